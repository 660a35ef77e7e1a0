"""compute_status: the operator's part of a job's status, from what one reconcile observed.

A pipeline of stages over one context (`StatusInputs`, built once), each returning a
typed result that the later stages read:

1. `decide_gates`: whether the job finished (failure.py) and whether a queue (Kueue)
   queues it (admission.py); either freezes slice tracking;
2. `track_slices`: the slices the trainer blames (hung.py), slice health (slices.py),
   then the operator's replacement records (replacement.py), maintenance notices and
   the checkpoint request (maintenance.py);
3. `track_trainer`: the recovery record (recovery.py; for a trainer that reports no
   elastic events, closed from the slices and the head's `main`: unreported.py) and the
   reporting trainer process;
3b. `track_steps`: whether training advances (progressing.py: Progressing, slow steps, the
   trainer restart a stall calls for), held by whatever the stages before explain;
4. `decide_conditions`: one function per condition (condition_rules.py, failure.py,
   admission.py, checkpoint_status.py, restore_at_risk.py), and Ready and the phase summarizing them
   (ready.py);
5. the status assembled from the results, and the Events, in stage order.

Every stage reads a slice's pods through its view (sliceview.py, `StatusInputs.views`),
derived once for all of them. Pure: `now` is passed in.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import NamedTuple

from elastic_api.catalog import slice_shape
from elastic_api.conditions import ConditionType, Phase, Reason
from elastic_api.forward import Forwarded
from elastic_api.models import (
    AdmissionStatus,
    CheckpointRequest,
    CheckpointStatus,
    Condition,
    Counters,
    ElasticTrainingJob,
    ElasticTrainingJobSpec,
    ElasticTrainingJobStatus,
    PoolStatus,
    RecoveryRecord,
    SliceStatus,
    TrainerProcess,
    TrainingReport,
)
from elastic_api.queueing import EVICTION_PENDING, REASON_NO_WORKLOAD, caused_by_eviction
from elastic_api.stragglers import slow_slices
from elastic_operator.core.admission import Admission, decide_admission
from elastic_operator.core.budget_tracking import (
    Spending,
    head_restarts,
    jobset_restarted_at,
    recent_stall_restarts,
    track_budgets,
)
from elastic_operator.core.checkpoint_status import (
    checkpoint_status,
    root_allowed_condition,
    root_refused_events,
)
from elastic_operator.core.condition_rules import (
    degraded_condition,
    recovering_condition,
    slice_down_condition,
    slow_steps_events,
    spares_condition,
    spec_applied_condition,
    suspended_condition,
    training_report_condition,
)
from elastic_operator.core.eviction import EvictionClock, PodsReadyTimeouts, eviction_clock
from elastic_operator.core.failure import (
    Outcome,
    decide_outcome,
    failed_condition,
    failure_events,
    succeeded_condition,
)
from elastic_operator.core.goodput_status import compute_goodput
from elastic_operator.core.hung import Requested, reported_evidence, requested_down
from elastic_operator.core.image_drift import image_drift_condition, image_drift_events
from elastic_operator.core.maintenance import (
    OPEN_PHASES,
    checkpoint_request,
    maintenance_condition,
    slice_maintenance,
)
from elastic_operator.core.pools import (
    DEFAULT_QUARANTINE,
    QuarantinePolicy,
    pools_in_use,
    spare_pools,
)
from elastic_operator.core.progressing import (
    ProgressSignals,
    ProgressUpdate,
    track_progress,
)
from elastic_operator.core.ready import JobSummary, Readiness, readiness
from elastic_operator.core.recovery import track_recovery, trainer_process, trainer_restarted_event
from elastic_operator.core.refused_jobs import jobs_created_condition, jobs_created_events
from elastic_operator.core.replacement import track_replacements
from elastic_operator.core.reported import forwarded, held_message
from elastic_operator.core.restore_at_risk import restore_risk_condition, restore_risk_events
from elastic_operator.core.server_features import in_place_condition, in_place_events
from elastic_operator.core.setter import ConditionSetter, get_condition, set_condition
from elastic_operator.core.slices import SliceChange, SliceHealth, compute_slices, slice_events
from elastic_operator.core.sliceview import SliceViews, slice_views
from elastic_operator.core.status_events import StatusEvent
from elastic_operator.core.topology import (
    slice_domains,
    spares_placed_by_kueue,
    topology_condition,
)
from elastic_operator.core.unreported import (
    TrainerSignals,
    head_main,
    newest_head,
    reports_recovery,
)
from elastic_operator.core.wording import fmt_slices
from elastic_operator.model.objects import Observed, ObservedJobSet, parse_time


@dataclass(frozen=True)
class StatusInputs:
    """What one status computation reads, built once; every stage takes it."""

    job: ElasticTrainingJob
    observed: Observed
    previous: ElasticTrainingJobStatus  # as stored (an empty one for a new job)
    now: datetime
    setter: ConditionSetter  # the previous conditions, now, the job's generation
    report_problem: str | None = None  # why (part of) status.training was ignored
    pods_ready: PodsReadyTimeouts = field(default_factory=PodsReadyTimeouts)  # Kueue's
    quarantine: QuarantinePolicy = DEFAULT_QUARANTINE  # the administrator's

    @classmethod
    def of(cls, job: ElasticTrainingJob, observed: Observed,
           previous: ElasticTrainingJobStatus | None, now: datetime,
           report_problem: str | None = None,
           pods_ready: PodsReadyTimeouts | None = None,
           quarantine: QuarantinePolicy = DEFAULT_QUARANTINE) -> StatusInputs:
        prev = previous or ElasticTrainingJobStatus()
        return cls(job, observed, prev, now,
                   ConditionSetter(prev.conditions, now, job.metadata.generation),
                   report_problem, pods_ready or PodsReadyTimeouts(), quarantine)

    @property
    def spec(self) -> ElasticTrainingJobSpec:
        return self.job.spec

    @cached_property
    def forwarded(self) -> Forwarded | None:
        return forwarded(self.previous)

    @property
    def report(self) -> TrainingReport | None:
        """The trainer's report (status.training), each figure that went back without a
        restore or reset it names held at what this status recorded (core/reported.py)."""
        return self.forwarded.report if self.forwarded is not None else None

    @property
    def report_trouble(self) -> str | None:
        """Why (part of) the report was ignored, or which figures were held."""
        return self.report_problem or held_message(self.previous, self.forwarded)

    @property
    def jobset(self) -> ObservedJobSet | None:
        return self.observed.jobset

    @property
    def checkpoint(self) -> CheckpointStatus | None:
        """status.checkpoint as this reconcile writes it (after the newest scan)."""
        return checkpoint_status(self.previous.checkpoint, self.observed.checkpoint,
                                 self.report)

    @cached_property
    def views(self) -> SliceViews:
        """Each slice's pods as every stage reads them (core/sliceview.py): derived once."""
        return slice_views(self.observed)


