"""The job-churn soak's record and verdict (issue 61, item 4: memory and state stay flat
for a week): samples of the operator's RSS and of the entries of each per-job store
(etj_job_memory_entries{store}) while short jobs are created and deleted, the slope of
each after warm-up (a least-squares line over the second half), and which stores grow
with the jobs ever created rather than with the jobs alive.

Pure on purpose: tests/unit/test_churn_checks.py feeds it made-up samples, a store that
leaks one entry per job among them, so the check cannot pass by construction.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

HOUR_S = 3600.0


@dataclass(frozen=True)
class Sample:
    t: float  # seconds since the churn started
    created: int  # jobs created so far
    alive: int  # jobs that exist now
    rss_bytes: int  # the operator's resident memory
    entries: dict[str, int] = field(default_factory=dict)  # store -> jobs it holds


def slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """The least-squares slope of ys over xs (0 for fewer than two distinct xs)."""
    n = len(xs)
    if n < 2:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs)
    if var == 0:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var


def second_half(samples: Sequence[Sample]) -> list[Sample]:
    """The samples after warm-up: the second half of the run's time."""
    if not samples:
        return []
    middle = (samples[0].t + samples[-1].t) / 2
    return [s for s in samples if s.t >= middle]


def growth(samples: Sequence[Sample], store: str) -> float:
    """Entries the fitted line of `store` gains over the second half."""
    half = second_half(samples)
    if len(half) < 2:
        return 0.0
    return slope([s.t for s in half], [s.entries.get(store, 0) for s in half]) * (
        half[-1].t - half[0].t)


def growing_stores(samples: Sequence[Sample], lanes: int) -> dict[str, float]:
    """The stores whose entries grow with the jobs ever created: over the second half,
    a fitted growth beyond what the jobs alive hold at most (twice the lanes) and beyond
    a twentieth of the jobs created meanwhile. store -> its growth."""
    half = second_half(samples)
    if len(half) < 2:
        return {}
    created = half[-1].created - half[0].created
    stores = {name for s in half for name in s.entries}
    out = {}
    for store in sorted(stores):
        gained = growth(samples, store)
        if gained > max(2 * lanes, 0.05 * created):
            out[store] = gained
    return out


def not_back(baseline: Sample, now: Sample) -> dict[str, tuple[int, int]]:
    """The stores not back at their baseline: store -> (baseline, now)."""
    return {store: (baseline.entries.get(store, 0), count)
            for store, count in sorted(now.entries.items())
            if count > baseline.entries.get(store, 0)}


def summary(samples: Sequence[Sample], lanes: int) -> dict[str, Any]:
    """What docs/benchmarks.md reports ("Job churn")."""
    half = second_half(samples)
    if len(half) < 2:
        return {"samples": len(samples)}
    ts = [s.t for s in half]
    rss_slope = slope(ts, [s.rss_bytes for s in half])
    created = half[-1].created - half[0].created
    return {
        "seconds": round(samples[-1].t - samples[0].t),
        "jobs_created": samples[-1].created,
        "lanes": lanes,
        "samples": len(samples),
        "rss_mib": {"start": _mib(samples[0].rss_bytes), "warm": _mib(half[0].rss_bytes),
                    "end": _mib(samples[-1].rss_bytes),
                    "max": _mib(max(s.rss_bytes for s in samples))},
        "rss_slope_mib_per_hour": round(rss_slope * HOUR_S / 2**20, 2),
        "rss_slope_kib_per_1000_jobs": round(
            rss_slope * (half[-1].t - half[0].t) / max(created, 1) * 1000 / 1024, 1),
        "stores": {store: {"max": max(s.entries.get(store, 0) for s in samples),
                           "end": samples[-1].entries.get(store, 0),
                           "growth_second_half": round(growth(samples, store), 2)}
                   for store in sorted({n for s in samples for n in s.entries})},
    }


def _mib(value: int) -> float:
    return round(value / 2**20, 1)
