"""What the chaos tests read in a trainer's log (tests/support/trainer_run.py), fed the
lines the trainer itself writes (elastic_trainer.events.ElasticEvent.log_line): a change
of that line's words fails here, not as a chaos run's miscounted write fault."""
from __future__ import annotations

from pathlib import Path

from elastic_trainer.events import ElasticEvent
from tests.support.trainer_run import TrainerProcesses


def event(id: int, kind: str, slices: list[int]) -> ElasticEvent:
    return ElasticEvent(id=id, kind=kind, error="DATA_LOSS: slice down", failed_step=40,
                        slices_down=slices, detected_at=10.0, fault_at=9.5,
                        restored_from_step=35, restore_source="snapshot",
                        restore_seconds=0.1, resumed_at=11.0, resumed_step=36,
                        active_slices_after=3)


def trainer_with_log(tmp_path: Path, lines: list[str]) -> TrainerProcesses:
    trainer = TrainerProcesses(["etj"], {}, tmp_path)
    trainer.started = 1
    trainer.log.write_text("".join(f"2026-12-02 INFO elastic_trainer: {line}\n"
                                   for line in lines))
    return trainer


def test_each_resumed_slice_loss_counts_once_and_a_scale_up_not_at_all(
        tmp_path: Path) -> None:
    lines = [event(1, "slice_down", [0]).log_line(),
             event(2, "scale_up", []).log_line(),
             event(3, "slice_down", [0, 2]).log_line(),
             "elastic event 4: DATA_LOSS: slice 1 is down at step 90 (mesh of 3 slices)"]
    assert trainer_with_log(tmp_path, lines).resumed_after_slice_loss() == 2


def test_a_cut_write_counts_as_a_write_failure(tmp_path: Path) -> None:
    lines = ["checkpoint save of step 30 was cut by a slice loss (DATA_LOSS: slice 0 "
             "went down during the checkpoint write)", event(1, "slice_down", [0]).log_line()]
    trainer = trainer_with_log(tmp_path, lines)
    assert (trainer.write_failures(), trainer.resumed_after_slice_loss()) == (1, 1)
