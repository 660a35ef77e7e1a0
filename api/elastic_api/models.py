"""pydantic models of the ElasticTrainingJob spec and status (camelCase on the wire).

These models are the single source of truth: the CRD schema in crds/ is generated from
them (`etj crd`), the renderer reads them, and the operator's status computation
produces them. `status.training` is written by the trainer, never by the operator; its
contract is docs/status-contract.md.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from elastic_api.catalog import INT32_MAX as INT32_MAX
from elastic_api.catalog import MAX_SLICE_RESTARTS as MAX_SLICE_RESTARTS
from elastic_api.catalog import MAX_VMS_PER_SLICE, TpuType, slice_shape
from elastic_api.images import COLOCATED_PYTHON_REPO, DEFAULT_PATHWAYS_VERSION, server_image
from elastic_api.names import MULTIKUEUE_CONTROLLER
from elastic_api.phases import PHASES, Phase, PhaseSource
from elastic_api.resize import (
    SIMULATED_DEVICES_PER_SLICE,
    TRAIN_ON_FROM_SLICES,
    TRAIN_ON_SHARE,
    default_min_slices,
)

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# JobSet's failurePolicy.maxRestarts and a Job's backoffLimit are int32 (INT32_MAX):
# admission keeps maxRestarts and VMs per slice x maxSliceRestarts within it (rules in
# validation.py; MAX_SLICE_RESTARTS and each shape's bound in catalog.py).

# The API server takes a JSON number with a fraction part (2.0) as an integer only if it
# is whole and below 2**53 in magnitude (exact as a float64).
_MAX_WHOLE_FLOAT = 2**53


def _api_integer(value: Any) -> Any:
    """Refuse, as the API server does, what pydantic's lax `int` would turn into one: a
    bool, a numeric string, a float with a fraction or too big to be exact, anything
    outside int64. A whole float below 2**53 is that integer (the API server agrees)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < _MAX_WHOLE_FLOAT:
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int) \
            or not INT64_MIN <= value <= INT64_MAX:
        raise PydanticCustomError(
            "int64_type", "Input should be an integer from -2^63 to 2^63-1 (int64)")
    return value


# A spec integer: what the API server's `type: integer` admits, no more (the CRD schema
# is the same as plain int's).
SpecInt = Annotated[int, BeforeValidator(_api_integer)]
# spec.recovery.inPlaceDeadlineSeconds unset.
DEFAULT_IN_PLACE_DEADLINE_SECONDS = 120
# A spec count that may be left unset (`SpecCount | None`): the bound sits before the
# validator, so pydantic still emits it as `minimum`.
SpecCount = Annotated[int, Field(ge=0), BeforeValidator(_api_integer)]


def _api_number(value: Any) -> Any:
    """Refuse, as the API server's `type: number` does, what pydantic's lax `float` would
    turn into one: a bool or a numeric string (and, in Python, a NaN or an infinity)."""
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value):
        raise PydanticCustomError("number_type", "Input should be a finite number")
    return float(value)


SpecNumber = Annotated[float, BeforeValidator(_api_number)]

# The share of step time one kind of copy of the state (a snapshot, a checkpoint) may cost
# when the trainer chooses its period (spec.overheadBudgetPercent, `etj train
# --overhead-budget-percent`): admission and the trainer's flag refuse the same range.
DEFAULT_OVERHEAD_BUDGET_PERCENT = 2.0
MAX_OVERHEAD_BUDGET_PERCENT = 50.0


# A quantity written as a string: the pattern JobSet's CRD checks (controller-gen's for a
# resource.Quantity), narrowed to what resource.ParseQuantity takes too (JobSet's webhook
# decodes with it, as does every controller that reads the JobSet): the exponent is an
# integer, and of at most two digits, since a quantity's range (1e-9 to about 9e18) needs
# no more and ParseQuantity wraps a long one into an int32. An OpenAPI `pattern`, not a
# CEL rule: before Kubernetes 1.34 CEL sizes an int-or-string as a whole request, and a
# regex over that exceeds a CRD's cost budget.
QUANTITY_PATTERN = (
    r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]{1,2})?$"
)
QUANTITY_HINT = (
    "not a Kubernetes quantity; write a number with an optional suffix, e.g. 8, 0.5, 500m, "
    "32Gi or 1e3"
)


def _quantity(value: Any) -> Any:
    if isinstance(value, str):
        # fullmatch: `$` alone would let a trailing newline through (the API server's
        # RE2 does not).
        if not re.fullmatch(QUANTITY_PATTERN, value):
            raise PydanticCustomError("quantity", QUANTITY_HINT)
        return value
    # YAML turns `cpu: 8` into an int; Kubernetes quantities accept both (an int within
    # the API server's integer rules; the pattern applies to strings only).
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(_api_integer(value))
    return value


# A Kubernetes resource quantity (8, "500m", "32Gi"): int-or-string on the wire.
Quantity = Annotated[
    str,
    BeforeValidator(_quantity),
    WithJsonSchema({"x-kubernetes-int-or-string": True, "pattern": QUANTITY_PATTERN}),
]

# Bounds keep the CRD's CEL immutability rules (`self == oldSelf`) within the API
# server's cost budget; they are generous for real jobs.
ShortStr = Annotated[str, Field(max_length=253)]
LongStr = Annotated[str, Field(max_length=4096)]
# What the trainer reports is counted from zero and stays below 2**53 (exact in JSON
# numbers; the API server reads schema bounds as floats); anything else is a bad
# report (flagged in TrainingReportValid, and refused by the API server's schema).
Count = Annotated[int, Field(ge=0, le=2**53 - 1)]


