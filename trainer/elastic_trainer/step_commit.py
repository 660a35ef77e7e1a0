"""A step's checkpoint, committed: saved unless a save of it is in flight or committed,
then waited for, as the CheckpointSave phase. The one way the loop's last checkpoint
(loop.py) and an answered checkpoint request (checkpoint_requests.py) reach a committed
step, so both time the wait alike: a wait that found its step committed already is not
learned from as a save (the watchdog's deadlines would shrink toward zero)."""
from __future__ import annotations

from collections.abc import Callable

from elastic_trainer.checkpoint import Checkpointer
from elastic_trainer.training_status import TrainingStatus
from elastic_trainer.watchdog import CHECKPOINT, Watchdog


def commit_step(checkpointer: Checkpointer, watchdog: Watchdog, status: TrainingStatus,
                step: int, save: Callable[[], None], *, timeout: float, phase_step: int
                ) -> bool:
    """Whether `step` was committed within `timeout` seconds; `save` starts its save when
    none is there. `phase_step`: the step the CheckpointSave phase is reported with."""
    saved = checkpointer.has_save_of(step)
    waits = not saved or checkpointer.in_flight_step == step
    with watchdog.during(CHECKPOINT, phase_step, measured=waits):
        status.report()
        if not saved:
            save()
        return checkpointer.wait_committed(step, timeout)
