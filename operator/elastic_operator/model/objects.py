"""What the operator observed in the cluster, as plain frozen dataclasses.

kube.py reads raw objects (dicts as the API server returns them); the `*_from_dict`
functions here turn them into these dataclasses. Parsing is pure and lenient: a field
that is missing or malformed becomes None instead of an exception, because a status
computation must never crash on what the cluster shows.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import Any, Literal, TypeVar

from elastic_api.conditions import Reason
from elastic_api.models import CheckpointStatus
from elastic_api.names import (
    ACTIVE_MAINTENANCE_LABEL,
    ALL_CONTAINERS_RESTARTING,
    APPLIED_SPEC_ANNOTATION,
    COMPLETION_INDEX_LABEL,
    CONTROLLER_UID_LABEL,
    HEAD_REPLICATED_JOB,
    IMPENDING_TERMINATION_TAINT,
    JOB_INDEX_LABEL,
    MAIN_CONTAINER,
    NODE_POOL_LABEL,
    QUARANTINE_CAUSE_ANNOTATION,
    QUARANTINE_LABEL,
    QUARANTINED_AT_ANNOTATION,
    REPLICATED_JOB_LABEL,
    RESTART_ATTEMPT_LABEL,
    SCHEDULED_MAINTENANCE_LABEL,
    SUSPENDED_AFTER_WORKER_LOST_ANNOTATION,
    SUSPENDED_BY_OPERATOR_ANNOTATION,
    TPU_ACCELERATOR_LABEL,
    TPU_RESOURCE,
    TPU_TOPOLOGY_LABEL,
    WORKER_REPLICATED_JOB,
)
from elastic_api.queueing import (
    EVICTED_BY_PREEMPTION,
    POD_TERMINATED_BY_KUEUE,
    WORKLOAD_REQUEUED,
    counts_as_eviction,
)
from elastic_operator.model.server import NEWEST, ServerFeatures
from elastic_operator.model.slice_memo import SliceMemo

T = TypeVar("T")


def parse_time(value: Any) -> datetime | None:
    """RFC 3339 from the API server (or a datetime) -> aware datetime; None if unparseable."""
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


ReadyStatus = Literal["True", "False", "Unknown"]


@dataclass(frozen=True)
class QuarantineCause:
    """Who quarantined a node pool and on what evidence (QUARANTINE_CAUSE_ANNOTATION)."""

    jobs: tuple[tuple[str, str], ...] = ()  # ("<namespace>/<name>", uid), the quarantiner first
    evidence: str = ""

    def to_json(self) -> str:
        return json.dumps({"jobs": [{"name": n, "uid": u} for n, u in self.jobs],
                           "evidence": self.evidence}, separators=(",", ":"))

    def describe(self) -> str:
        who = ", ".join(n for n, _ in self.jobs) or "unknown"
        return f"{who}: {self.evidence}" if self.evidence else who


def quarantine_cause_from(value: Any) -> QuarantineCause | None:
    """The annotation's JSON, leniently (a hand-edited or foreign value is None)."""
    if not isinstance(value, str):
        return None
    try:
        data = json.loads(value)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    jobs = tuple((str(j.get("name", "")), str(j.get("uid", "")))
                 for j in map(_dict, _list(data.get("jobs"))) if j.get("name"))
    evidence = data.get("evidence")
    return QuarantineCause(jobs=jobs, evidence=evidence if isinstance(evidence, str) else "")