@dataclass(frozen=True)
class Gates:
    """Stage 1: the job finished, or it is queued (either freezes slice tracking)."""

    outcome: Outcome
    admission: Admission

    @property
    def terminal(self) -> bool:
        return self.outcome.terminal

    @property
    def events(self) -> list[StatusEvent]:
        return failure_events(self.outcome) + self.admission.events


@dataclass(frozen=True)
class SliceTracking:
    """Stage 2: the slices (health, replacement records, maintenance), status.pools,
    the checkpoint request, the spare pools, and the Events of all of it."""

    slices: list[SliceStatus]
    changes: list[SliceChange]
    pools: list[PoolStatus]
    checkpoint_request: CheckpointRequest | None
    spares: list[str] | None  # None: no node pool of the job's shape seen
    events: list[StatusEvent] = field(default_factory=list)
    requested: Requested = field(default_factory=Requested)  # the trainer's blame


@dataclass(frozen=True)
class TrainerTracking:
    """Stage 3: the recovery record and the trainer process."""

    record: RecoveryRecord | None
    recovering: bool
    process: TrainerProcess | None
    replaced: TrainerProcess | None  # a trainer restart to count (Kueue's stops are not)
    events: list[StatusEvent] = field(default_factory=list)
    waiting_for: str | None = None  # what an open recovery the operator may close waits for


