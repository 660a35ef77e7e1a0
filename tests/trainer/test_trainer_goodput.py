"""The goodput account (elastic_trainer.goodput_tracker): hand-computed timelines, times
passed in."""
from __future__ import annotations

import time
from typing import Any

import pytest

from elastic_api.models import GoodputCounters, TrainerGoodput
from elastic_trainer.goodput_tracker import GoodputAccount
from elastic_trainer.report import prior_state


def _causes(account: GoodputAccount) -> dict[str, float]:
    return account.report().badput_seconds.model_dump()


def test_a_run_with_a_restore_of_an_older_step() -> None:
    g = GoodputAccount(started_at=100.0)
    g.begin("restore", 102.0)          # startup 2
    g.restored(0, 103.0)               # restore 1
    g.step_done(1, 108.0)              # 5 s: compiles; no median yet, split later
    assert g.report().productive_seconds == 0.0
    g.step_done(2, 109.0)              # 1 s; median 1: step 1 = 1 productive + 4 startup
    g.step_done(3, 110.5)              # 1.5 s
    g.begin("checkpointing", 110.5)
    g.begin("step", 111.0)             # checkpointing 0.5
    g.step_done(4, 112.0)              # 1 s; productive 1 + 1 + 1.5 + 1 = 4.5
    assert g.report().productive_seconds == 4.5
    assert g.median_step_seconds() == 1.0
    g.failed(112.5)                    # step 5 cut short: 0.5 recomputed
    g.begin("restore", 114.0)          # waiting for slices 1.5
    g.restored(2, 114.25)              # restore 0.25; steps 3 and 4 (2.5 s) are redone
    assert g.report().productive_seconds == 2.0
    g.step_done(3, 116.0)              # 1.75 s: 1 normal + 0.75 recompile
    g.finish(116.0)
    report = g.report()
    assert report.productive_seconds == 3.0
    assert _causes(g) == {"waiting_for_slices": 1.5, "restore": 1.25, "recompile": 0.75,
                          "recomputed_steps": 3.0, "checkpointing": 0.5, "startup": 6.0,
                          "fewer_slices": 0.0, "stalled": 0.0, "slow_slices": 0.0}
    assert report.median_step_seconds == 1.0
    assert report.productive_seconds + sum(_causes(g).values()) == 116.0 - 100.0


def test_steps_on_fewer_slices_held_up_or_hung_lose_their_share() -> None:
    """The causes the benchmark's model names: a step on 3 of 4 slices loses a quarter of
    its time to fewerSlices; one held up by a slice at 1.25x loses a fifth to slowSlices;
    a hung step is stalled until noticed (beyond a normal step), the rest recomputed."""
    g = GoodputAccount(started_at=0.0, prior=TrainerGoodput(median_step_seconds=1.0))
    g.begin("restore", 0.0)
    g.restored(0, 0.0)
    g.step_done(1, 1.0)                       # normal: 1 s kept
    g.step_done(2, 3.0, fewer=0.25)           # 2 s on 3 of 4 slices: 1.5 kept
    g.step_done(3, 4.0, slow=0.2)             # 1 s held up: 0.8 kept
    g.step_done(4, 5.0, fewer=0.9, slow=0.6)  # never more than the step itself
    g.failed(15.0, stalled=8.0)               # hung from 5.0, noticed at 14.0
    g.finish(15.0)
    causes = _causes(g)
    assert causes["fewer_slices"] == pytest.approx(0.5 + 0.6)
    assert causes["slow_slices"] == pytest.approx(0.2 + 0.4)
    assert causes["stalled"] == 8.0 and causes["recomputed_steps"] == 2.0
    assert g.report().productive_seconds == pytest.approx(1.0 + 1.5 + 0.8)
    assert g.report().productive_seconds + sum(causes.values()) == pytest.approx(15.0)


def test_the_loops_own_work_after_a_step_counts_with_that_step() -> None:
    g = GoodputAccount(started_at=0.0, prior=TrainerGoodput(median_step_seconds=1.0))
    g.begin("restore", 0.0)
    g.restored(0, 0.0)
    g.step_done(1, 1.0)                # the median is known: settled at once, 1 s kept
    g.begin("checkpointing", 1.2)      # 0.2 s of the loop's own work after step 1
    g.begin("step", 1.5)               # checkpointing 0.3
    g.step_done(2, 2.5)                # 1 s
    assert g.report().productive_seconds == 2.2
    assert _causes(g)["checkpointing"] == 0.3
    g.begin("checkpointing", 2.6)      # 0.1 with step 2 ...
    g.failed(3.0)                      # ... and a save cut by a lost slice: 0.4 checkpointing
    assert _causes(g)["checkpointing"] == 0.7
    assert _causes(g)["recomputed_steps"] == 0.0
    g.begin("restore", 3.0)
    g.restored(1, 3.5)                 # step 2 and its 0.1 are redone
    assert _causes(g)["recomputed_steps"] == 1.1
    g.step_done(2, 5.0)                # 1.5 s; median 1 (step 2): 0.5 recompile
    assert _causes(g)["recompile"] == 0.5
    g.finish(5.4)                      # 0.4 after the last step counts with it
    assert g.report().productive_seconds == 1.2 + 1.0 + 0.4
    assert g.total_seconds() == pytest.approx(5.4)


