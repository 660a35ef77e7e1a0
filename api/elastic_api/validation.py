"""Admission rules of the ElasticTrainingJob, written once for two enforcers.

The same rules run in the API server (as CEL `x-kubernetes-validations` in the CRD,
built by `crd.py` from `CEL_RULES`) and in Python (`validate_job`, used by `etj render`
and the operator). Every message names the field and says how to fix it, and the
Python messages are the exact strings the API server returns: each message is a template
whose `{placeholders}` become CEL expressions in the CRD and Python values here.
"""
from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from elastic_api import API_VERSION, KIND, data_paths, maxtext
from elastic_api.catalog import (
    CATALOG,
    CUBE_HOSTS,
    CUBE_LABEL,
    CUBE_SIDE,
    INT32_MAX,
    MAX_DIM,
    MAX_SLICE_RESTARTS,
    SliceShape,
    TpuFamily,
    all_shapes,
    cubes,
    slice_shape,
)
from elastic_api.images import (
    COLOCATED_PYTHON_REPO,
    DEFAULT_PATHWAYS_VERSION,
    MOVING_TAG,
    cel_pinned,
    moves,
)
from elastic_api.models import (
    BUNDLED_MODELS,
    BUNDLED_TRAINER_FIELDS,
    MAX_BUDGET_TIMES,
    MAX_OVERHEAD_BUDGET_PERCENT,
    MAX_SLICES,
    ElasticTrainingJob,
    ElasticTrainingJobSpec,
    TrainerSpec,
)
from elastic_api.names import (
    HOSTNAME_LABEL,
    KUEUE_PRIORITY_CLASS_LABEL,
    KUEUE_QUEUE_NAME_LABEL,
    MULTIKUEUE_ORIGIN_LABEL,
)

# JobSet puts `<jobset>-pathways-head-0-0.<subdomain>` (subdomain = the JobSet name) in a
# label value, at most 63 characters: 2n + 19 <= 63.
COORDINATOR_LABEL_SUFFIX = "-pathways-head-0-0."
MAX_NAME_LENGTH = (63 - len(COORDINATOR_LABEL_SUFFIX)) // 2  # 22
DNS1035_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
# `[.]`, not `\.`: the regex sits in a CEL string literal, where `\.` is no escape.
DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# The head's /tmp emptyDir (render.SHARED_TMP): no trainer volume may take its name or path.
SHARED_TMP_VOLUME = "shared-tmp"


@dataclass(frozen=True)
class Rule:
    """One CEL rule. `scope` is where it sits in the CRD schema ("" = root, "spec", ...).

    `message` is a template; `values` maps each placeholder to the CEL expression (over
    `self` at `scope`) that fills it. A transition rule (`oldSelf`) applies on update only.
    A `create_only` rule applies when a job is created only (`optionalOldSelf`): one that
    jobs stored before it need not meet, since the spec cannot change after creation but
    for `suspend` (operations.md: a rule never rejects stored objects).
    """

    scope: str
    rule: str
    message: str
    values: Mapping[str, str]
    create_only: bool = False

    def message_expression(self) -> str:
        parts: list[str] = []
        for literal, key in _split_template(self.message):
            if literal:
                parts.append(_cel_string(literal))
            if key is not None:
                expr = self.values[key]
                parts.append(expr)
        return " + ".join(parts)

    def static_message(self) -> str:
        """The message with placeholders left as <name>: used when CEL cannot evaluate one."""
        pieces = _split_template(self.message)
        return "".join(lit + (f"<{key}>" if key else "") for lit, key in pieces)

    def to_crd(self) -> dict[str, Any]:
        rule = f"oldSelf.hasValue() || ({self.rule})" if self.create_only else self.rule
        out: dict[str, Any] = {"rule": rule, "message": self.static_message()}
        if self.create_only:
            out["optionalOldSelf"] = True
        if self.values:
            out["messageExpression"] = self.message_expression()
        return out


def _split_template(template: str) -> list[tuple[str, str | None]]:
    pieces: list[tuple[str, str | None]] = []
    pos = 0
    for match in re.finditer(r"\{(\w+)\}", template):
        pieces.append((template[pos : match.start()], match.group(1)))
        pos = match.end()
    pieces.append((template[pos:], None))
    return pieces


def _cel_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


# --- messages (Python format templates; also the CEL messageExpressions) -----------------

NAME_FORMAT = (
    "metadata.name: '{name}' is not a DNS-1035 label; use lowercase letters, digits and '-', "
    "starting with a letter and ending with a letter or digit (JobSet derives Job, Service "
    "and host names from it)"
)
NAME_LENGTH = (
    "metadata.name: '{name}' is longer than "
    f"{MAX_NAME_LENGTH} characters; use at most {MAX_NAME_LENGTH}, so that the JobSet "
    "coordinator label '<name>-pathways-head-0-0.<name>' fits in 63 characters"
)
TOPOLOGY = "spec.tpu.topology: '{topology}' is not a {type} topology; use one of {valid}"
# No numbers in messages: CEL's string(int) has an unbounded estimated cost, which the
# API server refuses in a messageExpression.
MIN_SLICES = (
    "spec.elastic.minSlices: must not be more than spec.tpu.numSlices; set minSlices to at "
    "most numSlices (numSlices: pause and resume), or leave it unset for the default"
)
ELASTIC_SLICES = (
    "spec.elastic.elasticSlices: must not be more than spec.tpu.numSlices; set it to at most "
    "numSlices (it counts the slices that may be missing), or leave it unset"
)
GCS_SCRATCH = (
    "spec.pathways.gcsScratch: required when spec.backend is pathways; set it to a gs:// "
    "location for Pathways' scratch files (or use backend simulated)"
)
SLOW_SLICE_REPLACE = (
    "spec.elastic.onSlowSlice: Replace needs spec.recovery.replaceSlices true (the operator "
    "replaces a slow slice as it replaces a failed one); set onSlowSlice to Report, or "
    "replaceSlices to true"
)
MAX_RESTARTS_INT32 = (
    f"spec.maxRestarts: must be at most {INT32_MAX} (JobSet's failurePolicy.maxRestarts is "
    "an int32); set it lower"
)
MAX_SLICE_RESTARTS_INT32 = (
    f"spec.elastic.maxSliceRestarts: must be at most {MAX_SLICE_RESTARTS}, so that the "
    "worker Jobs' backoffLimit (VMs per slice x maxSliceRestarts) fits an int32 for every "
    "slice of up to 64 VMs (a larger slice has a lower bound); set it lower"
)
# The multi-cube shapes' own bound: (2^31-1) // VMs; {limit} names it, the shape and its VMs.
MAX_SLICE_RESTARTS_SHAPE = (
    "spec.elastic.maxSliceRestarts: must be at most {limit}, so that the worker Jobs' "
    "backoffLimit (VMs per slice x maxSliceRestarts) fits an int32; set it lower"
)
# A count per window: the status keeps one time per restart it counts (MAX_BUDGET_TIMES).
WINDOWED_COUNT = (
    "{field}: at most " f"{MAX_BUDGET_TIMES - 1}" " while spec.elastic.restartWindowSeconds is "
    "set (the status keeps the time of each restart a window counts); set it lower, or "
    "leave restartWindowSeconds unset to count over the whole run"
)
# The spec's restart counts a window applies to: (scope, field, wire path).
BUDGET_COUNTS = (("spec.elastic", "maxSliceRestarts"), ("spec.elastic", "maxRetries"),
                 ("spec.elastic", "maxStallRestarts"), ("spec", "maxRestarts"))