@dataclass(frozen=True)
class Decided:
    """Stage 4: the conditions (Ready first) and the summary Ready was decided from."""

    conditions: list[Condition]
    summary: JobSummary
    ready: Readiness
    clock: EvictionClock  # Kueue's waitForPodsReady (EvictionPending)
    slow_events: list[StatusEvent] = field(default_factory=list)
    root_events: list[StatusEvent] = field(default_factory=list)  # CheckpointRootNotAllowed
    image_events: list[StatusEvent] = field(default_factory=list)  # ImageDrift
    server_events: list[StatusEvent] = field(default_factory=list)  # MainRestartsInPlace
    refused_events: list[StatusEvent] = field(default_factory=list)  # JobsCreated

    @property
    def events(self) -> list[StatusEvent]:
        return self.clock.events + self.slow_events + self.root_events + self.image_events \
            + self.server_events + self.refused_events


class StatusResult(NamedTuple):
    """What compute_status returns (a NamedTuple: `status, events = ...` reads it)."""

    status: ElasticTrainingJobStatus
    events: list[StatusEvent]


def compute_status(
    job: ElasticTrainingJob,
    observed: Observed,
    previous: ElasticTrainingJobStatus | None,
    now: datetime,
    *,
    report_problem: str | None = None,
    pods_ready: PodsReadyTimeouts | None = None,
    quarantine: QuarantinePolicy = DEFAULT_QUARANTINE,
) -> StatusResult:
    """The operator's part of the status (status.training is carried over untouched),
    and the Events the change implies. `pods_ready`: Kueue's waitForPodsReady timeouts
    (None: Kueue's defaults); `quarantine`: the administrator's policy on quarantines."""
    ctx = StatusInputs.of(job, observed, previous, now, report_problem, pods_ready,
                          quarantine)
    gates = decide_gates(ctx)
    tracking = track_slices(ctx, gates)
    trainer = track_trainer(ctx, gates, tracking)
    steps = track_steps(ctx, gates, tracking, trainer)
    decided = decide_conditions(ctx, gates, tracking, trainer, steps)
    status = _assemble(ctx, gates, tracking, trainer, decided, steps)
    budgets, spent = track_budgets(ctx.spec, ctx.previous, tracking.slices, Spending(
        ctx.previous.counters.jobset_restarts, status.counters.jobset_restarts,
        steps.restarted, gates.terminal, head_restarts(ctx.observed.head_pods),
        _asked_in_place(ctx.previous)), now)
    status = status.model_copy(update={"budgets": budgets})
    risk = next(c for c in decided.conditions if c.type == ConditionType.RESTORE_AT_RISK)
    warned = [] if gates.terminal else restore_risk_events(ctx.previous.conditions, risk)
    return StatusResult(status, gates.events + tracking.events + trainer.events
                        + steps.events + spent + decided.events + warned)


def decide_gates(ctx: StatusInputs) -> Gates:
    """Terminal states first (they freeze slice tracking); then the queue, which holds a
    job that is not finished."""
    outcome = decide_outcome(ctx.spec, ctx.observed, ctx.previous)
    admission = decide_admission(ctx.setter, ctx.job, ctx.jobset, ctx.observed.workload,
                                 ctx.previous, outcome.terminal)
    return Gates(outcome, admission)


def track_slices(ctx: StatusInputs, gates: Gates) -> SliceTracking:
    """Slice health, then the operator's records of what it does about failed slices and
    maintenance (core/replacement.py, core/maintenance.py); all frozen once the job is
    terminal."""
    prev = ctx.previous
    if gates.terminal:
        slices = list(prev.slices)
        return SliceTracking(slices, [], list(prev.pools), prev.checkpoint_request,
                             _spares(ctx, slices),
                             requested=Requested(handled=prev.handled_slice_replacement))
    requested = requested_down(ctx.spec, ctx.report, prev, ctx.views,
                               frozen=_frozen(ctx, gates.admission),
                               spare_free=bool(_spares(ctx, prev.slices)), now=ctx.now)
    health = _slice_health(ctx, gates.admission, requested)
    events = requested.events + slice_events(health.changes)
    reported = {i: reported_evidence(h.reason, h.message)
                for i, h in requested.down.items() if h.new}
    restarts = ctx.jobset.restarts if ctx.jobset is not None else 0
    tracked = track_replacements(ctx.spec, health.slices, health.changes, ctx.observed,
                                 ctx.views, prev.pools, ctx.now, reported,
                                 jobset_restarted_at(prev, restarts, ctx.now),
                                 ctx.quarantine)
    slices, request = tracked.slices, prev.checkpoint_request
    events += tracked.events
    if ctx.jobset is not None and not ctx.jobset.suspended:
        notices = slice_maintenance(ctx.spec, slices, ctx.views, ctx.now)
        update = checkpoint_request(ctx.spec, notices.slices, prev.checkpoint_request,
                                    ctx.report, ctx.observed, ctx.views, ctx.now)
        slices, request = update.slices, update.request
        events += notices.events + update.events
    slices = slice_domains(ctx.spec, slices, ctx.views)
    return SliceTracking(slices, health.changes, tracked.pools, request,
                         _spares(ctx, slices), events, requested)


