from __future__ import annotations

from elastic_devtools.demo.summary import cadence_chosen, cadence_lines, cadence_text, summarize

KILLED = 1000.0


def _trainer_summary() -> dict:
    steps = [[s, 990.0 + 0.1 * s] for s in range(1, 101)]  # steps 1..100 up to t=1000
    steps += [[s, 1010.0 + 0.1 * (s - 96)] for s in range(96, 150)]  # rewound to 95
    return {
        "final_step": 149, "final_loss": 1.25, "process_id": 42, "step_times": steps,
        "elastic_events": [{
            "failed_step": 100, "restored_from_step": 95, "restore_source": "snapshot",
            "steps_lost": 5, "detected_at": 1001.5, "resumed_at": 1010.0,
        }],
    }


def test_summary_measures_from_the_kill() -> None:
    result = summarize(
        killed_at=KILLED, slice_down_at=1000.4, trainer_summary=_trainer_summary(),
        status_before={"training": {"processId": 42}},
        status_after={"training": {"processId": 42, "totalSteps": 149}},
        jobset_restarts=0, condition_reasons=["SliceDown", "Recovering", "Recovered"],
    )
    assert round(result.detect_seconds or 0, 3) == 0.4
    assert round(result.trainer_detect_seconds or 0, 3) == 1.5
    assert result.resume_seconds == 10.0
    assert result.steps_lost == 5 and result.restore_source == "snapshot"
    assert result.same_process
    assert set(result.to_json()) >= {"detect_seconds", "resume_seconds", "steps_lost"}


def test_a_different_process_is_reported() -> None:
    result = summarize(
        killed_at=KILLED, slice_down_at=None, trainer_summary=_trainer_summary(),
        status_before={"training": {"processId": 42}},
        status_after={"training": {"processId": 43}},
        jobset_restarts=1, condition_reasons=[],
    )
    assert not result.same_process
    assert result.detect_seconds is None


def test_the_summary_shows_the_move_to_the_spare() -> None:
    result = summarize(
        killed_at=KILLED, slice_down_at=1000.4, trainer_summary=_trainer_summary(),
        status_before={"training": {"processId": 42}},
        status_after={"training": {"processId": 42, "totalSteps": 149}},
        jobset_restarts=0, condition_reasons=["SliceDown", "Recovering", "Recovered"],
        replacement={"fromPool": "tpu-v5e-4x4-2", "toPool": "tpu-v5e-4x4-3",
                     "readyAt": "1970-01-01T00:16:46.500000Z"},  # 1006.5
    )
    assert result.replaced_seconds == 6.5
    assert (result.moved_from_pool, result.moved_to_pool) == ("tpu-v5e-4x4-2", "tpu-v5e-4x4-3")


def _cadence(period: int, reason: str, chosen_by: str = "Trainer") -> dict:
    return {"periodSteps": period, "chosenBy": chosen_by, "reason": reason,
            "message": "a copy costs 3.0 ms, a step 100.0 ms", "overheadPercent": 1.5}


def test_the_summary_shows_the_cadences_the_trainer_chose() -> None:
    training = {"processId": 42, "snapshotCadence": _cadence(2, "WithinBudget"),
                "checkpointCadence": _cadence(40, "CopySlowed")}
    result = summarize(
        killed_at=KILLED, slice_down_at=1000.4, trainer_summary=_trainer_summary(),
        status_before={"training": training}, status_after={"training": {"processId": 42}},
        jobset_restarts=0, condition_reasons=[])
    assert result.snapshot_cadence == "every 2 steps (WithinBudget, 1.5 % of step time)"
    assert result.checkpoint_cadence == "every 40 steps (CopySlowed, 1.5 % of step time)"
    assert cadence_lines(training) == [
        "snapshots: every 2 steps (WithinBudget, 1.5 % of step time): a copy costs 3.0 ms, "
        "a step 100.0 ms",
        "checkpoints: every 40 steps (CopySlowed, 1.5 % of step time): a copy costs 3.0 ms, "
        "a step 100.0 ms"]


def test_a_cadence_still_measuring_or_set_by_the_job_is_not_chosen_yet() -> None:
    assert cadence_chosen(_cadence(2, "WithinBudget"))
    assert not cadence_chosen(_cadence(2, "Measuring"))
    assert not cadence_chosen(_cadence(5, "UserSet", chosen_by="User"))
    assert not cadence_chosen(None) and not cadence_chosen("every step")
    assert cadence_text(_cadence(0, "Off", chosen_by="User")) == "off (Off)"
    assert cadence_text(None) is None