NUM_SLICES = (
    f"spec.tpu.numSlices: must be at most {MAX_SLICES}: the job's status keeps an entry per "
    "slice (and per node pool) in one object, and etcd stores no object over 1.5 MiB; "
    "use fewer, larger slices (e.g. v5p 16x16x24 is 6144 chips)"
)
# No value in the message: a name with a newline would split the one-line error.
SERVICE_ACCOUNT_NAME = (
    "spec.serviceAccountName: not a DNS-1123 subdomain, so no ServiceAccount can have this "
    "name; use lowercase letters, digits, '-' and '.', starting and ending with a letter or "
    "digit, or leave it unset for the namespace's default account"
)
SPARES = (
    "spec.tpu.spares: must not be more than spec.tpu.numSlices (a spare node pool stands in "
    "for one failed slice at a time); set it to at most numSlices"
)
WORKER_TOLERATION = (
    "spec.recovery.workerNodeTolerationSeconds: must be at least "
    "spec.recovery.nodeNotReadySeconds, or the Kubernetes eviction of a worker on a NotReady "
    "node comes before the operator's replacement; raise it or lower nodeNotReadySeconds"
)
HARDWARE_NEEDS_REPLACEMENT = (
    "spec.recovery.hardwareExitCodes, hardwareReasons: only read when "
    "spec.recovery.replaceSlices is true (they decide which failures quarantine a node "
    "pool); remove them or set replaceSlices to true"
)
HARDWARE_EXIT_CODES_TWICE = (
    "spec.recovery.hardwareExitCodes: an exit code is listed more than once; list each once"
)
HARDWARE_REASONS_TWICE = (
    "spec.recovery.hardwareReasons: a reason is listed more than once; list each once"
)
CHECKPOINT_TIMEOUT = (
    "spec.maintenance.checkpointTimeoutSeconds: must be less than "
    "spec.maintenance.leadSeconds, or the maintenance starts before the checkpoint request "
    "times out; lower it or raise leadSeconds"
)
OVERHEAD_BUDGET = (
    "spec.overheadBudgetPercent: must be more than 0 and at most "
    f"{MAX_OVERHEAD_BUDGET_PERCENT:g} (percent of step time a snapshot, and a checkpoint, "
    "may each cost when the trainer chooses their period); set it in that range, e.g. 2 "
    "(the default), or set snapshot.periodSteps and checkpoint.periodSteps yourself"
)
SNAPSHOT_PERIOD_RUN = (
    "spec.snapshot.periodSteps: must not be more than spec.trainer.steps, or no snapshot "
    "is ever taken; set it to at most steps, 0 to turn snapshots off, or leave it unset "
    "for the trainer to choose"
)
CHECKPOINT_PERIOD_RUN = (
    "spec.checkpoint.periodSteps: must not be more than spec.trainer.steps, or no "
    "checkpoint is ever saved; set it to at most steps, or leave it unset for the trainer "
    "to choose"
)
PLACEMENT = (
    "spec.placement: Any is for backend simulated only (Pathways workers need TPU nodes); "
    "remove it or set it to TPU"
)

# --- Topology-Aware Scheduling (spec.tpu.topologyAware) -------------------------------------

# A node label key, as Kueue checks a topology annotation (a qualified name): an optional
# DNS-1123 subdomain prefix of at most 253 characters and '/', then a name of 1-63.
LABEL_KEY = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
             r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
MAX_LABEL_PREFIX = 253
TAS_LEVEL_FORMAT = (
    "spec.tpu.topologyAware.{field}: not a node label key (an optional DNS-1123 subdomain "
    "prefix of at most 253 characters and '/', then at most 63 letters, digits, '-', '_' "
    "and '.'); set it to a level of your Kueue Topology, e.g. cloud.google.com/gke-nodepool"
)
TAS_SAME_LEVEL = (
    "spec.tpu.topologyAware.jobLevel: must differ from sliceLevel (a slice fills one "
    "sliceLevel domain, jobLevel holds all of them); set it to a level above sliceLevel, "
    "or remove it"
)
TAS_HOSTNAME = (
    "spec.tpu.topologyAware.sliceLevel: kubernetes.io/hostname holds one host, and a "
    "{type} {topology} slice has several; use the level one whole slice fills, e.g. "
    "cloud.google.com/gke-nodepool"
)
TAS_CUBE = (
    f"spec.tpu.topologyAware.sliceLevel: {CUBE_LABEL} holds one cube ({CUBE_HOSTS} hosts), "
    "and a {type} {topology} slice has more; use a level one whole slice fills, e.g. "
    "cloud.google.com/gke-nodepool (a node pool of the slice's topology)"
)
# A tpu7x slice of several cubes placed at the cube level is GKE's super-slicing (xpk's
# --super-slicing): the slice controller joins cube node pools into one slice, which the
# workers ask for with cloud.google.com/gke-tpu-slice-topology, and Kueue admits through
# its accelerator.gke.io/slice admission check (GKE 1.35.2 or newer, Rapid channel). Not
# supported yet (docs/api.md, "TPU7x (Ironwood)").
TAS_SUPER_SLICE = (
    f"spec.tpu.topologyAware.sliceLevel: {CUBE_LABEL} holds one cube ({CUBE_HOSTS} hosts), "
    "and a {type} {topology} slice of several cubes there would be super-slicing (GKE's "
    "slice controller joining cube node pools: cloud.google.com/gke-tpu-slice-topology, "
    "Kueue's accelerator.gke.io/slice admission check), which this operator does not "
    "support yet; use a node pool of the slice's topology per slice (its workload policy) "
    "with sliceLevel cloud.google.com/gke-nodepool, or 4x4x4 slices at the cube level"
)
TAS_PLACEMENT = (
    "spec.tpu.topologyAware: Kueue places TPU slices by topology, and spec.placement Any "
    "places no TPU workers; remove topologyAware, or spec.placement"
)

# --- the trainer: the bundled one, or the user's command -------------------------------------

STEPS_REQUIRED = (
    "spec.trainer.steps: required for the bundled trainer (spec.trainer.command unset); set "
    "the number of training steps, or set command to run your own program"
)
BUNDLED_FIELD = (
    "spec.trainer.{field}: configures the bundled trainer only, which does not run when "
    "spec.trainer.command is set; remove it and give your program the setting in "
    "spec.trainer.args"
)
COMMAND_EMPTY = (
    "spec.trainer.command: must be a non-empty list of non-empty strings (the program, then "
    "its arguments, as in a core/v1 container); remove the empty strings, or leave command "
    "unset to run etj train"
)
VOLUME_SOURCE = (
    "spec.trainer.volumes: every volume needs exactly one source; set one of csi, "
    "persistentVolumeClaim or emptyDir"
)
VOLUME_NAME = (
    "spec.trainer.volumes: volume names must be unique DNS-1123 labels (lowercase letters, "
    "digits and '-', starting and ending with a letter or digit) other than shared-tmp (the "
    "head's /tmp); rename the volume"
)
VOLUME_MOUNT = (
    "spec.trainer.volumeMounts: every mount must name a volume of spec.trainer.volumes and "
    "a path other than /tmp (the head's shared emptyDir); add the volume or fix the mount"
)

