"""Which slices are stragglers: the one rule the trainer (its `--on-slow-slice`) and the
operator (status.training.sliceStepTimes) both apply.

A slice is slow when its part of the recent steps, as a median over a window (so one
slow step is not a straggler), takes SLOW_SLICE_FACTOR times the fastest slice's or
more. Against the fastest slice, not the mean: with four slices one at half speed
moves the mean by a quarter, and a whole job that is slow (a loaded host, a bigger
batch after a resize) has no straggler at all. NVRx's straggler detection scores each
rank against the fastest the same way.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

from elastic_api.models import SliceStepTime

SLOW_SLICE_FACTOR = 1.5


def step_times(medians: dict[int, float]) -> list[SliceStepTime]:
    """{slice: median seconds of its part} -> the report's entries, fastest = 1."""
    fastest = min((s for s in medians.values() if s > 0), default=0.0)
    return [SliceStepTime(slice=i, seconds=round(s, 6),
                          relative=round(s / fastest, 3) if fastest > 0 else 1.0)
            for i, s in sorted(medians.items())]


def slow_slices(times: Iterable[SliceStepTime] | None,
                factor: float = SLOW_SLICE_FACTOR) -> list[int]:
    """The slices whose part is `factor` times the fastest slice's or more. Not one when
    they all are (nothing to compare against) or fewer than two slices are timed."""
    entries: Sequence[SliceStepTime] = list(times or [])
    if len(entries) < 2:
        return []
    slow = sorted(t.slice for t in entries if t.relative >= factor)
    return [] if len(slow) == len(entries) else slow
