"""The cadence rule (cadence.py): the period a copy gets from measured costs, step times,
failures and memory, within the overhead budget; hostile measurements never break it."""
from __future__ import annotations

import math
from collections import deque

import pytest
from hypothesis import given
from hypothesis import strategies as st

from elastic_api.models import DEFAULT_OVERHEAD_BUDGET_PERCENT, MAX_OVERHEAD_BUDGET_PERCENT
from elastic_trainer import train_cli
from elastic_trainer.cadence import (
    LENGTHEN_AT_MOST,
    PROBE_PERIOD,
    WARMUP_STEPS,
    Cadence,
    CadenceInputs,
    Cadences,
    budget_shares,
    choose_period,
)

BUDGET = 0.02


def choose(costs: list[float], steps: list[float], max_period: int = 10_000, **kw: object):
    return choose_period(CadenceInputs(BUDGET, costs, steps, max_period, **kw))  # type: ignore[arg-type]


def test_the_shortest_period_within_the_budget():
    # 3 ms a copy, 5 ms a step: 30 steps cost 3 / 150 = 2 %; 29 would cost more.
    choice = choose([0.003] * 5, [0.005] * 10)
    assert (choice.period, choice.reason) == (30, "WithinBudget")
    assert choice.overhead is not None and choice.overhead <= BUDGET
    assert BUDGET < 0.003 / (29 * 0.005)
    # A cheap copy against a long step: every step.
    assert choose([0.003] * 5, [0.9] * 10).period == 1


def test_one_budget_for_the_copies_the_trainer_schedules():
    # Both chosen: half each, so together they stay within the job's budget.
    assert budget_shares(0.02, None, None) == (0.01, 0.01)
    # One fixed (or snapshots off) by the job: the chosen one has all of it.
    assert budget_shares(0.02, 5, None) == (0.02, 0.02)
    assert budget_shares(0.02, 0, None) == (0.02, 0.02)
    assert budget_shares(0.02, None, 100) == (0.02, 0.02)
    # What the two chosen periods cost together is within the whole budget.
    snap, ckpt = budget_shares(BUDGET, None, None)
    step = [0.005] * 10
    together = choose_period(CadenceInputs(snap, [0.003] * 5, step, 10_000)).overhead + \
        choose_period(CadenceInputs(ckpt, [0.09] * 5, step, 10_000)).overhead  # type: ignore[operator]
    assert together <= BUDGET


def test_medians_of_the_newest_samples_so_one_slow_copy_does_not_decide():
    assert choose([0.003, 0.003, 0.5, 0.003, 0.003], [0.005] * 10).period == 30
    # Only the newest five costs count: older slow ones are forgotten.
    assert choose([0.5] * 10 + [0.003] * 5, [0.005] * 10).period == 30


def test_the_copy_getting_slower_lengthens_at_once_and_noise_does_not_shorten():
    slower = choose([0.006] * 5, [0.005] * 10, current=30)
    assert (slower.period, slower.reason) == (60, "CopySlowed")
    # 27 is less than a quarter shorter than 30: kept.
    assert choose([0.0027] * 5, [0.005] * 10, current=30).period == 30
    assert choose([0.0015] * 5, [0.005] * 10, current=30).period == 15


def test_failures_shorten_toward_young_daly_never_below_twice_the_copy():
    # 50 ms a copy, 0.9 s a step: 3 steps within 2 %; one failure in 30 s:
    # sqrt(2 x 0.05 x 30) = 1.73 s = 2 steps.
    choice = choose([0.05] * 5, [0.9] * 10, failures=1, seconds_trained=30.0)
    assert (choice.period, choice.reason) == (2, "YoungDaly")
    # Failures every second: the optimum is below the copy itself; twice the copy instead.
    floor = choose([0.05] * 5, [0.01] * 10, failures=10**6, seconds_trained=1.0,
                   walls=[0.05] * 5)
    assert floor.period == 10 and floor.reason == "YoungDaly"
    # Rare failures: the budget's period is shorter, and stays.
    assert choose([0.003] * 5, [0.005] * 10, failures=1, seconds_trained=1e6).reason == \
        "WithinBudget"