DATA_URL = f"spec.trainer.data: {data_paths.READ_FROM_A_FILESYSTEM}"
MODEL_UNKNOWN = (
    "spec.trainer.model: not a model config of the bundled trainer, which would refuse it "
    f"at start; use one of {', '.join(BUNDLED_MODELS)}, or run your own program (e.g. "
    "MaxText) with spec.trainer.command"
)

# --- the Pathways images: none that moves in the registry (elastic_api/images.py) -----------

PATHWAYS_VERSION_MOVES = (
    f"spec.pathways.version: {MOVING_TAG} moves in the registry, and a slice replaced later "
    "would pull another Pathways build than its peers and the resource manager run; set a "
    f"dated tag, e.g. {DEFAULT_PATHWAYS_VERSION} (the build pairing with the JAX of main), "
    "or leave it unset for that default"
)
IMAGE_MOVES = (
    "spec.pathways.{field}: an image with no digest and no tag, or the tag "
    f"{MOVING_TAG}, moves in the registry, and a slice replaced later would pull another "
    "build than its peers run; name a digest (<image>@sha256:<digest>) or a dated tag, "
    f"e.g. {DEFAULT_PATHWAYS_VERSION}"
)
# The image fields of spec.pathways, by wire path below it.
PINNED_IMAGES = ("images.server", "images.proxy", "colocatedPython.image")
# A toleration with no key and operator Exists tolerates every taint: the job could land
# on any node pool, other teams' included, and take its node service account (the
# Pathways pods' host network bypasses Workload Identity). Static, so a CRD rule; which
# keys a namespace may tolerate is the administrator's (the chart's placement policy).
TOLERATION_EVERY_TAINT = (
    "spec.tolerations: a toleration with operator Exists and no key tolerates every taint, "
    "so the job could run on any node pool and act as its service account; name the "
    "taint's key (key: <taint key>) that the cluster administrator allows for this "
    "namespace (chart value tenantPolicy.allowed.<namespace>.tolerationKeys)"
)
COLOCATED_NEEDS_PATHWAYS = (
    "spec.pathways.colocatedPython: the colocated Python sidecar runs beside the Pathways "
    "workers, and backend simulated has none; remove it, or use backend pathways"
)
COLOCATED_SIDECAR_REQUIRED = (
    f"spec.trainer.args: {maxtext.COLOCATED_KEY} (in args or "
    f"{maxtext.env_key(maxtext.COLOCATED_KEY)}) has the TPU hosts save and restore through "
    "Pathways' colocated Python, which needs its sidecar beside every TPU worker; set "
    "spec.pathways.colocatedPython.image (your program's code built on "
    f"{COLOCATED_PYTHON_REPO}/sidecar), or remove the flag"
)

# --- the progress sidecar, and what MaxText gets from the spec --------------------------------

PROGRESS_NEEDS_COMMAND = (
    "spec.trainer.progress: for a program of your own only (spec.trainer.command set): etj "
    "train writes status.training itself; remove progress, or set command"
)
PROGRESS_METRICS_FILE_REQUIRED = (
    "spec.trainer.progress.metricsFile: required unless spec.trainer.command runs MaxText's "
    "trainer (maxtext.trainers.pre_train.train), whose metrics_file the renderer sets; set "
    "the JSON-lines file your program writes, under /tmp"
)
PROGRESS_METRICS_FILE_PATH = (
    "spec.trainer.progress.metricsFile: must be a file under /tmp/ (the head's emptyDir, "
    "which main shares with the progress sidecar), named with letters, digits, '-', '_' and "
    "'.', with no '.' or '..' part, e.g. /tmp/metrics.jsonl; fix the path"
)
MAXTEXT_METRICS_FILE_ARG = (
    "spec.trainer.args: metrics_file must name a file under /tmp/ (the head's emptyDir, which "
    "MaxText shares with the progress sidecar), as spec.trainer.progress.metricsFile does, and "
    "the same one when both are set; fix it, or remove it and let the renderer set it"
)
CHECKPOINT_FIELD_UNREAD = (
    "spec.checkpoint.{field}: only the bundled trainer and MaxText's trainer read it (MaxText "
    "as {key}), not the program in spec.trainer.command; remove it and give your program the "
    "setting in spec.trainer.args"
)
CHECKPOINT_FIELD_TWICE = (
    "spec.checkpoint.{field}: the renderer passes it to MaxText as {key}, which "
    "spec.trainer.args or the variable {env} of spec.trainer.env sets too; set it in one place"
)
SNAPSHOT_MAXTEXT = (
    "spec.snapshot.periodSteps: MaxText 0.2.5 keeps no snapshot this could turn on: its "
    "elastic_backup_kind (snapshot by default) is read by no code of its trainer "
    "(maxtext/utils/elastic_utils.py elastic_snapshot() is never called), and it has no "
    "snapshot period, so the operator renders no flag for it; remove "
    "spec.snapshot.periodSteps (or set 0): MaxText restores from its newest checkpoint"
)
# spec.checkpoint fields the renderer hands to MaxText, by wire name: (Python name, MaxText key)
CHECKPOINT_MAXTEXT_FIELDS = {"keep": ("keep", maxtext.KEEP_KEY),
                             "async": ("async_", maxtext.ASYNC_KEY)}

# --- labels Kueue reads (carried to the JobSet) -------------------------------------------
# Only Python checks these (validate_job, so `etj render` and the operator): the API server
# itself refuses a label value that is not one, but CEL rules cannot see metadata.labels.
KUEUE_LABEL_VALUE = (
    "metadata.labels[{label}]: '{value}' is not a valid {what} name, so Kueue would refuse "
    "the JobSet; use a DNS-1123 subdomain of at most 63 characters (lowercase letters, "
    "digits, '-' and '.', starting and ending with a letter or digit)"
)
KUEUE_LABELS = {KUEUE_QUEUE_NAME_LABEL: "LocalQueue", KUEUE_PRIORITY_CLASS_LABEL:
                "WorkloadPriorityClass"}

# --- MultiKueue: what must hold in whichever worker cluster the job lands in ------------------

MULTIKUEUE_CHECKPOINT_DIRECTORY = (
    "spec.checkpoint.directory: a MultiKueue job (spec.managedBy set) may run in any worker "
    "cluster, and be dispatched again to another, so its checkpoints must be on storage "
    "every cluster reads; set a gs://bucket/path, or remove spec.managedBy to run the job "
    "in this cluster"
)
MULTIKUEUE_VOLUME = (
    "spec.trainer.volumes: a persistentVolumeClaim belongs to one cluster, and a MultiKueue "
    "job (spec.managedBy set) may run in another; use a csi volume (Cloud Storage FUSE) or "
    "an emptyDir, or remove spec.managedBy to run the job in this cluster"
)
# Python only, as KUEUE_LABEL_VALUE: CEL rules cannot see metadata.labels.
MULTIKUEUE_QUEUE = (
    f"metadata.labels[{KUEUE_QUEUE_NAME_LABEL}]: required for a MultiKueue job "
    "(spec.managedBy set), whose Workload no queue admits without it; set it to a "
    "LocalQueue whose ClusterQueue has the MultiKueue admission check"
)

