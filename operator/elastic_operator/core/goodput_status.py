"""Goodput: what failures cost, from the trainer's cumulative accounting and the
operator's own timeline (docs/metrics.md, "Goodput"). Pure.

    wallSeconds        observedAt - since (the job's creation)
    productiveSeconds  the trainer's step time of steps it kept
    ratio              productiveSeconds / wallSeconds
    badputSeconds      the trainer's causes (waitingForSlices, restore, recompile,
                       recomputedSteps, checkpointing, startup) and `other`, the rest of
                       the wall time (scheduling before the trainer's first report...)
    sliceDownSeconds   the operator's timeline: how long some slice was not Ready after
                       having been Ready (a cross-check of waitingForSlices)

The figures move only when the trainer reports or a slice changes state (`observedAt`),
never on a clock tick: a status write per resync would load the API server for nothing.
"""
from __future__ import annotations

from datetime import datetime

from elastic_api.models import BadputSeconds, Goodput, SliceStatus, TrainingReport
from elastic_operator.core.slices import SliceChange


def compute_goodput(
    previous: Goodput | None, since: datetime, report: TrainingReport | None,
    slices: list[SliceStatus], changes: list[SliceChange], now: datetime,
) -> Goodput:
    if previous is not None:
        since = previous.since  # fixed at the first reconcile
    down_seconds, down_since = _slice_downtime(previous, slices, changes, now)
    observed_at = previous.observed_at if previous is not None else now
    if report is not None and report.observed_at > observed_at:
        observed_at = report.observed_at
    if changes:
        observed_at = max(observed_at, now)
    wall = max(0.0, (observed_at - since).total_seconds())
    counters = report.goodput if report is not None else None
    productive = badput = ratio = None
    if counters is not None:
        productive = round(counters.productive_seconds, 3)
        causes = counters.badput_seconds
        accounted = productive + sum(causes.model_dump().values())
        badput = BadputSeconds(**{k: round(v, 3) for k, v in causes.model_dump().items()},
                               other=round(max(0.0, wall - accounted), 3))
        ratio = round(productive / wall, 4) if wall > 0 else None
    return Goodput(since=since, observed_at=observed_at, wall_seconds=round(wall, 3),
                   productive_seconds=productive, ratio=ratio, badput_seconds=badput,
                   slice_down_seconds=round(down_seconds, 3), slice_down_since=down_since)


def _slice_downtime(previous: Goodput | None, slices: list[SliceStatus],
                    changes: list[SliceChange], now: datetime) -> tuple[float, datetime | None]:
    """Accumulated time with a slice not Ready (since it went down), and the open start."""
    total = previous.slice_down_seconds if previous is not None else 0.0
    since = previous.slice_down_since if previous is not None else None
    went_down = [c.failed_at or now for c in changes if c.went_down]
    if since is None and went_down:
        since = min(went_down)
    if since is not None and all(s.state == "Ready" for s in slices):
        total += max(0.0, (now - since).total_seconds())
        since = None
    return total, since
