"""Which slices are stragglers: the one rule the trainer (its `--on-slow-slice`) and the
operator (status.training.sliceStepTimes) both apply.

A slice is slow when its part of the recent steps takes SLOW_SLICE_FACTOR times the
fastest slice's part of the same step or more, as a median over at least
SLOW_SLICE_STEPS steps (so one slow step is not a straggler: half of them must be).
Against the fastest slice, not the mean: with four slices one at half speed moves the
mean by a quarter, and a whole job that is slow (a loaded host, a bigger batch after a
resize, an evaluation, a save in flight, a compile or a restore: the run's own rhythm)
has no straggler at all, since every slice's part of that step is as slow. NVRx's
straggler detection scores each rank against the fastest the same way.

A slow slice is acted on (moved, `--on-slow-slice Replace`) once it has stayed slow for
SLOW_SLICE_SECONDS on end (`sustained`): FALCON's fail-slows slow a job 1.34x and last
from tens of seconds to hours; one gone within a minute is not worth a move, and a
timing blip never lasts that long. The factor is below FALCON's 1.34x.
"""
from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence

from elastic_api.models import SliceStepTime

SLOW_SLICE_FACTOR = 1.2
SLOW_SLICE_STEPS = 10  # steps timed before any slice is called slow
SLOW_SLICE_SECONDS = 60.0  # slow this long on end before it is moved
SLOW_SLICE_KEEP = 1.1  # a slow slice stays slow (its clock kept) down to this factor


def step_times(parts: Sequence[Mapping[int, float]]) -> list[SliceStepTime] | None:
    """Each slice's part of the recent steps ({slice: seconds}, one per step, the same
    slices in each) -> the report's entries: its median part, and the median over the
    steps of its part over that step's fastest (a per-step ratio, so that one slow step,
    or a whole job slowing down, moves no slice). None: fewer than SLOW_SLICE_STEPS."""
    if len(parts) < SLOW_SLICE_STEPS:
        return None
    slices = sorted(parts[-1])
    out = []
    for i in slices:
        ratios = [p[i] / min(p.values()) for p in parts if min(p.values()) > 0]
        out.append(SliceStepTime(
            slice=i, seconds=round(statistics.median(p[i] for p in parts), 6),
            relative=round(statistics.median(ratios), 3) if ratios else 1.0))
    return out


def slow_slices(times: Iterable[SliceStepTime] | None,
                factor: float = SLOW_SLICE_FACTOR) -> list[int]:
    """The slices whose part is `factor` times the fastest slice's or more. Not one when
    they all are (nothing to compare against) or fewer than two slices are timed."""
    entries: Sequence[SliceStepTime] = list(times or [])
    if len(entries) < 2:
        return []
    slow = sorted(t.slice for t in entries if t.relative >= factor)
    return [] if len(slow) == len(entries) else slow


def sustained(since: Mapping[int, float], times: Iterable[SliceStepTime] | None,
              now: float, seconds: float = SLOW_SLICE_SECONDS,
              keep: float = SLOW_SLICE_KEEP) -> tuple[dict[int, float], list[int]]:
    """(since, found): when each slow slice's slowness began (`since`: as before this
    look), and those slow for `seconds` on end. A slice becomes slow at SLOW_SLICE_FACTOR
    (`slow_slices`) and stays slow, its clock kept, while its part is `keep` times the
    fastest's or more: a 1.34x slice whose median dips under 1.2x for one look on a
    loaded host is not slow anew. Below `keep` (or not timed) it is forgotten."""
    entries = list(times or [])
    slow = set(slow_slices(entries))
    still = {t.slice for t in entries if t.slice in since and t.relative >= keep}
    kept = {s: since.get(s, now) for s in sorted(slow | still)}
    return kept, sorted(s for s, t in kept.items() if now - t >= seconds)
