"""elastic_api.budgets: the restart budgets, the one rule the operator (slice, stall and
JobSet restarts) and the trainer (--max-retries) spend them by."""
from __future__ import annotations

import random
from datetime import timedelta

import pytest
from builders import T0, at, etj

from elastic_api.budgets import (
    ELASTIC_RETRIES,
    HIGHEST_RATE,
    JOBSET_RESTARTS,
    MIN_ALLOWED,
    SLICE_RESTARTS,
    STALL_RESTARTS,
    Budget,
    budgets_of,
    derived_allowed,
    job_hosts,
    mean_seconds_between,
)
from elastic_api.models import DEFAULT_RESTART_WINDOW_SECONDS

HOUR = 3600
MONTH = 30 * 86400.0
LLAMA3_RATE = 419 / (54 * 2048) * 1000  # unplanned interruptions per 1,000 host-days


def _spec(**elastic: int):
    return etj().spec(elastic=elastic).build().spec if elastic else etj().build().spec


def _big(slices: int, topology: str = "16x16", **more: int):
    """A job of v5e `topology` slices (64 hosts each for 16x16)."""
    return etj().tpu("v5e", topology, slices).spec(**more).build().spec


def test_a_count_the_spec_sets_keeps_its_meaning_over_the_whole_run() -> None:
    budget = budgets_of(_spec(maxRetries=10)).elastic_retries
    assert (budget.allowed, budget.window_seconds, budget.derived) == (10, None, False)
    # Ten slice losses a year apart spend it all the same; the eleventh is refused.
    times: list = []
    for n in range(10):
        charge = budget.charge(n, times, at(n * 365 * 86400))
        assert charge.allowed and charge.used == n + 1 and charge.recent == ()
    assert not budget.charge(10, times, at(11 * 365 * 86400)).allowed
    assert "10 over the whole run" in budget.describe()


def test_unset_counts_are_derived_per_window_from_the_hosts() -> None:
    small, big = budgets_of(_spec()), budgets_of(_big(256))  # 12 hosts; 16,384 hosts
    for budget in (small.slice_restarts, small.elastic_retries, small.stall_restarts,
                   small.jobset_restarts):
        assert budget.derived and budget.window_seconds == DEFAULT_RESTART_WINDOW_SECONDS
        assert budget.allowed == MIN_ALLOWED
    assert big.elastic_retries.allowed > big.jobset_restarts.allowed > MIN_ALLOWED
    assert big.slice_restarts.allowed == MIN_ALLOWED  # a slice of 64 hosts
    assert big.slice_restarts.hosts == 64 and big.elastic_retries.hosts == 16384
    assert "derived for the job's 16,384 hosts" in big.elastic_retries.describe()


def test_a_window_the_spec_sets_applies_to_every_count() -> None:
    budgets = budgets_of(_spec(maxSliceRestarts=2, restartWindowSeconds=600))
    assert (budgets.slice_restarts.allowed, budgets.slice_restarts.window_seconds) == (2, 600)
    assert not budgets.slice_restarts.derived
    assert budgets.stall_restarts.window_seconds == 600 and budgets.stall_restarts.derived
    assert budgets.slice_restarts.describe() == "2 within any 10 min (maxSliceRestarts)"


def test_the_window_forgets_old_restarts_and_keeps_no_more_than_it_needs() -> None:
    budget = Budget(SLICE_RESTARTS, 2, 600, False, 4)
    times: tuple = ()
    for second in (0, 100, 700, 800):  # the first two have left the window by 800
        charge = budget.charge(0, times, at(second))
        times = charge.recent
    assert charge.allowed and times == (at(700), at(800))
    refused = budget.charge(0, times, at(900))
    assert not refused.allowed and refused.used == 3 and len(refused.recent) == 3
    assert budget.remaining(0, times, at(900)) == 0
    assert budget.remaining(0, times, at(1301)) == 1  # 700 is 601 s old by then
    assert budget.used(0, [at(t) for t in range(100)], at(100)) == 3  # at most count + 1