# Python only, as KUEUE_LABEL_VALUE: MultiKueue's copy of a job in a worker cluster carries
# spec.multiCluster without spec.managedBy, and only its origin label (which CEL rules
# cannot see) tells it from a job submitted there.
MULTI_CLUSTER_WITHOUT_MULTIKUEUE = (
    "spec.multiCluster: only a MultiKueue job (spec.managedBy: kueue.x-k8s.io/multikueue) "
    "is dispatched to other clusters, and may be dispatched again; set spec.managedBy, or "
    "remove spec.multiCluster to run the job in this cluster"
)

IMMUTABLE = (
    "spec.{field} is immutable: only spec.suspend and spec.multiCluster may change after "
    "creation; delete and "
    "recreate the job to change it"
)


@functools.cache
def shapes_within(hosts: int) -> tuple[str, ...]:
    """'<type>:<topology>' of the catalog's slices of at most `hosts` hosts: those a
    topology domain of that many hosts can hold."""
    return tuple(_key(shape) for shape in all_shapes() if shape.vms <= hosts)


def _key(shape: SliceShape) -> str:
    return f"{shape.family.type}:{shape.topology}"


def _cel_list(items: Iterable[str]) -> str:
    return "[" + ", ".join(f"'{i}'" for i in items) + "]"


# Levels whose domains are known to hold this many hosts: a larger slice never fits one.
# The types each message is for (None: every type): at the cube level a larger tpu7x
# slice is super-slicing, which its own message names.
SUPER_SLICING_TYPE = "tpu7x"
_TAS_LEVEL_SIZES: tuple[tuple[str, int, str, tuple[str, ...] | None], ...] = (
    (HOSTNAME_LABEL, 1, TAS_HOSTNAME, None),
    (CUBE_LABEL, CUBE_HOSTS, TAS_CUBE,
     tuple(t for t in CATALOG if t != SUPER_SLICING_TYPE)),
    (CUBE_LABEL, CUBE_HOSTS, TAS_SUPER_SLICE, (SUPER_SLICING_TYPE,)),
)


def _cel_types(types: tuple[str, ...] | None) -> str:
    """CEL (over spec.tpu): the rule is not for this type."""
    return "" if types is None else f"!(self.type in {_cel_list(types)}) || "


# --- the TPU topologies: a list per type and, for the 3D types, the catalog's rule ----------
# CEL over a topology string `t` (catalog.TpuFamily.admits): the listed ones, or AxBxC of
# multiples of 4 up to 256 (at most three digits each, so int() never overflows), with at
# most max_cubes cubes and, where ordered, A <= B <= C. No list of every shape: v4's rule
# alone admits 800.
_CEL_3D = r"^[1-9][0-9]{0,2}x[1-9][0-9]{0,2}x[1-9][0-9]{0,2}$"


def _cel_dim(t: str, i: int) -> str:
    return f"int({t}.split('x')[{i}])"


def _cel_cube_form(t: str) -> str:
    return (f"{t}.matches('{_CEL_3D}') && {t}.split('x').all(d, int(d) % {CUBE_SIDE} == 0 "
            f"&& int(d) <= {MAX_DIM})")


def _cel_cubes(t: str) -> str:
    return " * ".join(f"({_cel_dim(t, i)} / {CUBE_SIDE})" for i in range(3))


def _cel_admits(family: TpuFamily, t: str) -> str:
    listed = f"{t} in {_cel_list(family.listed)}"
    if not family.max_cubes:
        return listed
    rule = f"{_cel_cube_form(t)} && {_cel_cubes(t)} <= {family.max_cubes}"
    if family.ordered:
        rule += f" && {_cel_dim(t, 0)} <= {_cel_dim(t, 1)} && {_cel_dim(t, 1)} <= {_cel_dim(t, 2)}"
    return f"{listed} || ({rule})"


def _topology_aware_rules() -> list[Rule]:
    def well_formed(field: str) -> str:
        value = f"self.topologyAware.{field}"
        return (f"!has(self.topologyAware) || !has({value}) || {value}.matches('{LABEL_KEY}') "
                f"&& (!{value}.contains('/') || {value}.indexOf('/') <= {MAX_LABEL_PREFIX})")
    shape = {"type": "self.type", "topology": "self.topology"}
    return [
        *(Rule("spec.tpu", well_formed(field), TAS_LEVEL_FORMAT.replace("{field}", field), {})
          for field in ("sliceLevel", "jobLevel")),
        Rule("spec.tpu", "!has(self.topologyAware) || !has(self.topologyAware.jobLevel) || "
             "self.topologyAware.jobLevel != self.topologyAware.sliceLevel",
             TAS_SAME_LEVEL, {}),
        *(Rule("spec.tpu", "!has(self.topologyAware) || "
               f"self.topologyAware.sliceLevel != '{level}' || {_cel_types(types)}"
               f"(self.type + ':' + self.topology) in {_cel_list(shapes_within(hosts))}",
               message, shape)
          for level, hosts, message, types in _TAS_LEVEL_SIZES),
        Rule("spec", "!has(self.tpu.topologyAware) || !has(self.placement) || "
             "self.placement == 'TPU'", TAS_PLACEMENT, {}),
    ]


def _topology_aware_checks(spec: ElasticTrainingJobSpec) -> list[str]:
    tas = spec.tpu.topology_aware
    if tas is None:
        return []
    errors = []
    for field, value in (("sliceLevel", tas.slice_level), ("jobLevel", tas.job_level)):
        if value is not None and (not re.fullmatch(LABEL_KEY, value)
                                  or value.find("/") > MAX_LABEL_PREFIX):
            errors.append(TAS_LEVEL_FORMAT.replace("{field}", field))
    if tas.job_level is not None and tas.job_level == tas.slice_level:
        errors.append(TAS_SAME_LEVEL)
    shape = f"{spec.tpu.type}:{spec.tpu.topology}"
    errors += [message.format(type=spec.tpu.type, topology=spec.tpu.topology)
               for level, hosts, message, types in _TAS_LEVEL_SIZES
               if tas.slice_level == level and (types is None or spec.tpu.type in types)
               and shape not in shapes_within(hosts)]
    if spec.placement != "TPU":
        errors.append(TAS_PLACEMENT)
    return errors


# A slice of more cubes than this has a maxSliceRestarts bound below MAX_SLICE_RESTARTS
# (VMs = 16 x cubes for the 3D shapes of whole cubes; every other shape has at most 64).
BOUNDED_FROM_CUBES = 4


def _slice_restarts_bound(spec: ElasticTrainingJobSpec) -> SliceShape | None:
    """The job's shape when its maxSliceRestarts bound is below MAX_SLICE_RESTARTS."""
    try:
        shape = slice_shape(spec.tpu.type, spec.tpu.topology)
    except ValueError:
        return None
    return shape if shape.max_slice_restarts < MAX_SLICE_RESTARTS else None


def _slice_restarts_limit(shape: SliceShape) -> str:
    return (f"{shape.max_slice_restarts} for a {shape.family.type} {shape.topology} slice "
            f"({shape.vms} VMs)")