@dataclass(frozen=True)
class ObservedNode:
    name: str
    ready: bool
    # When the Ready condition last changed (kwok's chaos stage may report an old time).
    ready_transition_time: datetime | None = None
    # The Ready condition's status: False = the kubelet says so; Unknown = it went silent
    # (or no condition at all).
    ready_status: ReadyStatus = "Unknown"
    pool: str | None = None  # cloud.google.com/gke-nodepool
    accelerator: str | None = None  # cloud.google.com/gke-tpu-accelerator
    topology: str | None = None  # cloud.google.com/gke-tpu-topology
    quarantined: str | None = None  # elastic.pathways.dev/quarantined (why)
    quarantined_at: datetime | None = None
    # GKE's maintenance signals (names.py): when, if scheduled; ongoing; terminating soon.
    scheduled_maintenance: datetime | None = None
    maintenance_ongoing: bool = False
    impending_termination: bool = False
    # Every label, as (key, value) pairs sorted by key (the topology levels of Kueue's
    # Topology-Aware Scheduling are labels of any name).
    labels: tuple[tuple[str, str], ...] = ()
    # google.com/tpu in status.capacity and .allocatable: the kubelet counts only the
    # chips the device plugin reports healthy as allocatable.
    tpu_capacity: int | None = None
    tpu_allocatable: int | None = None
    quarantine_cause: QuarantineCause | None = None

    @property
    def unhealthy_chips(self) -> int:
        """TPU chips the device plugin reports unhealthy (0: none, or not a TPU node)."""
        if self.tpu_capacity is None or self.tpu_allocatable is None:
            return 0
        return max(0, self.tpu_capacity - self.tpu_allocatable)

    @property
    def healthy(self) -> bool:
        """Ready, with every TPU chip healthy."""
        return self.ready and self.unhealthy_chips == 0

    def label(self, key: str) -> str | None:
        return next((v for k, v in self.labels if k == key), None)

    @property
    def maintenance_signal(self) -> str | None:
        """The strongest maintenance signal on the node, if any (Reason words)."""
        if self.impending_termination:
            return Reason.IMPENDING_TERMINATION
        if self.maintenance_ongoing:
            return Reason.MAINTENANCE_ONGOING
        if self.scheduled_maintenance is not None:
            return Reason.SCHEDULED_MAINTENANCE
        return None


ContainerState = Literal["running", "waiting", "terminated"]


@dataclass(frozen=True)
class ObservedContainer:
    """A container's current state (containerStatuses[].state), e.g. the head's `main`."""

    state: ContainerState | None  # None: no state reported yet
    started_at: datetime | None = None  # state.running.startedAt
    restart_count: int = 0


@dataclass(frozen=True)
class ObservedPod:
    name: str
    replicated_job: str | None  # pathways-head or worker
    slice_index: int | None  # jobset.sigs.k8s.io/job-index
    host_index: int | None  # batch.kubernetes.io/job-completion-index
    phase: str  # Pending, Running, Succeeded, Failed, Unknown
    ready: bool
    created_at: datetime | None = None
    node_name: str | None = None
    deletion_timestamp: datetime | None = None
    deletion_grace_seconds: int | None = None
    status_reason: str | None = None  # e.g. Evicted
    status_message: str | None = None
    # The earliest container termination seen (finishedAt) and why.
    terminated_at: datetime | None = None
    terminated_reason: str | None = None
    terminated_exit_code: int | None = None
    # Last transition of the pod's Ready condition (to True when ready, False otherwise).
    ready_transition_time: datetime | None = None
    uid: str | None = None
    job_uid: str | None = None  # the Job that created it (batch.kubernetes.io/controller-uid)
    # The reason of the pod's DisruptionTarget condition, when True: who ended it
    # (DeletionByTaintManager, DeletionByPodGC, TerminationByKubelet, EvictionByEvictionAPI,
    # PreemptionByScheduler).
    disruption: str | None = None
    # Failed by Kueue's Topology-Aware Scheduling: it could not schedule on the node
    # Kueue assigned it, now unhealthy (elastic_api.queueing.POD_TERMINATED_BY_KUEUE).
    terminated_by_kueue: bool = False
    main: ObservedContainer | None = None  # the `main` container (the head's trainer)
    # The JobSet attempt it belongs to (jobset.sigs.k8s.io/restart-attempt): one older
    # than the JobSet's restarts goes because the whole JobSet restarts.
    restart_attempt: int | None = None
    # Container restarts in place (restartCount, summed over its containers), and whether
    # one is restarting now: a container that exited in a pod that stays (restartPolicy
    # OnFailure, a container restart rule, or the kubelet's AllContainersRestarting), not
    # yet running again. Its exit is in terminated_* until it runs again.
    restarts: int = 0
    restarting: bool = False
    # Its `main` restarts in the pod on a crash (a container restart rule `Restart`).
    main_restarts_in_place: bool = False
    # (container, imageID) of every container the kubelet reports an image ID for
    # (containerStatuses and initContainerStatuses): the digest it runs.
    images: tuple[tuple[str, str], ...] = ()

    @property
    def terminating(self) -> bool:
        return self.deletion_timestamp is not None

    @property
    def failed(self) -> bool:
        return self.phase == "Failed"

    @property
    def failure_started_at(self) -> datetime | None:
        """When this pod stopped serving: deletion request time, or container termination."""
        if self.deletion_timestamp is not None:
            # deletionTimestamp is the time the grace period ends; the delete came earlier.
            return self.deletion_timestamp - timedelta(seconds=self.deletion_grace_seconds or 0)
        if self.terminated_at is not None:
            return self.terminated_at
        if self.failed and not self.ready:
            return self.ready_transition_time
        return None


