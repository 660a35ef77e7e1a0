"""What one reconcile changes in the cluster, as a list of typed actions (the objects it
creates carry the marks of core/ownership.py).

The plan is pure; the reconciler (the thin I/O layer) executes its actions in order.
Creation is idempotent (an object that exists is left alone) and a JobSet that existed
is never recreated: that would reset JobSet's restart budget and lose the trainer.

spec.suspend suspends and resumes the job only through what is the operator's own:
the JobSet's suspend, marked as the operator's (a JobSet that another suspended, an
admission controller say, is never unsuspended), or, when Kueue manages the JobSet
(it owns its suspend both ways), the Workload's spec.active, marked the same way.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from elastic_api.conditions import ConditionType
from elastic_api.models import ElasticTrainingJob, ElasticTrainingJobStatus
from elastic_api.names import DISPATCHED_TO_ANNOTATION, KUEUE_QUEUE_NAME_LABEL
from elastic_api.queueing import WORKLOAD_ADMITTED
from elastic_operator.core.failure import is_terminal
from elastic_operator.core.ownership import owned, owned_by_another
from elastic_operator.core.podsready import pods_ready_condition, release_after_eviction
from elastic_operator.core.redispatch import evicted_for_lost_worker, redispatch_allowed
from elastic_operator.model.objects import ObservedJobSet, ObservedWorkload, QuarantineCause


@dataclass(frozen=True)
class CreateObject:
    """Create a rendered object (already owned) unless it exists."""

    obj: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.obj.get("kind"))


@dataclass(frozen=True)
class PatchJobSetSuspend:
    """Apply spec.suspend to the JobSet (the one spec field applied in place), marking the
    suspension as the operator's (or clearing the mark)."""

    namespace: str
    jobset: str
    suspend: bool


@dataclass(frozen=True)
class SetWorkloadActive:
    """Apply spec.suspend to a JobSet Kueue manages: deactivate its Workload (Kueue then
    evicts it, suspends the JobSet and frees the quota), marked as the operator's, or
    reactivate one the operator deactivated (it queues again). On a MultiKueue job's
    Workload, also its suspension after its worker cluster was lost
    (`suspended_after_worker_lost`: that cluster's name, "" if unknown; core/dispatch.py)."""

    namespace: str
    workload: str
    active: bool
    suspended_after_worker_lost: str | None = None


@dataclass(frozen=True)
class SetWorkloadCondition:
    """Set one condition of a Workload's status (server-side apply): a MultiKueue job's
    PodsReady, on the manager, where the operator is Kueue's integration for it."""

    namespace: str
    workload: str
    condition: dict[str, Any]


@dataclass(frozen=True)
class ReleaseEvictedWorkload:
    """JSON patch of an evicted Workload's status that frees its quota: what a job's
    integration writes once the job stopped (a MultiKueue job's, on the manager)."""

    namespace: str
    workload: str
    ops: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class AnnotateDispatchedTo:
    """Set (None: remove) a MultiKueue job's DISPATCHED_TO_ANNOTATION on the manager: the
    worker cluster its Workload was dispatched to (status.clusterName), for `kubectl get
    etj` (the Cluster column). Its status cannot say it: MultiKueue copies the worker's
    whole status over it."""

    namespace: str
    name: str
    cluster: str | None


Action = (CreateObject | PatchJobSetSuspend | SetWorkloadActive | SetWorkloadCondition
          | ReleaseEvictedWorkload | AnnotateDispatchedTo)


# --- slice replacement (core/replacement.py plans these after the status is written) ---


@dataclass(frozen=True)
class DeleteWorkerJob:
    """Delete a failed slice's worker Job (Foreground, precondition uid): JobSet
    recreates it at once, with fresh pods and no pod backoff."""

    namespace: str
    name: str
    uid: str
    slice_index: int
    reason: str  # why (the slice's failure reason, or Maintenance)


@dataclass(frozen=True)
class ForceDeletePod:
    """Delete a pod with grace period 0: it is Terminating on a node that is not Ready,
    whose kubelet will never confirm the deletion."""

    namespace: str
    name: str
    uid: str
    node: str
    slice_index: int


@dataclass(frozen=True)
class QuarantinePool:
    """Label every node of a node pool so that replacement workers avoid it, recording
    who quarantined it and on what evidence (the cause annotation, and an Event)."""

    pool: str
    reason: str  # NodeNotReady, DeviceUnhealthy, NodeDisruption, Maintenance, ...
    nodes: tuple[str, ...]
    slice_index: int
    cause: QuarantineCause = field(default_factory=QuarantineCause)


@dataclass(frozen=True)
class ReleasePool:
    """Remove a quarantine whose evidence has ended (a slice waits for the pool, whose
    nodes are healthy again; or the job's own failures, which caused it, follow the job
    to other pools)."""

    pool: str
    reason: str  # the quarantine's
    nodes: tuple[str, ...]
    slice_index: int | None  # the slice that waits for it (None: no slice in particular)
    why: str


