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
copy replaces it. Pure.
"""
from __future__ import annotations

from datetime import datetime

from elastic_api.conditions import ConditionType, Phase, Reason
from elastic_api.models import ElasticTrainingJob, ElasticTrainingJobStatus
from elastic_api.queueing import WORKLOAD_ADMITTED
from elastic_operator.core.admission import decide_admission
from elastic_operator.core.conditions import ConditionSetter, get_condition
from elastic_operator.core.events import StatusEvent
from elastic_operator.core.failure import is_terminal
from elastic_operator.core.text import iso
from elastic_operator.observed import ObservedWorkerCluster, ObservedWorkload


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
    message = (f"worker cluster {name} cannot be reached{since} (MultiKueueCluster {name} "
               f"not Active, {why}); the rest of this status is the last it sent. If it "
               "stays unreachable for MultiKueue's workerLostTimeout, MultiKueue dispatches "
               "the job again, and it resumes from its newest committed checkpoint")
    setter = ConditionSetter(previous.conditions, now, job.metadata.generation)
    ready = setter.unknown(ConditionType.READY, Reason.WORKER_CLUSTER_LOST,
                           f"worker cluster {name} cannot be reached{since}")
    kept = [c for c in previous.conditions
            if c.type not in (ConditionType.READY, ConditionType.WORKER_CLUSTER_REACHABLE)]
    reachable = setter.false(ConditionType.WORKER_CLUSTER_REACHABLE,
                             Reason.WORKER_CLUSTER_LOST, message)
    status = previous.model_copy(update={"conditions": [ready, *kept, reachable]})
    return status, [StatusEvent(reason=Reason.WORKER_CLUSTER_LOST, type="Warning",
                                message=message)]
