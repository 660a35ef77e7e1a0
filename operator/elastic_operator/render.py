"""The pure renderer: an ElasticTrainingJob in, the objects it owns out.

No I/O, no clock. The JobSet follows docs/api.md ("Rendering") and the Pathways shape in
shared/reference/pathways-jobset.md: a `pathways-head` replicatedJob (trainer `main`
plus the `pathways-rm` and `pathways-proxy` sidecars) and a `worker` replicatedJob with
one Job per TPU slice. Everything JobSet's mutating webhook would default is set
explicitly, so the JobSet is the same with or without the webhook. The operator adds
ownerReferences; this module does not.

May import: model.
"""
from __future__ import annotations

import hashlib
from typing import Any

import yaml

from elastic_api import maxtext
from elastic_api.budgets import asks_main_in_place, budgets_of
from elastic_api.catalog import CUBE_HOSTS, INT32_MAX, SliceShape, slice_shape
from elastic_api.images import proxy_image, server_image
from elastic_api.models import (
    ElasticTrainingJob,
    ElasticTrainingJobSpec,
    EnvVar,
    PathwaysComponent,
    Resources,
)
from elastic_api.names import (
    COLOCATED_PYTHON_CONTAINER,
    COMPLETION_INDEX_LABEL,
    COORDINATOR_LABEL,
    DEFAULT_SERVICE_ACCOUNT,
    EXCLUSIVE_TOPOLOGY_ANNOTATION,
    GCSFUSE_CSI_DRIVER,
    GCSFUSE_VOLUMES_ANNOTATION,
    GROUP,
    HEAD_REPLICATED_JOB,
    JOB_INDEX_LABEL,
    JOB_NAME_LABEL,
    JOBSET_API_VERSION,
    JOBSET_BUDGET_RULE,
    JOBSET_NAME_LABEL,
    KUEUE_API_VERSION,
    KUEUE_GROUP,
    KUEUE_JOB_LABELS,
    KUEUE_PODSET_REQUIRED_TOPOLOGY,
    KUEUE_PODSET_SLICE_REQUIRED_TOPOLOGY,
    KUEUE_PODSET_SLICE_SIZE,
    KUEUE_PREBUILT_WORKLOAD_ANNOTATION,
    KUEUE_PRIORITY_CLASS_LABEL,
    KUEUE_QUEUE_NAME_LABEL,
    MAIN_CONTAINER,
    MANAGED_BY,
    NODE_POOL_LABEL,
    NOT_READY_TAINT,
    PLURAL,
    POD_PRIORITY_CLASS_GROUP,
    POD_PRIORITY_CLASS_KIND,
    PROGRESS_CONTAINER,
    PROXY_CONTAINER,
    QUARANTINE_LABEL,
    REPLICATED_JOB_LABEL,
    REPLICATED_JOB_REPLICAS_LABEL,
    RM_CONTAINER,
    SAFE_TO_EVICT_ANNOTATION,
    SLICE_AGENT_CONTAINER,
    TPU_ACCELERATOR_LABEL,
    TPU_RESOURCE,
    TPU_SLICE_TOPOLOGY_ANNOTATION,
    TPU_TOPOLOGY_LABEL,
    TRAINER_FINAL_EXIT_CODES,
    UNREACHABLE_TAINT,
    WORKER_CONTAINER,
    WORKER_REPLICATED_JOB,
    WORKLOAD_PRIORITY_CLASS_KIND,
)
from elastic_api.names import jobset_name as _jobset_name
from elastic_api.restore_risk import DEFAULT_PROXY_MEMORY
from elastic_operator.model.objects import ObservedPriorityClass, PriorityClassRef
from elastic_operator.model.server import NEWEST, ServerFeatures

RM_PORT = 29001
PROXY_PORT = 29000
WORKER_PORT = 29005
COLOCATED_PYTHON_PORT = 50051  # the sidecar's gRPC server, which the worker calls
# A node keeps the digest it pulled first: a container restarted in place (a worker's
# OnFailure) runs the same build, never one the tag moved to since (elastic_api/images.py).
PATHWAYS_PULL_POLICY = "IfNotPresent"

RM_LIMITS = {"cpu": "8", "memory": "32G"}
PROXY_LIMITS = {"cpu": "16", "memory": DEFAULT_PROXY_MEMORY}  # restore_risk reads it too
SHARED_TMP = "shared-tmp"


def jobset_name(job: ElasticTrainingJob) -> str:
    """The JobSet's name: the job's own (admission keeps it short enough)."""
    return _jobset_name(job.metadata.name)


def pod_service_account(job: ElasticTrainingJob) -> str:
    """The one ServiceAccount of every pod, head and workers alike (as both peers do): the
    trainer's Role is bound to it, and Cloud Storage FUSE volumes mounted with
    hostNetworkPodKSA act as it. It is not the pods' Google identity for anything else:
    they run on the host network, where GKE sends their metadata requests to the Compute
    Engine metadata server, so the Pathways servers, the trainer and the TPU hosts reach
    Cloud Storage as their node pool's service account (docs/gke.md, "Identity")."""
    return job.spec.service_account_name or DEFAULT_SERVICE_ACCOUNT


def trainer_role_name(job: ElasticTrainingJob) -> str:
    """The trainer's Role and RoleBinding."""
    return f"{job.metadata.name}-trainer"


