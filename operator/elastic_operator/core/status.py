"""compute_status: the operator's part of a job's status, from what one reconcile observed.

It assembles the other core modules: the outcome (failure.py) freezes slice tracking,
and so does a queue (Kueue) that holds the job (admission.py); slice health (slices.py)
feeds recovery accounting (recovery.py); each condition is decided by its own function
(conditions.py, failure.py, admission.py) and Ready and the phase summarize them
(ready.py). Pure: `now` is passed in.
"""
from __future__ import annotations

from datetime import datetime

from elastic_api.catalog import slice_shape
from elastic_api.conditions import ConditionType, Reason
from elastic_api.models import (
    CheckpointRequest,
    Condition,
    Counters,
    ElasticTrainingJob,
    ElasticTrainingJobStatus,
    PoolStatus,
    SliceStatus,
    TrainerProcess,
    TrainingReport,
)
from elastic_api.queueing import caused_by_eviction
from elastic_operator.core.admission import Admission, decide_admission
from elastic_operator.core.checkpoint import checkpoint_status
from elastic_operator.core.conditions import (
    ConditionSetter,
    degraded_condition,
    recovering_condition,
    set_condition,
    slice_down_condition,
    spares_condition,
    spec_applied_condition,
    suspended_condition,
    training_report_condition,
)
from elastic_operator.core.events import StatusEvent
from elastic_operator.core.failure import (
    Outcome,
    decide_outcome,
    failed_condition,
    failure_events,
    succeeded_condition,
)
from elastic_operator.core.goodput import compute_goodput
from elastic_operator.core.maintenance import (
    checkpoint_request,
    maintenance_condition,
    slice_maintenance,
)
from elastic_operator.core.pools import pools_in_use, spare_pools
from elastic_operator.core.ready import JobSummary, readiness
from elastic_operator.core.recovery import track_recovery, trainer_process, trainer_restarted_event
from elastic_operator.core.replacement import track_replacements
from elastic_operator.core.slices import SliceChange, compute_slices, slice_events
from elastic_operator.observed import Observed, parse_time


def compute_status(
    job: ElasticTrainingJob,
    observed: Observed,
    previous: ElasticTrainingJobStatus | None,
    now: datetime,
    *,
    report_problem: str | None = None,
) -> tuple[ElasticTrainingJobStatus, list[StatusEvent]]:
    """The operator's part of the status (status.training is carried over untouched),
    and the Events the change implies."""
    prev = previous or ElasticTrainingJobStatus()
    spec = job.spec
    report = prev.training
    jobset = observed.jobset
    setter = ConditionSetter(prev.conditions, now, job.metadata.generation)

    # Terminal states first: they freeze slice tracking; so does a queue holding the job.
    outcome = decide_outcome(spec, observed, prev)
    admission = decide_admission(setter, job, jobset, observed.workload, prev,
                                 outcome.terminal)
    events = failure_events(outcome) + admission.events
    slices, changes = _slices(job, observed, prev, now, outcome, admission)
    events += slice_events(changes)
    slices, pools, request, replacement_events = _replacements(
        job, observed, prev, slices, changes, now, outcome.terminal)
    events += replacement_events
    spares = spare_pools(observed.pools, pools_in_use(slices)) if observed.pools else None
    record, recovery_events = track_recovery(
        prev, report, changes, now, frozenset(s.index for s in slices if s.state != "Ready"))
    events += recovery_events
    recovering = record is not None and record.resumed_at is None and not outcome.terminal
    process, replaced = trainer_process(prev.trainer_process, report)
    if replaced is not None and _stopped_by_queue(replaced, admission):
        replaced = None  # Kueue stopped it (preempted, suspended): no restart to warn of
    if replaced is not None and process is not None:
        events.append(trainer_restarted_event(process, replaced, prev.counters.elastic_events))

    job_set_name = jobset.name if jobset is not None else prev.job_set_name
    degraded = degraded_condition(setter, report, spec.tpu.num_slices, outcome.terminal)
    conditions = [
        slice_down_condition(setter, slices, outcome.terminal),
        recovering_condition(setter, record, recovering, report, outcome.terminal,
                             outcome.failure_message),
        degraded,
        suspended_condition(setter, spec.suspend, jobset),
        succeeded_condition(setter, outcome, job_set_name),
        failed_condition(setter, outcome),
        spec_applied_condition(setter, job, jobset, prev.job_set_name, outcome.terminal),
        training_report_condition(setter, report, report_problem),
        spares_condition(setter, spares, spec.tpu.spares),
        maintenance_condition(setter, slices, outcome.terminal),
    ]
    if admission.condition is not None:
        conditions.append(admission.condition)
    summary = _summary(job, observed, slices, outcome, recovering, degraded, report,
                       admission)
    ready = readiness(summary)
    conditions.insert(0, setter.set(ConditionType.READY, ready.status, ready.reason,
                                    ready.message))
    new_status = ElasticTrainingJobStatus(
        observed_generation=job.metadata.generation,
        phase=ready.phase,
        job_set_name=job_set_name,
        slices_desired=spec.tpu.num_slices,
        slices_ready=summary.ready_slices,
        slices=slices,
        conditions=conditions,
        counters=_counters(prev, changes, report, observed, replaced, admission),
        admission=admission.status,
        last_recovery=record,
        checkpoint=checkpoint_status(prev.checkpoint, observed.checkpoint),
        trainer_process=process,
        pools=pools,
        spare_pools=len(spares) if spares is not None else None,
        checkpoint_request=request,
        goodput=prev.goodput if outcome.terminal and prev.goodput else compute_goodput(
            prev.goodput, created_at(job) or now, report, slices, changes, now),
        training=prev.training,
    )
    return new_status, events