def test_a_crash_loop_is_stopped_within_minutes() -> None:
    """The same failure every 10 s: the window's count is reached within its first few
    restarts, whatever the job's size."""
    for spec in (_spec(), _big(256)):
        for budget in (budgets_of(spec).slice_restarts, budgets_of(spec).jobset_restarts,
                       budgets_of(spec).elastic_retries, budgets_of(spec).stall_restarts):
            times: tuple = ()
            for n in range(100):
                charge = budget.charge(n, times, T0 + timedelta(seconds=10 * n))
                times = charge.recent
                if not charge.allowed:
                    break
            assert not charge.allowed, budget.kind.field
            assert 10 * n <= 200, f"{budget.kind.field} stopped the loop only after {10 * n} s"


def _month_spends_it(budget: Budget, per_1000_host_days: float, seed: int) -> bool:
    """A month of Poisson arrivals at the rate for the budget's hosts and share."""
    rng = random.Random(seed)
    rate = per_1000_host_days * budget.kind.share / 1000 * budget.hosts / 86400
    times: tuple = ()
    now = 0.0
    while True:
        now += rng.expovariate(rate)
        if now > MONTH:
            return False
        charge = budget.charge(0, times, T0 + timedelta(seconds=now))
        if not charge.allowed:
            return True
        times = charge.recent


@pytest.mark.parametrize("slices", [16, 64, 256])  # 1,024, 4,096 and 16,384 hosts
def test_a_month_at_the_published_rates_spends_no_default_budget(slices: int) -> None:
    budgets = budgets_of(_big(slices))
    for budget in (budgets.elastic_retries, budgets.jobset_restarts, budgets.stall_restarts,
                   budgets.slice_restarts):
        for rate in (LLAMA3_RATE, HIGHEST_RATE.per_1000_host_days):
            spent = [seed for seed in range(20) if _month_spends_it(budget, rate, seed)]
            assert not spent, f"{budget.kind.field} spent at {rate:.2f} (seeds {spent})"


def test_the_derived_count_is_a_poisson_tail() -> None:
    assert derived_allowed(ELASTIC_RETRIES, 1, HOUR) == MIN_ALLOWED
    counts = [derived_allowed(ELASTIC_RETRIES, h, HOUR) for h in (1024, 4096, 16384, 65536)]
    assert counts == sorted(counts) and counts[0] < counts[-1]
    assert derived_allowed(JOBSET_RESTARTS, 16384, HOUR) < derived_allowed(
        ELASTIC_RETRIES, 16384, HOUR)
    assert derived_allowed(STALL_RESTARTS, 16384, 30 * 86400) > MIN_ALLOWED


def test_the_mean_time_between_a_kinds_interruptions_is_the_rate_its_budget_uses() -> None:
    """The trainer's prior for the checkpoint period (elastic_trainer.cadence): crashes on
    1,024 hosts at the highest published rate, one every ~28 h; half as long for twice
    the hosts; the derived budgets' expectation over a window is window / mean."""
    spec = _big(16)
    assert job_hosts(spec) == 1024
    crashes = mean_seconds_between(JOBSET_RESTARTS, job_hosts(spec))
    assert crashes == pytest.approx(86400e3 / (HIGHEST_RATE.per_1000_host_days * 0.129 * 1024))
    assert 27 * HOUR < crashes < 29 * HOUR
    assert mean_seconds_between(JOBSET_RESTARTS, 2048) == pytest.approx(crashes / 2)
    # Slice losses (and slow moves) come far more often than crashes.
    assert mean_seconds_between(ELASTIC_RETRIES, 1024) < crashes / 5
    assert mean_seconds_between(JOBSET_RESTARTS, 0) == mean_seconds_between(JOBSET_RESTARTS, 1)