def labels(job: ElasticTrainingJob, component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "elastic-training-job",
        "app.kubernetes.io/instance": job.metadata.name,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/managed-by": MANAGED_BY,
        JOB_NAME_LABEL: job.metadata.name,
    }


def kueue_labels(job: ElasticTrainingJob) -> dict[str, str]:
    """The job's Kueue labels (queue, priority class), which Kueue reads on the JobSet."""
    return {k: v for k, v in job.metadata.labels.items() if k in KUEUE_JOB_LABELS}


def _metadata(job: ElasticTrainingJob, name: str, component: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels(job, component)}
    if job.metadata.namespace:
        meta["namespace"] = job.metadata.namespace
    return meta


# --- env and containers ---------------------------------------------------------------------


def _env(name: str, value: str) -> dict[str, Any]:
    return {"name": name, "value": value}


def _field_env(name: str, field_path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": field_path}}}


def _label_env(name: str, label: str) -> dict[str, Any]:
    return _field_env(name, f"metadata.labels['{label}']")


def _annotation_env(name: str, annotation: str) -> dict[str, Any]:
    return _field_env(name, f"metadata.annotations['{annotation}']")


def _user_env(env: list[EnvVar]) -> list[dict[str, Any]]:
    return [e.to_wire() for e in env]


def _override_env(base: list[dict[str, Any]], extra: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`base` then `extra`; a name in `extra` replaces the same name in `base`."""
    names = {e["name"] for e in extra}
    return [e for e in base if e["name"] not in names] + extra


def _resources(defaults: dict[str, str], override: Resources | None) -> dict[str, Any]:
    limits = dict(defaults)
    requests: dict[str, str] = {}
    if override is not None:
        limits.update(override.limits or {})
        requests.update(override.requests or {})
    out: dict[str, Any] = {}
    if limits:
        out["limits"] = limits
    if requests:
        out["requests"] = requests
    return out


def _ports(*numbers: int) -> list[dict[str, Any]]:
    return [{"containerPort": n, "protocol": "TCP"} for n in numbers]


# Builders, not constants: shared objects would come out as YAML anchors.
def _tmp_mount() -> list[dict[str, Any]]:
    return [{"name": SHARED_TMP, "mountPath": "/tmp"}]


def _tmp_volume() -> list[dict[str, Any]]:
    return [{"name": SHARED_TMP, "emptyDir": {}}]


def _host_tmp_volume() -> list[dict[str, Any]]:
    """A Pathways worker's /tmp is the TPU VM's, as xpk mounts it: the TPU runtime keeps its
    logs there (/tmp/tpu_logs) and its chip lock (/tmp/libtpu_lockfile), which then
    outlive a failed worker's pod for whoever looks at the host, and the colocated Python
    sidecar shares it."""
    return [{"name": SHARED_TMP, "hostPath": {"path": "/tmp", "type": "DirectoryOrCreate"}}]


def _jobset_env() -> list[dict[str, Any]]:
    return [
        _annotation_env("JOBSET_NAME", JOBSET_NAME_LABEL),
        _annotation_env("REPLICATED_JOB_NAME", REPLICATED_JOB_LABEL),
    ]


def _job_identity_env(job: ElasticTrainingJob) -> list[dict[str, Any]]:
    return [
        _env("ETJ_JOB_NAME", job.metadata.name),
        _field_env("ETJ_JOB_NAMESPACE", "metadata.namespace"),
    ]


def _period(steps: int | None) -> str:
    return "auto" if steps is None else str(steps)


def trainer_command(job: ElasticTrainingJob) -> list[str]:
    """The command of `main`: the user's, else `etj train` with flags derived from the spec
    (the bundled trainer's CLI contract). `trainer.args` follow it as the container's args."""
    spec = job.spec
    if spec.trainer.command is not None:
        return list(spec.trainer.command)
    bundled = spec.trainer.bundled()
    ckpt = spec.checkpoint
    cmd = [
        "etj", "train",
        "--config", bundled.model,
        "--steps", str(bundled.steps),
        "--batch", str(bundled.batch),
        "--seed", str(bundled.seed),
        "--data", bundled.data,
        "--checkpoint-dir", ckpt.directory,
        # An unset period is `auto`: the trainer chooses it within the overhead budget.
        "--checkpoint-period", _period(ckpt.period_steps),
        "--checkpoint-keep", str(ckpt.keep_or_default),
    ]
    if not ckpt.async_or_default:
        cmd.append("--no-async-checkpoint")
    cmd += [
        "--snapshot-period", _period(spec.snapshot.period_steps),
        "--overhead-budget-percent", str(spec.overhead_budget_percent),
        "--min-slices", str(spec.min_slices),
        "--elastic-timeout", str(spec.elastic.timeout_seconds),
        *_retry_budget(spec),
        "--backend", spec.backend,
    ]
    if spec.on_slow_slice == "Replace":  # the trainer then asks (SliceSlow)
        cmd += ["--on-slow-slice", "Replace"]
    if spec.backend == "simulated":
        cmd += ["--simulate-slices", str(spec.tpu.num_slices), "--slice-health", "pods"]
    return cmd


def _retry_budget(spec: ElasticTrainingJobSpec) -> list[str]:
    """--max-retries and its window (0: over the whole run), as elastic_api.budgets has
    them for the spec: the trainer spends them by the same rule."""
    retries = budgets_of(spec).elastic_retries
    return ["--max-retries", str(retries.allowed),
            "--retry-window-seconds", str(retries.window_seconds or 0)]


def main_env(job: ElasticTrainingJob) -> list[dict[str, Any]]:
    """What `main` gets for any trainer (docs/api.md, "The environment of main"): where the
    Pathways proxy is, and which job it belongs to; then `trainer.env`, which may replace any
    of them."""
    spec = job.spec
    env = [_label_env("PATHWAYS_HEAD", COORDINATOR_LABEL)]
    if spec.backend == "pathways":
        env += [
            _env("JAX_PLATFORMS", "proxy"),
            _env("XCLOUD_ENVIRONMENT", "GCP"),
            _env("JAX_BACKEND_TARGET", f"grpc://$(PATHWAYS_HEAD):{PROXY_PORT}"),
        ]
        if spec.checkpoint.persistence:
            env.append(_env("ENABLE_PATHWAYS_PERSISTENCE", "1"))
    else:
        env.append(_env("JAX_PLATFORMS", "cpu"))
    env += _job_identity_env(job)
    return _override_env(env, _user_env(spec.trainer.env))


def _main_container(job: ElasticTrainingJob, server: ServerFeatures) -> dict[str, Any]:
    trainer = job.spec.trainer
    container: dict[str, Any] = {
        "name": MAIN_CONTAINER,
        "image": trainer.image,
        "command": trainer_command(job),
        "env": main_env(job),
        "volumeMounts": _tmp_mount() + [m.to_wire() for m in trainer.volume_mounts],
        "securityContext": main_security_context(job),
    }
    args = [*trainer.args, *maxtext.renderer_flags(job.spec)]
    if args:
        container["args"] = args
    resources = _resources({}, trainer.resources)
    if resources:
        container["resources"] = resources
    container.update(main_restart_rules(job, server))
    return container


def restarts_main_in_place(job: ElasticTrainingJob, server: ServerFeatures = NEWEST) -> bool:
    """A crash of main restarts it in its pod (the slices keep theirs), charged to the
    JobSet's restart budget: where the spec asks for it (elastic_api.budgets
    `asks_main_in_place`) and the API server keeps container restart rules (`server`,
    core/server_features.py decides)."""
    return asks_main_in_place(job.spec) and server.restart_rules


def main_restart_rules(job: ElasticTrainingJob, server: ServerFeatures = NEWEST
                       ) -> dict[str, Any]:
    """main's own restart policy (Kubernetes KEP-5307, ContainerRestartRules: alpha and
    off in 1.34, beta and on by default since 1.35): the kubelet restarts it in the head
    pod when it exits with a failure, keeping pathways-rm, pathways-proxy and every worker
    pod; not on a code that ends the run (0; `etj train`'s elastic budget spent: its
    report fails the job). Rendered only where the server keeps it (`server`): 1.33 and
    older refuse the head Job with it, 1.34 with the gate off drops it; there the head is
    rendered without it and a crash of main fails the pod, restarting the JobSet."""
    if not restarts_main_in_place(job, server):
        return {}
    final = list(TRAINER_FINAL_EXIT_CODES) if job.spec.trainer.command is None else [0]
    return {"restartPolicy": "Never", "restartPolicyRules": [
        {"action": "Restart", "exitCodes": {"operator": "NotIn", "values": final}}]}


def failure_policy(job: ElasticTrainingJob, server: ServerFeatures = NEWEST) -> dict[str, Any]:
    """JobSet's failurePolicy. A count over the whole run is JobSet's own maxRestarts. A
    count per window the operator keeps (elastic_api.budgets): JobSet may restart without
    end. Either way, once the budget is spent by what JobSet does not count (restarts
    beyond the window's count, main's restarts in place), the operator ends the head Job
    by its deadline, which this rule makes fail the JobSet. Without restarts in place (the
    server lacks the rules), a crash of main fails the head Job and JobSet restarts, up
    to maxRestarts, as before restart rules existed."""
    restarts = budgets_of(job.spec).jobset_restarts
    windowed = restarts.window_seconds is not None
    policy: dict[str, Any] = {"maxRestarts": INT32_MAX if windowed else restarts.allowed,
                              "restartStrategy": "Recreate"}
    if windowed or restarts_main_in_place(job, server):
        policy["rules"] = [{"name": JOBSET_BUDGET_RULE, "action": "FailJobSet",
                            "onJobFailureReasons": ["DeadlineExceeded"],
                            "targetReplicatedJobs": [HEAD_REPLICATED_JOB]}]
    return policy


# The progress sidecar's own state (its identity of the trainer process, kept across its
# restarts in the pod) lies next to the metrics file, in the head's /tmp.
PROGRESS_STATE_FILE = "/tmp/.etj-progress.json"
PROGRESS_RESOURCES = {"requests": {"cpu": "50m", "memory": "128Mi"},
                      "limits": {"memory": "256Mi"}}
# py-spy reads the trainer's memory (process_vm_readv): ptrace's permission.
PROGRESS_CAPABILITY = "SYS_PTRACE"


def _progress_sidecar(job: ElasticTrainingJob) -> dict[str, Any] | None:
    """`etj progress` from our trainer image, following main's metrics file on the shared
    /tmp and patching status.training with the trainer's RBAC (docs/api.md, "Progress of
    any trainer"). A native sidecar: it starts before main and is stopped after it."""
    trainer = job.spec.trainer
    path = maxtext.metrics_file(trainer)
    if trainer.progress is None or path is None:
        return None
    command = ["etj", "progress", "--metrics-file", path, "--format", trainer.progress.format,
               "--state-file", PROGRESS_STATE_FILE]
    steps = maxtext.flag_value(trainer.args, "steps") \
        if maxtext.runs_maxtext(trainer.command, trainer.args) else None
    if steps is not None and steps.isdigit():
        command += ["--total-steps", steps]
    command += ["--checkpoint-directory", job.spec.checkpoint.directory]
    return {
        "name": PROGRESS_CONTAINER,
        "image": trainer.progress.image,
        "restartPolicy": "Always",
        "command": command,
        "env": [
            *_job_identity_env(job),
            _field_env("ETJ_POD_NAME", "metadata.name"),
            _field_env("ETJ_POD_UID", "metadata.uid"),
        ],
        "resources": {k: dict(v) for k, v in PROGRESS_RESOURCES.items()},
        "volumeMounts": _tmp_mount(),
        "securityContext": progress_security_context(job),
    }


# The user fields of main's context that the progress sidecar takes too: reading the
# trainer's stacks (py-spy) needs its user, or CAP_SYS_PTRACE in effect, which a
# container gets only as root (docs/operations.md, "What the progress sidecar samples").
_SAME_USER = ("runAsUser", "runAsGroup", "runAsNonRoot")


def progress_security_context(job: ElasticTrainingJob) -> dict[str, Any]:
    """The hardened context plus SYS_PTRACE, as main's user: the sidecar reads the
    trainer's state, CPU time and Python stacks in the pod's shared process namespace."""
    context = _trainer_security_context()
    context["capabilities"] = {"drop": ["ALL"], "add": [PROGRESS_CAPABILITY]}
    override = job.spec.trainer.security_context
    wire = override.to_wire() if override is not None else {}
    context.update({k: wire[k] for k in _SAME_USER if k in wire})
    return context


def main_security_context(job: ElasticTrainingJob) -> dict[str, Any]:
    """The hardened context, with each field `trainer.securityContext` sets replacing ours
    (a field it leaves unset stays hardened)."""
    context = _trainer_security_context()
    override = job.spec.trainer.security_context
    if override is not None:
        context.update(override.to_wire())
    return context


def _component(job: ElasticTrainingJob, name: str) -> PathwaysComponent:
    return getattr(job.spec.pathways, name) or PathwaysComponent()


def _server_image(job: ElasticTrainingJob) -> str:
    images = job.spec.pathways.images
    if images is not None and images.server:
        return images.server
    return server_image(job.spec.pathways.version)


def _proxy_image(job: ElasticTrainingJob) -> str:
    images = job.spec.pathways.images
    if images is not None and images.proxy:
        return images.proxy
    return proxy_image(job.spec.pathways.version)


def _gcs_scratch(job: ElasticTrainingJob) -> str:
    scratch = job.spec.pathways.gcs_scratch
    if scratch is None:  # validate_job and admission reject this for backend pathways
        raise ValueError("spec.pathways.gcsScratch: required when spec.backend is pathways")
    return scratch


def _rm_sidecar(job: ElasticTrainingJob, shape: SliceShape) -> dict[str, Any]:
    component = _component(job, "resource_manager")
    return {
        "name": RM_CONTAINER,
        "image": _server_image(job),
        "imagePullPolicy": PATHWAYS_PULL_POLICY,
        "restartPolicy": "Always",
        "args": [
            f"--server_port={RM_PORT}",
            f"--gcs_scratch_location={_gcs_scratch(job)}",
            "--node_type=resource_manager",
            f"--instance_count={job.spec.tpu.num_slices}",
            f"--instance_type={shape.pathways_instance_type}",
            *component.args,
        ],
        "env": [
            *_jobset_env(),
            _label_env("HOST_ADDRESS", COORDINATOR_LABEL),
            _env("TPU_SKIP_MDS_QUERY", "true"),
        ],
        "ports": _ports(RM_PORT, RM_PORT + 1),
        "resources": _resources(RM_LIMITS, component.resources),
        "volumeMounts": _tmp_mount(),
        "securityContext": pathways_security_context(),
    }


def _proxy_sidecar(job: ElasticTrainingJob) -> dict[str, Any]:
    component = _component(job, "proxy")
    args = [
        f"--server_port={PROXY_PORT}",
        f"--resource_manager_address=$(PATHWAYS_HEAD):{RM_PORT}",
        f"--gcs_scratch_location={_gcs_scratch(job)}",
    ]
    if job.spec.elastic_slices > 0:
        args.append(f"--num_elastic_slices={job.spec.elastic_slices}")
    return {
        "name": PROXY_CONTAINER,
        "image": _proxy_image(job),
        "imagePullPolicy": PATHWAYS_PULL_POLICY,
        "restartPolicy": "Always",
        "args": args + list(component.args),
        "env": [_label_env("PATHWAYS_HEAD", COORDINATOR_LABEL)],
        "ports": _ports(PROXY_PORT),
        "resources": _resources(PROXY_LIMITS, component.resources),
        "volumeMounts": _tmp_mount(),
        "securityContext": pathways_security_context(),
    }


def _worker_env(job: ElasticTrainingJob) -> list[dict[str, Any]]:
    """What a worker pod needs to find its slice and the head (both backends)."""
    return [
        _label_env("MEGASCALE_SLICE_ID", JOB_INDEX_LABEL),
        _label_env("MEGASCALE_NUM_SLICES", REPLICATED_JOB_REPLICAS_LABEL),
        _label_env("MEGASCALE_COORDINATOR_ADDRESS", COORDINATOR_LABEL),
        _label_env("PATHWAYS_HEAD", COORDINATOR_LABEL),
        *_jobset_env(),
    ]


def _pathways_worker(job: ElasticTrainingJob, shape: SliceShape) -> dict[str, Any]:
    component = _component(job, "worker")
    return {
        "name": WORKER_CONTAINER,
        "image": _server_image(job),
        "imagePullPolicy": PATHWAYS_PULL_POLICY,
        "args": [
            f"--server_port={WORKER_PORT}",
            f"--resource_manager_address=$(PATHWAYS_HEAD):{RM_PORT}",
            f"--gcs_scratch_location={_gcs_scratch(job)}",
            *component.args,
        ],
        "env": [
            *_worker_env(job),
            _env("TPU_MIN_LOG_LEVEL", "0"),
            _env("TF_CPP_MIN_LOG_LEVEL", "0"),
            _env("XCLOUD_ENVIRONMENT", "GCP"),
            # As both peers (pathways-job, xpk) set it: a workaround for megascale gRPC bugs.
            _env("MEGASCALE_GRPC_ENABLE_XOR_TRACER", "false"),
        ],
        "ports": _ports(WORKER_PORT, WORKER_PORT + 1, 8471, 8080),
        "resources": _resources({TPU_RESOURCE: str(shape.chips_per_vm)}, component.resources),
        "volumeMounts": _tmp_mount(),
        "securityContext": pathways_security_context(),
    }


def _colocated_python_sidecar(job: ElasticTrainingJob) -> dict[str, Any] | None:
    """Pathways' colocated Python beside each TPU worker (spec.pathways.colocatedPython),
    as xpk's --colocated-python-sidecar-image renders it: a native sidecar serving gRPC on
    50051 (the host network's, which the worker reaches), sharing the worker's /tmp."""
    colocated = job.spec.pathways.colocated_python
    if colocated is None or job.spec.backend != "pathways":
        return None
    return {
        "name": COLOCATED_PYTHON_CONTAINER,
        "image": colocated.image,
        "imagePullPolicy": PATHWAYS_PULL_POLICY,
        "restartPolicy": "Always",
        "env": [_env("GRPC_SERVER_ADDRESS", f"0.0.0.0:{COLOCATED_PYTHON_PORT}"),
                _env("PYTHONUNBUFFERED", "1")],
        "ports": _ports(COLOCATED_PYTHON_PORT),
        "resources": _resources({}, colocated.resources),
        "volumeMounts": _tmp_mount(),
        "securityContext": pathways_security_context(),
    }


def pathways_security_context() -> dict[str, Any]:
    """Google's Pathways images (resource manager, proxy, TPU worker) and the colocated
    Python sidecar: no capability (not even the runtime's default set), no privilege
    escalation, the runtime's seccomp profile. They run as the image's user (root) with a
    writable root filesystem, as Google ships them; not `privileged`: the TPU device
    plugin hands a container requesting google.com/tpu its chips (xpk's `privileged` main
    container predates it), and GKE Autopilot runs TPU pods under RuntimeDefault. These
    pods run on the host network with the host's /tmp, so this is what keeps a bug in
    them from becoming the node (docs/threat-model.md, "Host access")."""
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _trainer_security_context() -> dict[str, Any]:
    """Containers running our trainer image: non-root, no privilege escalation, no
    capabilities, read-only root filesystem (the image points every cache at /tmp, an
    emptyDir). Pathways' own images: pathways_security_context."""
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _slice_agent(job: ElasticTrainingJob, shape: SliceShape) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": SLICE_AGENT_CONTAINER,
        "image": job.spec.trainer.image,
        "command": ["etj", "slice-agent"],
        "env": [*_worker_env(job), *_job_identity_env(job)],
        "volumeMounts": _tmp_mount(),
        "securityContext": _trainer_security_context(),
    }
    # Placed as a TPU worker, it takes the VM's chips (one worker per node, as Pathways').
    chips = {TPU_RESOURCE: str(shape.chips_per_vm)} if tpu_placement(job) else {}
    resources = _resources(chips, _component(job, "worker").resources)
    if resources:
        container["resources"] = resources
    return container


