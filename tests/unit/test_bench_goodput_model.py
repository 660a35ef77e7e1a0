"""The goodput model (bench/goodput_model.py, goodput_timeline.py): what one
interruption costs each policy, a month played on a job's timeline, its causes adding up
to the month, its budgets spent as the operator spends them."""
from __future__ import annotations

import pytest

from bench.goodput_model import (
    CAUSES,
    POLICIES,
    RATES,
    SHARES,
    Hardware,
    Job,
    Local,
    cadenced,
    plan,
    with_values,
)
from bench.goodput_timeline import Event, Timeline, draw, month, months
from elastic_api.budgets import JOBSET_RESTARTS, mean_seconds_between

HW = Hardware()
LOCAL = Local(detect={("ours", "hard"): 0.2, ("baseline", "hard"): 0.3},
              back={("ours", "hard"): 2.0, ("baseline", "hard"): 4.0,
                    ("baseline", "crash"): 4.0, ("ours", "crash"): 4.0}, start=15.0)
LLAMA3 = RATES["Llama 3"][0]


def _pause(p: object) -> float:
    return sum(s for _, s in p.pause)  # type: ignore[attr-defined]


def test_a_hardware_failure_costs_ours_a_slice_and_plain_jobset_everything() -> None:
    job = Job(16)  # its batch of 4,096 does not split over 15 slices: it pauses
    ours, base = plan("ours", "hard", job, HW, LOCAL), plan("jobset", "hard", job, HW, LOCAL)
    assert ours.restores == "snapshot" and base.restores == "checkpoint"
    assert _pause(ours) == pytest.approx(13.0 + 0.2 + 50.0 + 2.0 + 5.4 + 12.7)
    assert _pause(base) == pytest.approx(0.3 + 4.0 + 130.0 + 15.0 + 5.4 + 12.7)
    xpk = plan("xpk", "hard", job, HW, LOCAL)
    assert _pause(xpk) == pytest.approx(_pause(base) + HW.resubmit.value)


def test_training_on_the_slices_left_pays_a_second_transition_not_the_wait() -> None:
    assert not Job(16).train_on and not Job(3, batch=7680).train_on
    on = plan("ours", "hard", Job(16, batch=7680), HW, LOCAL)  # splits over 15 slices
    assert on.reduced == pytest.approx(50.0 + 2.0) and on.regrow
    assert _pause(on) == pytest.approx(13.2 + 5.4 + 12.7)


def test_announced_and_found_moves_redo_nothing() -> None:
    for kind in ("maintenance", "slow"):
        assert plan("ours", kind, Job(16), HW, LOCAL).restores is None
    assert plan("jobset", "maintenance", Job(16), HW, LOCAL).restores == "checkpoint"


def test_a_hang_waits_for_the_watchdog_or_the_collective_timeout() -> None:
    ours, base = plan("ours", "hang", Job(16), HW, LOCAL), plan("jobset", "hang", Job(16),
                                                                 HW, LOCAL)
    assert ours.pause[0] == ("stalled", HW.watchdog.value)
    assert base.pause[0] == ("stalled", HW.collective_timeout.value)


def test_a_crash_restarts_main_in_place_and_only_the_variant_keeps_the_snapshot() -> None:
    ours = plan("ours", "crash", Job(16), HW, LOCAL)
    assert ours.restores == "checkpoint"
    # The API's defaults restart main in place (issue 66): the slices are not recreated.
    waited = dict(ours.pause)["waitingForSlices"]
    assert waited < HW.jobset_up.value <= dict(plan("jobset", "crash", Job(16), HW, LOCAL)
                                                .pause)["waitingForSlices"]
    kept = plan("ours-snapshot-kept", "crash", Job(16), HW, LOCAL)
    assert kept.restores == "snapshot"
    assert dict(kept.pause)["waitingForSlices"] == waited


def test_ours_checkpoints_toward_the_priors_young_daly_period_the_baselines_at_theirs(
        ) -> None:
    """The trainer's cadence as the model plays it: 2 s a save within 1 % is every 200 s;
    at 1,024 hosts the crashes' prior MTBF (~28 h at the highest published rate)
    lengthens it to sqrt(2 x 2 x MTBF), about 634 s; at 16,384 hosts that optimum is
    shorter than the budget's, which stays. Snapshots keep the budget's period."""
    mtbf = mean_seconds_between(JOBSET_RESTARTS, 1024)
    small = cadenced("ours", Job(16), LLAMA3, HW)
    assert small.checkpoint_period.value == pytest.approx((4.0 * mtbf) ** 0.5)
    assert 600 < small.checkpoint_period.value < 4 * 200
    assert small.checkpoint_overhead.value < HW.copy_budget.value / 3
    assert small.snapshot_period.value == pytest.approx(200.0)
    assert cadenced("ours", Job(256), LLAMA3, HW).checkpoint_period.value == \
        pytest.approx(200.0)
    base = cadenced("jobset", Job(16), LLAMA3, HW)
    assert base.checkpoint_period.value == HW.baseline_checkpoint.value


def test_a_restore_throws_away_the_training_since_its_copy() -> None:
    hw = with_values(HW, snapshot_period=100.0, checkpoint_period=1000.0)
    line = Timeline(Job(4), hw, overhead=0.0)
    line.run_until(250.0)  # 250 s trained: the snapshot at 200, the checkpoint none yet
    line.interrupt(plan("ours", "hard", Job(4), hw, Local()))
    assert line.lost["recomputedSteps"] == pytest.approx(50.0)
    line.run_until(1000.0)
    assert line.useful + sum(line.lost.values()) == pytest.approx(1000.0)


def test_the_causes_add_up_to_the_month() -> None:
    job = Job(16)
    events = draw(job, LLAMA3, seed=3)
    for policy in POLICIES:
        m = month(policy, job, events, HW, LOCAL)
        assert set(m.lost) == set(CAUSES)
        assert m.useful + sum(m.lost.values()) == pytest.approx(m.seconds)
        assert 0 < m.goodput < 1


def test_a_month_draws_the_published_mix() -> None:
    job = Job(256)  # 16,384 hosts: ~62 interruptions a day at Llama 3's rate
    events = draw(job, LLAMA3, seed=1)
    counts = {k: sum(1 for e in events if e.kind == k) for k in SHARES}
    expected = LLAMA3 * job.hosts * 30 / 1000
    assert sum(counts.values()) == pytest.approx(expected, rel=0.1)
    assert counts["hard"] > counts["crash"] > counts["hang"]
    assert draw(job, LLAMA3, seed=1) == events and draw(job, LLAMA3, seed=2) != events


def test_ours_beats_plain_jobset_which_beats_xpk_and_spends_no_budget() -> None:
    result = {p: months(p, Job(16), LLAMA3, range(4), HW, LOCAL) for p in POLICIES}
    goodput = {p: r["goodput"]["mean"] for p, r in result.items()}  # type: ignore[index]
    assert goodput["ours"] > goodput["jobset"] > goodput["xpk"]
    assert result["ours"]["budgets_spent"] == 0


def test_a_crash_loop_spends_the_budget_and_costs_a_resubmission() -> None:
    job = Job(16)
    loop = [Event(100.0 + 10 * n, "crash", 0) for n in range(8)]
    m = month("ours", job, loop, HW, LOCAL, days=1.0)
    assert m.budgets_spent and m.lost["other"] >= HW.resubmit.value  # resubmitted