def _size_rules() -> list[Rule]:
    """How many slices, and how often each may restart, for the shape: at most
    (2^31-1) // VMs, VMs = 16 x cubes (a catalog shape of more than 4 cubes), computed in
    CEL; the message's numbers come from a map by cube count (CEL's string(int) has an
    unbounded estimated cost)."""
    t = "self.tpu.topology"
    big = (" || ".join(f"(self.tpu.type == '{f.type}' && ({_cel_admits(f, t)}))"
                       for f in CATALOG.values() if f.max_cubes))
    count = _cel_cubes(t)
    bounded = f"({big}) && {_cel_cube_form(t)} && {count} > {BOUNDED_FROM_CUBES}"
    vms_per_cube = CUBE_SIDE ** 3 // 4  # 4 chips per VM
    counts = sorted({cubes(s.topology) for s in all_shapes()
                     if s.max_slice_restarts < MAX_SLICE_RESTARTS})
    assert all(c > BOUNDED_FROM_CUBES for c in counts), counts
    bounds = "{" + ", ".join(
        f"{c}: '{INT32_MAX // (vms_per_cube * c)}'" for c in counts) + "}"
    vms = "{" + ", ".join(f"{c}: '{vms_per_cube * c}'" for c in counts) + "}"
    limit = (f"{bounds}[{count}] + ' for a ' + self.tpu.type + ' ' + self.tpu.topology "
             f"+ ' slice (' + {vms}[{count}] + ' VMs)'")
    return [
        Rule("spec.tpu", f"self.numSlices <= {MAX_SLICES}", NUM_SLICES, {}),
        Rule("spec", "!has(self.elastic) || !has(self.elastic.maxSliceRestarts) || "
             f"self.elastic.maxSliceRestarts <= {MAX_SLICE_RESTARTS}",
             MAX_SLICE_RESTARTS_INT32, {}),
        Rule("spec",
             "!has(self.elastic) || !has(self.elastic.maxSliceRestarts) || "
             f"!({bounded}) || self.elastic.maxSliceRestarts <= "
             f"{INT32_MAX} / ({vms_per_cube} * {count})",
             MAX_SLICE_RESTARTS_SHAPE, {"limit": limit}),
    ]


def _size_checks(spec: ElasticTrainingJobSpec) -> list[str]:
    errors = []
    if spec.tpu.num_slices > MAX_SLICES:
        errors.append(NUM_SLICES)
    restarts = spec.elastic.max_slice_restarts
    if restarts is not None and restarts > MAX_SLICE_RESTARTS:
        errors.append(MAX_SLICE_RESTARTS_INT32)
    shape = _slice_restarts_bound(spec) if restarts is not None else None
    if shape is not None and restarts is not None and restarts > shape.max_slice_restarts:
        errors.append(MAX_SLICE_RESTARTS_SHAPE.format(limit=_slice_restarts_limit(shape)))
    return errors


def _budget_rules() -> list[Rule]:
    """A count per window stays within what the status keeps of it."""
    rules = []
    for scope, name in BUDGET_COUNTS:
        where = "self.elastic." if scope == "spec.elastic" else "self."
        has = "has(self.elastic) && " if scope == "spec.elastic" else ""
        rules.append(Rule(
            "spec", f"!(has(self.elastic) && has(self.elastic.restartWindowSeconds)) || "
            f"!({has}has({where}{name})) || {where}{name} < {MAX_BUDGET_TIMES}",
            WINDOWED_COUNT.replace("{field}", f"{scope}.{name}"), {}))
    return rules


def _budget_checks(spec: ElasticTrainingJobSpec) -> list[str]:
    if spec.elastic.restart_window_seconds is None:
        return []
    counts = {"maxSliceRestarts": spec.elastic.max_slice_restarts,
              "maxRetries": spec.elastic.max_retries,
              "maxStallRestarts": spec.elastic.max_stall_restarts,
              "maxRestarts": spec.max_restarts}
    return [WINDOWED_COUNT.replace("{field}", f"{scope}.{name}")
            for scope, name in BUDGET_COUNTS
            if (count := counts[name]) is not None and count >= MAX_BUDGET_TIMES]


def _topology_rules() -> list[Rule]:
    # One rule per TPU type, generated from the catalog, so the message lists exactly the
    # topologies valid for that type.
    rules = []
    for tpu_type, family in CATALOG.items():
        rules.append(
            Rule(
                scope="spec.tpu",
                rule=f"self.type != '{tpu_type}' || {_cel_admits(family, 'self.topology')}",
                message=TOPOLOGY.replace("{type}", tpu_type).replace(
                    "{valid}", family.describe()),
                values={"topology": "self.topology"},
            )
        )
    return rules


# Spec fields that may change after creation. Everything else is immutable: the JobSet's
# replicatedJobs are immutable, so honouring a change would mean a new JobSet, which resets
# JobSet's restart budget and loses the running trainer.
# spec.multiCluster only says what the manager may do when the job's worker cluster is
# lost; it renders into nothing.
MUTABLE_SPEC_FIELDS = frozenset({"suspend", "multiCluster"})


def _immutability_rules(spec_fields: list[str], required: set[str]) -> list[Rule]:
    rules = []
    for name in spec_fields:
        if name in MUTABLE_SPEC_FIELDS:
            continue
        if name in required:
            rule = f"self.{name} == oldSelf.{name}"
        else:
            # Adding or removing an optional field is a change too.
            rule = (
                f"has(self.{name}) == has(oldSelf.{name}) && "
                f"(!has(self.{name}) || self.{name} == oldSelf.{name})"
            )
        rules.append(Rule(scope="spec", rule=rule, message=IMMUTABLE.replace("{field}", name),
                          values={}))
    return rules


def _trainer_rules() -> list[Rule]:
    bundled = [
        Rule("spec.trainer", f"!has(self.command) || !has(self.{field})",
             BUNDLED_FIELD.replace("{field}", field), {})
        for field in BUNDLED_TRAINER_FIELDS
    ]
    return [
        Rule("spec.trainer", "has(self.command) || has(self.steps)", STEPS_REQUIRED, {}),
        *bundled,
        Rule("spec.trainer",
             "!has(self.command) || size(self.command) > 0 && "
             "self.command.all(c, size(c) > 0)",
             COMMAND_EMPTY, {}),
        Rule("spec.trainer",
             "!has(self.volumes) || self.volumes.all(v, "
             "(has(v.csi) ? 1 : 0) + (has(v.persistentVolumeClaim) ? 1 : 0) + "
             "(has(v.emptyDir) ? 1 : 0) == 1)",
             VOLUME_SOURCE, {}),
        Rule("spec.trainer",
             "!has(self.volumes) || self.volumes.all(v, "
             f"v.name.matches('{DNS1123_LABEL}') && v.name != '{SHARED_TMP_VOLUME}' && "
             "self.volumes.exists_one(w, w.name == v.name))",
             VOLUME_NAME, {}),
        Rule("spec.trainer",
             "!has(self.volumeMounts) || self.volumeMounts.all(m, "
             "m.mountPath != '/tmp' && m.mountPath != '/tmp/' && "
             "has(self.volumes) && self.volumes.exists(v, v.name == m.name))",
             VOLUME_MOUNT, {}),
    ]


def _data_rules() -> list[Rule]:
    """What the bundled trainer would refuse at start (at creation only, as every rule
    added after jobs were stored)."""
    models = ", ".join(f"'{m}'" for m in BUNDLED_MODELS)
    return [Rule("spec.trainer", f"!has(self.data) || {data_paths.CEL_NOT_URL}", DATA_URL, {},
                 create_only=True),
            Rule("spec.trainer", f"!has(self.model) || self.model in [{models}]",
                 MODEL_UNKNOWN, {}, create_only=True)]