@dataclass(frozen=True)
class ReplicatedJobStatus:
    name: str
    failed: int = 0  # Jobs of this replicatedJob that failed


@dataclass(frozen=True)
class ObservedJobSet:
    name: str
    suspended: bool
    restarts: int
    # "Completed" or "Failed" once the JobSet is terminal, else None.
    terminal_state: str | None
    failed_message: str | None = None
    worker_hosts_per_slice: int | None = None
    replicated_jobs: tuple[ReplicatedJobStatus, ...] = ()
    owner_uid: str | None = None  # uid of the controller ownerReference
    applied_spec: str | None = None  # APPLIED_SPEC_ANNOTATION
    uid: str | None = None
    suspended_by_operator: bool = False  # SUSPENDED_BY_OPERATOR_ANNOTATION


@dataclass(frozen=True)
class ObservedCondition:
    type: str
    status: str  # True, False, Unknown
    reason: str = ""
    message: str = ""
    last_transition_time: datetime | None = None


@dataclass(frozen=True)
class ObservedWorkload:
    """The Workload Kueue made for the job's JobSet (kueue.x-k8s.io/v1beta2)."""

    name: str
    active: bool = True  # spec.active (unset: active)
    suspended_by_operator: bool = False  # SUSPENDED_BY_OPERATOR_ANNOTATION
    # SUSPENDED_AFTER_WORKER_LOST_ANNOTATION: deactivated by the operator after its worker
    # cluster (the value; "" if unknown) was lost, redispatch not allowed.
    suspended_after_worker_lost: str | None = None
    queue_name: str | None = None  # spec.queueName (the LocalQueue)
    cluster_queue: str | None = None  # status.admission.clusterQueue, while it has quota
    # status.clusterName: the worker cluster MultiKueue dispatched it to (set once).
    cluster_name: str | None = None
    conditions: tuple[ObservedCondition, ...] = ()
    # The preemptions Kueue counted on it (status.schedulingStats.evictions, reason
    # Preempted): it keeps counting across requeues, so a reconcile that missed a short
    # eviction still sees it.
    preemptions: int = 0
    # The other evictions counted there that counters.evictions counts
    # (queueing.counts_as_eviction: PodsReadyTimeout, NodeFailures, ...).
    evictions: int = 0
    # The reasons of those counted evictions, as Kueue lists them (it keeps no times).
    eviction_reasons: tuple[str, ...] = ()
    # status.requeueState.requeueAt: after a PodsReadyTimeout eviction, the end of the
    # requeuing backoff.
    requeue_at: datetime | None = None

    def condition(self, type_: str) -> ObservedCondition | None:
        return next((c for c in self.conditions if c.type == type_), None)

    def is_true(self, type_: str) -> bool:
        cond = self.condition(type_)
        return cond is not None and cond.status == "True"

    @property
    def last_counted_eviction(self) -> str | None:
        """The reason of the newest counted eviction, once Kueue readmitted the job (its
        Evicted condition no longer says): the Requeued condition's when it names one
        (NodeFailures; PodsReadyTimeout during the backoff), else the only kind counted."""
        requeued = self.condition(WORKLOAD_REQUEUED)
        if requeued is not None and requeued.reason in self.eviction_reasons:
            return requeued.reason
        return self.eviction_reasons[0] if len(set(self.eviction_reasons)) == 1 else None


@dataclass(frozen=True)
class PriorityClassRef:
    """A Workload's spec.priorityClassRef: a WorkloadPriorityClass (group kueue.x-k8s.io)
    or a pod PriorityClass (scheduling.k8s.io)."""

    group: str
    kind: str
    name: str