def tpu_placement(job: ElasticTrainingJob) -> bool:
    """Workers placed as TPU workers, one slice per node pool (always for Pathways)."""
    return job.spec.backend == "pathways" or job.spec.placement == "TPU"


# --- pods, Jobs, JobSet ----------------------------------------------------------------------


def _tolerations(job: ElasticTrainingJob, *, tpu: bool) -> list[dict[str, Any]]:
    base = [{"key": TPU_RESOURCE, "operator": "Exists"}] if tpu else []
    return base + [t.to_wire() for t in job.spec.tolerations]


def _node_failure_tolerations(job: ElasticTrainingJob) -> list[dict[str, Any]]:
    """Workers are evicted from a NotReady or unreachable node after
    spec.recovery.workerNodeTolerationSeconds, not the API server's default 300 s: the
    fallback while the operator is not there to replace the slice itself."""
    if not job.spec.recovery.replace_slices:
        return []
    seconds = job.spec.recovery.worker_node_toleration_seconds
    return [{"key": key, "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": seconds} for key in (NOT_READY_TAINT, UNREACHABLE_TAINT)]


def _avoid_quarantined_pools(job: ElasticTrainingJob) -> dict[str, Any] | None:
    """Workers never land on a node pool the operator quarantined (names.QUARANTINE_LABEL):
    after a failure the recreated slice goes to a healthy spare pool. Running pods are
    not affected (IgnoredDuringExecution). Not under Topology-Aware Scheduling: Kueue
    pins each slice's pods to the hosts it assigned at admission, and a recreated slice
    whose domain had been quarantined could never be scheduled."""
    if not job.spec.recovery.replace_slices or not tpu_placement(job) \
            or job.spec.tpu.topology_aware is not None:
        return None
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": QUARANTINE_LABEL, "operator": "DoesNotExist"}]}]}}}