def _image_rules() -> list[Rule]:
    """No Pathways image that moves (at creation only: jobs stored before keep theirs)."""
    def given(path: str) -> str:
        parts = path.split(".")
        return " && ".join(["has(self.pathways)"] + [
            f"has(self.pathways.{'.'.join(parts[:i + 1])})" for i in range(len(parts))])

    rules = [Rule("spec", f"!has(self.pathways) || !has(self.pathways.version) || "
                  f"self.pathways.version != '{MOVING_TAG}'", PATHWAYS_VERSION_MOVES, {},
                  create_only=True)]
    rules += [Rule("spec", f"!({given(path)}) || {cel_pinned('self.pathways.' + path)}",
                   _fill(IMAGE_MOVES, {"field": path}), {}, create_only=True)
              for path in PINNED_IMAGES]
    runs = maxtext.cel_asks_colocated_python("self.trainer")
    rules += [
        Rule("spec", "!has(self.pathways) || !has(self.pathways.colocatedPython) || "
             "!has(self.backend) || self.backend != 'simulated'",
             COLOCATED_NEEDS_PATHWAYS, {}, create_only=True),
        Rule("spec", f"!{runs} || has(self.pathways) && has(self.pathways.colocatedPython)",
             COLOCATED_SIDECAR_REQUIRED, {}, create_only=True),
    ]
    return rules


def _image_checks(spec: ElasticTrainingJobSpec) -> list[str]:
    pathways = spec.pathways
    errors = []
    if pathways.version == MOVING_TAG:
        errors.append(PATHWAYS_VERSION_MOVES)
    images = pathways.images
    colocated = pathways.colocated_python
    given = {"images.server": images.server if images else None,
             "images.proxy": images.proxy if images else None,
             "colocatedPython.image": colocated.image if colocated else None}
    errors += [_fill(IMAGE_MOVES, {"field": path}) for path in PINNED_IMAGES
               if (ref := given[path]) is not None and moves(ref)]
    if colocated is not None and spec.backend == "simulated":
        errors.append(COLOCATED_NEEDS_PATHWAYS)
    if colocated is None and maxtext.asks_colocated_python(spec.trainer):
        errors.append(COLOCATED_SIDECAR_REQUIRED)
    return errors


def _hardware_rules() -> list[Rule]:
    """spec.recovery's classification of failures (the operator's core/blame.py)."""
    def unique(field: str) -> str:
        items = f"self.{field}"
        return f"!has({items}) || {items}.all(x, {items}.exists_one(y, y == x))"

    return [
        Rule("spec.recovery",
             "has(self.replaceSlices) && !self.replaceSlices ? "
             "(!has(self.hardwareExitCodes) || size(self.hardwareExitCodes) == 0) && "
             "(!has(self.hardwareReasons) || size(self.hardwareReasons) == 0) : true",
             HARDWARE_NEEDS_REPLACEMENT, {}),
        Rule("spec.recovery", unique("hardwareExitCodes"), HARDWARE_EXIT_CODES_TWICE, {}),
        Rule("spec.recovery", unique("hardwareReasons"), HARDWARE_REASONS_TWICE, {}),
    ]


def _progress_rules() -> list[Rule]:
    runs = maxtext.cel_runs_maxtext("self")
    pattern = maxtext.METRICS_FILE_PATTERN
    key = maxtext.METRICS_FILE_KEY + "="
    value = f"a.substring({len(key)})"
    return [
        Rule("spec.trainer", "!has(self.progress) || has(self.command)",
             PROGRESS_NEEDS_COMMAND, {}),
        Rule("spec.trainer",
             f"!has(self.progress) || has(self.progress.metricsFile) || {runs}",
             PROGRESS_METRICS_FILE_REQUIRED, {}),
        Rule("spec.trainer",
             "!has(self.progress) || !has(self.progress.metricsFile) || "
             f"self.progress.metricsFile.matches('{pattern}')",
             PROGRESS_METRICS_FILE_PATH, {}),
        Rule("spec.trainer",
             f"!has(self.progress) || !{runs} || !has(self.args) || "
             f"self.args.all(a, !a.startsWith('{key}') || {value}.matches('{pattern}') && "
             f"(!has(self.progress.metricsFile) || {value} == self.progress.metricsFile))",
             MAXTEXT_METRICS_FILE_ARG, {}),
    ]


def _checkpoint_maxtext_rules() -> list[Rule]:
    runs = maxtext.cel_runs_maxtext("self.trainer")
    rules = []
    for field, (_, key) in CHECKPOINT_MAXTEXT_FIELDS.items():
        env = maxtext.env_key(key)
        fill = {"field": field, "key": key, "env": env}
        rules += [
            # At creation only: jobs stored before these rules carry the defaults the CRD
            # then gave keep (3) and async (true), whatever their command.
            Rule("spec", f"!has(self.checkpoint.{field}) || !has(self.trainer.command) || {runs}",
                 _fill(CHECKPOINT_FIELD_UNREAD, fill), {}, create_only=True),
            Rule("spec",
                 f"!has(self.checkpoint.{field}) || !{runs} || "
                 f"(!has(self.trainer.args) || !self.trainer.args.exists(a, "
                 f"a.startsWith('{key}='))) && "
                 f"(!has(self.trainer.env) || !self.trainer.env.exists(e, e.name == '{env}'))",
                 _fill(CHECKPOINT_FIELD_TWICE, fill), {}, create_only=True),
        ]
    # At creation only, as the rules above.
    rules.append(Rule("spec", f"!has(self.snapshot) || !has(self.snapshot.periodSteps) || "
                      f"self.snapshot.periodSteps == 0 || !{runs}",
                      SNAPSHOT_MAXTEXT, {}, create_only=True))
    return rules


def _fill(template: str, values: Mapping[str, str]) -> str:
    """A template with its placeholders filled now (no CEL messageExpression needed)."""
    for name, value in values.items():
        template = template.replace("{" + name + "}", value)
    return template


def _cadence_rules() -> list[Rule]:
    return [
        Rule(
            "spec",
            "!has(self.overheadBudgetPercent) || self.overheadBudgetPercent > 0.0 && "
            f"self.overheadBudgetPercent <= {MAX_OVERHEAD_BUDGET_PERCENT!r}",
            OVERHEAD_BUDGET,
            {},
        ),
        Rule(
            "spec",
            "!has(self.snapshot) || !has(self.snapshot.periodSteps) || "
            "!has(self.trainer.steps) || self.snapshot.periodSteps <= self.trainer.steps",
            SNAPSHOT_PERIOD_RUN,
            {},
        ),
        # At creation only: jobs stored while 100 was the default carry it, whatever
        # their steps.
        Rule(
            "spec",
            "!has(self.checkpoint.periodSteps) || !has(self.trainer.steps) || "
            "self.checkpoint.periodSteps <= self.trainer.steps",
            CHECKPOINT_PERIOD_RUN,
            {},
            create_only=True,
        ),
    ]


def _multikueue_rules() -> list[Rule]:
    return [
        Rule("spec", "!has(self.managedBy) || self.checkpoint.directory.startsWith('gs://')",
             MULTIKUEUE_CHECKPOINT_DIRECTORY, {}),
        Rule("spec", "!has(self.managedBy) || !has(self.trainer.volumes) || "
             "self.trainer.volumes.all(v, !has(v.persistentVolumeClaim))",
             MULTIKUEUE_VOLUME, {}),
    ]


