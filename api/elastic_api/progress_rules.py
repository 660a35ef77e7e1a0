"""The progress rules, written once (docs/operations.md, "Silent failures"; docs/trainer.md,
"Phases"). The operator applies them to status.training (any trainer: the bundled one, or
MaxText through the progress sidecar); the bundled trainer's watchdog applies the phase
rule to itself. Nothing here is a fixed number of seconds but the floors.

- The step deadline (`step_deadline`): how long a train step may take.
  `spec.elastic.progressDeadlineSeconds` as given, else learned from the seconds per step
  (`step_sample`: the trainer's own stepSeconds, or the gap between two step changes over
  the steps it spans, the longer; never the cadence at which reports arrive: a sidecar
  reporting every 5 s with 40 steps per report teaches 0.125 s, not 5 s), as
  max(FLOOR, MEDIAN_FACTOR x the median, LONGEST_FACTOR x the longest of the newest
  SAMPLES), EXTENDED_FACTOR x that for the first step after a hold (a recovery, a resize,
  a pause, a resume: a recompile may come first).
- The phase rule (`judge_phase`), where the trainer's phase is known
  (status.training.activity): progress is a new step, or a heartbeat in a phase that
  belongs to training (HEARTBEAT_PHASES; TrainStep's heartbeat is the step itself). Each
  phase is held to its own deadline (elastic_api.phases.phase_deadline) from its newest
  sign of life: TrainStep and DeviceWait (a thread blocked in one device call) to the
  step deadline, Stopped to a short grace, the others to LONGEST_FACTOR x their longest
  in this run (a long first floor before one was seen), never under the spec's deadline.
- The steps rule (`progress_deadline`), where the phase is not known: no new step for
  max(the step deadline, LONGEST_FACTOR x the longest gap between step changes seen),
  EXTENDED_FACTOR x that for a first step after a hold and while a save is in flight. The
  longest gap covers what this rule cannot see: the job's own saves and evaluations, and
  the report cadence. The floor (NVRx's soft timeout, 60 s) outlasts any report cadence
  (the bundled trainer and the sidecar write every 5 s) and a loaded machine's noise.
- Slow steps: the seconds per step over the newest WINDOW gaps (their sum over the steps
  they span) at least SLOW_FACTOR x the job's own best such figure (its baseline), for
  SLOW_SECONDS on end; learned only while the trainer trains on every slice.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from statistics import median
from typing import Final

from elastic_api.models import PROGRESS_DEADLINE_FLOOR_SECONDS
from elastic_api.phases import TRAINING_PHASES, Phase, phase_deadline

FLOOR_SECONDS = PROGRESS_DEADLINE_FLOOR_SECONDS
MEDIAN_FACTOR = 10.0
LONGEST_FACTOR = 2.0
EXTENDED_FACTOR = 5.0
# Gaps kept in status.progress; the newest WINDOW of them measure the step time, once
# there are MIN_SAMPLES.
SAMPLES = 16
WINDOW = 16
MIN_SAMPLES = 8
SLOW_FACTOR = 2.0
SLOW_SECONDS = 120.0

# Phases whose heartbeat (activity.lastActivityAt: an evaluation's step, the CPU time of a
# compile or a save advancing) is progress. TrainStep's is the step itself: a process
# busy in its loop that completes no step makes no progress.
HEARTBEAT_PHASES: Final[frozenset[Phase]] = TRAINING_PHASES - {"TrainStep"}
# Phases a step's time includes: a gap between step changes in which the trainer was seen
# in another (an evaluation, a save, a compile, a restore, stopped) is not a step's time.
STEP_TIME_PHASES: Final[frozenset[Phase]] = frozenset({"TrainStep", "DataWait", "DeviceWait"})


# --- the step deadline ------------------------------------------------------------------


def step_sample(gap_seconds: float, steps: int, step_seconds: float | None = None
                ) -> float | None:
    """Seconds per step over a gap between two step changes that spans `steps` steps: the
    gap over the steps, or the trainer's own `step_seconds` (its last step) when longer
    (None: no step in it)."""
    if steps <= 0:
        return None
    return round(max(gap_seconds / steps, step_seconds or 0.0), 3)


def step_deadline(samples: Sequence[float], spec_seconds: int | None = None, *,
                  extended: bool = False) -> float:
    """How long a train step (and a device call inside one) may take: the spec's exactly,
    else learned from the seconds per step (`step_sample`), EXTENDED_FACTOR x that for
    the first step after a hold."""
    if spec_seconds is not None:
        return float(spec_seconds)
    candidates = [FLOOR_SECONDS]
    if samples:
        candidates += [MEDIAN_FACTOR * median(samples), LONGEST_FACTOR * max(samples)]
    deadline = round(max(candidates), 3)
    return deadline * EXTENDED_FACTOR if extended else deadline


def progress_deadline(spec_seconds: int | None, samples: Sequence[float],
                      longest_gap: float | None, *, extended: bool = False) -> float:
    """The steps rule's deadline: the spec's exactly, else the step deadline or
    LONGEST_FACTOR x the longest gap between step changes seen, the longer (extended for
    a first step after a hold or a save in flight)."""
    if spec_seconds is not None:
        return float(spec_seconds)
    deadline = round(max(step_deadline(samples), LONGEST_FACTOR * (longest_gap or 0.0)), 3)
    return deadline * EXTENDED_FACTOR if extended else deadline


# --- the phase rule ---------------------------------------------------------------------


def phase_deadline_in_force(phase: Phase, longest_seconds: float | None,
                            step_deadline_seconds: float,
                            spec_seconds: int | None = None) -> float:
    """`phase`'s deadline (elastic_api.phases.phase_deadline), where a deadline in the
    spec is the step deadline and never shortens a phase that belongs to training (an
    evaluation, a save, a compile may outlast a step)."""
    own = phase_deadline(phase, longest_seconds, step_deadline_seconds)
    if spec_seconds is not None and phase in HEARTBEAT_PHASES:
        return max(own, float(spec_seconds))
    return own


@dataclass(frozen=True)
class PhaseVerdict:
    """A phase judged at `now`: how long it has gone without a sign of life, against its
    deadline."""

    phase: Phase
    since: datetime  # when the phase began
    quiet_since: datetime  # its newest sign of life: what the deadline counts from
    deadline: float
    now: datetime
    longest: float | None = None  # the longest this phase took in this run (None: first)

    @property
    def seconds(self) -> float:
        """How long the phase has run."""
        return max(0.0, (self.now - self.since).total_seconds())

    @property
    def quiet_seconds(self) -> float:
        """How long it has gone without a sign of life."""
        return max(0.0, (self.now - self.quiet_since).total_seconds())

    @property
    def past(self) -> bool:
        return self.quiet_seconds >= self.deadline


def judge_phase(phase: Phase, since: datetime, now: datetime, *, step_deadline_seconds: float,
                longest_seconds: float | None = None, last_activity_at: datetime | None = None,
                last_step_at: datetime | None = None,
                spec_seconds: int | None = None) -> PhaseVerdict:
    """The phase rule: `phase`, entered at `since`, past its deadline or not at `now`.

    `step_deadline_seconds`: `step_deadline` of the run's step times; `longest_seconds`:
    the longest this phase took in this run (PhaseRecord; None: not seen yet);
    `last_activity_at`: its newest heartbeat (progress in HEARTBEAT_PHASES only);
    `last_step_at`: when the newest step was seen (always progress)."""
    signs = [since, last_step_at]
    if phase in HEARTBEAT_PHASES:
        signs.append(last_activity_at)
    quiet = max(t for t in signs if t is not None)
    deadline = phase_deadline_in_force(phase, longest_seconds, step_deadline_seconds,
                                       spec_seconds)
    return PhaseVerdict(phase, since, quiet, deadline, now, longest_seconds)


# --- slow steps -------------------------------------------------------------------------


def recent_step_seconds(gaps: Sequence[float], counts: Sequence[int]) -> float | None:
    """Seconds per step over the newest WINDOW gaps (their sum over their steps: robust
    to jitter, where a median of per-gap ratios is not); None: too few yet."""
    window = list(zip(gaps, counts, strict=False))[-WINDOW:]
    steps = sum(c for _, c in window)
    if len(window) < MIN_SAMPLES or steps <= 0:
        return None
    return sum(g for g, _ in window) / steps


def baseline(previous: float | None, gaps: Sequence[float],
             counts: Sequence[int]) -> float | None:
    """The job's own best: the lowest recent seconds per step seen."""
    recent = recent_step_seconds(gaps, counts)
    if recent is None or recent <= 0:
        return previous
    return recent if previous is None else min(previous, recent)


def slow_factor(gaps: Sequence[float], counts: Sequence[int],
                best: float | None) -> float | None:
    """How many times slower than the baseline the recent steps run (None: unknown)."""
    recent = recent_step_seconds(gaps, counts)
    if recent is None or best is None or best <= 0:
        return None
    return recent / best
