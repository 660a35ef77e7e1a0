"""Which rule judges whether training advances, and its verdict (docs/operations.md,
"Silent failures"; the rules are elastic_api/progress_rules.py). Pure.

- Phase, where status.training.activity says what the trainer is doing (the bundled
  trainer reports it, the progress sidecar samples any trainer's process): the phase is
  held to its own deadline from its newest sign of life (a new step, a heartbeat in a
  phase that belongs to training, the phase's start), learned from the run's own step
  times and the phase's own history (status.training.phases).
- Steps, where it does not (a trainer the sidecar cannot sample): no new step, nor a sign
  of life the phase rule saw last, for the progress deadline.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from elastic_api import progress_rules as rules
from elastic_api.models import (
    ElasticTrainingJobSpec,
    PhaseRecord,
    ProgressStatus,
    TrainerActivity,
    TrainingReport,
)
from elastic_api.phases import Phase

RuleName = Literal["Phase", "Steps"]


@dataclass(frozen=True)
class Verdict:
    """The rule that judged, how long training has gone without progress, its deadline."""

    rule: RuleName
    seconds: float  # without progress (a new step, or a sign of life the rule counts)
    deadline: float
    quiet_since: datetime  # what `seconds` counts from
    phase: rules.PhaseVerdict | None = None  # rule Phase
    activity: TrainerActivity | None = None  # rule Phase

    @property
    def past(self) -> bool:
        return self.seconds >= self.deadline


def clock_start(state: ProgressStatus) -> datetime:
    """What the deadline counts from: the newest step seen (or the clock's restart), or
    the newest sign of life the phase rule saw, the later."""
    if state.phase_since is None:
        return state.since
    return max(state.since, state.phase_since)


def step_deadline_of(spec: ElasticTrainingJobSpec, state: ProgressStatus) -> float:
    """The step deadline (elastic_api.progress_rules.step_deadline), extended for the first
    step after a hold."""
    return rules.step_deadline(state.step_seconds, spec.elastic.progress_deadline_seconds,
                              extended=state.first_step)


def deadline_of(spec: ElasticTrainingJobSpec, state: ProgressStatus, saving: bool) -> float:
    """The steps rule's deadline (elastic_api.progress_rules.progress_deadline)."""
    return rules.progress_deadline(spec.elastic.progress_deadline_seconds, state.step_seconds,
                                  state.longest_gap_seconds,
                                  extended=state.first_step or saving)


def longest_of(phases: list[PhaseRecord] | None, phase: Phase) -> float | None:
    """The longest `phase` took in this run (None: it has not ended yet)."""
    return next((p.longest_seconds for p in phases or () if p.phase == phase), None)


def judge(spec: ElasticTrainingJobSpec, report: TrainingReport, state: ProgressStatus,
          saving: bool, now: datetime) -> Verdict:
    """The verdict at `now`: by the trainer's phase where the report has it, else by its
    steps."""
    activity = report.activity
    if activity is None:
        start = clock_start(state)
        return Verdict("Steps", max(0.0, (now - start).total_seconds()),
                       deadline_of(spec, state, saving), start)
    verdict = rules.judge_phase(
        activity.phase, activity.since, now,
        step_deadline_seconds=step_deadline_of(spec, state),
        longest_seconds=longest_of(report.phases, activity.phase),
        last_activity_at=activity.last_activity_at, last_step_at=state.since,
        spec_seconds=spec.elastic.progress_deadline_seconds)
    return Verdict("Phase", verdict.quiet_seconds, verdict.deadline, verdict.quiet_since,
                   verdict, activity)


def watched(state: ProgressStatus, verdict: Verdict) -> ProgressStatus:
    """status.progress with what the rule watches: the rule, its deadline, the phase and
    its newest sign of life (kept for the steps rule should the phase go unreported)."""
    update: dict[str, object] = {"rule": verdict.rule, "deadline_seconds": verdict.deadline}
    if verdict.phase is not None:
        update.update(phase=verdict.phase.phase, phase_since=verdict.quiet_since)
    if not verdict.past:
        update["stalled_at"] = None
    return state.model_copy(update=update)


def due_in(state: ProgressStatus, now: datetime) -> float | None:
    """Seconds until the deadline in force comes due (None: none in force)."""
    if state.deadline_seconds is None:
        return None
    due = clock_start(state) + timedelta(seconds=state.deadline_seconds)
    return (due - now).total_seconds()