def _spares(ctx: StatusInputs, slices: list[SliceStatus]) -> list[str] | None:
    """The healthy spare pools; None: none of the job's shape seen, or Kueue places the
    slices (Topology-Aware Scheduling: no slice moves to a spare)."""
    pools = ctx.observed.pools
    if not pools or ctx.spec.tpu.topology_aware is not None:
        return None
    return spare_pools(pools, pools_in_use(slices))


def _frozen(ctx: StatusInputs, admission: Admission) -> str | None:
    """Why every slice is Pending (no JobSet, suspended, queued), if it is."""
    jobset = ctx.jobset
    if jobset is None:
        return Reason.JOBSET_NOT_CREATED
    if ctx.spec.suspend:
        return Reason.SUSPENDED
    if admission.queued:
        return admission.reason
    if jobset.suspended:
        return Reason.SUSPENDED
    return None


def _slice_health(ctx: StatusInputs, admission: Admission,
                  requested: Requested) -> SliceHealth:
    """Slice states; Pending while suspended, while the job is queued or before the
    JobSet exists. (Kueue evicts the Workload before it suspends the JobSet, whose pods
    then go: pods seen going come with a Workload that says why, as the reconciler reads
    it after them.) The slices the trainer blames are Down (hung.py)."""
    jobset = ctx.jobset
    frozen = _frozen(ctx, admission)
    hosts_per_slice = (jobset.worker_hosts_per_slice if jobset and jobset.worker_hosts_per_slice
                       else catalog_hosts(ctx.job))
    epoch = admission.status.admitted_at if admission.status is not None else None
    health = compute_slices(ctx.spec.tpu.num_slices, hosts_per_slice, ctx.observed,
                            ctx.views, ctx.previous.slices, ctx.now, frozen_reason=frozen,
                            epoch=epoch, held_down=requested.down)
    if admission.queued:  # every pod goes: what a replacement was to do is moot
        health = SliceHealth([s.model_copy(update={"replacement": None})
                              for s in health.slices], health.changes)
    return health


def track_trainer(ctx: StatusInputs, gates: Gates, tracking: SliceTracking) -> TrainerTracking:
    """The recovery record (opened by the slices that went down, closed by the trainer's
    report) and the trainer process now reporting."""
    not_ready = frozenset(s.index for s in tracking.slices if s.state != "Ready")
    signals = TrainerSignals(reports_recovery=reports_recovery(ctx.spec, ctx.previous),
                             main=head_main(ctx.observed.head_pods), checkpoint=ctx.checkpoint)
    recovery = track_recovery(ctx.previous, ctx.report, tracking.changes, ctx.now, not_ready,
                              signals, evicted_since=gates.admission.evicted_since)
    record = recovery.record
    recovering = record is not None and record.open and not gates.terminal
    process = trainer_process(ctx.previous.trainer_process, ctx.report)
    replaced = process.replaced
    if replaced is not None and _stopped_by_queue(replaced, gates.admission):
        replaced = None  # Kueue stopped it (preempted, suspended): no restart to warn of
    events = list(recovery.events)
    if replaced is not None and process.process is not None:
        events.append(trainer_restarted_event(process.process, replaced,
                                              ctx.previous.counters.elastic_events))
    return TrainerTracking(record, recovering, process.process, replaced, events,
                           recovery.waiting_for)


def track_steps(ctx: StatusInputs, gates: Gates, tracking: SliceTracking,
                trainer: TrainerTracking) -> ProgressUpdate:
    """Whether training advances (core/progressing.py), held by what the stages before
    explain: no stall while the job is finished, suspended, queued, short of a Ready
    slice, recovering, or paused for maintenance."""
    report = ctx.report
    active = report.active_slices if report is not None else None
    signals = ProgressSignals(hold=_hold(ctx, gates, tracking, trainer),
                              saving=_saving(ctx), head=newest_head(ctx.observed.head_pods),
                              all_slices_active=active is None
                              or active >= ctx.spec.tpu.num_slices,
                              stall_restarts=ctx.previous.counters.stall_restarts,
                              stall_times=recent_stall_restarts(ctx.previous))
    return track_progress(ctx.setter, ctx.spec, report, ctx.previous.progress, signals,
                          ctx.now)


