"""Whether a MultiKueue job whose worker cluster was lost may run elsewhere
(spec.multiCluster.redispatch), as the manager cluster's operator reads Kueue's Workload:
the rule core/plan.py (`suspend_after_loss_actions`) and core/dispatch.py
(`suspended_after_loss_status`) share. Pure.
"""
from __future__ import annotations

from elastic_api.models import ElasticTrainingJob
from elastic_api.queueing import WORKLOAD_EVICTED
from elastic_operator.model.objects import ObservedWorkload

# Kueue v0.19.2 (pkg/controller/admissionchecks/multikueue/workload.go): the MultiKueue
# check goes to Retry with this message once the cluster the Workload was admitted in has
# been unreachable for workerLostTimeout; Kueue then evicts the Workload, reason
# AdmissionCheck, the check's message in the Evicted condition's. (Its other Retry
# messages are no partition: the worker answered, its copy was evicted or is gone.)
EVICTED_BY_ADMISSION_CHECK = "AdmissionCheck"
WORKER_LOST_MESSAGE = "Admitting remote lost"
REDISPATCH_ON_WORKER_LOST = "OnWorkerLost"


def redispatch_allowed(job: ElasticTrainingJob) -> bool:
    """spec.multiCluster.redispatch lets MultiKueue run the job elsewhere when its
    worker cluster is lost."""
    return job.spec.redispatch == REDISPATCH_ON_WORKER_LOST


def evicted_for_lost_worker(workload: ObservedWorkload) -> bool:
    """Kueue took the Workload back because its worker cluster was lost, and has not
    readmitted it since (Evicted stays True until then)."""
    evicted = workload.condition(WORKLOAD_EVICTED)
    return evicted is not None and evicted.status == "True" \
        and evicted.reason == EVICTED_BY_ADMISSION_CHECK \
        and WORKER_LOST_MESSAGE in evicted.message


def suspended_after_loss(workload: ObservedWorkload | None) -> bool:
    """The operator suspended the job (deactivated its Workload) after its worker
    cluster was lost."""
    return workload is not None and not workload.active \
        and workload.suspended_after_worker_lost is not None