def _pod_common(
    job: ElasticTrainingJob, *, restart_policy: str, host_network: bool,
) -> dict[str, Any]:
    spec = job.spec
    pod: dict[str, Any] = {
        "restartPolicy": restart_policy,
        "terminationGracePeriodSeconds": spec.termination_grace_period_seconds,
        "serviceAccountName": pod_service_account(job),
        "volumes": _tmp_volume(),
    }
    if host_network:
        pod["hostNetwork"] = True
        pod["dnsPolicy"] = "ClusterFirstWithHostNet"
    else:
        pod["dnsPolicy"] = "ClusterFirst"
    if spec.priority_class_name:
        pod["priorityClassName"] = spec.priority_class_name
    return pod


def _head_pod(job: ElasticTrainingJob, shape: SliceShape, server: ServerFeatures
              ) -> dict[str, Any]:
    spec = job.spec
    pathways = spec.backend == "pathways"
    pod = _pod_common(job, restart_policy="Never", host_network=pathways)
    pod["volumes"] += [v.to_wire() for v in spec.trainer.volumes]
    # With TPU placement the head stays off the TPU pools (a spare must stay free).
    node_selector = {NODE_POOL_LABEL: spec.head_node_pool} if tpu_placement(job) else {}
    node_selector.update(spec.node_selector)
    if node_selector:
        pod["nodeSelector"] = node_selector
    tolerations = _tolerations(job, tpu=False)
    if tolerations:
        pod["tolerations"] = tolerations
    init = [_rm_sidecar(job, shape), _proxy_sidecar(job)] if pathways else []
    progress = _progress_sidecar(job)
    if progress is not None:
        init.append(progress)
        # The sidecar samples main's process (its state, CPU time and stacks).
        pod["shareProcessNamespace"] = True
    if init:
        pod["initContainers"] = init
    pod["containers"] = [_main_container(job, server)]
    return pod


