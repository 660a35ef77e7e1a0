"""A job MultiKueue dispatches (spec.managedBy), as the manager cluster's operator sees it.

There the job never runs: the operator makes its Kueue Workload (core/plan.py
`plan_dispatch`), Kueue reserves quota on the manager, MultiKueue copies the Workload to
the worker clusters, and the first that admits it gets a copy of the job (without
managedBy), which that cluster's operator runs as any job. MultiKueue's generic adapter
then copies the copy's whole `.status` back onto this job. So this status is written
here only until MultiKueue has chosen a cluster (the Workload's status.clusterName):
where the job waits, in the words of the Admitted condition. From then on it is the
worker's, and a write here would be overwritten at the next copy, or overwrite it; but
for one case: while that worker cluster cannot be reached, nothing is copied, and the
manager says so (WorkerClusterReachable False, Ready Unknown), until the worker's next
copy replaces it.

When it stays unreachable past MultiKueue's workerLostTimeout, Kueue takes the job back
(the Workload evicted, reason AdmissionCheck) and would dispatch it again. That cluster
may still be running it (a partition, not a loss), and two copies would write the same
checkpoint directory: so unless spec.multiCluster.redispatch is OnWorkerLost, the
operator suspends it (core/plan.py `suspend_after_loss_actions`: the Workload deactivated
before its quota is released) and says so (`suspended_after_loss_status`, phase Suspended,
reason RedispatchNotAllowed); setting OnWorkerLost resumes it. Pure.
"""
from __future__ import annotations

from datetime import datetime

from elastic_api.conditions import ConditionType, Phase, Reason
from elastic_api.models import AdmissionStatus, ElasticTrainingJob, ElasticTrainingJobStatus
from elastic_api.queueing import ADMITTED, WORKLOAD_ADMITTED
from elastic_operator.core.admission import decide_admission
from elastic_operator.core.failure import is_terminal
from elastic_operator.core.redispatch import redispatch_allowed, suspended_after_loss
from elastic_operator.core.setter import ConditionSetter, get_condition
from elastic_operator.core.status_events import StatusEvent
from elastic_operator.core.wording import iso
from elastic_operator.model.objects import ObservedWorkerCluster, ObservedWorkload


def dispatched(workload: ObservedWorkload | None, previous: ElasticTrainingJobStatus) -> bool:
    """MultiKueue runs the job in a worker cluster: its Workload is admitted (a worker
    admitted MultiKueue's copy, which got a copy of the job), or the job finished there.
    A Workload taken back (preempted, deactivated for spec.suspend, its worker lost for
    good) is not: its copy is deleted, and the status says again where the job waits."""
    return is_terminal(previous) or (
        workload is not None and workload.is_true(WORKLOAD_ADMITTED))


def dispatch_status(job: ElasticTrainingJob, workload: ObservedWorkload | None,
                    previous: ElasticTrainingJobStatus, now: datetime,
                    ) -> tuple[ElasticTrainingJobStatus | None, list[StatusEvent]]:
    """The status of a MultiKueue job that waits on the manager (again, after its copy
    was taken back), and its Events; None while it is dispatched (the worker's status is
    copied here: never overwritten) or has no Workload (the reconcile that creates one
    writes it)."""
    if workload is None or dispatched(workload, previous):
        return None, []
    if suspended_after_loss(workload):
        return suspended_after_loss_status(job, workload, previous, now)
    setter = ConditionSetter(previous.conditions, now, job.metadata.generation)
    admission = decide_admission(setter, job, None, workload, previous, terminal=False)
    assert admission.condition is not None  # a Workload: queued
    ready = setter.false(ConditionType.READY, admission.reason,
                         f"not dispatched to a worker cluster yet: {admission.message}")
    phase = Phase.SUSPENDED if job.spec.suspend else Phase.QUEUED
    status = previous.model_copy(update={
        "observed_generation": job.metadata.generation, "phase": phase,
        "slices_desired": job.spec.tpu.num_slices, "slices_ready": 0,
        "conditions": [ready, admission.condition], "admission": admission.status,
    })
    return status, admission.events



# What MultiKueue's condition message may add to ours (it can be a long client error).
MAX_CLUSTER_MESSAGE = 300