@dataclass(frozen=True)
class ObservedPriorityClass:
    """A priority class as read: what Kueue orders and preempts a Workload by (its value,
    the Workload's spec.priority)."""

    ref: PriorityClassRef
    value: int


@dataclass(frozen=True)
class ObservedWorkerCluster:
    """A MultiKueueCluster (a worker cluster, as the manager's Kueue sees it)."""

    name: str
    active: bool  # its Active condition is True
    reason: str = ""
    message: str = ""
    since: datetime | None = None  # when Active last changed


@dataclass(frozen=True)
class ObservedJob:
    """A worker Job of the JobSet (one per slice)."""

    name: str
    uid: str
    slice_index: int | None
    deleting: bool = False
    backoff_limit: int | None = None
    active_deadline_seconds: int | None = None  # spec.activeDeadlineSeconds
    failed_pods: int = 0  # status.failed + uncountedTerminatedPods.failed
    finished: str | None = None  # "Complete" or "Failed" once the Job is finished
    deleted_at: datetime | None = None  # metadata.deletionTimestamp (whole seconds)


@dataclass(frozen=True)
class RefusedJob:
    """A Job of the JobSet the API server refuses to create (a server-side dry run of it,
    as JobSet would create it: core/refused_jobs.py): its name, the field the server
    names (its Status details' first cause; "" when it names none) and its words."""

    name: str
    field: str
    message: str


@dataclass(frozen=True)
class FailureMark:
    """A slice failure of another job on a pool that blamed no node (the job's own, as
    far as it could tell, or its own report), as that job's status records it."""

    job: str  # <namespace>/<name>
    uid: str
    at: datetime
    pools: int  # on how many pools that job's slices failed so (more than 1: it follows the job)


@dataclass(frozen=True)
class ObservedPool:
    """A node pool of one TPU shape: its nodes, and whether pods of any
    ElasticTrainingJob (other than the one reconciled) run there."""

    name: str
    nodes: tuple[ObservedNode, ...]
    used_by_others: bool = False

    # Slice failures of other jobs on this pool with no evidence against its nodes, from
    # their status (NodeIndex keeps them).
    failures_of_others: tuple[FailureMark, ...] = ()

    @property
    def all_ready(self) -> bool:
        return bool(self.nodes) and all(n.ready for n in self.nodes)

    @property
    def healthy(self) -> bool:
        """Every node Ready with healthy TPU chips."""
        return bool(self.nodes) and all(n.healthy for n in self.nodes)

    @property
    def quarantined(self) -> str | None:
        return next((n.quarantined for n in self.nodes if n.quarantined), None)

    @property
    def partly_quarantined(self) -> bool:
        """Some nodes labelled, not all: a quarantine (or a release) cut short. Pods that
        avoid quarantined nodes would land on the rest and could not all fit."""
        labelled = sum(1 for n in self.nodes if n.quarantined)
        return 0 < labelled < len(self.nodes)

    @property
    def cause(self) -> QuarantineCause | None:
        return next((n.quarantine_cause for n in self.nodes if n.quarantine_cause), None)

    @property
    def maintenance(self) -> bool:
        return any(n.maintenance_signal for n in self.nodes)


