"""A job MultiKueue dispatches (spec.managedBy), as the manager cluster's operator sees it.

There the job never runs: the operator makes its Kueue Workload (core/plan.py
`plan_dispatch`), Kueue reserves quota on the manager, MultiKueue copies the Workload to
the worker clusters, and the first that admits it gets a copy of the job (without
managedBy), which that cluster's operator runs as any job. MultiKueue's generic adapter
then copies the copy's whole `.status` back onto this job. So this status is written
here only until MultiKueue has chosen a cluster (the Workload's status.clusterName):
where the job waits, in the words of the Admitted condition. From then on it is the
worker's, and a write here would be overwritten at the next copy, or overwrite it. Pure.
"""
from __future__ import annotations

from datetime import datetime

from elastic_api.conditions import ConditionType, Phase
from elastic_api.models import ElasticTrainingJob, ElasticTrainingJobStatus
from elastic_operator.core.admission import decide_admission
from elastic_operator.core.conditions import ConditionSetter
from elastic_operator.core.events import StatusEvent
from elastic_operator.core.failure import is_terminal
from elastic_operator.observed import ObservedWorkload


def dispatched(workload: ObservedWorkload | None, previous: ElasticTrainingJobStatus) -> bool:
    """MultiKueue has sent the job to a worker cluster: its Workload names one, or the
    status is already a worker's (only an operator running the job names a JobSet)."""
    return (workload is not None and workload.cluster_name is not None) \
        or previous.job_set_name is not None or is_terminal(previous)


def dispatch_status(job: ElasticTrainingJob, workload: ObservedWorkload | None,
                    previous: ElasticTrainingJobStatus, now: datetime,
                    ) -> tuple[ElasticTrainingJobStatus | None, list[StatusEvent]]:
    """The status of a MultiKueue job that waits on the manager, and its Events; None
    once it is dispatched (the worker's status is copied here: never overwritten) or
    while it has no Workload yet (the reconcile that creates one writes it)."""
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