def worker_lost_status(job: ElasticTrainingJob, workload: ObservedWorkload | None,
                       cluster: ObservedWorkerCluster | None,
                       previous: ElasticTrainingJobStatus, now: datetime,
                       ) -> tuple[ElasticTrainingJobStatus | None, list[StatusEvent]]:
    """The status (the worker's last copy, with WorkerClusterReachable False and Ready
    Unknown) while the worker cluster the job runs in cannot be reached, and a Warning
    Event; None while it can (the copy stands), or when this is said already."""
    if workload is None or workload.cluster_name is None or cluster is None \
            or cluster.active or is_terminal(previous):
        return None, []
    said = get_condition(previous, ConditionType.WORKER_CLUSTER_REACHABLE)
    if said is not None and (said.status, said.reason) == ("False", Reason.WORKER_CLUSTER_LOST):
        return None, []
    name = workload.cluster_name
    since = f" since {iso(cluster.since)}" if cluster.since is not None else ""
    why = f"{cluster.reason}: {cluster.message}"[:MAX_CLUSTER_MESSAGE].rstrip(". ")
    then = ("MultiKueue dispatches the job again, and it resumes from its newest committed "
            "checkpoint (spec.multiCluster.redispatch OnWorkerLost)"
            if redispatch_allowed(job) else
            "Kueue takes the job back and the operator keeps it from running elsewhere "
            "(spec.multiCluster.redispatch Never)")
    message = (f"worker cluster {name} cannot be reached{since} (MultiKueueCluster {name} "
               f"not Active, {why}); the rest of this status is the last it sent. If it "
               f"stays unreachable for MultiKueue's workerLostTimeout, {then}")
    setter = ConditionSetter(previous.conditions, now, job.metadata.generation)
    ready = setter.unknown(ConditionType.READY, Reason.WORKER_CLUSTER_LOST,
                           f"worker cluster {name} cannot be reached{since}")
    kept = [c for c in previous.conditions
            if c.type not in (ConditionType.READY, ConditionType.WORKER_CLUSTER_REACHABLE)]
    reachable = setter.false(ConditionType.WORKER_CLUSTER_REACHABLE,
                             Reason.WORKER_CLUSTER_LOST, message)
    # The cluster's name, for the suspension after it is lost (Kueue forgets it at the
    # eviction).
    admission = (previous.admission or AdmissionStatus()).model_copy(
        update={"worker_cluster": name})
    status = previous.model_copy(update={"conditions": [ready, *kept, reachable],
                                         "admission": admission})
    return status, [StatusEvent(reason=Reason.WORKER_CLUSTER_LOST, type="Warning",
                                message=message)]


def suspended_after_loss_status(job: ElasticTrainingJob, workload: ObservedWorkload,
                                previous: ElasticTrainingJobStatus, now: datetime,
                                ) -> tuple[ElasticTrainingJobStatus, list[StatusEvent]]:
    """The status of a job suspended after its worker cluster was lost: phase Suspended,
    Ready and Admitted False (RedispatchNotAllowed, naming the cluster and the field),
    WorkerClusterReachable False; the rest (checkpoint, counters, training) the worker's
    last. A Warning Event when the suspension begins."""
    cluster = workload.suspended_after_worker_lost or None
    name = f"worker cluster {cluster}" if cluster else "its worker cluster"
    why = (f"{name} was lost (unreachable for MultiKueue's workerLostTimeout) and Kueue "
           "took the job back; it is not dispatched again since "
           "spec.multiCluster.redispatch is Never: the lost cluster may still be running "
           "it, and two copies would write the same checkpoint directory")
    message = (f"{why}. Its Workload {workload.name} is deactivated; nothing else was "
               "touched. To run it in a cluster with quota, from its newest committed "
               "checkpoint, set spec.multiCluster.redispatch to OnWorkerLost")
    setter = ConditionSetter(previous.conditions, now, job.metadata.generation)
    admission = decide_admission(setter, job, None, workload, previous, terminal=False)
    said = get_condition(previous, ADMITTED)
    admitted = setter.false(ADMITTED, Reason.REDISPATCH_NOT_ALLOWED, message)
    ready = setter.false(ConditionType.READY, Reason.REDISPATCH_NOT_ALLOWED, why)
    reachable = setter.false(ConditionType.WORKER_CLUSTER_REACHABLE,
                             Reason.WORKER_CLUSTER_LOST, f"{name} was lost")
    status = previous.model_copy(update={
        "observed_generation": job.metadata.generation, "phase": Phase.SUSPENDED,
        "slices_desired": job.spec.tpu.num_slices, "slices_ready": 0,
        "conditions": [ready, admitted, reachable],
        "admission": (admission.status or AdmissionStatus()).model_copy(
            update={"worker_cluster": cluster}),
    })
    if said is not None and said.reason == Reason.REDISPATCH_NOT_ALLOWED:
        return status, []
    return status, [StatusEvent(reason=Reason.REDISPATCH_NOT_ALLOWED, type="Warning",
                                message=message)]