def _worker_pod(job: ElasticTrainingJob, shape: SliceShape) -> dict[str, Any]:
    spec = job.spec
    pathways = spec.backend == "pathways"
    tpu = tpu_placement(job)
    pod = _pod_common(job, restart_policy="OnFailure", host_network=pathways)
    node_selector = (
        {TPU_ACCELERATOR_LABEL: shape.family.accelerator_label, TPU_TOPOLOGY_LABEL: shape.topology}
        if tpu else {}
    )
    if dynamic_slicing(job, shape):  # GKE builds the slice from the cube Kueue assigns
        node_selector.pop(TPU_TOPOLOGY_LABEL)
    node_selector.update(spec.node_selector)
    if node_selector:
        pod["nodeSelector"] = node_selector
    affinity = _avoid_quarantined_pools(job)
    if affinity is not None:
        pod["affinity"] = affinity
    tolerations = _tolerations(job, tpu=tpu) + _node_failure_tolerations(job)
    if tolerations:
        pod["tolerations"] = tolerations
    if pathways:
        pod["volumes"] = _host_tmp_volume()
    colocated = _colocated_python_sidecar(job)
    if colocated is not None:
        pod["initContainers"] = [colocated]
    pod["containers"] = [_pathways_worker(job, shape) if pathways else _slice_agent(job, shape)]
    return pod