@dataclass(frozen=True)
class Observed:
    """Everything one reconcile saw about one ElasticTrainingJob."""

    jobset: ObservedJobSet | None
    pods: tuple[ObservedPod, ...] = ()
    nodes: dict[str, ObservedNode] = field(default_factory=dict)
    # None = not scanned this time (keep the previous status.checkpoint).
    checkpoint: CheckpointStatus | None = None
    # The JobSet's worker Jobs by slice index (only read when the operator replaces).
    jobs: dict[int, ObservedJob] = field(default_factory=dict)
    # The node pools of the job's TPU shape (hot spares among them).
    pools: tuple[ObservedPool, ...] = ()
    # None: no Workload, or none looked for (the job is not queued).
    workload: ObservedWorkload | None = None
    # What the API server accepts (one for the operator: watch/server_probe.py).
    server: ServerFeatures = NEWEST
    # The JobSet's Jobs missing past a grace that a dry run says the server refuses.
    refused_jobs: tuple[RefusedJob, ...] = ()
    # What earlier reconciles of the job derived from each slice's pods (slice_memo.py);
    # None: compute everything (tests, one-off reads).
    memo: SliceMemo | None = field(default=None, compare=False, repr=False)

    @property
    def worker_pods_by_slice(self) -> dict[int, list[ObservedPod]]:
        """The worker pods of each slice (its job-index): the one filter of worker pods.
        Read-only."""
        return self._by_role[0]

    @property
    def head_pods(self) -> list[ObservedPod]:
        """The pods of the head Job (every one seen, old ones too). Read-only."""
        return self._by_role[1]

    @cached_property
    def _by_role(self) -> tuple[dict[int, list[ObservedPod]], list[ObservedPod]]:
        """The pods grouped once per observation (not a field: not compared, not copied
        by `dataclasses.replace`), and kept in the memo while they are the same: half a
        dozen stages read them, and at thousands of pods each pass over them is costly."""
        def group() -> tuple[dict[int, list[ObservedPod]], list[ObservedPod]]:
            by_slice: dict[int, list[ObservedPod]] = {}
            heads = []
            for pod in self.pods:
                if pod.replicated_job == WORKER_REPLICATED_JOB and pod.slice_index is not None:
                    by_slice.setdefault(pod.slice_index, []).append(pod)
                elif pod.replicated_job == HEAD_REPLICATED_JOB:
                    heads.append(pod)
            return by_slice, heads
        return group() if self.memo is None else self.memo.of_job("by role", self.pods, group)

    @cached_property
    def slice_inputs(self) -> dict[int, tuple[object, ...]]:
        """Per slice, what a value derived from its pods and their nodes depends on: each
        of its pods, then each one's node (None: not known). Read-only."""
        nodes = self.nodes

        def inputs() -> dict[int, tuple[object, ...]]:
            return {index: (*pods, *[nodes.get(p.node_name or "") for p in pods])
                    for index, pods in self.worker_pods_by_slice.items()}
        if self.memo is None:
            return inputs()
        return self.memo.of_job("slice inputs", (self.pods, nodes), inputs)

    def per_slice(self, what: str, index: int, compute: Callable[[], T],
                  *more: object) -> T:
        """compute(): a pure function of slice `index`'s pods and their nodes (and of
        `more`), from the memo while they are the same as when it was last computed."""
        if self.memo is None:
            return compute()
        return self.memo.get(what, index, self.slice_inputs.get(index, ()), compute, more)


def _epoch(value: Any) -> datetime | None:
    """Unix epoch seconds in a label value -> aware datetime."""
    seconds = _int(value)
    if seconds is None or not 0 <= seconds < 2**40:
        return None
    return datetime.fromtimestamp(seconds, UTC)


def node_from_dict(obj: dict[str, Any]) -> ObservedNode:
    meta = _dict(obj.get("metadata"))
    labels = _dict(meta.get("labels"))
    annotations = _dict(meta.get("annotations"))
    status: ReadyStatus = "Unknown"
    transition = None
    for cond in _list(_dict(obj.get("status")).get("conditions")):
        cond = _dict(cond)
        if cond.get("type") == "Ready":
            value = cond.get("status")
            status = value if value in ("True", "False") else "Unknown"
            transition = parse_time(cond.get("lastTransitionTime"))
    taints = [_dict(t) for t in _list(_dict(obj.get("spec")).get("taints"))]
    node_status = _dict(obj.get("status"))

    def label(key: str) -> str | None:
        value = labels.get(key)
        return value if isinstance(value, str) and value else None

    return ObservedNode(
        name=str(meta.get("name", "")), ready=status == "True", ready_transition_time=transition,
        ready_status=status, pool=label(NODE_POOL_LABEL),
        accelerator=label(TPU_ACCELERATOR_LABEL), topology=label(TPU_TOPOLOGY_LABEL),
        quarantined=label(QUARANTINE_LABEL),
        quarantined_at=parse_time(annotations.get(QUARANTINED_AT_ANNOTATION)),
        scheduled_maintenance=_epoch(labels.get(SCHEDULED_MAINTENANCE_LABEL)),
        maintenance_ongoing=labels.get(ACTIVE_MAINTENANCE_LABEL) == "ONGOING",
        impending_termination=any(t.get("key") == IMPENDING_TERMINATION_TAINT for t in taints),
        labels=tuple(sorted((k, v) for k, v in labels.items()
                            if isinstance(k, str) and isinstance(v, str))),
        tpu_capacity=_count(_dict(node_status.get("capacity")).get(TPU_RESOURCE)),
        tpu_allocatable=_count(_dict(node_status.get("allocatable")).get(TPU_RESOURCE)),
        quarantine_cause=quarantine_cause_from(annotations.get(QUARANTINE_CAUSE_ANNOTATION)),
    )