def test_a_prior_mtbf_lengthens_toward_young_daly_at_most_four_times_the_budgets():
    # 0.2 s a save, 0.1 s a step: 100 steps within 2 %.
    assert choose([0.2] * 5, [0.1] * 10).period == 100
    # One failure every 1,000 s (the prior): sqrt(2 x 0.2 x 1000) = 20 s = 200 steps.
    toward = choose([0.2] * 5, [0.1] * 10, prior_mtbf=1000.0)
    assert (toward.period, toward.reason) == (200, "YoungDaly")
    assert "published rate" in toward.message and toward.overhead < BUDGET
    # Rarer failures: the optimum (633 steps) is past the bound, 4 x 100.
    capped = choose([0.2] * 5, [0.1] * 10, prior_mtbf=1e4)
    assert capped.period == LENGTHEN_AT_MOST * 100 == 400
    assert f"at most {LENGTHEN_AT_MOST}x the budget's 100" in capped.message
    # Failures seen more often than the prior says: their MTBF decides (sqrt(2 x 0.2 x
    # 400) = 12.6 s = 127 steps), and a prior never shortens the budget's period.
    seen = choose([0.2] * 5, [0.1] * 10, prior_mtbf=1e4, failures=5, seconds_trained=2000.0)
    assert (seen.period, seen.reason) == (127, "YoungDaly") and "5 failure(s)" in seen.message
    assert choose([0.2] * 5, [0.1] * 10, prior_mtbf=10.0).period == 100
    for bad in (math.nan, math.inf, -1.0, 0.0, True):
        assert choose([0.2] * 5, [0.1] * 10, prior_mtbf=bad).period == 100


def test_never_sooner_than_twice_a_copy_lasts():
    # A save that costs the steps nothing (paced steps) but lasts 150 ms: not every step.
    choice = choose([0.0] * 5, [0.1] * 10, walls=[0.15] * 5)
    assert (choice.period, choice.reason) == (3, "WithinBudget")
    assert "lasts 150 ms" in choice.message
    # Frequent failures do not go below it either.
    assert choose([0.01] * 5, [0.1] * 10, walls=[0.15] * 5, failures=10**6,
                  seconds_trained=1.0).period == 3
    assert choose([0.0] * 5, [0.1] * 10, walls=[math.nan, -1.0]).period == 1


def test_memory_pressure_lengthens():
    tight = choose([0.003] * 5, [0.005] * 10, headroom=1.5)
    assert (tight.period, tight.reason) == (60, "MemoryPressure")
    none_left = choose([0.003] * 5, [0.005] * 10, max_period=500, headroom=0.4)
    assert (none_left.period, none_left.reason) == (500, "MemoryPressure")
    assert choose([0.003] * 5, [0.005] * 10, headroom=10.0).reason == "WithinBudget"


def test_nothing_measured_yet_keeps_probing():
    assert choose([], []).reason == "Measuring"
    assert choose([], []).period == PROBE_PERIOD
    assert choose([0.003], [], current=7).period == 7
    assert choose([0.003], [0.0, 0.0]).reason == "Measuring"  # a 0 s step is no step


HOSTILE = [math.nan, math.inf, -math.inf, -1.0, -1e-9, 1e308, 0.0, 5e-324]


@pytest.mark.parametrize("bad", HOSTILE)
def test_hostile_samples_are_ignored_or_bounded(bad: float):
    for choice in (
        choose([bad] * 5, [0.005] * 10),
        choose([0.003] * 5, [bad] * 10),
        choose([0.003] * 5 + [bad], [0.005] * 10 + [bad]),
        choose([0.003] * 5, [0.005] * 10, failures=3, seconds_trained=bad),
        choose([0.003] * 5, [0.005] * 10, headroom=bad),
    ):
        assert 1 <= choice.period <= 10_000
        assert isinstance(choice.period, int)