def _slow_slice_rule() -> Rule:
    return Rule("spec", "!has(self.elastic) || !has(self.elastic.onSlowSlice) || "
                "self.elastic.onSlowSlice != 'Replace' || !has(self.recovery) || "
                "!has(self.recovery.replaceSlices) || self.recovery.replaceSlices",
                SLOW_SLICE_REPLACE, {})


def cel_rules(spec_fields: list[str], required: set[str]) -> list[Rule]:
    """Every CEL rule of the CRD; `spec_fields`/`required` are the spec's wire names."""
    return [
        Rule("", f"self.metadata.name.matches('{DNS1035_LABEL}')", NAME_FORMAT,
             {"name": "self.metadata.name"}),
        Rule("", f"size(self.metadata.name) <= {MAX_NAME_LENGTH}", NAME_LENGTH,
             {"name": "self.metadata.name"}),
        *_topology_rules(),
        *_size_rules(),
        *_budget_rules(),
        *_topology_aware_rules(),
        Rule(
            "spec",
            "!has(self.elastic) || !has(self.elastic.minSlices) || "
            "self.elastic.minSlices <= self.tpu.numSlices",
            MIN_SLICES,
            {},
        ),
        Rule(
            "spec",
            "!has(self.elastic) || !has(self.elastic.elasticSlices) || "
            "self.elastic.elasticSlices <= self.tpu.numSlices",
            ELASTIC_SLICES,
            {},
        ),
        Rule("spec", f"!has(self.maxRestarts) || self.maxRestarts <= {INT32_MAX}",
             MAX_RESTARTS_INT32, {}),
        Rule("spec", "!has(self.tpu.spares) || self.tpu.spares <= self.tpu.numSlices",
             SPARES, {}),
        _slow_slice_rule(),
        Rule(
            "spec",
            "!has(self.recovery) || !has(self.recovery.workerNodeTolerationSeconds) || "
            "!has(self.recovery.nodeNotReadySeconds) || "
            "self.recovery.workerNodeTolerationSeconds >= self.recovery.nodeNotReadySeconds",
            WORKER_TOLERATION,
            {},
        ),
        *_hardware_rules(),
        Rule(
            "spec",
            "!has(self.maintenance) || !has(self.maintenance.checkpointTimeoutSeconds) || "
            "!has(self.maintenance.leadSeconds) || "
            "self.maintenance.checkpointTimeoutSeconds < self.maintenance.leadSeconds",
            CHECKPOINT_TIMEOUT,
            {},
        ),
        *_cadence_rules(),
        Rule(
            "spec",
            "!has(self.placement) || self.placement == 'TPU' || "
            "has(self.backend) && self.backend == 'simulated'",
            PLACEMENT,
            {},
        ),
        Rule(
            "spec",
            "!has(self.serviceAccountName) || "
            f"self.serviceAccountName.matches('{DNS1123_SUBDOMAIN}')",
            SERVICE_ACCOUNT_NAME,
            {},
        ),
        Rule(
            "spec",
            "has(self.backend) && self.backend == 'simulated' || "
            "has(self.pathways) && has(self.pathways.gcsScratch)",
            GCS_SCRATCH,
            {},
        ),
        Rule("spec", "!has(self.tolerations) || self.tolerations.all(t, "
             "!has(t.operator) || t.operator != 'Exists' || has(t.key) && t.key != '')",
             TOLERATION_EVERY_TAINT, {}, create_only=True),
        *_trainer_rules(),
        *_data_rules(),
        *_image_rules(),
        *_progress_rules(),
        *_checkpoint_maxtext_rules(),
        *_multikueue_rules(),
        *_immutability_rules(spec_fields, required),
    ]


# --- the Python enforcer ------------------------------------------------------------------


def _loc_to_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif str(part).isprintable() and str(part).strip() == str(part) and str(part):
            path += ("." if path else "") + str(part)
        else:  # a key with control characters or blanks: quoted, so the message stays one line
            path += f"[{json.dumps(str(part))}]"
    return path or "<root>"


def _shown(value: str) -> str:
    """A value as a message quotes it: control characters escaped (str.splitlines breaks
    on \\x1e and others too), so that one problem stays one line."""
    return value if value.isprintable() else json.dumps(value)[1:-1]


def _semantic_checks(job: ElasticTrainingJob) -> list[str]:
    errors: list[str] = []
    name = job.metadata.name
    # fullmatch: `$` alone would let a trailing newline through (CEL's RE2 does not).
    if not re.fullmatch(DNS1035_LABEL, name):
        errors.append(NAME_FORMAT.format(name=_shown(name)))
    if len(name) > MAX_NAME_LENGTH:
        errors.append(NAME_LENGTH.format(name=_shown(name)))
    spec = job.spec
    family = CATALOG[spec.tpu.type]
    if not family.admits(spec.tpu.topology):
        errors.append(
            TOPOLOGY.format(topology=spec.tpu.topology, type=spec.tpu.type,
                            valid=family.describe())
        )
    num = spec.tpu.num_slices
    if spec.elastic.min_slices is not None and spec.elastic.min_slices > num:
        errors.append(MIN_SLICES)
    if spec.elastic.elastic_slices is not None and spec.elastic.elastic_slices > num:
        errors.append(ELASTIC_SLICES)
    if spec.max_restarts is not None and spec.max_restarts > INT32_MAX:
        errors.append(MAX_RESTARTS_INT32)
    errors += _size_checks(spec)
    errors += _budget_checks(spec)
    if spec.tpu.spares > num:
        errors.append(SPARES)
    if spec.elastic.on_slow_slice == "Replace" and not spec.recovery.replace_slices:
        errors.append(SLOW_SLICE_REPLACE)
    if spec.recovery.worker_node_toleration_seconds < spec.recovery.node_not_ready_seconds:
        errors.append(WORKER_TOLERATION)
    errors += _hardware_checks(spec)
    if spec.maintenance.checkpoint_timeout_seconds >= spec.maintenance.lead_seconds:
        errors.append(CHECKPOINT_TIMEOUT)
    if not 0 < spec.overhead_budget_percent <= MAX_OVERHEAD_BUDGET_PERCENT:
        errors.append(OVERHEAD_BUDGET)
    snapshot, steps = spec.snapshot.period_steps, spec.trainer.steps
    if snapshot is not None and steps is not None and snapshot > steps:
        errors.append(SNAPSHOT_PERIOD_RUN)
    period = spec.checkpoint.period_steps
    if period is not None and steps is not None and period > steps:
        errors.append(CHECKPOINT_PERIOD_RUN)
    if spec.placement == "Any" and spec.backend != "simulated":
        errors.append(PLACEMENT)
    account = spec.service_account_name
    if account is not None and not re.fullmatch(DNS1123_SUBDOMAIN, account):
        errors.append(SERVICE_ACCOUNT_NAME)
    if spec.backend == "pathways" and spec.pathways.gcs_scratch is None:
        errors.append(GCS_SCRATCH)
    errors += _topology_aware_checks(spec)
    errors += _trainer_checks(spec.trainer)
    if spec.trainer.data is not None and data_paths.is_url(spec.trainer.data):
        errors.append(DATA_URL)
    if spec.trainer.model is not None and spec.trainer.model not in BUNDLED_MODELS:
        errors.append(MODEL_UNKNOWN)
    if any(t.operator == "Exists" and not t.key for t in spec.tolerations):
        errors.append(TOLERATION_EVERY_TAINT)
    errors += _image_checks(spec)
    errors += _progress_checks(spec.trainer)
    errors += _checkpoint_maxtext_checks(spec)
    errors += _multikueue_checks(spec)
    if spec.multikueue and not job.metadata.labels.get(KUEUE_QUEUE_NAME_LABEL):
        errors.append(MULTIKUEUE_QUEUE)
    if spec.multi_cluster is not None and not spec.multikueue \
            and MULTIKUEUE_ORIGIN_LABEL not in job.metadata.labels:
        errors.append(MULTI_CLUSTER_WITHOUT_MULTIKUEUE)
    errors += _kueue_label_checks(job.metadata.labels)
    return errors