def _count(value: Any) -> int | None:
    """A device count as the kubelet writes it (a quantity: "4"), else None."""
    count = _int(value)
    return count if count is not None and count >= 0 else None


def job_from_dict(obj: dict[str, Any]) -> ObservedJob:
    meta = _dict(obj.get("metadata"))
    labels = _dict(meta.get("labels"))
    spec = _dict(obj.get("spec"))
    status = _dict(obj.get("status"))
    finished = None
    for cond in _list(status.get("conditions")):
        cond = _dict(cond)
        if cond.get("status") == "True" and cond.get("type") in ("Complete", "Failed"):
            finished = str(cond.get("type"))
    return ObservedJob(
        name=str(meta.get("name", "")), uid=str(meta.get("uid", "")),
        slice_index=_int(labels.get(JOB_INDEX_LABEL)),
        deleting=meta.get("deletionTimestamp") is not None,
        deleted_at=parse_time(meta.get("deletionTimestamp")),
        backoff_limit=_int(spec.get("backoffLimit")),
        active_deadline_seconds=_int(spec.get("activeDeadlineSeconds")),
        # The Job controller's count: a failed pod enters uncountedTerminatedPods before
        # its finalizer goes and status.failed after: their sum never goes back.
        failed_pods=(_int(status.get("failed")) or 0)
        + len(_list(_dict(status.get("uncountedTerminatedPods")).get("failed"))),
        finished=finished,
    )


def pod_from_dict(obj: dict[str, Any]) -> ObservedPod:
    meta = _dict(obj.get("metadata"))
    labels = _dict(meta.get("labels"))
    annotations = _dict(meta.get("annotations"))
    spec = _dict(obj.get("spec"))
    status = _dict(obj.get("status"))
    ready = False
    ready_transition = None
    disruption = None
    by_kueue = False
    all_restarting = False
    for cond in _list(status.get("conditions")):
        cond = _dict(cond)
        if cond.get("type") == "Ready":
            ready = cond.get("status") == "True"
            ready_transition = parse_time(cond.get("lastTransitionTime"))
        elif cond.get("type") == "DisruptionTarget" and cond.get("status") == "True":
            disruption = _str_or_none(cond.get("reason")) or "DisruptionTarget"
        elif cond.get("type") == POD_TERMINATED_BY_KUEUE and cond.get("status") == "True":
            by_kueue = True
        elif cond.get("type") == ALL_CONTAINERS_RESTARTING and cond.get("status") == "True":
            all_restarting = True
    ended = _ended_containers(_list(status.get("containerStatuses")))
    terminated_at, terminated_reason, terminated_exit = ended.first
    main = next((_container(_dict(cs)) for cs in _list(status.get("containerStatuses"))
                 if _dict(cs).get("name") == MAIN_CONTAINER), None)
    images = tuple(
        (str(cs["name"]), str(cs["imageID"]))
        for cs in map(_dict, [*_list(status.get("initContainerStatuses")),
                              *_list(status.get("containerStatuses"))])
        if isinstance(cs.get("name"), str) and isinstance(cs.get("imageID"), str)
        and cs["imageID"])
    uid = meta.get("uid")
    job_uid = labels.get(CONTROLLER_UID_LABEL)
    host_index = _int(labels.get(COMPLETION_INDEX_LABEL))
    if host_index is None:
        host_index = _int(annotations.get(COMPLETION_INDEX_LABEL))  # also an annotation
    return ObservedPod(
        name=str(meta.get("name", "")),
        replicated_job=labels.get(REPLICATED_JOB_LABEL),
        slice_index=_int(labels.get(JOB_INDEX_LABEL)),
        host_index=host_index,
        phase=str(status.get("phase") or "Pending"),
        ready=ready,
        created_at=parse_time(meta.get("creationTimestamp")),
        node_name=spec.get("nodeName") if isinstance(spec.get("nodeName"), str) else None,
        deletion_timestamp=parse_time(meta.get("deletionTimestamp")),
        deletion_grace_seconds=_int(meta.get("deletionGracePeriodSeconds")),
        status_reason=status.get("reason") if isinstance(status.get("reason"), str) else None,
        status_message=status.get("message") if isinstance(status.get("message"), str) else None,
        terminated_at=terminated_at,
        terminated_reason=terminated_reason,
        terminated_exit_code=terminated_exit,
        ready_transition_time=ready_transition,
        uid=uid if isinstance(uid, str) else None,
        job_uid=job_uid if isinstance(job_uid, str) else None,
        disruption=disruption,
        terminated_by_kueue=by_kueue,
        main=main,
        restart_attempt=_int(labels.get(RESTART_ATTEMPT_LABEL)),
        restarts=ended.restarts,
        main_restarts_in_place=_main_restarts(_list(spec.get("containers"))),
        restarting=meta.get("deletionTimestamp") is None and status.get("phase") in (
            "Running", "Pending") and (ended.restarting or all_restarting),
        images=images,
    )