def test_hostile_counts_and_types():
    for failures in (-1, 0, True, 2**80):
        choice = choose([0.003] * 5, [0.005] * 10, failures=failures, seconds_trained=10.0)
        assert 1 <= choice.period <= 10_000
    assert choose(["3", None, True], [0.005] * 10).reason == "Measuring"  # type: ignore[list-item]
    for current in (0, -5, None):
        assert choose([0.003] * 5, [0.005] * 10, current=current).period == 30  # type: ignore[arg-type]
    # A huge cost against a tiny step: the longest period, no overflow.
    assert choose([1e308] * 5, [5e-324] * 10, max_period=77).period == 77


@pytest.mark.parametrize("budget", [0, -0.01, 0.51, math.nan, math.inf, True, "0.02"])
def test_a_budget_outside_the_range_is_a_bug_of_the_caller(budget: object):
    with pytest.raises(ValueError, match="overhead budget"):
        choose_period(CadenceInputs(budget, [0.003], [0.005], 100))  # type: ignore[arg-type]


@pytest.mark.parametrize("max_period", [0, -1, 1.5, True])
def test_a_max_period_below_one_is_a_bug_of_the_caller(max_period: object):
    with pytest.raises(ValueError, match="max_period"):
        choose_period(CadenceInputs(0.02, [0.003], [0.005], max_period))  # type: ignore[arg-type]


samples = st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=40)


@given(costs=samples, steps=samples, max_period=st.integers(1, 10**9),
       budget=st.floats(min_value=1e-6, max_value=0.5),
       failures=st.integers(-5, 10**12), seconds=st.floats(allow_nan=True),
       headroom=st.none() | st.floats(allow_nan=True),
       current=st.none() | st.integers(-5, 10**9),
       prior=st.none() | st.floats(allow_nan=True))
def test_any_measurements_give_a_period_within_bounds(costs, steps, max_period, budget,
                                                      failures, seconds, headroom, current,
                                                      prior):
    choice = choose_period(CadenceInputs(budget, costs, steps, max_period, current, failures,
                                         seconds, headroom, prior_mtbf=prior))
    assert isinstance(choice.period, int) and 1 <= choice.period <= max_period
    assert choice.reason in ("Measuring", "WithinBudget", "CopySlowed", "MemoryPressure",
                             "YoungDaly")


@given(cost=st.floats(1e-6, 10.0), step=st.floats(1e-4, 10.0),
       budget=st.floats(0.001, 0.5))
def test_within_budget_is_the_shortest_period_that_keeps_it(cost, step, budget):
    choice = choose_period(CadenceInputs(budget, [cost], [step], 10**9))
    assert choice.reason == "WithinBudget"
    assert cost / (choice.period * step) <= budget * (1 + 1e-6)
    if choice.period > 1:
        assert cost / ((choice.period - 1) * step) > budget * (1 - 1e-6)


def _cadence(period: int | None = None, steps: int = 1000) -> Cadence:
    return Cadence(period, BUDGET, steps)


def test_a_user_period_is_kept_and_zero_is_off():
    fixed = _cadence(7)
    assert [s for s in range(1, 30) if fixed.due(s)] == [7, 14, 21, 28]
    fixed.add_step(0.005)
    for _ in range(6):
        fixed.add_cost(0.003)
    assert fixed.decide().period == 2  # nothing chosen: decide() leaves it alone
    assert fixed.period == 7
    report = fixed.report()
    assert (report.period_steps, report.chosen_by, report.reason) == (7, "User", "UserSet")
    assert report.overhead_percent == pytest.approx(100 * 0.003 / (7 * 0.005), rel=1e-4)
    off = _cadence(0)
    assert not any(off.due(s) for s in range(1, 1000))
    assert (off.report().period_steps, off.report().reason) == (0, "Off")