def _asked_in_place(previous: ElasticTrainingJobStatus) -> tuple[str, int | None] | None:
    """The stall restart in place the operator asked for: (the pod, main's count then)."""
    restart = previous.progress.restart if previous.progress is not None else None
    if restart is None or not restart.in_place:
        return None
    return restart.pod_uid, restart.main_restarts


def _hold(ctx: StatusInputs, gates: Gates, tracking: SliceTracking,
          trainer: TrainerTracking) -> str | None:
    """Why no step is expected now (each has a condition of its own), or None."""
    report, request = ctx.report, tracking.checkpoint_request
    not_ready = [s.index for s in tracking.slices if s.state != "Ready"]
    holds = [
        (gates.terminal, "the job finished"),
        (ctx.jobset is None, "no JobSet yet"),
        (gates.admission.queued, f"Kueue holds the job ({gates.admission.reason})"),
        (ctx.spec.suspend or (ctx.jobset is not None and ctx.jobset.suspended),
         "the job is suspended"),
        (bool(not_ready), f"{fmt_slices(not_ready)} not Ready"),
        (trainer.recovering, "a recovery is in progress"),
        (request is not None and request.pause and request.phase in OPEN_PHASES,
         "the trainer holds for maintenance"),
        (report is not None and report.state in ("Recovering", "Succeeded", "Failed"),
         f"the trainer reports {report.state if report else ''}"),
    ]
    return next((why for held, why in holds if held), None)


def _saving(ctx: StatusInputs) -> bool:
    """A checkpoint save (or restore) in flight: the newest listing shows a step newer
    than the committed one, or the trainer's watchdog says so."""
    stall = ctx.report.stall if ctx.report is not None else None
    if stall is not None and stall.phase in ("Checkpoint", "Restore"):
        return True
    checkpoint = ctx.checkpoint
    if checkpoint is None or not checkpoint.incomplete_steps:
        return False
    return max(checkpoint.incomplete_steps) > (checkpoint.latest_committed_step or -1)


def _stopped_by_queue(replaced: TrainerProcess, admission: Admission) -> bool:
    """The replaced trainer ran when Kueue last took the job back (the tie-break on the
    second is elastic_api.queueing's, the trainer's too)."""
    return replaced.started_at is not None and caused_by_eviction(
        admission.evicted_since, running_since=replaced.started_at)


