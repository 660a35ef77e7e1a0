"""Progress: whether training advances, seen by the operator itself (condition
`Progressing`, in Kubernetes' Deployment convention), for any trainer that reports a step
(the bundled trainer, or MaxText through the progress sidecar). Pure.

Three parts, each its own function:

- detect (`observe`): the clock and what is learned, kept in status.progress. The clock
  restarts at each new step the operator sees, at a new trainer process, and when a hold
  ends; a hold (the job suspended, queued, finished, a slice not Ready or a recovery in
  progress, a pause for maintenance, the trainer recovering) stops it: none of those is a
  stall, and each is reported by its own condition. The gaps between step changes teach
  the step time (elastic_api.progress_rules.step_sample: over the steps each spans, never the
  report cadence) unless the gap spans a hold, a process start, the first step after a
  hold (a recompile) or a phase of its own (an evaluation, a save).
- judge (core/stall_rule.py): by the trainer's phase where status.training.activity has
  it (rule Phase: each phase held to its own deadline, so an evaluation or a first
  compile that shows signs of life is no stall, and a thread blocked in one device call
  or a stopped process is one sooner), else by its steps (rule Steps, today's rule).
- blame (`diagnose`): what the stall looks like, in the message: the trainer's watchdog
  names suspect slices (a slow or hung slice: the trainer asks for their replacement,
  core/hung.py), or names none (a hung step); a trainer that reports nothing at all any
  more is frozen; behind the progress sidecar, MaxText is hung.
- act (`restart_for`): with nothing blamed and spec.elastic.onStall Recover, the trainer
  is restarted once per stall: status.progress.restart records the head pod to delete
  (its Job makes a new one: `plan_trainer_restart`), written before the delete. Each
  counts in status.counters.stallRestarts, and against spec.elastic.maxStallRestarts
  (elastic_api.budgets: per window, its times in status.budgets.stallRestarts), as a
  slice's failures against maxSliceRestarts: once spent, a stall is reported only
  (StallRestartsExhausted), so a trainer that stalls again after every restart is not
  restarted forever.

Stragglers (`slow_steps`): steps slower than the job's own best for a sustained window
make Degraded True with reason SlowSteps (condition_rules.py reconciles it with FewerSlices).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from elastic_api import maxtext
from elastic_api import progress_rules as rule
from elastic_api.budgets import budgets_of
from elastic_api.conditions import ConditionType, Reason
from elastic_api.models import (
    Condition,
    ElasticTrainingJobSpec,
    ProgressStatus,
    TrainerRestart,
    TrainingReport,
)
from elastic_api.names import HEAD_REPLICATED_JOB, child_job_name
from elastic_operator.core import stall_text
from elastic_operator.core import trainer_restarts as restarts_in_place
from elastic_operator.core.plan import RestartTrainer
from elastic_operator.core.setter import ConditionSetter
from elastic_operator.core.stall_rule import Verdict, deadline_of, due_in, judge, watched
from elastic_operator.core.status_events import StatusEvent
from elastic_operator.core.wording import duration, fmt_slices, iso
from elastic_operator.model.objects import ObservedPod


@dataclass(frozen=True)
class ProgressSignals:
    """What the other stages tell progress tracking."""

    hold: str | None = None  # why no step is expected now (None: one is)
    saving: bool = False  # a checkpoint save is in flight (the newest listing shows it)
    head: ObservedPod | None = None  # the newest head pod, running and not going
    all_slices_active: bool = True  # the trainer trains on every slice
    stall_restarts: int = 0  # the trainer restarts made for stalls so far (counters)
    stall_times: tuple[datetime, ...] = ()  # when those within the budget's window came


@dataclass(frozen=True)
class Stall:
    """A stall (the deadline passed), and what it looks like."""

    step: int | None
    verdict: Verdict  # the rule that found it: the phase, for how long, the deadline
    diagnosis: str  # in words
    blamed: tuple[int, ...] = ()  # slices the trainer's evidence blames

    @property
    def message(self) -> str:
        at = f"step {self.step}" if self.step is not None else "the last step"
        return (f"{stall_text.stalled(self.verdict)}: training stopped at {at}; "
                f"{self.diagnosis}")


@dataclass(frozen=True)
class Slow:
    factor: float
    recent: float
    best: float
    seconds: float  # how long it has lasted

    @property
    def message(self) -> str:
        return (f"steps take {self.factor:.1f}x the job's own best ({self.recent:.3g} s "
                f"against {self.best:.3g} s per step) for {duration(self.seconds)}")


@dataclass(frozen=True)
class ProgressUpdate:
    state: ProgressStatus | None
    condition: Condition
    stall: Stall | None = None
    slow: Slow | None = None
    events: list[StatusEvent] = field(default_factory=list)
    restarted: bool = False  # a trainer restart was decided in this look (counted)


# --- detect -----------------------------------------------------------------------------


def observe(previous: ProgressStatus | None, report: TrainingReport | None, now: datetime,
            hold: str | None, learn_steps: bool = True) -> ProgressStatus | None:
    """status.progress after this look at the trainer's step. `learn_steps`: the step
    times may teach the baseline (every slice active)."""
    if report is None:
        return previous
    started = report.process_started_at
    if previous is None or (started is not None and started != previous.process_started_at):
        fresh = ProgressStatus(step=report.step, since=now, process_started_at=started,
                               held=hold)
        if previous is None:
            return fresh
        return fresh.model_copy(update={  # what was learned is the job's, not the process's
            "gaps": previous.gaps, "step_gaps": previous.step_gaps,
            "step_counts": previous.step_counts, "step_seconds": previous.step_seconds,
            "longest_gap_seconds": previous.longest_gap_seconds,
            "baseline_step_seconds": previous.baseline_step_seconds,
            "restart": previous.restart})
    if hold is not None:
        # The clock stands still (its start moves to the hold's end): no write per look.
        return previous.model_copy(update={
            "step": report.step, "held": hold, "stalled_at": None, "slow_since": None,
            "first_step": previous.advanced or previous.first_step})
    if previous.held is not None:  # the hold ended: the clock starts now
        return previous.model_copy(update={"step": report.step, "since": now, "held": None,
                                           "first_step": previous.advanced})
    if report.step != previous.step:
        previous = _advanced(previous, report, now, learn_steps)
    return _seen_phase(previous, report)


def _advanced(previous: ProgressStatus, report: TrainingReport, now: datetime,
              learn_steps: bool) -> ProgressStatus:
    """A new step: learned from, unless its gap spans a start, a recompile or a phase of
    its own (an evaluation, a save: not a step's time)."""
    step = report.step
    update: dict[str, object] = {"step": step, "since": now, "advanced": True,
                                 "first_step": False, "stalled_at": None, "off_step": False}
    old = previous.step
    if previous.advanced and not previous.first_step and old is not None and step > old:
        gap = max(0.0, (now - previous.since).total_seconds())
        update["gaps"] = [*previous.gaps, round(gap, 3)][-rule.SAMPLES:]
        update["longest_gap_seconds"] = round(max(gap, previous.longest_gap_seconds or 0.0), 3)
        sample = rule.step_sample(gap, step - old, report.step_seconds)
        if sample is not None and not previous.off_step:
            update["step_seconds"] = [*previous.step_seconds, sample][-rule.SAMPLES:]
        if learn_steps and not previous.off_step:
            gaps = [*previous.step_gaps, round(gap, 3)][-rule.SAMPLES:]
            counts = [*previous.step_counts, step - old][-rule.SAMPLES:]
            update.update(step_gaps=gaps, step_counts=counts,
                          baseline_step_seconds=rule.baseline(
                              previous.baseline_step_seconds, gaps, counts))
    return previous.model_copy(update=update)


def _seen_phase(state: ProgressStatus, report: TrainingReport) -> ProgressStatus:
    """Marks a phase of its own seen since the newest step (its gap teaches nothing)."""
    activity = report.activity
    if state.off_step or activity is None or activity.phase in rule.STEP_TIME_PHASES:
        return state
    return state.model_copy(update={"off_step": True})


# --- blame ------------------------------------------------------------------------------


def diagnose(spec: ElasticTrainingJobSpec, report: TrainingReport, state: ProgressStatus,
             head: ObservedPod | None) -> tuple[str, tuple[int, ...]]:
    """What the stall looks like, and the slices the trainer's evidence blames."""
    stall = report.stall
    if stall is not None and stall.suspect_slices:
        said = f": {stall.evidence}" if stall.evidence else ""
        return (f"a slow slice: the trainer's watchdog reports step {stall.step} "
                f"({stall.phase}) past its {duration(stall.deadline_seconds)} deadline and "
                f"suspects {fmt_slices(stall.suspect_slices)}{said}",
                tuple(sorted(set(stall.suspect_slices))))
    if stall is not None:
        return (f"a hung step: the trainer's watchdog reports step {stall.step} "
                f"({stall.phase}) running since {iso(stall.started_at)}, past its "
                f"{duration(stall.deadline_seconds)} deadline, and can blame no slice", ())
    main = head.main if head is not None else None
    alive = (f"its main container runs (since {iso(main.started_at)})"
             if main is not None and main.state == "running" and main.started_at
             else "its main container is not seen running")
    if spec.trainer.progress is not None and spec.trainer.command:
        who = "MaxText" if maxtext.runs_maxtext(spec.trainer.command, spec.trainer.args) \
            else "trainer"
        return (f"a hung {who}: the metrics file the progress sidecar follows has had no "
                f"new step since {iso(state.since)}; {alive}", ())
    if report.observed_at <= state.since:
        return (f"a frozen trainer: it has reported nothing since {iso(report.observed_at)}; "
                f"{alive}", ())
    return (f"a hung trainer: it reports (last at {iso(report.observed_at)}) but no new "
            f"step; {alive}", ())


# --- act --------------------------------------------------------------------------------


def restart_for(spec: ElasticTrainingJobSpec, state: ProgressStatus, stall: Stall,
                head: ObservedPod | None, now: datetime,
                spent: bool = False) -> TrainerRestart | None:
    """The trainer restart this stall calls for (None: none, one is recorded, or the
    stall restart budget is `spent`)."""
    if spec.elastic.on_stall != "Recover" or stall.blamed or spent \
            or not stall.verdict.past:  # a phase within its deadline is never restarted
        return None
    done = state.restart
    if done is not None and state.stalled_at is not None \
            and done.requested_at >= state.stalled_at:
        return None  # this stall's restart is recorded already
    if head is None or not head.uid or head.terminating:
        return None
    return TrainerRestart(requested_at=now, step=state.step, pod_name=head.name,
                          pod_uid=head.uid, reason=Reason.PROGRESS_DEADLINE_EXCEEDED,
                          in_place=restarts_in_place.asks_in_place(spec, head),
                          process_started_at=state.process_started_at,
                          main_restarts=head.main.restart_count if head.main else 0)


def plan_trainer_restart(namespace: str, jobset: str, progress: ProgressStatus | None,
                         pods: Sequence[ObservedPod]) -> RestartTrainer | None:
    """The restart status.progress records, while its head pod is still there and not
    going (level-based: once it is gone or going, there is nothing left to do)."""
    restart = progress.restart if progress is not None else None
    if restart is None or restart.in_place:  # in place: the trainer exits by itself
        return None
    pod = next((p for p in pods if p.uid == restart.pod_uid
                and p.replicated_job == HEAD_REPLICATED_JOB), None)
    if pod is None or pod.terminating or pod.phase in ("Succeeded", "Failed"):
        return None
    return RestartTrainer(namespace, child_job_name(jobset, HEAD_REPLICATED_JOB, 0),
                          pod.job_uid, pod.name, restart.pod_uid, restart.step)


# --- the stage --------------------------------------------------------------------------


def track_progress(setter: ConditionSetter, spec: ElasticTrainingJobSpec,
                   report: TrainingReport | None, previous: ProgressStatus | None,
                   signals: ProgressSignals, now: datetime) -> ProgressUpdate:
    """status.progress, the Progressing condition, slow steps, their Events, and the
    trainer restart a stall calls for."""
    state = observe(previous, report, now, signals.hold, signals.all_slices_active)
    if state is None or report is None:
        return ProgressUpdate(state, setter.unknown(
            ConditionType.PROGRESSING, Reason.WAITING_FOR_FIRST_STEP,
            "the trainer has not reported a step yet"))
    state = state.model_copy(update={  # no rule judges while held or starting
        "deadline_seconds": deadline_of(spec, state, signals.saving), "rule": None})
    if state.held is not None:
        return ProgressUpdate(state, setter.unknown(
            ConditionType.PROGRESSING, Reason.PROGRESS_HELD, f"{state.held}: no step expected"))
    if not state.advanced:
        return ProgressUpdate(state, setter.unknown(
            ConditionType.PROGRESSING, Reason.WAITING_FOR_FIRST_STEP,
            f"the trainer process is starting (step {state.step} reported, no new one yet)"))
    slow = slow_steps(state, now)
    verdict = judge(spec, report, state, signals.saving, now)
    state = watched(state, verdict).model_copy(update={"slow_since": _slow_since(state, now)})
    if not verdict.past:
        return _advancing(setter, state, verdict, slow)
    diagnosis, blamed = diagnose(spec, report, state, signals.head)
    stall = Stall(state.step, verdict, diagnosis, blamed)
    return _stalled(setter, spec, state, stall, signals, now)


def _advancing(setter: ConditionSetter, state: ProgressStatus, verdict: Verdict,
               slow: Slow | None) -> ProgressUpdate:
    """True: StepsAdvancing, or PhaseInProgress while a phase of training other than a
    step (an evaluation, a save, a compile, ...) runs within its deadline."""
    in_phase = verdict.phase is not None and verdict.phase.phase in rule.HEARTBEAT_PHASES
    reason = Reason.PHASE_IN_PROGRESS if in_phase else Reason.STEPS_ADVANCING
    message = stall_text.advancing(verdict, state.step, state.since)
    sustained = slow if slow is not None and slow.seconds >= rule.SLOW_SECONDS else None
    return ProgressUpdate(state, setter.true(ConditionType.PROGRESSING, reason, message),
                          slow=sustained)


def _stalled(setter: ConditionSetter, spec: ElasticTrainingJobSpec, state: ProgressStatus,
             stall: Stall, signals: ProgressSignals, now: datetime) -> ProgressUpdate:
    first = state.stalled_at is None
    state = state.model_copy(update={"stalled_at": state.stalled_at or now})
    events = []
    if first:
        events.append(StatusEvent(reason=Reason.PROGRESS_DEADLINE_EXCEEDED, type="Warning",
                                  message=stall.message))
    budget = budgets_of(spec).stall_restarts
    used = budget.used(signals.stall_restarts, signals.stall_times, now)
    spent = spec.elastic.on_stall == "Recover" and not stall.blamed and used >= budget.allowed
    restart = restart_for(spec, state, stall, signals.head, now, spent)
    if spent and first:
        events.append(StatusEvent(
            reason=Reason.STALL_RESTARTS_EXHAUSTED, type="Warning",
            message=f"the trainer stalled at step {stall.step} with its stall restart budget "
                    f"spent ({used} restarts, {budget.short()}): not "
                    "restarted again; Progressing stays False until a step advances"))
    message = stall.message
    if restart is not None:
        state = state.model_copy(update={"restart": restart})
        events.append(_restarting_event(stall, restart))
    elif state.restart is not None and restarts_in_place.exit_overdue(
            state.restart, signals.head, now):
        fallback = state.restart.model_copy(update={"in_place": False})
        state = state.model_copy(update={"restart": fallback})  # once: the record changes
        events.append(_restarting_event(stall, fallback, overdue=True))
    done = state.restart
    if done is not None and state.stalled_at is not None \
            and done.requested_at >= state.stalled_at:
        message += "; restarting the trainer" + (
            " in its pod (asked to exit)" if done.in_place
            else f" (head pod {done.pod_name} deleted)")
    elif spec.elastic.on_stall == "Report":
        message += "; spec.elastic.onStall is Report: not restarted"
    elif spent:
        message += (f"; the stall restart budget is spent ({used} restarts, "
                    f"{budget.short()}): not restarted")
    elif stall.blamed:
        message += "; the trainer's request replaces the slices it blames"
    return ProgressUpdate(state, setter.false(ConditionType.PROGRESSING,
                                              Reason.PROGRESS_DEADLINE_EXCEEDED, message),
                          stall=stall, events=events, restarted=restart is not None)


def _restarting_event(stall: Stall, restart: TrainerRestart, *,
                      overdue: bool = False) -> StatusEvent:
    what = f"restarting the trainer stalled at step {stall.step} (spec.elastic.onStall " \
        "Recover): "
    if restart.in_place:
        how = ("asking it to exit; its pod restarts main in place (pathways-rm, "
               "pathways-proxy and the workers kept), and it resumes from the newest "
               "committed checkpoint")
    else:
        late = (f"it did not exit within {restarts_in_place.EXIT_GRACE_SECONDS:g} s of the "
                "request: ") if overdue else ""
        how = (f"{late}deleting head pod {restart.pod_name}; its Job makes a new one, which "
               "resumes from the newest committed checkpoint")
    return StatusEvent(reason=Reason.TRAINER_RESTARTING, type="Warning", message=what + how)


def slow_steps(state: ProgressStatus, now: datetime) -> Slow | None:
    """Steps slower than the job's own best by the SlowSteps factor (with how long)."""
    factor = rule.slow_factor(state.step_gaps, state.step_counts,
                              state.baseline_step_seconds)
    if factor is None or factor < rule.SLOW_FACTOR or state.baseline_step_seconds is None:
        return None
    recent = rule.recent_step_seconds(state.step_gaps, state.step_counts) or 0.0
    since = state.slow_since or now
    return Slow(round(factor, 2), recent, state.baseline_step_seconds,
                max(0.0, (now - since).total_seconds()))


def _slow_since(state: ProgressStatus, now: datetime) -> datetime | None:
    factor = rule.slow_factor(state.step_gaps, state.step_counts,
                              state.baseline_step_seconds)
    if factor is None or factor < rule.SLOW_FACTOR:
        return None
    return state.slow_since or now


def next_progress_look_in(spec: ElasticTrainingJobSpec, state: ProgressStatus | None,
                          now: datetime) -> float | None:
    """Seconds until the deadline in force (or the slow-steps window) comes due, for the
    reconcile's wake-up (None: nothing to wait for)."""
    if state is None or not state.advanced or state.held is not None \
            or state.stalled_at is not None:
        return None
    if state.deadline_seconds is None:
        state = state.model_copy(update={"deadline_seconds": deadline_of(spec, state, False)})
    waits = [due_in(state, now) or 0.0]
    if state.slow_since is not None:
        waits.append((state.slow_since + timedelta(seconds=rule.SLOW_SECONDS)
                      - now).total_seconds())
    return max(0.0, min(waits))