def test_a_replacement_process_continues_and_moves_the_lost_steps() -> None:
    prior = TrainerGoodput(productive_seconds=50.0, median_step_seconds=0.5,
                           badput_seconds=GoodputCounters(restore=2.0, startup=3.0))
    g = GoodputAccount(started_at=1000.0, prior=prior, prior_step=100)
    g.begin("restore", 1004.0)         # startup 3 + 4
    g.restored(90, 1005.0)             # restore 2 + 1; steps 91..100 of the earlier
    #                                    process are redone: 10 x 0.5 s
    report = g.report()
    assert report.productive_seconds == 45.0
    assert report.badput_seconds.recomputed_steps == 5.0
    assert (report.badput_seconds.startup, report.badput_seconds.restore) == (7.0, 3.0)
    g.step_done(91, 1007.0)            # 2 s, the median carried over (0.5): 1.5 startup
    assert g.report().productive_seconds == 45.5
    assert _causes(g)["startup"] == 8.5
    # A later restore of this process moves only its own steps.
    g.step_done(92, 1007.5)
    g.failed(1007.6)
    g.begin("restore", 1008.0)
    g.restored(90, 1008.5)
    assert g.report().productive_seconds == 45.0  # steps 91 and 92 (0.5 each) redone


def test_a_single_step_run_keeps_its_step_without_a_median() -> None:
    g = GoodputAccount(started_at=0.0)
    g.begin("restore", 1.0)
    g.restored(0, 1.0)
    g.step_done(1, 3.0)
    g.begin("checkpointing", 3.0)
    g.finish(3.5)
    assert g.report().productive_seconds == 2.0
    assert _causes(g)["checkpointing"] == 0.5 and _causes(g)["startup"] == 1.0


def test_an_unknown_activity_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown activity"):
        GoodputAccount(0.0).begin("lunch", 1.0)


def _earlier_goodput(goodput: Any) -> Any:
    """What a replacement process takes of an earlier one's status.training.goodput."""
    training = {"observedAt": "2026-11-30T09:00:00Z", "state": "Training", "goodput": goodput}
    return prior_state({"training": training}, max_retries=3).goodput


def test_a_sound_earlier_report_is_trusted() -> None:
    wire = {"productiveSeconds": 12, "badputSeconds": {"restore": 1.5},
            "medianStepSeconds": 0.25, "future": "ignored"}
    goodput = _earlier_goodput(wire)
    assert goodput is not None and goodput.productive_seconds == 12.0
    assert goodput.badput_seconds.restore == 1.5


@pytest.mark.parametrize("garbage", [
    None, "12", [1], {"productiveSeconds": -1}, {"productiveSeconds": True},
    {"productiveSeconds": "12"}, {"productiveSeconds": float("inf")},
    {"badputSeconds": {"restore": float("nan")}}, {"badputSeconds": []},
    {"medianStepSeconds": -0.5},
])
def test_a_hostile_earlier_report_is_ignored(garbage: Any) -> None:
    assert _earlier_goodput(garbage) is None


def test_a_run_accounts_for_its_wall_time_and_the_redone_steps(run_trainer: Any) -> None:
    """`etj train` on simulated slices, slice 1 lost in step 23 without snapshots: the
    checkpoint of step 20 is restored, steps 21 and 22 are done again. (Synchronous
    saves: an async one of step 20 may still be writing when the slice goes. Snapshots
    off, not auto: auto chooses a period from the step and snapshot times it measures, and
    on a loaded machine it took one of step 22.)"""
    before = time.time()
    run = run_trainer("--fail-at", "23:1", "--no-async-checkpoint", "--snapshot-period", "0")
    after = time.time()
    assert run.returncode == 0, run.log[-4000:]
    [event] = run.events()
    assert (event["restored_from_step"], event["steps_lost"]) == (20, 2)
    s = run.summary
    goodput = TrainerGoodput.model_validate(s["goodput"])
    causes = goodput.badput_seconds
    # From the process's start (read from /proc: before the imports) to the end of the
    # run, every second is in one counter.
    started, finished = s["process_started_at"], s["finished_at"]
    assert before - 0.05 <= started < finished <= after  # /proc: 10 ms ticks
    accounted = goodput.productive_seconds + sum(causes.model_dump().values())
    assert accounted == pytest.approx(finished - started, abs=0.01)
    # Steps 21 and 22 and the part of step 23 before the loss: redone.
    times = dict(s["step_times"][:22])  # the first pass: steps 1..22
    assert causes.recomputed_steps >= times[22] - times[21] > 0
    assert causes.restore > 0 and causes.startup > 0 and causes.checkpointing > 0
    assert goodput.median_step_seconds is not None and goodput.median_step_seconds > 0
    assert 0 < goodput.productive_seconds < accounted