def _main_restarts(containers: list[Any]) -> bool:
    """The `main` container carries a restart rule that restarts it in the pod."""
    main = next((c for c in map(_dict, containers) if c.get("name") == MAIN_CONTAINER), {})
    return any(_dict(r).get("action") == "Restart"
               for r in _list(main.get("restartPolicyRules")))


@dataclass
class _Ended:
    """What a pod's containers show of runs that ended: the earliest non-zero exit still
    shown (finishedAt, reason, code), their restarts, and whether one waits to run again."""

    first: tuple[datetime | None, str | None, int | None] = (None, None, None)
    restarts: int = 0
    restarting: bool = False
    # Its `main` restarts in the pod on a crash (a container restart rule `Restart`).
    main_restarts_in_place: bool = False

    def saw(self, term: dict[str, Any]) -> None:
        exit_code = _int(term.get("exitCode"))
        finished = parse_time(term.get("finishedAt"))
        if exit_code in (None, 0) or finished is None:
            return
        if self.first[0] is None or finished < self.first[0]:
            reason = term.get("reason")
            self.first = (finished, reason if isinstance(reason, str) else None, exit_code)


def _ended_containers(statuses: list[Any]) -> _Ended:
    """The current state of each container; lastState only while the container waits to
    run again (the run that just ended: once it runs, that run was restarted in place)."""
    out = _Ended()
    for cs in map(_dict, statuses):
        out.restarts += max(_int(cs.get("restartCount")) or 0, 0)
        state = _dict(cs.get("state"))
        term = _dict(state.get("terminated"))
        if term:
            out.saw(term)
            out.restarting = out.restarting or (_int(term.get("exitCode")) or 0) != 0
            continue
        last = _dict(_dict(cs.get("lastState")).get("terminated"))
        if isinstance(state.get("waiting"), dict) and last:
            out.saw(last)
            out.restarting = True
    return out


def _container(cs: dict[str, Any]) -> ObservedContainer:
    state = _dict(cs.get("state"))
    # One key of running/waiting/terminated is set; the kubelet never sends two.
    current: ContainerState | None = next(
        (k for k in ("terminated", "running", "waiting") if isinstance(state.get(k), dict)),
        None)
    started = parse_time(_dict(state.get("running")).get("startedAt"))
    return ObservedContainer(state=current, started_at=started,
                             restart_count=max(_int(cs.get("restartCount")) or 0, 0))