def _probe_until_chosen(cadence: Cadence, cost: float, step_seconds: float) -> list[int]:
    """Run the cadence's probes, each measured at `cost`; the steps copied."""
    made = []
    for step in range(1, 100):
        cadence.add_step(step_seconds)
        if cadence.due(step):
            cadence.made(step)
            made.append(step)
            if cadence.add_cost(cost):
                cadence.decide()
        if not cadence.measuring:
            break
    return made


def test_a_chosen_cadence_probes_after_warm_up_drops_the_first_then_decides():
    cadence = _cadence()
    assert cadence.chosen and cadence.measuring
    assert not any(cadence.due(s) for s in range(WARMUP_STEPS))
    made = _probe_until_chosen(cadence, 0.003, 0.005)
    # The first probe after warm-up; its sample is dropped; the second decides.
    assert made == [WARMUP_STEPS, WARMUP_STEPS + PROBE_PERIOD]
    assert (cadence.period, cadence.choice.reason) == (30, "WithinBudget")
    last = made[-1]
    assert not cadence.due(last + 29) and cadence.due(last + 30)
    report = cadence.report()
    assert (report.chosen_by, report.reason, report.budget_percent) == ("Trainer",
                                                                         "WithinBudget", 2.0)
    assert report.overhead_percent is not None and report.overhead_percent <= 2.0


def test_a_probe_waits_for_the_one_before_and_for_quiet():
    cadence = _cadence()
    assert cadence.due(WARMUP_STEPS)
    assert not cadence.due(WARMUP_STEPS, quiet=False)  # another copy in flight: later
    cadence.made(WARMUP_STEPS)
    assert not cadence.due(WARMUP_STEPS + 10)  # its cost has not come back
    cadence.lost()  # the copy failed: no measurement, probe again
    assert cadence.due(WARMUP_STEPS + 10)


def test_an_attempt_warms_up_again_and_counts_from_the_restored_step():
    cadence = _cadence()
    _probe_until_chosen(cadence, 0.003, 0.005)
    cadence.made(100)
    cadence.attempt_started(90)  # restored step 90
    assert not cadence.due(90 + WARMUP_STEPS - 1)
    assert not cadence.due(119) and cadence.due(120)
    cadence.made(120)
    cadence.attempt_started(120)
    assert cadence._probes_pending == 0  # a copy in flight when the attempt failed is gone


def test_cadences_take_what_the_copies_measured():
    snapshot_costs: deque[tuple[int, float | None, float | None]] = deque()
    save_costs: deque[tuple[int, float | None, float | None]] = deque()
    cadences = Cadences(_cadence(), _cadence(), snapshot_costs, save_costs)
    for _ in range(20):
        cadences.step_done(0.010)
    assert list(cadences.snapshot.step_seconds) == list(cadences.checkpoint.step_seconds)
    for wall in (1.0, 0.2):  # the first sample of each kind is dropped
        snapshot_costs.append((21, 0.003, 0.004))
        save_costs.append((21, wall, wall))
        changed = cadences.measured()
    assert changed == [cadences.snapshot, cadences.checkpoint]
    assert (list(cadences.snapshot.costs), list(cadences.snapshot.walls)) == ([0.003], [0.004])
    assert (list(cadences.checkpoint.costs), list(cadences.checkpoint.walls)) == ([0.2], [0.2])
    save_costs.append((22, None, None))  # a failed save: no sample
    assert cadences.measured() == []


def test_checkpoint_probes_wait_for_the_snapshot_ones():
    cadences = Cadences(_cadence(), _cadence(), deque(), deque())
    step = WARMUP_STEPS
    assert cadences.due(step, snapshot_busy=False, saving=False) == (True, False)
    cadences.snapshot.made(step)
    assert cadences.due(step + 2, snapshot_busy=True, saving=False) == (False, False)
    # Snapshots off: the checkpoint probes at once.
    off = Cadences(_cadence(0), _cadence(), deque(), deque())
    assert off.due(step, snapshot_busy=False, saving=False) == (False, True)


