"""The job-churn soak's checks (tests/support/churn.py) on made-up samples: a store that
follows the jobs alive passes, one that keeps an entry per job ever created (or one in
ten) is caught, the slope is a least-squares slope, and a store above its baseline after
the jobs are deleted is named."""
from __future__ import annotations

import pytest

from tests.support.churn import Sample, growing_stores, not_back, slope, summary

LANES = 3


def run(leak_every: int | None, jobs: int = 600, seconds: float = 3600.0) -> list[Sample]:
    """A churn of `jobs` jobs over `seconds`, 3 alive at a time, sampled every 10 s: the
    store `ok` holds the jobs alive; `leaky` also keeps one in `leak_every` forever."""
    samples = []
    for i in range(int(seconds // 10) + 1):
        t = i * 10.0
        created = int(jobs * t / seconds)
        alive = LANES if 0 < created < jobs else 0
        leaked = created // leak_every if leak_every else 0
        samples.append(Sample(t, created, alive, rss_bytes=100 * 2**20 + i,
                              entries={"ok": alive, "leaky": alive + leaked}))
    return samples


def test_a_least_squares_slope() -> None:
    assert slope([0, 1, 2, 3], [1, 3, 5, 7]) == pytest.approx(2.0)
    assert slope([0, 1, 2], [4, 4, 4]) == 0.0
    assert slope([5], [1]) == 0.0


def test_a_store_that_follows_the_jobs_alive_is_flat() -> None:
    assert growing_stores(run(leak_every=None), LANES) == {}


@pytest.mark.parametrize("leak_every", [1, 10])
def test_a_store_that_keeps_jobs_ever_created_is_caught(leak_every: int) -> None:
    grown = growing_stores(run(leak_every), LANES)
    assert set(grown) == {"leaky"}
    assert grown["leaky"] == pytest.approx(300 / leak_every, rel=0.05)


def test_a_store_above_its_baseline_after_the_churn_is_named() -> None:
    base = Sample(0, 0, 0, 0, {"ok": 0, "leaky": 1})
    assert not_back(base, Sample(9, 30, 0, 0, {"ok": 0, "leaky": 1})) == {}
    assert not_back(base, Sample(9, 30, 0, 0, {"ok": 2, "leaky": 1})) == {"ok": (0, 2)}


def test_the_summary_reports_the_rss_slope_and_each_store() -> None:
    samples = run(leak_every=None)
    report = summary(samples, LANES)
    assert report["jobs_created"] == 600 and report["seconds"] == 3600
    # 1 byte per 10 s sample: 360 bytes an hour.
    assert report["rss_slope_mib_per_hour"] == pytest.approx(360 / 2**20, abs=0.01)
    assert report["stores"]["ok"] == {"max": LANES, "end": 0,
                                      "growth_second_half": pytest.approx(0, abs=3)}