def decide_conditions(ctx: StatusInputs, gates: Gates, tracking: SliceTracking,
                      trainer: TrainerTracking, steps: ProgressUpdate) -> Decided:
    """Each condition from its own function; Ready (first) and the phase from them."""
    setter, spec, jobset, outcome = ctx.setter, ctx.spec, ctx.jobset, gates.outcome
    terminal, slices = gates.terminal, tracking.slices
    slow = _slow_words(ctx, tracking, steps)
    degraded = degraded_condition(setter, ctx.report, spec.tpu.num_slices, terminal, slow)
    conditions = [
        steps.condition,
        slice_down_condition(setter, slices, terminal),
        recovering_condition(setter, trainer.record, trainer.recovering, ctx.report, terminal,
                             outcome.failure_message, trainer.waiting_for),
        degraded,
        suspended_condition(setter, spec.suspend, jobset),
        succeeded_condition(setter, outcome, _jobset_name(ctx)),
        failed_condition(setter, outcome),
        spec_applied_condition(setter, ctx.job, jobset, ctx.previous.jobset_name, terminal),
        training_report_condition(setter, ctx.report, ctx.report_trouble),
        spares_placed_by_kueue(setter, spec) if spec.tpu.topology_aware is not None
        else spares_condition(setter, tracking.spares, spec.tpu.spares, slices),
        maintenance_condition(setter, slices, terminal),
        restore_risk_condition(setter, spec, ctx.checkpoint),
    ]
    root_allowed = root_allowed_condition(setter, ctx.checkpoint)
    conditions.append(root_allowed)
    placement = topology_condition(setter, spec, ctx.observed, slices, _queued(gates))
    if placement is not None:
        conditions.append(placement)
    if gates.admission.condition is not None:
        conditions.append(gates.admission.condition)
    clock = eviction_clock(setter, ctx.observed.workload, gates.admission.queued,
                           ctx.previous.admission, slices, ctx.pods_ready, terminal,
                           get_condition(ctx.previous, EVICTION_PENDING))
    if clock.condition is not None:
        conditions.append(clock.condition)
    was_drifting = get_condition(ctx.previous, ConditionType.IMAGE_DRIFT)
    drift = image_drift_condition(setter, spec, ctx.observed, was_drifting)
    if drift is not None:
        conditions.append(drift)
    in_place = in_place_condition(setter, spec, ctx.observed.server)
    if in_place is not None:
        conditions.append(in_place)
    was_refused = get_condition(ctx.previous, ConditionType.JOBS_CREATED)
    jobs_created = jobs_created_condition(setter, ctx.observed.refused_jobs, was_refused)
    if jobs_created is not None:
        conditions.append(jobs_created)
    summary = _summary(ctx, gates, slices, trainer.recovering, degraded)
    ready = readiness(summary)
    ready_condition = setter.set(ConditionType.READY, ready.status, ready.reason,
                                 ready.message)
    return Decided([ready_condition, *conditions], summary, ready, clock,
                   slow_steps_events(get_condition(ctx.previous, ConditionType.DEGRADED),
                                     degraded),
                   root_refused_events(ctx.previous, root_allowed),
                   image_drift_events(was_drifting, drift),
                   in_place_events(get_condition(ctx.previous,
                                                 ConditionType.MAIN_RESTARTS_IN_PLACE),
                                   in_place),
                   jobs_created_events(was_refused, jobs_created))


def _slow_words(ctx: StatusInputs, tracking: SliceTracking,
                steps: ProgressUpdate) -> str | None:
    """Slow steps in words, with whom the trainer blames and what is done about it."""
    if steps.slow is None:
        return None
    words = steps.slow.message
    handled = tracking.requested.handled
    report = ctx.report
    request = report.slice_replacement if report is not None else None
    stragglers = slow_slices(report.slice_step_times if report is not None else None)
    if stragglers and report is not None:
        times = {t.slice: t.relative for t in report.slice_step_times or []}
        words += "; " + ", ".join(f"slice {i}'s part takes {times[i]:.1f}x the fastest "
                                  "slice's" for i in stragglers)
    if request is not None and request.reason == Reason.SLICE_SLOW:
        words += f"; the trainer blames {fmt_slices(request.slices)}"
        if handled is not None and handled.id == request.id and handled.message:
            words += f" ({handled.message})"
    return words


def _queued(gates: Gates) -> bool:
    """A Kueue Workload admits the job (or is about to: its JobSet is being made)."""
    return gates.admission.condition is not None and \
        gates.admission.reason != REASON_NO_WORKLOAD


def _jobset_name(ctx: StatusInputs) -> str | None:
    return ctx.jobset.name if ctx.jobset is not None else ctx.previous.jobset_name


def _assemble(ctx: StatusInputs, gates: Gates, tracking: SliceTracking,
              trainer: TrainerTracking, decided: Decided,
              steps: ProgressUpdate) -> ElasticTrainingJobStatus:
    prev, now, slices = ctx.previous, ctx.now, tracking.slices
    return ElasticTrainingJobStatus(
        observed_generation=ctx.job.metadata.generation,
        phase=decided.ready.phase,
        jobset_name=_jobset_name(ctx),
        slices_desired=ctx.spec.tpu.num_slices,
        slices_ready=decided.summary.ready_slices,
        slices=slices,
        conditions=decided.conditions,
        counters=_counters(ctx, gates, tracking, trainer, steps),
        admission=_with_clock(gates.admission.status, decided.clock),
        last_recovery=trainer.record,
        checkpoint=ctx.checkpoint,
        trainer_process=trainer.process,
        pools=tracking.pools,
        spare_pools=len(tracking.spares) if tracking.spares is not None else None,
        checkpoint_request=tracking.checkpoint_request,
        progress=steps.state,
        handled_slice_replacement=tracking.requested.handled,
        goodput=prev.goodput if gates.terminal and prev.goodput else compute_goodput(
            prev.goodput, created_at(ctx.job) or now, ctx.report, slices, tracking.changes,
            now),
        training=prev.training,
    )