class ApiModel(BaseModel):
    """camelCase aliases on the wire, snake_case in Python; unknown fields are errors."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    def to_wire(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class StatusModel(ApiModel):
    # A newer trainer or operator may add fields; an older reader must not crash on them.
    # A status is read from its JSON (status_parsing.py): the parser caches the field names
    # only, never the values (a job's names, uids, times), which would otherwise fill
    # pydantic's process-wide string cache job after job.
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore",
                              cache_strings="keys")


# --- spec -------------------------------------------------------------------------------


class TopologyAwareSpec(ApiModel):
    """Kueue's Topology-Aware Scheduling places the slices (a TAS ResourceFlavor of the
    job's queue): each slice's pods in one domain of `sliceLevel`, instead of JobSet's
    one-slice-per-node-pool placement."""

    slice_level: str = Field(
        max_length=317,
        description="Node label of the Kueue Topology level one slice fills, e.g. "
        "cloud.google.com/gke-nodepool (a v5e/v6e slice per node pool) or "
        "cloud.google.com/gke-tpu-partition-4x4x4-id (TPU7x cubes). Rendered as "
        "kueue.x-k8s.io/podset-slice-required-topology, with podset-slice-size = hosts "
        "per slice.",
    )
    job_level: str | None = Field(
        None, max_length=317,
        description="Node label of a level that holds every slice of the job (e.g. "
        "cloud.google.com/gce-topology-block): kueue.x-k8s.io/podset-required-topology. "
        "Unset: slices may land in different domains of every level above sliceLevel.",
    )


# spec.tpu.numSlices' cap: the job's status keeps an entry per slice and per node pool in
# one object, which etcd keeps under 1.5 MiB (docs/api.md, "How many slices", says what
# else bounds it, and how much of that 256 slices take).
MAX_SLICES = 256
MAX_SPARES = 64


class TpuSpec(ApiModel):
    """The TPU slices: type and topology pick a catalog shape; one worker Job per slice."""

    type: TpuType = Field(description="TPU generation: v5e, v5p, v6e, v4 or tpu7x.")
    topology: str = Field(
        max_length=16, description="Slice topology, e.g. 4x4 (v5e) or 2x2x2 (v5p); one of "
        "the catalog's for the type (docs/api.md, \"TPU catalog\").",
    )
    # The cap is a CEL rule (validation.py), not a maximum: its message says why.
    num_slices: SpecInt = Field(
        1, ge=1,
        description=f"Number of TPU slices (worker Jobs); at most {MAX_SLICES}, so that the "
        "job's status (an entry per slice) stays within etcd's 1.5 MiB object size even "
        "with every slice failing at once.",
    )
    spares: SpecInt = Field(
        0, ge=0, le=MAX_SPARES,
        description="Node pools of this shape expected beyond numSlices (hot spares a failed "
        "slice moves to); at most numSlices. The operator reports how many are healthy "
        "(status.sparePools, condition SparesAvailable); it cannot create them.",
    )
    topology_aware: TopologyAwareSpec | None = Field(
        None,
        description="Place slices with Kueue's Topology-Aware Scheduling (the job's queue "
        "has a TAS flavor). Kueue then keeps each slice in its domain: the operator's "
        "spare pools and quarantine do not apply (condition TopologyPlacement).",
    )


# spec.elastic.progressDeadlineSeconds: its bounds, and the floor of the learned deadline
# (elastic_api.progress_rules has the rule).
MIN_PROGRESS_DEADLINE_SECONDS = 5
# spec.elastic.restartWindowSeconds (elastic_api.budgets has the rule): its default where
# a count is derived, and its bounds: shorter than a slice's replacement, a window forgets
# each restart before the next comes and stops no crash loop; past 30 days it is a count
# over the run (leave it unset for that).
DEFAULT_RESTART_WINDOW_SECONDS = 3600
MIN_RESTART_WINDOW_SECONDS = 600
MAX_RESTART_WINDOW_SECONDS = 30 * 86400
# Restart times kept per budget in the status: the count plus one says it is spent; no
# derived count comes near it, and admission keeps a windowed count below it.
MAX_BUDGET_TIMES = 64
MAX_PROGRESS_DEADLINE_SECONDS = 86400
PROGRESS_DEADLINE_FLOOR_SECONDS = 60.0


class ElasticSpec(ApiModel):
    """How the trainer survives losing slices inside its process."""

    # The bound sits before the validator: pydantic then still emits it as `minimum`.
    min_slices: Annotated[int, Field(ge=1), BeforeValidator(_api_integer)] | None = Field(
        None,
        description="Slices needed to train: fewer than numSlices = replica resize (the "
        "bundled trainer keeps the global batch on the slices left, and grows back when "
        "one returns); numSlices = pause and resume. Unset, for the bundled trainer: from "
        f"{TRAIN_ON_FROM_SLICES} slices, numSlices less one slice in {TRAIN_ON_SHARE} (at "
        "least one) where its batch splits over the slices left, so a replacement's "
        "minutes are trained through; else numSlices.",
    )
    timeout_seconds: SpecInt = Field(300, ge=1, description="How long one retry waits for slices.")
    max_retries: SpecCount | None = Field(
        None,
        description="Elastic events (slices lost) the trainer recovers from: per "
        "restartWindowSeconds when that is set, else over the whole run. Unset: derived per "
        "window from the job's hosts (docs/api.md, \"Restart budgets\"; "
        "status.budgets.elasticRetries says the count).",
    )
    max_slice_restarts: SpecCount | None = Field(
        None,
        description="Restarts allowed per slice: per restartWindowSeconds when that is set, "
        "else over the whole run; worker backoffLimit = VMs per slice x this. Unset: derived "
        "per window from a slice's hosts (status.budgets.sliceRestarts says the count). "
        f"At most {MAX_SLICE_RESTARTS}, and at most (2^31-1) / VMs per slice, so that "
        f"backoffLimit fits an int32 (e.g. {INT32_MAX // MAX_VMS_PER_SLICE} for the "
        f"largest slice, {MAX_VMS_PER_SLICE} VMs).",
    )
    restart_window_seconds: Annotated[int, Field(ge=MIN_RESTART_WINDOW_SECONDS,
                                                 le=MAX_RESTART_WINDOW_SECONDS),
                                      BeforeValidator(_api_integer)] | None = Field(
        None,
        description="The window every restart budget counts over (maxSliceRestarts, "
        "maxRetries, maxStallRestarts, spec.maxRestarts): at most that many restarts within "
        "any this many seconds, so a long run keeps restarting and a crash loop is stopped. "
        "Unset: a count the spec sets holds over the whole run, and an unset count is "
        f"derived per {DEFAULT_RESTART_WINDOW_SECONDS} s. "
        f"{MIN_RESTART_WINDOW_SECONDS} to {MAX_RESTART_WINDOW_SECONDS}.",
    )
    elastic_slices: Annotated[int, Field(ge=0), BeforeValidator(_api_integer)] | None = Field(
        None,
        description="Slices that may be missing before the JobSet restarts (--num_elastic_slices). "
        "Unset = numSlices.",
    )
    progress_deadline_seconds: Annotated[int, Field(ge=MIN_PROGRESS_DEADLINE_SECONDS,
                                                    le=MAX_PROGRESS_DEADLINE_SECONDS),
                                         BeforeValidator(_api_integer)] | None = Field(
        None,
        description="The step deadline: seconds without a new training step "
        "(status.training.step) after which the job is stalled: condition Progressing "
        "False (ProgressDeadlineExceeded), a Warning Event, and onStall. It holds a train "
        "step and a thread blocked in one device call; the other phases of training (an "
        "evaluation, a checkpoint save, a compile, a restore, a data wait) keep deadlines "
        "of their own, never shorter than this, and a stopped process a 30 s grace "
        "(docs/trainer.md, \"Phases\"). Unset: learned from the trainer's step times "
        "(10 x the median seconds per step, 2 x the longest, at least "
        f"{int(PROGRESS_DEADLINE_FLOOR_SECONDS)} s; where the trainer's phase is not known, "
        "also 2 x the longest gap between new steps seen; 5 x that for the first step after "
        "a pause or resize, and while a checkpoint save is in flight).",
    )
    on_stall: Literal["Recover", "Report"] = Field(
        "Recover",
        description="What the operator does when the progress deadline passes and nothing "
        "is blamed (no slice down, none the trainer suspects). Recover: restart the "
        "trainer (the head's main: its pod is deleted and its Job makes a new one; counted "
        "as a trainer restart, resumed from the newest committed checkpoint; the JobSet is "
        "kept), once per stall, at most maxStallRestarts times. Report: the condition "
        "and Event only.",
    )
    max_stall_restarts: SpecCount | None = Field(
        None,
        description="Trainer restarts for stalls (onStall Recover) allowed: per "
        "restartWindowSeconds when that is set, else over the job's life (counted in "
        "status.counters.stallRestarts). Unset: derived per window from the job's hosts "
        "(status.budgets.stallRestarts says the count). Once spent, a stall is reported "
        "only: Progressing False says so and a StallRestartsExhausted Warning Event is "
        "posted; a trainer that stalls again after every restart is not restarted forever.",
    )
    on_slow_slice: Literal["Replace", "Report"] | None = Field(
        None,
        description="When the trainer blames one slice for slow steps (its sliceReplacement "
        "request with reason SliceSlow: 1.2x the fastest slice's part or more, for 60 s "
        "on end) and a healthy spare node pool exists. Replace: recreate that slice's "
        "worker Job on the spare (counted as a slice failure). Report: condition Degraded "
        "(SlowSteps) only. Unset: Replace where recovery.replaceSlices is true, else "
        "Report.",
    )

    def slow_slice_action(self, replace_slices: bool) -> str:
        """onSlowSlice, or its default (Replace where the operator replaces slices)."""
        if self.on_slow_slice is not None:
            return self.on_slow_slice
        return "Replace" if replace_slices else "Report"


Redispatch = Literal["Never", "OnWorkerLost"]


class MultiClusterSpec(ApiModel):
    """A MultiKueue job (spec.managedBy): what the manager cluster's operator may do when
    the worker cluster it runs in is lost (docs/operations.md, "Many clusters")."""

    redispatch: Redispatch = Field(
        "Never",
        description="When MultiKueue declares the worker cluster the job runs in lost "
        "(unreachable for its workerLostTimeout), Kueue takes the job back. Never: the "
        "operator suspends it so that it is not dispatched again (its Workload "
        "deactivated, phase Suspended, reason RedispatchNotAllowed): a lost cluster may "
        "still be running it, and two copies would write the same checkpoint directory. "
        "OnWorkerLost: it is dispatched again to a cluster with quota and resumes from its "
        "newest committed checkpoint. Mutable: setting OnWorkerLost on a job so suspended "
        "runs it again.",
    )


# A container exit code that can fail a pod (0 never does).
ExitCode = Annotated[int, Field(ge=1, le=255), BeforeValidator(_api_integer)]
# A Kubernetes reason (CamelCase; `OutOfgoogle.com/tpu` has a resource name in it).
TerminationReason = Annotated[str, Field(min_length=1, max_length=128,
                                         pattern=r"^[A-Za-z][A-Za-z0-9./_-]*$")]


class RecoverySpec(ApiModel):
    """How the operator replaces a failed slice (docs/operations.md, "Slice replacement, hot
    spares and maintenance")."""

    replace_slices: bool = Field(
        True,
        description="The operator recreates a failed slice's worker Job at once (no growing "
        "pod backoff; stuck pods force-deleted; failing node pools avoided). false: JobSet's "
        "and the Job controller's defaults alone.",
    )
    node_not_ready_seconds: SpecInt = Field(
        5, ge=0, le=600,
        description="A slice whose node reports Ready=False this long is replaced "
        "(Ready=Unknown or a deleted node: at once).",
    )
    force_delete_after_seconds: SpecInt = Field(
        5, ge=0, le=600,
        description="A worker pod being deleted on a node that has not been Ready this long "
        "(or is gone) is deleted with grace period 0.",
    )
    worker_node_toleration_seconds: SpecInt = Field(
        30, ge=0, le=3600,
        description="tolerationSeconds of the workers' node.kubernetes.io/not-ready and "
        "unreachable NoExecute tolerations (instead of the API server's 300 s): the "
        "eviction that still happens while the operator is down. At least "
        "nodeNotReadySeconds.",
    )
    quarantine_after_failures: SpecInt = Field(
        2, ge=1, le=100,
        description="Jobs (this one counted) whose slices failed on one node pool within "
        "quarantineWindowSeconds with no evidence against the nodes, after which the pool "
        "is avoided (while a spare pool exists). A job whose failures follow it from pool "
        "to pool is not counted. 1: this job's own failure is enough.",
    )
    quarantine_window_seconds: SpecInt = Field(
        3600, ge=60, le=604800,
        description="The window of quarantineAfterFailures and hardwareExitCodes.",
    )
    hardware_exit_codes: list[ExitCode] = Field(
        default_factory=list, max_length=32,
        description="Exit codes of a worker container that say its TPU host is broken (the "
        "convention of your program or its runtime): the node pool is quarantined as for a "
        "dead node, unless this job reported the same on another pool within "
        "quarantineWindowSeconds (the fault follows the job). Any other exit on a healthy "
        "node is the job's own failure: it spends the slice's restart budget and "
        "quarantines nothing.",
    )
    hardware_reasons: list[TerminationReason] = Field(
        default_factory=list, max_length=16,
        description="The same for reasons: a worker container's termination reason, the "
        "pod's status reason or its DisruptionTarget condition's reason (e.g. a device "
        "plugin's). Kubernetes' own node signals need no entry (docs/operations.md, "
        "\"Who is to blame\").",
    )
    # Neither has a schema default: the API server would write it into every job, and a
    # release before these fields (which refuses fields it does not know) could not read
    # the job after a downgrade (make test-upgrade). The operator applies the default.
    restart_in_place: bool | None = Field(
        None,
        description="A slice whose failure the evidence does not lay on its nodes (a worker "
        "process that exited on a healthy node, its code not in hardwareExitCodes) keeps "
        "its pods: the kubelet restarts the container where it stands and the operator "
        "waits for it instead of recreating the worker Job (docs/api.md, \"Restart in place "
        "or move\"). false: every failure recreates the Job. Unset: true.",
    )
    in_place_deadline_seconds: Annotated[int, Field(ge=5, le=3600),
                                         BeforeValidator(_api_integer)] | None = Field(
        None,
        description="A slice restarting in place that is not Ready again this long after "
        "the operator decided so is recreated (the kubelet could not restart it). Unset: "
        f"{DEFAULT_IN_PLACE_DEADLINE_SECONDS}.",
    )

    @property
    def in_place_allowed(self) -> bool:
        """restartInPlace as it applies: unset is true."""
        return self.restart_in_place is not False

    @property
    def in_place_deadline(self) -> int:
        """inPlaceDeadlineSeconds as it applies."""
        return self.in_place_deadline_seconds or DEFAULT_IN_PLACE_DEADLINE_SECONDS


class MaintenanceSpec(ApiModel):
    """What the operator does when GKE announces maintenance on a slice's nodes."""

    enabled: bool = Field(
        True,
        description="Act on GKE's maintenance signals: ask the trainer for a checkpoint, then "
        "move the slice to a spare pool (or let the maintenance take it).",
    )
    lead_seconds: SpecInt = Field(
        900, ge=60, le=604800,
        description="Act this long before cloud.google.com/scheduled-maintenance-time.",
    )
    checkpoint_timeout_seconds: SpecInt = Field(
        300, ge=1, le=3600,
        description="How long to wait for the trainer to acknowledge the checkpoint request "
        "before moving the slice anyway; less than leadSeconds.",
    )
    pause_timeout_seconds: SpecInt = Field(
        600, ge=1, le=3600,
        description="The longest the trainer pauses (no steps) after acknowledging, waiting "
        "for the slice to move.",
    )


# What the bundled trainer uses for checkpoint.keep and checkpoint.async left unset.
DEFAULT_CHECKPOINT_KEEP, DEFAULT_CHECKPOINT_ASYNC = 3, True


class CheckpointSpec(ApiModel):
    """Orbax checkpoints (the fallback every recovery can use)."""

    directory: str = Field(
        min_length=1, max_length=1024,
        description="Orbax checkpoint root: gs://bucket/path or a filesystem path.",
    )
    # Optional, so that "not given" (the trainer chooses) differs from any number; a job
    # stored while the default was 100 keeps its explicit 100.
    period_steps: Annotated[int, Field(ge=1), BeforeValidator(_api_integer)] | None = Field(
        None,
        description="Save a checkpoint every N steps. Unset: the bundled trainer chooses the "
        "period from what a save costs against the step time, within "
        "spec.overheadBudgetPercent (status.training.checkpointCadence says which and why).",
    )
    # No defaults in the CRD for keep and async: admission can then tell a value the user
    # set (refused for a program that would never read it) from one nobody set.
    keep: Annotated[int, Field(ge=1), BeforeValidator(_api_integer)] | None = Field(
        None,
        description="Committed checkpoints to keep. Unset: 3 for the bundled trainer; MaxText "
        "keeps every one (passed as max_num_checkpoints_to_keep). Only for the bundled "
        "trainer and MaxText.",
    )
    async_: bool | None = Field(
        None, alias="async",
        description="Write checkpoints in the background. Unset: true for the bundled "
        "trainer; MaxText's own default, true (passed as async_checkpointing). Only for the "
        "bundled trainer and MaxText.",
    )
    persistence: bool = Field(
        True,
        description="ENABLE_PATHWAYS_PERSISTENCE=1 in main (backend pathways): Orbax's "
        "Pathways persistence handler, where the trainer registers it, has the TPU hosts "
        "write their own shards (the bundled trainer does; MaxText 0.2.5's pre-training "
        "trainer does not: docs/api.md).",
    )

    @property
    def keep_or_default(self) -> int:
        """What the bundled trainer keeps."""
        return self.keep if self.keep is not None else DEFAULT_CHECKPOINT_KEEP

    @property
    def async_or_default(self) -> bool:
        """Whether the bundled trainer saves in the background."""
        return self.async_ if self.async_ is not None else DEFAULT_CHECKPOINT_ASYNC


class SnapshotSpec(ApiModel):
    """In-memory snapshots of the training state (faster recovery than a checkpoint)."""

    period_steps: Annotated[int, Field(ge=0), BeforeValidator(_api_integer)] | None = Field(
        None,
        description="Keep an in-memory snapshot every N steps (0 = off); at most "
        "spec.trainer.steps. Unset: the bundled trainer chooses the period from what a "
        "snapshot costs against the step time, within spec.overheadBudgetPercent "
        "(status.training.snapshotCadence says which and why).",
    )


class EnvVar(ApiModel):
    """An environment variable, as in a core/v1 EnvVar."""

    name: str = Field(min_length=1, max_length=253)
    value: LongStr | None = None
    value_from: dict[str, Any] | None = Field(None, description="As in a core/v1 EnvVar.")


class Resources(ApiModel):
    """Container resources, as in core/v1 ResourceRequirements."""

    limits: dict[ShortStr, Quantity] | None = Field(
        None, max_length=16,
        description="Resource name to quantity: an integer or a string such as 500m or 32Gi.",
    )
    requests: dict[ShortStr, Quantity] | None = Field(
        None, max_length=16,
        description="Resource name to quantity: an integer or a string such as 500m or 32Gi.",
    )


class SecurityContext(ApiModel):
    """What main's security context may relax, as in a core/v1 SecurityContext: the user
    and the root filesystem, for images that run as root or write next to their code.
    Nothing that grants privileges (privileged, capabilities, privilege escalation,
    seccomp, AppArmor, SELinux) is offered: those stay hardened."""

    run_as_non_root: bool | None = None
    run_as_user: Annotated[int, Field(ge=0), BeforeValidator(_api_integer)] | None = None
    run_as_group: Annotated[int, Field(ge=0), BeforeValidator(_api_integer)] | None = None
    read_only_root_filesystem: bool | None = None


class VolumeMount(ApiModel):
    """Where `main` mounts one of `trainer.volumes`, as in a core/v1 VolumeMount."""

    name: str = Field(max_length=63, description="A volume of trainer.volumes.")
    mount_path: str = Field(min_length=1, max_length=1024)
    read_only: bool | None = None
    sub_path: str | None = Field(None, max_length=1024)


class CsiVolumeSource(ApiModel):
    """An inline CSI volume, as in a core/v1 CSIVolumeSource (e.g. Cloud Storage FUSE)."""

    driver: ShortStr = Field(description="e.g. gcsfuse.csi.storage.gke.io (Cloud Storage FUSE).")
    read_only: bool | None = None
    volume_attributes: dict[ShortStr, LongStr] | None = Field(
        None, max_length=32, description="e.g. bucketName and mountOptions for Cloud Storage FUSE.",
    )


class PvcVolumeSource(ApiModel):
    """As in a core/v1 PersistentVolumeClaimVolumeSource."""

    claim_name: ShortStr
    read_only: bool | None = None


class EmptyDirVolumeSource(ApiModel):
    """As in a core/v1 EmptyDirVolumeSource."""

    medium: Literal["", "Memory"] | None = None
    size_limit: Quantity | None = None


class Volume(ApiModel):
    """A volume of the head pod for `main`, as in a core/v1 Volume: one source of csi
    (Cloud Storage FUSE), persistentVolumeClaim or emptyDir."""

    name: str = Field(max_length=63, description="A DNS-1123 label, not shared-tmp.")
    csi: CsiVolumeSource | None = None
    persistent_volume_claim: PvcVolumeSource | None = None
    empty_dir: EmptyDirVolumeSource | None = None


class ProgressSpec(ApiModel):
    """A progress sidecar for a program that does not write status.training itself: `etj
    progress`, a native sidecar in the head pod, follows the program's metrics file on the
    head's /tmp and reports step, loss and step time, and samples the program's process
    (the head pod then shares its process namespace) for what it is doing
    (status.training.activity; docs/api.md, "Progress of any trainer")."""

    image: str = Field(
        min_length=1, max_length=512,
        description="The trainer image of this project (it runs `etj progress`), e.g. "
        "<registry>/elastic-trainer:<version>.",
    )
    format: Literal["maxtext"] = Field(
        "maxtext",
        description="maxtext: MaxText's metrics_file, one JSON object per line with step, "
        "learning/loss and perf/step_time_seconds; its evaluation lines (eval/...) are the "
        "evaluation's heartbeat.",
    )
    metrics_file: str | None = Field(
        None, max_length=1024,
        description="The file to follow, under /tmp (the emptyDir main shares with the "
        "sidecar). Unset: for MaxText, metrics_file in trainer.args, else /tmp/etj-metrics.jsonl "
        "(the renderer passes it to MaxText as metrics_file); required for any other program.",
    )


@dataclass(frozen=True)
class BundledTrainer:
    """The bundled trainer's settings, unset ones filled with their defaults."""

    model: str
    steps: int
    batch: int
    seed: int
    data: str


# What the bundled trainer uses for a field left unset.
DEFAULT_MODEL, DEFAULT_BATCH, DEFAULT_SEED, DEFAULT_DATA = "tiny", 8, 0, "synthetic"
# The bundled trainer's model configs (elastic_trainer.configs; a test keeps them equal):
# admission refuses any other trainer.model, which `etj train` would refuse at start.
BUNDLED_MODELS = ("tiny", "small", "qwen3-0.6b")
# The fields that configure `etj train` only; admission refuses them with `command`.
BUNDLED_TRAINER_FIELDS = ("model", "steps", "batch", "seed", "data")


class TrainerSpec(ApiModel):
    """The program in the head pod's `main` container: the bundled trainer (`etj train`),
    or any JAX program given by `command` (e.g. MaxText)."""

    image: str = Field(
        min_length=1, max_length=512,
        description="Image of the head's main container (the trainer).",
    )
    command: list[LongStr] | None = Field(
        None, max_length=64,
        description="Entrypoint of main, as in a core/v1 Container (not run in a shell). "
        "Set: main runs it instead of `etj train`, and model, steps, batch, seed and data "
        "must be unset. Unset: main runs `etj train` with flags from this spec.",
    )
    args: list[LongStr] = Field(
        default_factory=list, max_length=64,
        description="Arguments of main, as in a core/v1 Container: after command, or after "
        "`etj train` and its flags.",
    )
    model: str | None = Field(
        None, max_length=253,
        description="Bundled trainer only: model config name, one of "
        f"{', '.join(BUNDLED_MODELS)}; unset = tiny.",
    )
    steps: Annotated[int, Field(ge=1), BeforeValidator(_api_integer)] | None = Field(
        None, description="Bundled trainer only, and required for it: training steps.",
    )
    batch: Annotated[int, Field(ge=1), BeforeValidator(_api_integer)] | None = Field(
        None, description="Bundled trainer only: global batch size (sequences per step); "
        "unset = 8.",
    )
    seed: Annotated[int, Field(ge=0), BeforeValidator(_api_integer)] | None = Field(
        None, description="Bundled trainer only: seed for parameters and data; unset = 0.",
    )
    data: str | None = Field(
        None, max_length=1024,
        description="Bundled trainer only: `synthetic` (the default when unset), or a "
        "directory or glob of ArrayRecord shards on a filesystem: mount a bucket with "
        "trainer.volumes (Cloud Storage FUSE) and name the mounted path; a URL (gs://...) "
        "is refused.",
    )
    env: list[EnvVar] = Field(
        default_factory=list, max_length=64, description="Extra environment variables for `main`.",
    )
    resources: Resources | None = None
    security_context: SecurityContext | None = Field(
        None,
        description="Relaxes main's hardened security context field by field: the user and "
        "the read-only root filesystem (no privilege escalation, no capabilities and "
        "RuntimeDefault seccomp always stay).",
    )
    volumes: list[Volume] = Field(
        default_factory=list, max_length=16,
        description="Volumes of the head pod for main (e.g. a bucket through Cloud Storage "
        "FUSE).",
    )
    volume_mounts: list[VolumeMount] = Field(
        default_factory=list, max_length=16, description="Mounts of trainer.volumes in main.",
    )
    progress: ProgressSpec | None = Field(
        None,
        description="Only with command: a sidecar that reports the program's progress "
        "(status.training) from its metrics file. Unset: no sidecar.",
    )

    def bundled(self) -> BundledTrainer:
        """The bundled trainer's settings (admission requires steps when command is unset)."""
        if self.steps is None:
            raise ValueError("spec.trainer.steps: required for the bundled trainer")
        return BundledTrainer(
            model=self.model if self.model is not None else DEFAULT_MODEL,
            steps=self.steps,
            batch=self.batch if self.batch is not None else DEFAULT_BATCH,
            seed=self.seed if self.seed is not None else DEFAULT_SEED,
            data=self.data if self.data is not None else DEFAULT_DATA,
        )


class PathwaysComponent(ApiModel):
    """Overrides for one Pathways component."""

    resources: Resources | None = None
    args: list[LongStr] = Field(
        default_factory=list, max_length=64, description="Extra flags for this component.",
    )


class PathwaysImages(ApiModel):
    """Full image references; override `version`. Each with a digest (@sha256:...) or a
    tag other than latest."""

    server: str | None = Field(
        None, max_length=512, description="Resource manager and worker image, e.g. "
        f"{server_image(DEFAULT_PATHWAYS_VERSION)}@sha256:<digest>.",
    )
    proxy: str | None = Field(None, max_length=512, description="IFRT proxy image.")


class ColocatedPythonSpec(ApiModel):
    """The colocated Python sidecar on every TPU worker (Pathways' colocated Python: code
    the controller sends to run on the TPU hosts, e.g. MaxText's
    colocated_python_checkpointing), rendered as xpk's --colocated-python-sidecar-image
    renders it: a native sidecar `colocated-python-sidecar` serving gRPC on port 50051,
    sharing the workers' /tmp."""

    image: str = Field(
        min_length=1, max_length=512,
        description="The sidecar's image: your program's code (e.g. MaxText) built on "
        f"{COLOCATED_PYTHON_REPO}/sidecar:<date>-python_<version>-jax_<version>, the JAX "
        "of main. A digest or a dated tag: no tag or latest is refused (a replaced "
        "slice would run other code than its peers).",
    )
    resources: Resources | None = None


class PathwaysSpec(ApiModel):
    """The Pathways servers: resource manager, IFRT proxy and TPU workers."""

    version: str = Field(
        DEFAULT_PATHWAYS_VERSION, max_length=128,
        description="Tag of the Pathways server and proxy images (<date>-jax_<version>, "
        "pairing with the JAX of main; the default pairs with the bundled trainer's). "
        "latest is refused: it moves, and a slice replaced later would pull another "
        "server than its peers run.",
    )
    images: PathwaysImages | None = None
    colocated_python: ColocatedPythonSpec | None = Field(
        None,
        description="Run the colocated Python sidecar on every TPU worker (backend "
        "pathways). Required by MaxText's colocated_python_checkpointing=True.",
    )
    gcs_scratch: str | None = Field(
        None, max_length=1024, pattern=r"^gs://[^/]+",
        description="gs:// scratch location for Pathways (required with backend pathways).",
    )
    resource_manager: PathwaysComponent | None = None
    proxy: PathwaysComponent | None = None
    worker: PathwaysComponent | None = None


class Toleration(ApiModel):
    """A pod toleration, as in core/v1."""

    key: ShortStr | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: ShortStr | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: SpecInt | None = None


class ElasticTrainingJobSpec(ApiModel):
    tpu: TpuSpec
    backend: Literal["pathways", "simulated"] = Field(
        "pathways",
        description="`simulated` renders the same JobSet without TPUs: the trainer runs on CPU "
        "with simulated slices and workers run a slice agent.",
    )
    elastic: ElasticSpec = Field(default_factory=ElasticSpec)
    max_restarts: SpecCount | None = Field(
        None,
        description="Restarts of the program allowed: main's restarts in place (a crash of "
        "the trainer's process, spec.recovery.restartInPlace) and whole-JobSet restarts (a "
        "slice whose own budget is spent, a head pod lost): per spec.elastic."
        "restartWindowSeconds when that is set (the operator counts them and fails the "
        "JobSet past the count), else over the whole run (JobSet's failurePolicy."
        f"maxRestarts, the operator adding main's); at most {INT32_MAX} (an int32 in JobSet). "
        "Unset: derived per window from the job's hosts (status.budgets.jobSetRestarts says "
        "the count).",
    )
    recovery: RecoverySpec = Field(default_factory=RecoverySpec)
    maintenance: MaintenanceSpec = Field(default_factory=MaintenanceSpec)
    placement: Literal["TPU", "Any"] = Field(
        "TPU",
        description="TPU: workers are placed like TPU workers (TPU node selector, google.com/tpu "
        "limit, one slice per node pool), the head on headNodePool, for either backend. Any: "
        "no TPU placement (backend simulated only: kind, clusters without TPU nodes).",
    )
    checkpoint: CheckpointSpec
    snapshot: SnapshotSpec = Field(default_factory=SnapshotSpec)
    overhead_budget_percent: SpecNumber = Field(
        DEFAULT_OVERHEAD_BUDGET_PERCENT,
        description="Bundled trainer: the share of step time (percent, more than 0 and at "
        "most 50) the copies whose periodSteps is unset may cost together: half each when "
        "the trainer chooses both the snapshot and the checkpoint period, all of it for the "
        "one it chooses otherwise.",
    )
    trainer: TrainerSpec
    pathways: PathwaysSpec = Field(default_factory=PathwaysSpec)
    priority_class_name: str | None = Field(
        None, max_length=253,
        description="priorityClassName of every pod (Kueue also orders the job by it when the "
        "job has no kueue.x-k8s.io/priority-class label).",
    )
    node_selector: dict[ShortStr, ShortStr] = Field(
        default_factory=dict, max_length=32, description="Added to every pod's nodeSelector.",
    )
    tolerations: list[Toleration] = Field(
        default_factory=list, max_length=32, description="Added to every pod.",
    )
    head_node_pool: str = Field(
        "cpu-np", max_length=63, description="GKE node pool of the head (CPU) pod.",
    )
    service_account_name: str | None = Field(
        None, max_length=253,
        description="ServiceAccount of every pod, head and workers alike (a DNS-1123 "
        "subdomain). The trainer's Role is bound to it, and Cloud Storage FUSE volumes "
        "mounted with hostNetworkPodKSA act as it. The Pathways pods run on the host "
        "network, where Workload Identity does not apply: their own Google Cloud calls "
        "(checkpoints, Pathways scratch) use their node pool's service account "
        "(docs/gke.md, \"Identity\"). Unset: the namespace's default.",
    )
    termination_grace_period_seconds: SpecInt = Field(
        30, ge=0, description="terminationGracePeriodSeconds of every pod.",
    )
    suspend: bool = Field(False, description="Suspend the JobSet (pods are deleted, state kept).")
    managed_by: Literal["kueue.x-k8s.io/multikueue"] | None = Field(
        None,
        description=f"{MULTIKUEUE_CONTROLLER}: Kueue's MultiKueue dispatches the job to a "
        "worker cluster, where the operator runs it; in this (the manager) cluster the "
        "operator makes its Kueue Workload and no JobSet, and the status is the worker's. "
        "Unset: the job runs in this cluster. Immutable.",
    )
    multi_cluster: MultiClusterSpec | None = Field(
        None,
        description="A MultiKueue job (spec.managedBy): whether it may be dispatched again "
        "when its worker cluster is lost. Unset: as {} (redispatch Never). Mutable.",
    )

    @property
    def multikueue(self) -> bool:
        """MultiKueue dispatches this job: this is the manager cluster's copy."""
        return self.managed_by == MULTIKUEUE_CONTROLLER

    @property
    def redispatch(self) -> str:
        """spec.multiCluster.redispatch, with its default."""
        return (self.multi_cluster or MultiClusterSpec()).redispatch

    @property
    def min_slices(self) -> int:
        """spec.elastic.minSlices, or its default (elastic_api.resize)."""
        if self.elastic.min_slices:
            return self.elastic.min_slices
        batch = None if self.trainer.command is not None else self.trainer.bundled().batch
        return default_min_slices(self.tpu.num_slices, batch, self.devices_per_slice)

    @property
    def on_slow_slice(self) -> str:
        """spec.elastic.onSlowSlice, or its default (elastic.slow_slice_action)."""
        return self.elastic.slow_slice_action(self.recovery.replace_slices)

    @property
    def devices_per_slice(self) -> int:
        """The devices of one slice the bundled trainer's mesh spans: its chips, or the
        simulated backend's."""
        if self.backend == "simulated":
            return SIMULATED_DEVICES_PER_SLICE
        try:
            return slice_shape(self.tpu.type, self.tpu.topology).chips
        except ValueError:  # refused at admission
            return 1

    @property
    def elastic_slices(self) -> int:
        if self.elastic.elastic_slices is None:
            return self.tpu.num_slices
        return self.elastic.elastic_slices


# --- status -------------------------------------------------------------------------------

ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(StatusModel):
    type: str
    status: ConditionStatus
    reason: str
    message: str = ""
    last_transition_time: datetime
    observed_generation: int | None = None


SliceState = Literal["Pending", "Ready", "Down", "Restarting"]


ReplacementAction = Literal["Replace", "Move", "GiveUp", "RestartInPlace"]
# Whom a slice failure's evidence blames (the operator's core/blame.py decides):
# Node: what the control plane shows of the node or the pod (NotReady or gone, unhealthy
#   TPU chips, the node's lifecycle ending the pod, a maintenance in progress);
# Reported: the worker's own exit code or reason, named in spec.recovery.hardwareExitCodes
#   or hardwareReasons;
# Job: the worker container exited on a healthy node (the job's own failure);
# Other: neither (a pod deleted or evicted, a host lost between two looks).
Blame = Literal["Node", "Reported", "Job", "Other"]


class SliceReplacement(StatusModel):
    """What the operator does about a slice's current failure, written to the status
    before it acts (so a restarted operator neither repeats nor forgets it)."""

    action: ReplacementAction = Field(
        description="Replace: recreate the worker Job (counts in restarts); RestartInPlace: "
        "the evidence clears the nodes, the slice's pods restart where they stand (counts in "
        "restarts; recreated if not Ready within spec.recovery.inPlaceDeadlineSeconds); "
        "Move: a planned move off a pool under maintenance (counts in moves); GiveUp: the "
        "restart budget is spent, the Job's backoffLimit is lowered so JobSet's "
        "failurePolicy applies.")
    reason: str = Field(description="Why: the slice's failure reason, or Maintenance.")
    job_uid: str | None = Field(None, description="uid of the worker Job replaced (the "
                                "delete's precondition: a newer Job is never deleted).")
    from_pool: str | None = None
    requested_at: datetime
    blame: Blame | None = Field(None, description="Whom the failure's evidence blames: "
                                "Node, Reported, Job or Other (PoolFailure.blame).")
    evidence: str | None = Field(None, description="The evidence, in words.")


class ReplacementRecord(StatusModel):
    """The slice's last completed replacement."""

    action: ReplacementAction
    reason: str
    requested_at: datetime
    ready_at: datetime
    seconds: float = Field(description="requestedAt to the slice Ready again.")
    from_pool: str | None = None
    to_pool: str | None = None
    blame: Blame | None = None


class SliceMaintenance(StatusModel):
    """A maintenance GKE announced on the nodes of the slice's pool."""

    pool: str
    signal: str = Field(description="ScheduledMaintenance, MaintenanceOngoing or "
                        "ImpendingTermination (the GKE label or taint seen).")
    scheduled_at: datetime | None = Field(
        None, description="cloud.google.com/scheduled-maintenance-time, when given.")
    noticed_at: datetime
    request_id: int | None = Field(None, description="The checkpointRequest that covers it.")


class CountedFailures(StatusModel):
    """How far the slice's restarts account for its worker Job's own count of failed pods
    (status.failed + uncountedTerminatedPods.failed: the Job controller's, kept across
    operator restarts). A count above it is a failure no look saw, counted once
    (docs/design/exactly-once.md)."""

    job_uid: str = Field(description="uid of the worker Job the count is of.")
    failed_pods: int = Field(0, description="Its failed pods the restarts account for.")
    container_restarts: int | None = Field(
        None, description="The container restarts of its pods (their restartCount, summed) "
        "the restarts account for: a restart in place no look saw is counted once. None: "
        "written by an operator that did not count them (taken as the count then seen).")


class SliceStatus(StatusModel):
    index: int
    state: SliceState
    ready_hosts: int = 0
    hosts: int = 0
    restarts: int = Field(0, description="Times this slice failed (never decreases); the "
                          "operator replaces it while restarts <= spec.elastic."
                          "maxSliceRestarts.")
    moves: int = Field(0, description="Planned moves to another pool (maintenance); not "
                       "failures, not counted in restarts.")
    reason: str | None = None
    message: str | None = None
    last_transition_time: datetime | None = None
    pool: str | None = Field(None, description="Node pool the slice's pods run on.")
    domain: str | None = Field(
        None, description="With spec.tpu.topologyAware: the sliceLevel domain (the label's "
        "value on its nodes) the slice's pods run in.")
    replacement: SliceReplacement | None = None
    last_replacement: ReplacementRecord | None = None
    maintenance: SliceMaintenance | None = None
    counted: CountedFailures | None = None
    recent_failures: list[datetime] = Field(
        default_factory=list, max_length=MAX_BUDGET_TIMES,
        description="The slice's failures spec.elastic.maxSliceRestarts counts now, oldest "
        "first: those within the restart window (docs/api.md, \"Restart budgets\"); empty "
        "for a count over the whole run, which restarts holds.")


class PoolFailure(StatusModel):
    """One slice failure of this job on a pool."""

    at: datetime
    blame: Blame
    reason: str = Field(description="The evidence: NodeNotReady, DeviceUnhealthy, "
                        "NodeDisruption, Maintenance, HardwareFailure, or the slice's "
                        "reason (PodFailed, ...).")


class PoolStatus(StatusModel):
    """A node pool this job ran on: its recent slice failures, and whether the operator
    keeps replacements off it (the node label elastic.pathways.dev/quarantined)."""

    name: str
    failures: list[PoolFailure] = Field(
        default_factory=list, description="This job's slice failures on this pool within "
        "spec.recovery.quarantineWindowSeconds (newest last).")
    quarantined: str | None = Field(
        None, description="Why replacements avoid it: NodeNotReady, DeviceUnhealthy, "
        "NodeDisruption, Maintenance, HardwareFailure, RepeatedFailures; unset: not "
        "quarantined.")
    quarantined_at: datetime | None = None
    quarantine_cause: str | None = Field(
        None, description="Which job(s) quarantined it and on what evidence (the nodes' "
        "elastic.pathways.dev/quarantine-cause annotation).")


class BudgetStatus(StatusModel):
    """One restart budget (elastic_api.budgets): its rule, and what is spent of it now."""

    allowed: int = Field(description="Restarts allowed within the window (or the run).")
    window_seconds: int | None = Field(None, description="The window they are counted "
                                       "over; absent: over the whole run.")
    derived: bool = Field(description="True: the spec leaves the count unset and it is "
                          "derived from the hosts it covers.")
    rule: str = Field(description="The rule in words: the count, the window, why.")
    used: int = Field(0, description="Restarts that count now (for slices: the slice "
                      "with the most).")
    slice: int | None = Field(None, description="sliceRestarts: the slice with the most.")
    recent: list[datetime] = Field(
        default_factory=list, max_length=MAX_BUDGET_TIMES,
        description="When the restarts that count now came, oldest first (windows only; "
        "a slice's are in slices[].recentFailures).")
    spent_at: datetime | None = Field(None, description="When a restart was refused "
                                      "for it (the count reached): a crash loop, or more "
                                      "failures than the rates behind the count.")
    last_at: datetime | None = Field(None, description="jobSetRestarts: when the newest "
                                     "JobSet restart was seen (its slices' going is that "
                                     "restart, not their failures).")


class CountedMainRestarts(StatusModel):
    """How far jobSetRestarts accounts for main's restarts in place: a crash of the program
    restarts main in its head pod (spec.recovery.restartInPlace), which the JobSet's
    budget counts as it counted the JobSet restart such a crash used to cost. Each is
    charged once, when first seen; a new head pod's count starts again from 0."""

    pod_uid: str = Field(description="uid of the head pod the count is of.")
    restarts: int = Field(0, ge=0, description="main's restartCount in that pod, charged.")
    total: int = Field(0, ge=0, description="main's restarts in place charged over the run, "
                       "every head pod's.")


class RestartBudgets(StatusModel):
    """The restart budgets (docs/api.md, "Restart budgets"): kept here, never reset but
    by their window, so a restarted operator or trainer goes on counting."""

    slice_restarts: BudgetStatus
    elastic_retries: BudgetStatus
    stall_restarts: BudgetStatus
    jobset_restarts: BudgetStatus = Field(alias="jobSetRestarts")
    main_restarts: CountedMainRestarts | None = Field(
        None, description="main's restarts in place, charged to jobSetRestarts.")


class CheckpointRequest(StatusModel):
    """The operator asks the trainer for a checkpoint now (docs/status-contract.md); the
    trainer answers in status.training.checkpointAck."""

    id: int = Field(description="1, 2, ...: the trainer acknowledges this id.")
    reason: Literal["Maintenance", "User"]
    slices: list[int] = Field(default_factory=list)
    requested_at: datetime
    deadline: datetime = Field(description="Moved anyway (phase Expired) if not "
                               "acknowledged by then.")
    pause: bool = Field(description="Hold (no steps) after the save until phase is Released "
                        "or pauseSeconds passed: steps after the save would be lost.")
    pause_seconds: int = 0
    phase: Literal["Requested", "Acknowledged", "Moving", "Released", "Expired"]


class CheckpointAck(StatusModel):
    """The trainer's answer to status.checkpointRequest."""

    id: Count
    step: Count = Field(description="The step saved (committed) for the request.")
    committed_at: datetime
    paused: bool = Field(False, description="The trainer pauses before the next step.")


class GoodputCounters(StatusModel):
    """Cumulative seconds by cause, continued across trainer processes."""

    waiting_for_slices: float = Field(0.0, ge=0)
    fewer_slices: float = Field(0.0, ge=0, description="Steps on fewer slices than the "
                                "job's: the missing slices' share of their time.")
    startup: float = Field(0.0, ge=0)
    restore: float = Field(0.0, ge=0)
    recompile: float = Field(0.0, ge=0)
    recomputed_steps: float = Field(0.0, ge=0)
    stalled: float = Field(0.0, ge=0, description="A step that hung, until the watchdog "
                           "noticed it (beyond a normal step).")
    slow_slices: float = Field(0.0, ge=0, description="Steps held up by a slow slice: "
                               "their time beyond the fastest slice's part.")
    checkpointing: float = Field(0.0, ge=0)


class TrainerGoodput(StatusModel):
    """The trainer's cumulative accounting of its time (status.training.goodput)."""

    productive_seconds: float = Field(0.0, ge=0, description="Step time of steps whose "
                                      "results were kept (recomputed steps excluded).")
    badput_seconds: GoodputCounters = Field(default_factory=GoodputCounters)
    median_step_seconds: float | None = Field(None, ge=0)


class BadputSeconds(GoodputCounters):
    other: float = Field(0.0, ge=0, description="Wall time no cause accounts for (e.g. "
                         "scheduling before the trainer's first report).")


class Goodput(StatusModel):
    """What failures cost (docs/metrics.md, "Goodput")."""

    since: datetime = Field(description="Job creation.")
    observed_at: datetime = Field(description="The trainer report (or slice transition) "
                                  "these figures are as of.")
    wall_seconds: float
    productive_seconds: float | None = None
    ratio: float | None = Field(None, description="productiveSeconds / wallSeconds.")
    badput_seconds: BadputSeconds | None = None
    slice_down_seconds: float = Field(
        0.0, description="The operator's timeline: time some slice was Down or Restarting "
        "(after it had been Ready).")
    slice_down_since: datetime | None = Field(
        None, description="Open interval of slice_down_seconds (a slice is not Ready now).")




class ElasticEventReport(StatusModel):
    """The trainer's view of its current (or most recent) elastic event."""

    id: Count = Field(description="1 for the first event of the run, then 2, 3, ...")
    phase: Literal["Detected", "WaitingForSlices", "Restoring", "Resumed", "Failed"]
    detected_at: datetime
    error: str | None = Field(None, description="e.g. DATA_LOSS: slice 2 is down")
    failed_step: Count | None = Field(None, description="Last step completed before the failure.")
    slices_down: list[Count] = Field(default_factory=list)
    restored_from_step: Count | None = None
    restore_source: Literal["snapshot", "checkpoint", "none"] | None = None
    restored_at: datetime | None = None
    resumed_at: datetime | None = Field(
        None, description="When the first step after restore completed.",
    )
    resumed_step: Count | None = None


class CadenceReport(StatusModel):
    """How often the trainer keeps one kind of copy of the state (snapshot or checkpoint),
    and why (docs/trainer.md, "Cadence")."""

    period_steps: Count = Field(description="Steps between two copies; 0 = off.")
    chosen_by: Literal["User", "Trainer"] = Field(
        description="User: spec (or the flag) gave the period; Trainer: chosen from measured "
        "costs.")
    # A string, not an enum: a newer trainer may give a reason this schema does not know.
    reason: str = Field(
        max_length=64,
        description="UserSet, Off, Measuring (warming up: probe copies), WithinBudget (the "
        "shortest period within the budget), CopySlowed (lengthened: the copy got "
        "slower against the step), MemoryPressure (lengthened: little free host memory), YoungDaly "
        "(shortened toward sqrt(2 x cost x mean time between failures)).")
    message: str | None = None
    cost_seconds: float | None = Field(None, ge=0, description="What one copy costs (median "
                                       "of the newest measurements).")
    step_seconds: float | None = Field(None, ge=0, description="A step without a copy "
                                       "(median of the newest).")
    overhead_percent: float | None = Field(None, ge=0, description="costSeconds / (periodSteps"
                                           " x stepSeconds), in percent.")
    budget_percent: float | None = Field(None, ge=0, description="The budget the period was "
                                         "chosen within.")


class StallReport(StatusModel):
    """The trainer's watchdog (docs/trainer.md, "Watchdog"): the step in flight has run
    past the deadline learned from the run's own step times. Absent while steps complete."""

    step: Count = Field(description="The step that has not completed (the last completed + 1).")
    phase: Literal["Step", "FirstStep", "Checkpoint", "Restore"] = Field(
        description="What was in flight: a step, the first step after a compile or resize, "
        "a checkpoint save or a restore (each has its own, longer deadline).")
    started_at: datetime = Field(description="When that step (or save, or restore) started.")
    detected_at: datetime
    deadline_seconds: float = Field(ge=0, description="The deadline it ran past.")
    suspect_slices: list[Count] = Field(
        default_factory=list,
        description="Slices the evidence blames; empty: nothing could be blamed (the "
        "operator restarts the trainer after its own progress deadline).")
    evidence: str | None = Field(
        None, max_length=512,
        description="What the blame rests on, e.g. slice 2's part of step 53 did not finish "
        "while slices 0, 1 and 3 finished theirs in 0.11 s.")


class SliceReplacementRequest(StatusModel):
    """The trainer asks the operator to replace slices its own evidence blames, whose pods
    stay Ready (a hung or slow slice): the operator recreates each one's worker Job once
    per (processId, id), counted as a slice failure."""

    id: Count = Field(description="1 for the process's first request, then 2, 3, ...")
    slices: list[Count] = Field(min_length=1)
    # A string, not an enum: a newer trainer may give a reason this schema does not know.
    reason: str = Field(max_length=64, description="SliceHung or SliceSlow.")
    requested_at: datetime
    message: str | None = Field(None, max_length=512)


class TrainerActivity(StatusModel):
    """What the trainer's main thread is doing now (elastic_api.phases): reported by the
    trainer itself, or inferred by the progress sidecar from its process (state, CPU
    time, Python stacks) and from what it writes (docs/trainer.md, "Phases")."""

    phase: Phase = Field(description="TrainStep, Compile, Evaluation, CheckpointSave, "
                         "Restore, DataWait, DeviceWait (blocked in one device call) or "
                         "Stopped (the process is stopped).")
    since: datetime = Field(description="When the trainer entered this phase (its own clock, "
                            "or the first sample that saw it).")
    last_activity_at: datetime | None = Field(
        None, description="The newest sign of life inside the phase: an evaluation step's "
        "line, the process's CPU time advancing, the trainer's own heartbeat.")
    frame: str | None = Field(
        None, max_length=300, description="The frame that shows the phase, e.g. "
        "block_until_ready, called from train_step at train.py:412.")
    source: PhaseSource = Field(description="Trainer (reported), Sampled (the sidecar read "
                                "the process) or MetricsFile (the trainer's output).")
    process_state: Literal["Running", "Sleeping", "DiskSleep", "Stopped", "Zombie"] | None = \
        Field(None, description="The process's state at the sample (Sampled only).")
    cpu_seconds: float | None = Field(None, ge=0, description="The process's CPU time at the "
                                      "sample (Sampled only).")


class PhaseRecord(StatusModel):
    """How long one phase has taken in this run, on the trainer's clock: the history each
    phase's deadline is learned from (elastic_api.phases.phase_deadline)."""

    phase: Phase
    count: Count = Field(description="Times the phase ended.")
    last_seconds: float = Field(ge=0, description="How long it took the last time.")
    longest_seconds: float = Field(ge=0, description="The longest it took.")


class SliceStepTime(StatusModel):
    """One slice's part of the recent steps, where the backend can time each part (the
    simulated backend can; the Pathways client sees one program, docs/trainer.md). Slow,
    not stalled: a slice at `relative` >= elastic_api.stragglers.SLOW_SLICE_FACTOR is a
    straggler (elastic_api.stragglers.slow_slices, the rule both sides apply)."""

    slice: Count
    seconds: float = Field(ge=0, description="The median of its part over the last steps "
                           "measured on this mesh.")
    relative: float = Field(ge=0, description="seconds over the fastest slice's (1 for the "
                            "fastest).")


class RestoreReport(StatusModel):
    """The restore the trainer last did (status.training.lastRestore; the operator carries
    it into status.checkpoint.lastRestore)."""

    # A string, not an enum: a newer trainer may restore from a source this schema does
    # not know.
    source: str = Field(max_length=64, description="checkpoint (from checkpoint.directory) "
                        "or snapshot (from the surviving slices' memory).")
    step: Count = Field(description="The step restored.")
    bytes: Count | None = Field(
        None, description="What the restore read: the committed step's files as listed "
        "(elastic_api.checkpoints.step_size, the operator's rule too); for a snapshot, the "
        "state's bytes.")
    seconds: float = Field(ge=0, description="From the start of the restore to the state "
                           "on the devices.")
    gib_per_second: float | None = Field(None, ge=0, alias="gibPerSecond",
                                         description="bytes / 2^30 / seconds.")
    restored_at: datetime
    # Who timed it, and so what `seconds` includes (elastic_api.restores).
    measured_by: str | None = Field(
        None, max_length=64, description="Trainer: the trainer timed its own restore. "
        "ProgressSidecar: a trainer that reports nothing (MaxText), timed by the progress "
        "sidecar from the process's start to its first step after the restore, less that "
        "step's own time: an upper bound that includes the process's start-up and compile.")


class TrainingReport(StatusModel):
    """Written by the trainer through the status subresource; read by the operator."""

    observed_at: datetime
    state: Literal["Initializing", "Training", "Recovering", "Succeeded", "Failed"]
    reason: str | None = Field(None, description="CamelCase reason when Failed.")
    message: str | None = None
    step: Count = 0
    total_steps: Count | None = None
    loss: float | None = None
    step_seconds: float | None = Field(None, ge=0, description="Wall time of the last "
                                       "completed step.")
    tokens_per_second: float | None = None
    attempt: Count = Field(0, description="Elastic attempt: 0, then +1 per elastic event.")
    active_slices: Count | None = None
    last_committed_checkpoint_step: Count | None = None
    last_snapshot_step: Count | None = None
    elastic_events_total: Count = 0
    retries_remaining: Count | None = None
    retry_times: list[datetime] | None = Field(
        None, max_length=MAX_BUDGET_TIMES,
        description="When the slice losses --max-retries counts now came (within "
        "--retry-window-seconds), oldest first: a trainer process that replaces this one "
        "goes on counting from them.")
    process_id: Count | None = None
    host_name: str | None = None
    process_started_at: datetime | None = None
    elastic_event: ElasticEventReport | None = None
    checkpoint_ack: CheckpointAck | None = None
    goodput: TrainerGoodput | None = None
    snapshot_cadence: CadenceReport | None = None
    checkpoint_cadence: CadenceReport | None = None
    activity: TrainerActivity | None = Field(
        None, description="What the trainer is doing now (elastic_api.phases).")
    phases: list[PhaseRecord] | None = Field(
        None, max_length=len(PHASES), description="How long each phase has taken in this "
        "run, one entry per phase: what each phase's deadline is learned from.")
    stall: StallReport | None = Field(
        None, description="Set while the step in flight is past the watchdog's deadline.")
    slice_replacement: SliceReplacementRequest | None = Field(
        None, description="The trainer's newest request to replace slices it blames.")
    slice_step_times: list[SliceStepTime] | None = Field(
        None, description="Each active slice's part of the recent steps; absent where the "
        "backend cannot time the parts (Pathways).")
    last_restore: RestoreReport | None = Field(
        None, description="The restore this trainer process last did (the newest of its "
        "start and its elastic events).")


# Who closed a recovery (status.lastRecovery.closedBy), and what confirmed a recovery the
# operator closed without the trainer (confirmedBy): docs/design/recovery.md.
CLOSED_BY_TRAINER, CLOSED_BY_OPERATOR = "Trainer", "Operator"
CONFIRMED_BY_REPORT, CONFIRMED_BY_CHECKPOINT = "TrainingReport", "Checkpoint"


class RecoveryRecord(StatusModel):
    """The latest recovery (status.lastRecovery): what is known of it, and nothing made
    up. A recovery the operator closed without the trainer (closedBy Operator) has no
    resumedAt, downtimeSeconds, stepsLost, restoredFromStep or restoreSource: nobody
    reported them."""

    detected_at: datetime
    resumed_at: datetime | None = None
    downtime_seconds: float | None = None
    steps_lost: int | None = None
    restored_from_step: int | None = None
    restore_source: str | None = None
    slices: list[int] = Field(default_factory=list)
    closed_at: datetime | None = Field(
        None, description="When the recovery closed (Trainer: resumedAt; Operator: when "
        "every slice was Ready again).")
    closed_by: Literal["Trainer", "Operator"] | None = Field(
        None, description="Trainer: the trainer's report said training resumed (its elastic "
        "event Resumed, or a step after the failure). Operator: for a trainer that reports "
        "no elastic events, every slice was Ready again with the head's main running since "
        "before the failure (or, main being new, a checkpoint newer than the failure was "
        "listed); training itself was not confirmed by that.")
    confirmed_by: Literal["TrainingReport", "Checkpoint"] | None = Field(
        None, description="After an Operator closure, what showed training going on: a "
        "status.training report of a new step made after the closure, or a committed "
        "checkpoint newer than any step known at the failure, listed after the closure.")
    confirmed_at: datetime | None = Field(
        None, description="The report's observedAt, or the listing's observedAt.")
    confirmed_step: int | None = Field(None, description="The step reported, or committed.")
    # Bookkeeping for the operator: the trainer's elasticEvent.id this recovery is matched
    # to, and the trainer's step when the slice went down (a later step means resumed);
    # the newest checkpoint step listed at the failure (committed or in flight) and the
    # trainer's step at an Operator closure (what a confirmation must go beyond).
    elastic_event_id: int | None = None
    step_at_detection: int | None = None
    checkpoint_step_at_detection: int | None = None
    step_at_closure: int | None = None

    @property
    def open(self) -> bool:
        """Not closed yet (an older operator's closed record has resumedAt only)."""
        return self.resumed_at is None and self.closed_at is None


class Counters(StatusModel):
    """Monotonic counters: the operator takes max(previous, observed) so they never go back."""

    slice_failures: int = 0
    elastic_events: int = 0
    jobset_restarts: int = Field(0, alias="jobSetRestarts")
    trainer_restarts: int = Field(
        0, description="Times a new trainer process replaced the one that was reporting.")
    stall_restarts: int = Field(
        0, description="Times the operator restarted a stalled trainer (spec.elastic.onStall "
        "Recover), against spec.elastic.maxStallRestarts.")
    preemptions: int = Field(
        0, description="Times Kueue preempted the job (evicted it to admit another); none "
        "counts as a slice failure or a JobSet restart.")
    evictions: int = Field(
        0, description="Times Kueue evicted the job for another reason of its own "
        "(PodsReadyTimeout, NodeFailures, a stopped queue, ...; not preemptions, not "
        "deactivations); none counts as a slice failure, a JobSet restart or a trainer "
        "restart. The last one's reason: status.admission.lastEvictionReason.")


class TrainerRestart(StatusModel):
    """The operator restarting the trainer after a stall (spec.elastic.onStall Recover):
    in place (the process asked to exit, its pod restarts main), or the head pod it
    deletes; written before it acts."""

    requested_at: datetime
    step: int | None = Field(None, description="The step the trainer was stalled at.")
    pod_name: str
    pod_uid: str
    reason: str = Field(description="ProgressDeadlineExceeded.")
    in_place: bool = Field(False, description="The trainer process is asked to exit and its "
                           "pod restarts main in place (pathways-rm, pathways-proxy and the "
                           "workers kept); false: the head pod is deleted (the trainer did "
                           "not exit in time, or main does not restart in place).")
    process_started_at: datetime | None = Field(
        None, description="status.training.processStartedAt of the process asked to exit (it "
        "recognizes itself by it).")
    main_restarts: int | None = Field(None, ge=0, description="main's restartCount when asked: "
                                      "a higher one says it restarted.")


class ProgressStatus(StatusModel):
    """The operator's own view of training progress (condition Progressing), from the
    steps in status.training: what it has learned of the job's step interval, kept here so
    that a restarted operator keeps it."""

    step: int | None = Field(None, description="The newest step seen.")
    since: datetime = Field(description="When the operator first saw that step, or when "
                            "its clock started again (a hold ended, a new trainer process).")
    process_started_at: datetime | None = Field(
        None, description="status.training.processStartedAt of the process seen.")
    advanced: bool = Field(False, description="That process has made a step since the "
                           "clock started (before: still starting, never stalled).")
    first_step: bool = Field(False, description="Waiting for the first step after a hold "
                             "(a recovery, a pause, a resume: a recompile may come first).")
    held: str | None = Field(None, description="Why the clock is held (the job is "
                             "suspended, queued, recovering, paused for maintenance, ...).")
    gaps: list[float] = Field(default_factory=list, description="Seconds between the "
                              "newest step changes the operator saw (newest last).")
    step_gaps: list[float] = Field(default_factory=list, description="The gaps that measure "
                                   "the step time (every slice active; newest last).")
    step_counts: list[int] = Field(default_factory=list, description="The steps each of "
                                   "stepGaps spans.")
    longest_gap_seconds: float | None = None
    step_seconds: list[float] = Field(
        default_factory=list, description="Seconds per step at the newest step changes "
        "(newest last), what the step deadline is learned from: the gap over the steps it "
        "spans, or the trainer's stepSeconds when longer; none from a gap with offStep.")
    off_step: bool = Field(False, description="The trainer was seen in a phase a step's "
                           "time does not include (an evaluation, a save, a compile, a "
                           "restore) since the newest step: the next gap is not a step's.")
    baseline_step_seconds: float | None = Field(
        None, description="The job's own best seconds per step (the lowest over the "
        "newest stepGaps seen).")
    slow_since: datetime | None = Field(None, description="Since when steps run slower "
                                        "than the baseline by the SlowSteps factor.")
    deadline_seconds: float | None = Field(None, description="The deadline in force: under "
                                           "rule Phase the phase's, under Steps the progress "
                                           "deadline (spec, or learned).")
    rule: Literal["Phase", "Steps"] | None = Field(
        None, description="The rule that judged at the newest look: Phase (the trainer's "
        "phase is known, status.training.activity: each phase held to its own deadline) or "
        "Steps (it is not: no new step for the progress deadline).")
    phase: Phase | None = Field(None, description="The phase rule Phase watched.")
    phase_since: datetime | None = Field(
        None, description="The newest sign of life the phase rule saw (the phase's start, "
        "its heartbeat, or the newest step): what its deadline counts from.")
    stalled_at: datetime | None = Field(None, description="When the deadline passed.")
    restart: TrainerRestart | None = Field(None, description="The operator's restart of "
                                           "the trainer for the latest stall.")


class HandledSliceReplacement(StatusModel):
    """The trainer's slice replacement request (status.training.sliceReplacement) the
    operator last handled: each is acted on once per (processId, processStartedAt, id)."""

    process_id: int | None = None
    process_started_at: datetime | None = None
    id: int
    handled_at: datetime
    replaced: list[int] = Field(default_factory=list, description="The slices replaced.")
    message: str | None = Field(None, description="What was done, and why not for a slice "
                                "left alone.")


class TrainerProcess(StatusModel):
    """The trainer process the operator last saw reporting (status.training's identity),
    kept by the operator so that a replacement process is noticed and counted."""

    process_id: int | None = None
    host_name: str | None = None
    started_at: datetime | None = None


class CheckpointStatus(StatusModel):
    """What the operator's last listing of spec.checkpoint.directory found, by the commit
    rule both the operator and the bundled trainer apply (elastic_api/checkpoints.py)."""

    directory: str | None = None
    latest_committed_step: int | None = Field(
        None, description="The newest committed step: a directory named by the step in "
        "ASCII digits (no leading zero) holding commit_success.txt, which Orbax writes "
        "last, on gs:// and on a filesystem. The step the bundled trainer restores.")
    incomplete_steps: list[int] = Field(
        default_factory=list, description="Uncommitted steps newer than "
        "latestCommittedStep (a step directory without commit_success.txt, or a "
        "<step>.orbax-checkpoint-tmp* directory): saves that may still be in flight.")
    abandoned_steps: list[int] = Field(
        default_factory=list, description="Uncommitted steps not newer than "
        "latestCommittedStep: left by saves that never finished (Orbax removes such a "
        "directory only if the same step is saved again). Never restored; safe to delete.")
    observed_at: datetime | None = Field(
        None, description="When a listing of the directory first showed this result (it "
        "is listed every --checkpoint-scan-seconds; only changes are written).")
    error: str | None = Field(
        None, description="Why the directory could not be listed, or why it holds no "
        "step (e.g. MaxText's run directory, one level above its checkpoints/).")
    reason: str | None = Field(
        None, description="Why `error` is set, as one word, where it is the operator's "
        "own configuration: CheckpointRootNotAllowed, the directory is outside the roots "
        "`etj operator --checkpoint-roots` (chart value checkpointRoots) allows for the "
        "job's namespace, and is never listed (condition CheckpointRootAllowed False).")
    latest_committed_bytes: int | None = Field(
        None, ge=0, description="The size of latestCommittedStep: the bytes of the regular "
        "files under its directory, from the same listing (no object is read; a sparse "
        "file counts its length). What a restore of it reads.")
    latest_committed_files: int | None = Field(
        None, ge=0, description="The regular files under latestCommittedStep's directory.")
    last_restore: RestoreReport | None = Field(
        None, description="The restore the trainer last reported "
        "(status.training.lastRestore), kept by the operator across trainer processes.")


class AdmissionStatus(StatusModel):
    """Where a queued job (Kueue) stands with its queue; the `Admitted` condition says it
    in words. Absent on jobs that no queue admits."""

    workload: str | None = Field(None, description="The Workload Kueue made for the JobSet.")
    queue_name: str | None = Field(None, description="The LocalQueue it waits in.")
    cluster_queue: str | None = Field(None, description="The ClusterQueue that admitted it.")
    admitted_at: datetime | None = Field(
        None, description="When Kueue last admitted it (the Workload's Admitted condition).")
    evicted_at: datetime | None = Field(
        None, description="When Kueue last evicted it (preempted, deactivated, ...).")
    workload_preemptions: int = Field(
        0, description="Preemptions Kueue counted on this Workload (its schedulingStats), "
        "as last seen: what counters.preemptions has taken into account.")
    workload_evictions: int = Field(
        0, description="Other evictions Kueue counted on this Workload (schedulingStats), "
        "as last seen: what counters.evictions has taken into account.")
    last_eviction_reason: str | None = Field(
        None, description="Kueue's reason for the last eviction (Preempted, "
        "PodsReadyTimeout, NodeFailures, ...).")
    pods_ready_deadline: datetime | None = Field(
        None, description="When Kueue's waitForPodsReady evicts the job unless all its "
        "pods are Ready by then (condition EvictionPending); absent while they are.")
    eviction_warned: datetime | None = Field(
        None, description="The podsReadyDeadline the Warning Event EvictionPending was "
        "posted for (once, half-way to it).")
    requeue_at: datetime | None = Field(
        None, description="After a PodsReadyTimeout eviction: not readmitted before this "
        "(Kueue's requeuing backoff).")
    worker_cluster: str | None = Field(
        None, description="A MultiKueue job, on the manager cluster: the worker cluster "
        "it ran in, while that cluster cannot be reached and once it is lost (written by "
        "the manager; the worker's status, copied here otherwise, does not know it).")


# An Event's message as the operator posts it, and as its outbox keeps it.
MAX_EVENT_MESSAGE = 1024


class PendingEvent(StatusModel):
    """A Kubernetes Event of a status change, kept in the status write that carries the
    change and posted after it (the operator's outbox)."""

    name: str = Field(description="The Event's name, derived from the change: the API "
                      "server refuses a second copy.")
    reason: str
    type: Literal["Normal", "Warning"] = "Normal"
    message: str = Field("", max_length=MAX_EVENT_MESSAGE)


class ElasticTrainingJobStatus(StatusModel):
    observed_generation: int | None = None
    phase: str | None = Field(None, description="Short status for `kubectl get`.")
    jobset_name: str | None = Field(None, alias="jobSetName")
    slices_desired: int | None = None
    slices_ready: int | None = None
    slices: list[SliceStatus] = Field(default_factory=list)
    conditions: list[Condition] = Field(default_factory=list)
    counters: Counters = Field(default_factory=Counters)
    admission: AdmissionStatus | None = None
    last_recovery: RecoveryRecord | None = None
    checkpoint: CheckpointStatus | None = None
    trainer_process: TrainerProcess | None = None
    pools: list[PoolStatus] = Field(default_factory=list)
    spare_pools: int | None = Field(None, description="Healthy, unused, unquarantined node "
                                    "pools of the job's TPU shape.")
    checkpoint_request: CheckpointRequest | None = None
    goodput: Goodput | None = None
    progress: ProgressStatus | None = None
    handled_slice_replacement: HandledSliceReplacement | None = None
    budgets: RestartBudgets | None = None
    pending_events: list[PendingEvent] | None = Field(
        None, description="The Events of the latest status change, written with it and "
        "posted after the write; the next reconcile (this replica's or a new leader's) "
        "posts those not known to be posted (a second copy is refused) and drops them. "
        "Absent when there are none.")
    training: TrainingReport | None = None


class ObjectMeta(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str
    namespace: str | None = None
    uid: str | None = None
    generation: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class ElasticTrainingJob(ApiModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")
    api_version: str = "elastic.pathways.dev/v1alpha1"
    kind: Literal["ElasticTrainingJob"] = "ElasticTrainingJob"
    metadata: ObjectMeta
    spec: ElasticTrainingJobSpec
    status: ElasticTrainingJobStatus | None = None