@dataclass(frozen=True)
class LowerBackoffLimit:
    """A slice's restart budget is spent: set its Job's backoffLimit to 0, so the Job
    fails and JobSet's failurePolicy applies (as without the operator)."""

    namespace: str
    name: str
    uid: str
    slice_index: int


@dataclass(frozen=True)
class FailWorkerJob:
    """A slice the trainer blamed (hung, slow: its pods never fail by themselves) has its
    restart budget spent: set its Job's backoffLimit and activeDeadlineSeconds to 0 (uid
    precondition), so the Job controller fails the Job itself (DeadlineExceeded), counting
    each of its pods once, and JobSet's failurePolicy applies, as for a dead slice.
    Deleting a pod is no such failure: the Job controller counts a deleted pod only if it
    sees it still carrying the Job's tracking finalizer and not Succeeded (a worker that
    exits 0 on SIGTERM is), else it makes a new one (docs/design/slice-replacement.md)."""

    namespace: str
    name: str
    uid: str
    slice_index: int
    reason: str  # the record's: SliceHung, SliceSlow


@dataclass(frozen=True)
class EndHeadJob:
    """The JobSet's restart budget is spent (elastic_api.budgets; core/budget_tracking.py): by
    the JobSet's restarts within its window, or by main's restarts in place with them. Set
    the head Job's activeDeadlineSeconds to 0 (uid precondition); the Job fails
    (DeadlineExceeded) and the JobSet's failure-policy rule for it
    (elastic_api.names.JOBSET_BUDGET_RULE, render.failure_policy) fails the JobSet, which
    restarts it no more."""

    namespace: str
    name: str
    uid: str
    restarts: int  # the restarts that count against the budget now
    main_in_place: int  # of the run's, main's restarts in place


@dataclass(frozen=True)
class RestartTrainer:
    """Restart a stalled trainer (core/progressing.py): let the head Job replace one more
    failed pod (its backoffLimit raised to its failures + 1, uid precondition), then
    delete the head pod (uid precondition); the Job makes a new one. The JobSet, the
    workers and the JobSet's restart budget are untouched."""

    namespace: str
    head_job: str
    job_uid: str | None  # the head Job's (the pod's controller-uid)
    pod_name: str
    pod_uid: str
    step: int | None


ReplacementAction = (DeleteWorkerJob | ForceDeletePod | QuarantinePool | ReleasePool
                     | LowerBackoffLimit | FailWorkerJob | RestartTrainer | EndHeadJob)


@dataclass(frozen=True)
class Plan:
    actions: tuple[Action, ...] = ()
    why_not: str | None = None  # why nothing is created (terminal / lost JobSet), for logs

    @property
    def creates(self) -> list[dict[str, Any]]:
        return [a.obj for a in self.actions if isinstance(a, CreateObject)]


def plan_reconcile(
    job: ElasticTrainingJob,
    rendered: list[dict[str, Any]],
    jobset: ObservedJobSet | None,
    previous: ElasticTrainingJobStatus,
    *,
    workload: ObservedWorkload | None = None,
    ensure_children: bool = False,
) -> Plan:
    """Create what is missing, apply suspend; never recreate a JobSet that existed.

    workload: the JobSet's Kueue Workload, if it has one.
    ensure_children: the JobSet exists but this process has not yet made sure of the
    objects rendered beside it (the trainer's RBAC): create them again (idempotent)."""
    if jobset is None:
        if is_terminal(previous):
            return Plan(why_not="the job is finished; its JobSet is not recreated")
        if previous.jobset_name:
            return Plan(why_not=f"JobSet {previous.jobset_name} existed and is gone; "
                        "not recreated (that would reset its restart budget)")
        if job.spec.suspend and job.metadata.labels.get(KUEUE_QUEUE_NAME_LABEL):
            # Kueue could admit and start it before its Workload is deactivated.
            return Plan(why_not="spec.suspend is true: a queued job's JobSet is created "
                        "when it is resumed")
        return Plan(actions=tuple(CreateObject(obj) for obj in owned(job, rendered)))
    if owned_by_another(job, jobset):
        return Plan(why_not=f"JobSet {jobset.name} is owned by another object")
    if jobset.terminal_state is not None or is_terminal(previous):
        return Plan(why_not="the JobSet is finished")
    actions: list[Action] = []
    if ensure_children:
        actions += [CreateObject(obj) for obj in owned(job, rendered) if obj["kind"] != "JobSet"]
    actions += suspend_actions(job, jobset, workload, previous)
    return Plan(actions=tuple(actions))


def suspend_actions(job: ElasticTrainingJob, jobset: ObservedJobSet,
                    workload: ObservedWorkload | None,
                    previous: ElasticTrainingJobStatus) -> list[Action]:
    """Suspend or resume the job for spec.suspend, lifting only the operator's own suspension."""
    namespace = job.metadata.namespace or ""
    suspend = job.spec.suspend
    if workload is not None:  # Kueue owns the JobSet's suspend: never touch it
        return workload_suspend_actions(job, workload)
    if suspend and not jobset.suspended:
        return [PatchJobSetSuspend(namespace, jobset.name, True)]
    if not suspend and jobset.suspended and (
            jobset.suspended_by_operator or _suspended_by_older_operator(job, previous)):
        return [PatchJobSetSuspend(namespace, jobset.name, False)]
    return []