def _with_clock(admission: AdmissionStatus | None,
                clock: EvictionClock) -> AdmissionStatus | None:
    """status.admission with Kueue's waitForPodsReady deadline: none without a running
    clock (no Workload seen, a finished job), so nothing wakes a reconcile for it."""
    if admission is None:
        return admission
    return admission.model_copy(update={"pods_ready_deadline": clock.deadline,
                                        "eviction_warned": clock.warned})


def created_at(job: ElasticTrainingJob) -> datetime | None:
    """metadata.creationTimestamp (kept by ObjectMeta as an extra field)."""
    extra = job.metadata.model_extra or {}
    return parse_time(extra.get("creationTimestamp"))


def _summary(ctx: StatusInputs, gates: Gates, slices: list[SliceStatus], recovering: bool,
             degraded: Condition) -> JobSummary:
    outcome, admission, report = gates.outcome, gates.admission, ctx.report
    return JobSummary(
        num_slices=ctx.spec.tpu.num_slices,
        ready_slices=sum(1 for s in slices if s.state == "Ready"),
        failure_message=outcome.failure.message if outcome.failure is not None else None,
        succeeded=outcome.succeeded,
        suspended=ctx.spec.suspend,
        jobset_exists=ctx.jobset is not None,
        down_slices=tuple(s.index for s in slices if s.state == "Down"),
        recovering=recovering,
        restarting=any(s.state == "Restarting" for s in slices),
        degraded=degraded.status == "True",
        active_slices=report.active_slices if report is not None else None,
        queued_because=(admission.reason, admission.message) if admission.queued else None,
    )


def _counters(ctx: StatusInputs, gates: Gates, tracking: SliceTracking,
              trainer: TrainerTracking, steps: ProgressUpdate) -> Counters:
    """Counters never go backwards (max with what the cluster and the trainer show)."""
    prev, report, jobset = ctx.previous.counters, ctx.report, ctx.jobset
    return Counters(
        slice_failures=prev.slice_failures + sum(1 for c in tracking.changes if c.failed),
        elastic_events=max(
            prev.elastic_events,
            report.elastic_events_total if report else 0,
            report.elastic_event.id if report and report.elastic_event else 0,
        ),
        jobset_restarts=max(prev.jobset_restarts, jobset.restarts if jobset else 0),
        trainer_restarts=prev.trainer_restarts + (trainer.replaced is not None),
        stall_restarts=prev.stall_restarts + steps.restarted,
        preemptions=prev.preemptions + gates.admission.preemptions,
        evictions=prev.evictions + gates.admission.evictions,
    )


def catalog_hosts(job: ElasticTrainingJob) -> int:
    """Hosts per slice from the TPU catalog (before the JobSet says it)."""
    try:
        return slice_shape(job.spec.tpu.type, job.spec.tpu.topology).vms
    except ValueError:
        return 1


def name_conflict_status(job: ElasticTrainingJob, jobset: ObservedJobSet,
                         previous: ElasticTrainingJobStatus,
                         now: datetime) -> ElasticTrainingJobStatus:
    """The status of a job whose JobSet's name is taken by another object's JobSet. Most
    often that is the JobSet of a job of the same name deleted a moment ago, not yet
    removed by the garbage collector (MultiKueue recreates its copy in a worker cluster
    at once after taking a job back): nothing of it (its slices, pods, end) is this
    job's, so none of it is read; the job's own JobSet is created once it is gone."""
    gen = job.metadata.generation
    message = (f"JobSet {jobset.name} exists and is owned by another object; this job's "
               "JobSet is created once it is gone (delete it, or rename this job)")
    kept = [c for c in previous.conditions
            if c.type not in (ConditionType.READY, ConditionType.SPEC_APPLIED)]
    conds = [
        set_condition(previous.conditions, ConditionType.READY, "False",
                      Reason.JOBSET_NOT_CREATED, message, now, gen),
        *kept,
        set_condition(previous.conditions, ConditionType.SPEC_APPLIED, "False",
                      Reason.JOBSET_NAME_CONFLICT, message, now, gen),
    ]
    return previous.model_copy(update={"conditions": conds, "observed_generation": gen,
                                       "phase": previous.phase or Phase.PENDING})


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