def _multikueue_checks(spec: ElasticTrainingJobSpec) -> list[str]:
    if spec.managed_by is None:
        return []
    errors = []
    if not spec.checkpoint.directory.startswith("gs://"):
        errors.append(MULTIKUEUE_CHECKPOINT_DIRECTORY)
    if any(v.persistent_volume_claim is not None for v in spec.trainer.volumes):
        errors.append(MULTIKUEUE_VOLUME)
    return errors


def _hardware_checks(spec: ElasticTrainingJobSpec) -> list[str]:
    recovery = spec.recovery
    errors = []
    if not recovery.replace_slices and (recovery.hardware_exit_codes
                                        or recovery.hardware_reasons):
        errors.append(HARDWARE_NEEDS_REPLACEMENT)
    if len(set(recovery.hardware_exit_codes)) < len(recovery.hardware_exit_codes):
        errors.append(HARDWARE_EXIT_CODES_TWICE)
    if len(set(recovery.hardware_reasons)) < len(recovery.hardware_reasons):
        errors.append(HARDWARE_REASONS_TWICE)
    return errors


def _trainer_checks(trainer: TrainerSpec) -> list[str]:
    errors: list[str] = []
    if trainer.command is None and trainer.steps is None:
        errors.append(STEPS_REQUIRED)
    if trainer.command is not None:
        errors += [BUNDLED_FIELD.format(field=field) for field in BUNDLED_TRAINER_FIELDS
                   if getattr(trainer, field) is not None]
        if not trainer.command or not all(trainer.command):
            errors.append(COMMAND_EMPTY)
    volumes = trainer.volumes
    if any(sum(s is not None for s in (v.csi, v.persistent_volume_claim, v.empty_dir)) != 1
           for v in volumes):
        errors.append(VOLUME_SOURCE)
    names = [v.name for v in volumes]
    if any(not re.fullmatch(DNS1123_LABEL, n) or n == SHARED_TMP_VOLUME or names.count(n) > 1
           for n in names):
        errors.append(VOLUME_NAME)
    if any(m.mount_path in ("/tmp", "/tmp/") or m.name not in names
           for m in trainer.volume_mounts):
        errors.append(VOLUME_MOUNT)
    return errors


def _progress_checks(trainer: TrainerSpec) -> list[str]:
    progress = trainer.progress
    if progress is None:
        return []
    if trainer.command is None:
        return [PROGRESS_NEEDS_COMMAND]
    errors: list[str] = []
    runs = maxtext.runs_maxtext(trainer.command, trainer.args)
    path = progress.metrics_file
    if path is None and not runs:
        errors.append(PROGRESS_METRICS_FILE_REQUIRED)
    if path is not None and not re.fullmatch(maxtext.METRICS_FILE_PATTERN, path):
        errors.append(PROGRESS_METRICS_FILE_PATH)
    key = maxtext.METRICS_FILE_KEY + "="
    given = [a[len(key):] for a in trainer.args if a.startswith(key)] if runs else []
    if any(not re.fullmatch(maxtext.METRICS_FILE_PATTERN, g) or (path is not None and g != path)
           for g in given):
        errors.append(MAXTEXT_METRICS_FILE_ARG)
    return errors


def _checkpoint_maxtext_checks(spec: ElasticTrainingJobSpec) -> list[str]:
    trainer = spec.trainer
    runs = maxtext.runs_maxtext(trainer.command, trainer.args)
    errors: list[str] = []
    for field, (attr, key) in CHECKPOINT_MAXTEXT_FIELDS.items():
        if getattr(spec.checkpoint, attr) is None:
            continue
        fill = {"field": field, "key": key, "env": maxtext.env_key(key)}
        if trainer.command is not None and not runs:
            errors.append(_fill(CHECKPOINT_FIELD_UNREAD, fill))
        elif runs and (maxtext.has_flag(trainer.args, key)
                       or any(e.name == fill["env"] for e in trainer.env)):
            errors.append(_fill(CHECKPOINT_FIELD_TWICE, fill))
    if runs and spec.snapshot.period_steps:
        errors.append(SNAPSHOT_MAXTEXT)
    return errors


def _kueue_label_checks(labels: Mapping[str, str]) -> list[str]:
    errors = []
    for label, what in KUEUE_LABELS.items():
        value = labels.get(label)
        if value is not None and (len(value) > 63
                                  or not re.fullmatch(DNS1123_SUBDOMAIN, value)):
            shown = value if value.isprintable() else json.dumps(value)[1:-1]  # one line
            errors.append(KUEUE_LABEL_VALUE.format(label=label, value=shown, what=what))
    return errors


def validate_job(obj: Mapping[str, Any]) -> ElasticTrainingJob:
    """Parse and check an ElasticTrainingJob manifest as the API server would.

    Raises ValueError whose message has one line per problem, each naming the field path
    (e.g. `spec.tpu.numSlices`) and the fix.
    """
    if not isinstance(obj, Mapping):
        raise ValueError(
            f"<root>: expected a mapping (an ElasticTrainingJob), got {type(obj).__name__}"
        )
    problems: list[str] = []
    api_version = obj.get("apiVersion")
    if api_version != API_VERSION:
        problems.append(
            f"apiVersion: {api_version!r} is not {API_VERSION!r}; set apiVersion: {API_VERSION}"
        )
    if obj.get("kind") != KIND:
        problems.append(f"kind: {obj.get('kind')!r} is not {KIND!r}; set kind: {KIND}")
    if problems:
        raise ValueError("\n".join(problems))
    try:
        job = ElasticTrainingJob.model_validate(obj)
    except ValidationError as exc:
        raise ValueError("\n".join(describe_validation_error(exc))) from None
    problems = _semantic_checks(job)
    if problems:
        raise ValueError("\n".join(problems))
    return job


def describe_validation_error(exc: ValidationError) -> list[str]:
    """One line per problem of a pydantic ValidationError: the field path and the fix.
    The one formatter of model errors (`etj render`, admission-equivalent checks and the
    operator's InvalidSpec condition)."""
    return [f"{_loc_to_path(err['loc'])}: {_pydantic_message(err)}" for err in exc.errors()]


_PYDANTIC_FIXES: dict[str, Callable[[dict[str, Any]], str]] = {
    "missing": lambda e: "required; set it",
    "extra_forbidden": lambda e: (
        "unknown field; remove it (check the spelling against docs/api.md)"
    ),
}


def _pydantic_message(err: Any) -> str:
    fix = _PYDANTIC_FIXES.get(err["type"])
    if fix is not None:
        return fix(err)
    return f"{err['msg']} (got {err.get('input')!r})"