def jobset_from_dict(obj: dict[str, Any]) -> ObservedJobSet:
    meta = _dict(obj.get("metadata"))
    spec = _dict(obj.get("spec"))
    status = _dict(obj.get("status"))
    terminal = status.get("terminalState") if isinstance(status.get("terminalState"), str) else None
    failed_message = None
    for cond in _list(status.get("conditions")):
        cond = _dict(cond)
        if cond.get("status") != "True":
            continue
        if cond.get("type") == "Completed" and terminal is None:
            terminal = "Completed"
        elif cond.get("type") == "Failed":
            terminal = "Failed"
            failed_message = cond.get("message") if isinstance(cond.get("message"), str) else None
    hosts = None
    for rj in _list(spec.get("replicatedJobs")):
        rj = _dict(rj)
        if rj.get("name") == WORKER_REPLICATED_JOB:
            job_spec = _dict(_dict(rj.get("template")).get("spec"))
            hosts = _int(job_spec.get("parallelism")) or _int(job_spec.get("completions"))
    rjs = tuple(
        ReplicatedJobStatus(name=str(_dict(r).get("name", "")),
                            failed=_int(_dict(r).get("failed")) or 0)
        for r in _list(status.get("replicatedJobsStatus"))
    )
    owner_uid = None
    for ref in _list(meta.get("ownerReferences")):
        ref = _dict(ref)
        if ref.get("controller") is True:
            owner_uid = ref.get("uid") if isinstance(ref.get("uid"), str) else None
    annotations = _dict(meta.get("annotations"))
    applied = annotations.get(APPLIED_SPEC_ANNOTATION)
    uid = meta.get("uid")
    return ObservedJobSet(
        name=str(meta.get("name", "")),
        suspended=spec.get("suspend") is True,
        restarts=_int(status.get("restarts")) or 0,
        terminal_state=terminal,
        failed_message=failed_message,
        worker_hosts_per_slice=hosts,
        replicated_jobs=rjs,
        owner_uid=owner_uid,
        applied_spec=applied if isinstance(applied, str) else None,
        uid=uid if isinstance(uid, str) and uid else None,
        suspended_by_operator=SUSPENDED_BY_OPERATOR_ANNOTATION in annotations,
    )


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def workload_from_dict(obj: dict[str, Any]) -> ObservedWorkload:
    meta = _dict(obj.get("metadata"))
    annotations = _dict(meta.get("annotations"))
    lost = annotations.get(SUSPENDED_AFTER_WORKER_LOST_ANNOTATION)
    spec = _dict(obj.get("spec"))
    status = _dict(obj.get("status"))
    conditions = tuple(
        ObservedCondition(type=str(c.get("type")), status=str(c.get("status", "Unknown")),
                          reason=_str_or_none(c.get("reason")) or "",
                          message=_str_or_none(c.get("message")) or "",
                          last_transition_time=parse_time(c.get("lastTransitionTime")))
        for c in map(_dict, _list(status.get("conditions"))) if isinstance(c.get("type"), str)
    )
    evictions = [(str(e.get("reason") or ""), max(_int(e.get("count")) or 0, 0))
                 for e in map(_dict, _list(_dict(status.get("schedulingStats")).get("evictions")))]
    preemptions = sum(n for reason, n in evictions if reason == EVICTED_BY_PREEMPTION)
    return ObservedWorkload(
        name=str(meta.get("name", "")),
        active=spec.get("active") is not False,
        suspended_by_operator=SUSPENDED_BY_OPERATOR_ANNOTATION in annotations,
        suspended_after_worker_lost=lost if isinstance(lost, str) else None,
        queue_name=_str_or_none(spec.get("queueName")),
        cluster_queue=_str_or_none(_dict(status.get("admission")).get("clusterQueue")),
        cluster_name=_str_or_none(status.get("clusterName")),
        conditions=conditions,
        preemptions=preemptions,
        evictions=sum(n for reason, n in evictions if counts_as_eviction(reason)),
        eviction_reasons=tuple(r for r, n in evictions if counts_as_eviction(r) and n),
        requeue_at=parse_time(_dict(status.get("requeueState")).get("requeueAt")),
    )


def priority_class_from_dict(ref: PriorityClassRef, obj: dict[str, Any]
                             ) -> ObservedPriorityClass | None:
    """Both kinds keep their value in `value` (an int32); None: none readable."""
    value = obj.get("value")
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    return ObservedPriorityClass(ref, value)


def worker_cluster_from_dict(obj: dict[str, Any]) -> ObservedWorkerCluster:
    status = _dict(obj.get("status"))
    active = next((c for c in map(_dict, _list(status.get("conditions")))
                   if c.get("type") == "Active"), {})
    return ObservedWorkerCluster(
        name=str(_dict(obj.get("metadata")).get("name", "")),
        active=active.get("status") == "True",
        reason=_str_or_none(active.get("reason")) or "",
        message=_str_or_none(active.get("message")) or "",
        since=parse_time(active.get("lastTransitionTime")))