def _replicated_job(
    job: ElasticTrainingJob,
    name: str,
    *,
    replicas: int,
    pods: int,
    backoff_limit: int,
    exclusive_topology: str | None,
    pod_spec: dict[str, Any],
    pod_annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    pod_labels = labels(job, name)
    job_meta: dict[str, Any] = {"labels": dict(pod_labels)}
    if exclusive_topology is not None:
        job_meta["annotations"] = {EXCLUSIVE_TOPOLOGY_ANNOTATION: exclusive_topology}
    pod_meta: dict[str, Any] = {"labels": pod_labels}
    if pod_annotations:
        pod_meta["annotations"] = pod_annotations
    return {
        "name": name,
        "replicas": replicas,
        "template": {
            "metadata": job_meta,
            "spec": {
                "backoffLimit": backoff_limit,
                "completions": pods,
                "parallelism": pods,
                "completionMode": "Indexed",
                "template": {"metadata": pod_meta, "spec": pod_spec},
            },
        },
    }


def dynamic_slicing(job: ElasticTrainingJob, shape: SliceShape) -> bool:
    """TPU7x under Topology-Aware Scheduling, a slice of at most one cube: GKE's dynamic
    slicing (xpk's super-slicing) builds it, of the topology the pod asks for, from the
    cube Kueue assigned; the nodes carry their cube's topology, not the slice's. A larger
    slice is a node pool of its own (made with a workload policy), whose nodes carry the
    slice's topology, as on the other TPU types."""
    return job.spec.tpu.type == "tpu7x" and job.spec.tpu.topology_aware is not None \
        and shape.vms <= CUBE_HOSTS


def worker_pod_annotations(job: ElasticTrainingJob, shape: SliceShape) -> dict[str, str]:
    """Kueue's Topology-Aware Scheduling: each slice (a worker Job, `shape.vms` pods) in
    one domain of sliceLevel, the whole job in one of jobLevel (spec.tpu.topologyAware)."""
    tas = job.spec.tpu.topology_aware
    if tas is None:
        return {}
    annotations = {KUEUE_PODSET_SLICE_REQUIRED_TOPOLOGY: tas.slice_level,
                   KUEUE_PODSET_SLICE_SIZE: str(shape.vms)}
    if tas.job_level is not None:
        annotations[KUEUE_PODSET_REQUIRED_TOPOLOGY] = tas.job_level
    if dynamic_slicing(job, shape):
        annotations[TPU_SLICE_TOPOLOGY_ANNOTATION] = shape.topology
    return annotations


def head_pod_annotations(job: ElasticTrainingJob) -> dict[str, str]:
    # The head looks idle to the cluster autoscaler (a CPU node with one pod); evicting it
    # ends the run. GKE injects its Cloud Storage FUSE sidecar only where asked to.
    annotations = {SAFE_TO_EVICT_ANNOTATION: "false"}
    if any(v.csi is not None and v.csi.driver == GCSFUSE_CSI_DRIVER
           for v in job.spec.trainer.volumes):
        annotations[GCSFUSE_VOLUMES_ANNOTATION] = "true"
    return annotations


def render_jobset(job: ElasticTrainingJob, server: ServerFeatures = NEWEST) -> dict[str, Any]:
    """The job's JobSet, as the API server the operator runs on accepts it (`server`:
    whether main's container restart rules are kept; default the newest server)."""
    spec = job.spec
    shape = slice_shape(spec.tpu.type, spec.tpu.topology)
    pathways = spec.backend == "pathways"
    name = jobset_name(job)
    head = _replicated_job(
        job, HEAD_REPLICATED_JOB, replicas=1, pods=1, backoff_limit=0,
        exclusive_topology="kubernetes.io/hostname" if pathways else None,
        pod_spec=_head_pod(job, shape, server), pod_annotations=head_pod_annotations(job),
    )
    worker = _replicated_job(
        job, WORKER_REPLICATED_JOB, replicas=spec.tpu.num_slices, pods=shape.vms,
        # A slice failure stays local: the operator recreates the slice's Job; this
        # budget is the Job controller's, for when the operator is not running.
        backoff_limit=shape.vms * budgets_of(spec).slice_restarts.allowed,
        # One slice per node pool (JobSet's exclusive placement), unless Kueue places
        # the slices by topology.
        exclusive_topology=NODE_POOL_LABEL if tpu_placement(job)
        and spec.tpu.topology_aware is None else None,
        pod_spec=_worker_pod(job, shape), pod_annotations=worker_pod_annotations(job, shape),
    )
    worker["dependsOn"] = [{"name": HEAD_REPLICATED_JOB, "status": "Ready"}]
    metadata = _metadata(job, name, "jobset")
    metadata["labels"].update(kueue_labels(job))
    prebuilt = job.metadata.annotations.get(KUEUE_PREBUILT_WORKLOAD_ANNOTATION)
    if prebuilt:  # a MultiKueue copy: Kueue's JobSet integration takes this Workload
        metadata["annotations"] = {KUEUE_PREBUILT_WORKLOAD_ANNOTATION: prebuilt}
    return {
        "apiVersion": JOBSET_API_VERSION,
        "kind": "JobSet",
        "metadata": metadata,
        "spec": {
            "suspend": spec.suspend,
            "coordinator": {"replicatedJob": HEAD_REPLICATED_JOB, "jobIndex": 0, "podIndex": 0},
            "network": {
                "enableDNSHostnames": True,
                "publishNotReadyAddresses": True,
                "subdomain": name,
            },
            "successPolicy": {"operator": "All", "targetReplicatedJobs": [HEAD_REPLICATED_JOB]},
            "failurePolicy": failure_policy(job, server),
            # dependsOn orders head before workers; InOrder would conflict with it.
            "startupPolicy": {"startupPolicyOrder": "AnyOrder"},
            "replicatedJobs": [head, worker],
        },
    }


def render_rbac(job: ElasticTrainingJob) -> list[dict[str, Any]]:
    """What the trainer needs: read its job, patch its status (and, simulated, see pods),
    granted to the pods' own ServiceAccount (docs/threat-model.md says what that shares)."""
    name = trainer_role_name(job)
    job_name = job.metadata.name
    rules: list[dict[str, Any]] = [
        {"apiGroups": [GROUP], "resources": [PLURAL], "resourceNames": [job_name],
         "verbs": ["get"]},
        {"apiGroups": [GROUP], "resources": [f"{PLURAL}/status"], "resourceNames": [job_name],
         "verbs": ["get", "patch"]},
    ]
    if job.spec.backend == "simulated":
        # The simulated trainer tells slice health from the worker pods' readiness.
        rules.append({"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]})
    subject: dict[str, Any] = {"kind": "ServiceAccount", "name": pod_service_account(job)}
    if job.metadata.namespace:
        subject["namespace"] = job.metadata.namespace
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": _metadata(job, name, "trainer"), "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": _metadata(job, name, "trainer"),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [subject]},
    ]


def workload_name(job: ElasticTrainingJob) -> str:
    """The Workload of a MultiKueue job, named as Kueue names those it makes
    (`<kind>-<name>-<5 hex>`; the hex from the uid, so a job deleted and recreated under
    the same name gets a new Workload). At most 47 characters: it is also a label value
    (kueue.x-k8s.io/prebuilt-workload-name on the worker cluster's copy)."""
    digest = hashlib.sha256((job.metadata.uid or "").encode()).hexdigest()[:5]
    return f"{job.kind.lower()}-{job.metadata.name}-{digest}"


def workload_priority_class(job: ElasticTrainingJob) -> PriorityClassRef | None:
    """The class Kueue's JobSet integration orders the job's Workload by (jobframework
    ExtractPriority): the WorkloadPriorityClass its kueue.x-k8s.io/priority-class label
    names, else its pods' PriorityClass (spec.priorityClassName); None: neither, Kueue's
    default priority. Not applied here: a cluster's globalDefault PriorityClass."""
    name = job.metadata.labels.get(KUEUE_PRIORITY_CLASS_LABEL)
    if name:
        return PriorityClassRef(KUEUE_GROUP, WORKLOAD_PRIORITY_CLASS_KIND, name)
    if job.spec.priority_class_name:
        return PriorityClassRef(POD_PRIORITY_CLASS_GROUP, POD_PRIORITY_CLASS_KIND,
                                job.spec.priority_class_name)
    return None


def render_workload(job: ElasticTrainingJob,
                    priority: ObservedPriorityClass | None = None) -> dict[str, Any]:
    """The Kueue Workload of a MultiKueue job, made on the manager cluster (where no
    JobSet runs): the PodSets Kueue's JobSet integration makes of the JobSet the worker
    cluster's operator renders, one per replicatedJob (the head; the workers, slices x
    VMs), with the same pod templates. They must be the same: MultiKueue copies this
    Workload to the worker, where the JobSet takes it as its prebuilt Workload, and
    Kueue finishes a prebuilt Workload whose PodSets differ from its job's (OutOfSync).
    `priority`: the class `workload_priority_class` names, as read (its value), set as
    Kueue's integration sets it on the Workloads it makes: Kueue orders and preempts by
    spec.priority, and reads no label of a Workload it did not make."""
    jobset = render_jobset(job)
    pod_sets = [
        {"name": rj["name"],
         "count": rj["replicas"] * rj["template"]["spec"]["parallelism"],
         "template": rj["template"]["spec"]["template"],
         "topologyRequest": topology_request(rj)}
        for rj in jobset["spec"]["replicatedJobs"]
    ]
    metadata = _metadata(job, workload_name(job), "workload")
    metadata["labels"].update(kueue_labels(job))
    spec: dict[str, Any] = {"active": not job.spec.suspend, "podSets": pod_sets}
    queue = job.metadata.labels.get(KUEUE_QUEUE_NAME_LABEL)
    if queue:
        spec["queueName"] = queue
    if priority is not None:
        spec["priorityClassRef"] = {"group": priority.ref.group, "kind": priority.ref.kind,
                                    "name": priority.ref.name}
        spec["priority"] = priority.value
    return {"apiVersion": KUEUE_API_VERSION, "kind": "Workload", "metadata": metadata,
            "spec": spec}


def topology_request(replicated_job: dict[str, Any]) -> dict[str, Any]:
    """The PodSet's topologyRequest, as Kueue's JobSet integration makes it with
    Topology-Aware Scheduling on (v0.19's default): the pod and slice index labels, the
    slices, and what the pod template's TAS annotations ask for. On a worker cluster
    Kueue schedules MultiKueue's copy of the Workload by it."""
    annotations = replicated_job["template"]["spec"]["template"]["metadata"].get(
        "annotations") or {}
    request: dict[str, Any] = {"podIndexLabel": COMPLETION_INDEX_LABEL,
                               "subGroupIndexLabel": JOB_INDEX_LABEL,
                               "subGroupCount": replicated_job["replicas"]}
    if KUEUE_PODSET_REQUIRED_TOPOLOGY in annotations:
        request["required"] = annotations[KUEUE_PODSET_REQUIRED_TOPOLOGY]
    if KUEUE_PODSET_SLICE_REQUIRED_TOPOLOGY in annotations \
            and KUEUE_PODSET_SLICE_SIZE in annotations:
        request["podSetSliceRequiredTopology"] = annotations[
            KUEUE_PODSET_SLICE_REQUIRED_TOPOLOGY]
        request["podSetSliceSize"] = int(annotations[KUEUE_PODSET_SLICE_SIZE])
    return request


def render(job: ElasticTrainingJob, server: ServerFeatures = NEWEST) -> list[dict[str, Any]]:
    """Every child object of the job: trainer RBAC first, then the JobSet; for a job
    MultiKueue dispatches (spec.managedBy), only its Workload (it runs elsewhere)."""
    if job.spec.multikueue:
        return [render_workload(job)]
    return [*render_rbac(job), render_jobset(job, server)]


class _NoAliasDumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def to_yaml_stream(objects: list[dict[str, Any]]) -> str:
    """A `---`-separated YAML stream with sorted keys (stable, diff-friendly)."""
    return "".join(
        "---\n" + yaml.dump(obj, Dumper=_NoAliasDumper, sort_keys=True, default_flow_style=False,
                            width=100)
        for obj in objects
    )
