"""The progress deadline and the slow-steps rule, written once (docs/operations.md,
"Silent failures").

The operator applies them to the steps it sees in status.training (any trainer: the
bundled one, or MaxText through the progress sidecar), learning from the gaps between
the step changes it observes; nothing here is a fixed number of seconds but the floor.

- The deadline: `spec.elastic.progressDeadlineSeconds` as given, else
  max(FLOOR, MEDIAN_FACTOR x the median gap, LONGEST_FACTOR x the longest gap seen), and
  EXTENDED_FACTOR x that for the first step after a hold (a recovery, a resize, a pause,
  a resume: a recompile may come first) and while a checkpoint save is in flight. The
  floor is NVRx's soft timeout (60 s): longer than any status report cadence (the bundled
  trainer writes every 5 s) and than the noise of a loaded machine; the longest gap
  covers the job's own periodic saves once it has made one.
- Slow steps: the seconds per step over the newest WINDOW gaps (their sum over the steps
  they span) at least SLOW_FACTOR x the job's own best such figure (its baseline), for
  SLOW_SECONDS on end; learned only while the trainer trains on every slice.
"""
from __future__ import annotations

from collections.abc import Sequence
from statistics import median

from elastic_api.models import PROGRESS_DEADLINE_FLOOR_SECONDS

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


def learned_deadline(gaps: Sequence[float], longest: float | None) -> float:
    """The deadline learned from the observed gaps between step changes."""
    candidates = [FLOOR_SECONDS]
    if gaps:
        candidates.append(MEDIAN_FACTOR * median(gaps))
    if longest is not None:
        candidates.append(LONGEST_FACTOR * longest)
    return round(max(candidates), 3)


def progress_deadline(spec_seconds: int | None, gaps: Sequence[float],
                      longest: float | None, *, extended: bool = False) -> float:
    """The deadline in force: the spec's exactly, else the learned one (extended for a
    first step after a hold or a save in flight)."""
    if spec_seconds is not None:
        return float(spec_seconds)
    deadline = learned_deadline(gaps, longest)
    return deadline * EXTENDED_FACTOR if extended else deadline


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