def _replacements(
    job: ElasticTrainingJob, observed: Observed, prev: ElasticTrainingJobStatus,
    slices: list[SliceStatus], changes: list[SliceChange], now: datetime, terminal: bool,
) -> tuple[list[SliceStatus], list[PoolStatus], CheckpointRequest | None, list[StatusEvent]]:
    """The operator's records of what it does about failed slices and maintenance
    (core/replacement.py, core/maintenance.py); frozen once the job is terminal."""
    if terminal:
        return slices, list(prev.pools), prev.checkpoint_request, []
    spec = job.spec
    tracked = track_replacements(spec, slices, changes, observed, prev.pools, now)
    slices, events = tracked.slices, tracked.events
    if observed.jobset is None or observed.jobset.suspended:
        return slices, tracked.pools, prev.checkpoint_request, events
    slices, notices = slice_maintenance(spec, slices, observed, now)
    request, slices, request_events = checkpoint_request(
        spec, slices, prev.checkpoint_request, prev.training, observed, now)
    return slices, tracked.pools, request, events + notices + request_events


def created_at(job: ElasticTrainingJob) -> datetime | None:
    """metadata.creationTimestamp (kept by ObjectMeta as an extra field)."""
    extra = job.metadata.model_extra or {}
    return parse_time(extra.get("creationTimestamp"))


def _slices(job: ElasticTrainingJob, observed: Observed, prev: ElasticTrainingJobStatus,
            now: datetime, outcome: Outcome,
            admission: Admission) -> tuple[list[SliceStatus], list[SliceChange]]:
    """Slice states; frozen once the job is terminal, Pending while suspended, while a
    queue holds the job or before the JobSet exists. (Kueue evicts the Workload before it
    suspends the JobSet, whose pods then go: pods seen going come with a Workload that
    says why, as the reconciler reads it after them.)"""
    if outcome.terminal:
        return list(prev.slices), []
    jobset = observed.jobset
    frozen = None
    if jobset is None:
        frozen = Reason.JOBSET_NOT_CREATED
    elif job.spec.suspend:
        frozen = Reason.SUSPENDED
    elif admission.holds:
        frozen = admission.reason
    elif jobset.suspended:
        frozen = Reason.SUSPENDED
    hosts_per_slice = (jobset.worker_hosts_per_slice if jobset and jobset.worker_hosts_per_slice
                       else catalog_hosts(job))
    return compute_slices(job.spec.tpu.num_slices, hosts_per_slice, observed, prev.slices, now,
                          frozen_reason=frozen)


def _stopped_by_queue(replaced: TrainerProcess, admission: Admission) -> bool:
    """The replaced trainer ran when Kueue last took the job back (the tie-break on the
    second is elastic_api.queueing's, the trainer's too)."""
    return replaced.started_at is not None and caused_by_eviction(
        admission.evicted_since, running_since=replaced.started_at)


def _summary(job: ElasticTrainingJob, observed: Observed, slices: list[SliceStatus],
             outcome: Outcome, recovering: bool, degraded: Condition,
             report: TrainingReport | None, admission: Admission) -> JobSummary:
    return JobSummary(
        num_slices=job.spec.tpu.num_slices,
        ready_slices=sum(1 for s in slices if s.state == "Ready"),
        failure_message=outcome.failure.message if outcome.failure is not None else None,
        succeeded=outcome.succeeded,
        suspended=job.spec.suspend,
        jobset_exists=observed.jobset is not None,
        down_slices=tuple(s.index for s in slices if s.state == "Down"),
        recovering=recovering,
        restarting=any(s.state == "Restarting" for s in slices),
        degraded=degraded.status == "True",
        active_slices=report.active_slices if report is not None else None,
        held_by_queue=(admission.reason, admission.message) if admission.holds else None,
    )


def _counters(prev: ElasticTrainingJobStatus, changes: list[SliceChange],
              report: TrainingReport | None, observed: Observed,
              replaced: TrainerProcess | None, admission: Admission) -> Counters:
    """Counters never go backwards (max with what the cluster and the trainer show)."""
    jobset = observed.jobset
    return Counters(
        slice_failures=prev.counters.slice_failures + sum(1 for c in changes if c.failed),
        elastic_events=max(
            prev.counters.elastic_events,
            report.elastic_events_total if report else 0,
            report.elastic_event.id if report and report.elastic_event else 0,
        ),
        job_set_restarts=max(prev.counters.job_set_restarts, jobset.restarts if jobset else 0),
        trainer_restarts=prev.counters.trainer_restarts + (replaced is not None),
        preemptions=prev.counters.preemptions + admission.preemptions,
    )


def catalog_hosts(job: ElasticTrainingJob) -> int:
    """Hosts per slice from the TPU catalog (before the JobSet says it)."""
    try:
        return slice_shape(job.spec.tpu.type, job.spec.tpu.topology).vms
    except ValueError:
        return 1


def invalid_spec_status(
    previous: ElasticTrainingJobStatus, message: str, now: datetime, generation: int | None,
) -> ElasticTrainingJobStatus:
    """The status of a job whose spec cannot be rendered (admission should prevent it)."""
    kept = [c for c in previous.conditions
            if c.type not in (ConditionType.READY, ConditionType.SPEC_APPLIED)]
    conds = [
        set_condition(previous.conditions, ConditionType.READY, "False", Reason.INVALID_SPEC,
                      message, now, generation),
        *kept,
        set_condition(previous.conditions, ConditionType.SPEC_APPLIED, "False",
                      Reason.INVALID_SPEC,
                      f"{message}. Fix the spec (kubectl edit) or re-create the job.", now,
                      generation),
    ]
    return previous.model_copy(update={"conditions": conds, "observed_generation": generation,
                                       "phase": previous.phase or "Pending"})