def test_the_trainer_flag_and_the_api_share_the_budget_defaults():
    assert train_cli.DEFAULT_OVERHEAD_BUDGET_PERCENT == DEFAULT_OVERHEAD_BUDGET_PERCENT
    assert train_cli.MAX_OVERHEAD_BUDGET_PERCENT == MAX_OVERHEAD_BUDGET_PERCENT


def test_a_new_attempt_does_not_measure_the_copies_of_the_failed_one():
    snapshot_costs: deque[tuple[int, float | None, float | None]] = deque()
    save_costs: deque[tuple[int, float | None, float | None]] = deque()
    cadences = Cadences(_cadence(), _cadence(), snapshot_costs, save_costs)
    save_costs.append((25, 0.2, 0.2))
    snapshot_costs.append((25, 0.003, 0.004))
    cadences.attempt_started(20)  # rewound to step 20
    assert not save_costs and not snapshot_costs and cadences.measured() == []


def test_a_copy_that_fits_is_made_every_step_one_that_does_not_every_n():
    # A snapshot's share of the default budget (1 %) against a 0.5 s step: 5 ms.
    share = budget_shares(DEFAULT_OVERHEAD_BUDGET_PERCENT / 100, None, None)[0]
    every = choose_period(CadenceInputs(share, [0.004] * 5, [0.5] * 10, 10_000,
                                        walls=[0.2] * 5))
    assert (every.period, every.reason) == (1, "WithinBudget")
    assert every.overhead is not None and every.overhead <= share
    # The fallback: a copy past the budget every N steps; one that lasts more than half a
    # step no sooner than it is published (two host copies at most).
    assert choose_period(CadenceInputs(share, [0.012] * 5, [0.5] * 10, 10_000)).period == 3
    assert choose_period(CadenceInputs(share, [0.004] * 5, [0.5] * 10, 10_000,
                                       walls=[0.3] * 5)).period == 2


def test_a_chosen_snapshot_due_while_the_last_is_in_flight_is_deferred_not_waited_for():
    cadences = Cadences(_cadence(), _cadence(0), deque(), deque())
    _probe_until_chosen(cadences.snapshot, 0.003, 0.9)
    assert cadences.snapshot.period == 1
    cadences.snapshot.made(20)
    # Step 21's copy is due, but step 20's is not published: the next step's instead.
    assert cadences.due(21, snapshot_busy=True, saving=False) == (False, False)
    assert cadences.due(22, snapshot_busy=False, saving=False) == (True, False)
    assert cadences.snapshot.deferred == 1
    assert "1 deferred a step" in (cadences.snapshot.report().message or "")
    # A period the job set is not deferred (copies.py waits for the copy before).
    fixed = Cadences(_cadence(1), _cadence(0), deque(), deque())
    assert fixed.due(21, snapshot_busy=True, saving=False) == (True, False)


def test_with_a_copy_every_step_the_steps_beside_it_are_measured():
    cadences = Cadences(_cadence(), _cadence(), deque(), deque())
    cadences.step_done(0.9, beside_snapshot=True)  # probing: a step beside a copy is not
    assert list(cadences.snapshot.step_seconds) == []
    _probe_until_chosen(cadences.snapshot, 0.003, 0.9)
    assert cadences.every_step()
    # No step is clean now: those beside the copy are the step times there are, so a step
    # that gets much shorter makes the copy, no longer within the budget, less frequent.
    for _ in range(40):
        cadences.step_done(0.01, beside_snapshot=True)
    cadences.snapshot.add_cost(0.003)
    assert cadences.snapshot.decide().period > 1
    assert not cadences.every_step()
    # A period the job set of 1: its steps beside a copy stay out.
    fixed = Cadences(_cadence(1), _cadence(), deque(), deque())
    fixed.step_done(0.5, beside_snapshot=True)
    assert list(fixed.snapshot.step_seconds) == []