def workload_suspend_actions(job: ElasticTrainingJob,
                             workload: ObservedWorkload) -> list[Action]:
    """spec.suspend through the Workload: deactivate it, or reactivate one the operator
    deactivated (never one an administrator did)."""
    namespace = job.metadata.namespace or ""
    if job.spec.suspend and workload.active:
        return [SetWorkloadActive(namespace, workload.name, active=False)]
    if not job.spec.suspend and not workload.active and workload.suspended_by_operator:
        if workload.suspended_after_worker_lost is not None and not redispatch_allowed(job):
            return []  # suspended until the user allows it (core/dispatch.py)
        return [SetWorkloadActive(namespace, workload.name, active=True)]
    return []


def suspend_after_loss_actions(job: ElasticTrainingJob, workload: ObservedWorkload,
                               previous: ElasticTrainingJobStatus) -> list[Action]:
    """A MultiKueue job whose worker cluster was lost, and may not run elsewhere: its
    Workload deactivated (marked as suspended after the loss, naming the cluster) while
    Kueue has not readmitted it. Planned before the quota release
    (release_after_eviction), in the same plan: Kueue requeues a Workload once its quota
    is free, and an inactive one it never readmits."""
    if redispatch_allowed(job) or job.spec.suspend or not workload.active \
            or not evicted_for_lost_worker(workload):
        return []
    cluster = previous.admission.worker_cluster if previous.admission is not None else None
    return [SetWorkloadActive(job.metadata.namespace or "", workload.name, active=False,
                              suspended_after_worker_lost=cluster or "")]


def plan_dispatch(job: ElasticTrainingJob, rendered: list[dict[str, Any]],
                  workload: ObservedWorkload | None,
                  previous: ElasticTrainingJobStatus, now: datetime) -> Plan:
    """A MultiKueue job on the manager cluster: create its Workload (rendered: the
    Workload alone, render.render_workload), apply spec.suspend to it, and tell Kueue its
    pods are Ready when the worker's status says so (core/dispatch.py). A Workload that
    existed (the status names it) and is gone is not recreated: that would run the job
    again, from the start of its queue. A Workload taken back because its worker cluster
    was lost is suspended (deactivated) unless spec.multiCluster.redispatch allows running it
    elsewhere, and reactivated once it does."""
    if workload is not None:
        # The suspension first: the release frees the quota Kueue would readmit it with.
        actions = workload_suspend_actions(job, workload) or \
            suspend_after_loss_actions(job, workload, previous)
        release = release_after_eviction(workload, now)
        if release is not None:
            actions.append(ReleaseEvictedWorkload(job.metadata.namespace or "", workload.name,
                                                  tuple(release)))
        condition = pods_ready_condition(workload, previous, now)
        if condition is not None:
            actions.append(SetWorkloadCondition(job.metadata.namespace or "", workload.name,
                                                condition))
        actions += dispatched_to_actions(job, workload, previous)
        return Plan(actions=tuple(actions))
    if is_terminal(previous):
        return Plan(why_not="the job is finished; its Workload is not recreated")
    recorded = previous.admission.workload if previous.admission is not None else None
    if recorded or previous.jobset_name:
        return Plan(why_not=f"Workload {recorded or '?'} existed and is gone; not recreated "
                    "(the job would run again)")
    return Plan(actions=tuple(CreateObject(obj) for obj in owned(job, rendered)))


def dispatched_to_actions(job: ElasticTrainingJob, workload: ObservedWorkload,
                          previous: ElasticTrainingJobStatus) -> list[Action]:
    """Keep the job's DISPATCHED_TO_ANNOTATION equal to where it runs: its Workload's
    status.clusterName while admitted (and, once finished, where it ran); removed when the
    Workload is taken back, so that a copy MultiKueue makes for another cluster does not
    carry the old name."""
    if is_terminal(previous) and workload.cluster_name is None:
        return []  # finished: where it ran stays said
    wanted = workload.cluster_name if workload.is_true(WORKLOAD_ADMITTED) or \
        is_terminal(previous) else None
    if job.metadata.annotations.get(DISPATCHED_TO_ANNOTATION) == wanted:
        return []
    return [AnnotateDispatchedTo(job.metadata.namespace or "", job.metadata.name, wanted)]


def _suspended_by_older_operator(job: ElasticTrainingJob,
                                 previous: ElasticTrainingJobStatus) -> bool:
    """An operator from before the mark suspended this JobSet: the status says the job
    was suspended, and it is not queued."""
    was_suspended = any(c.type == ConditionType.SUSPENDED and c.status == "True"
                        for c in previous.conditions)
    return was_suspended and previous.admission is None and \
        not job.metadata.labels.get(KUEUE_QUEUE_NAME_LABEL)
