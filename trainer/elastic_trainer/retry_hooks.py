"""What the trainer does between two attempts (the hooks of retry.run_elastic): a slice
lost is an elastic event, named for the hang or the straggler the trainer asked to be
replaced when those are the slices lost (stalls.py), and the copies in flight are settled
before any restore; a scale up settles the snapshot it took. The wait for slices is
bounded by the elastic timeout, not the watchdog.
"""
from __future__ import annotations

import logging
import time

import jax

from elastic_trainer.backends import Backend
from elastic_trainer.checkpoint import Checkpointer
from elastic_trainer.errors import ScaleUpSignal
from elastic_trainer.events import ElasticEvent
from elastic_trainer.snapshots import ReplicaSnapshots
from elastic_trainer.stalls import Blamed, Stalls
from elastic_trainer.standby import swapped_in
from elastic_trainer.training_status import TrainingStatus
from elastic_trainer.watchdog import CHECKPOINT, Watchdog

log = logging.getLogger("elastic_trainer")


class Recovery:
    """retry.ElasticHooks for the loop."""

    def __init__(self, backend: Backend, status: TrainingStatus, watchdog: Watchdog,
                 stalls: Stalls, checkpointer: Checkpointer, snapshots: ReplicaSnapshots,
                 elastic_timeout: float | None) -> None:
        self.backend, self.status, self.watchdog, self.stalls = backend, status, watchdog, stalls
        self.checkpointer, self.snapshots = checkpointer, snapshots
        self.elastic_timeout = elastic_timeout

    def on_waiting(self, need: int) -> None:
        self.watchdog.disarm()  # the elastic timeout bounds the wait
        event = self.status.open_event()
        if event is not None:
            event.phase = "WaitingForSlices"
            self.status.report(urgent=True)
        log.info("waiting for %d healthy slice(s) (timeout %ss)", need, self.elastic_timeout)

    def on_slices_ready(self, active: set[int], waited_seconds: float) -> None:
        event = self.status.open_event()
        if event is not None:
            event.wait_seconds = (event.wait_seconds or 0.0) + waited_seconds
            event.slices_back_at = time.time()
            event.standby_swap = event.standby_swap or bool(swapped_in(self.backend))

    def on_slice_down(self, error: jax.errors.JaxRuntimeError, retrying: bool) -> None:
        detected = time.time()
        status = self.status
        self.watchdog.arm(CHECKPOINT, status.progress.step + 1)  # the settles below
        blamed = self.stalls.take_blamed()
        status.goodput.failed(detected, then="waiting_for_slices",
                              stalled=_stood_still(blamed, status.goodput.median_step_seconds()))
        if status.checkpoint_ack is not None and status.checkpoint_ack.paused:
            status.checkpoint_ack = status.checkpoint_ack.model_copy(update={"paused": False})
        down, fault_at = self.backend.failed_slices(error)
        text = str(error).splitlines()[0]
        if blamed is not None and blamed.slices & set(down):
            # The slices asked for are the ones lost: the event is the hang (or the
            # straggler), found when it was, not when the replacement took the slice.
            text, detected = f"{blamed.cause}; {text}", blamed.detected_at
            fault_at = blamed.fault_at if blamed.fault_at is not None else fault_at
        event = ElasticEvent(
            id=status.next_event_id(), kind="slice_down", error=text,
            failed_step=status.progress.step, slices_down=down, detected_at=detected,
            fault_at=fault_at,
        )
        status.add_event(event)
        status.progress.state = "Recovering"
        status.metrics.on_event()
        log.warning("elastic event %d: %s at step %d (mesh of %s slices)", event.id,
                    event.error, event.failed_step, status.progress.active_slices)
        status.report(urgent=True)
        # Before any restore: finish or fail the save that may be in flight and delete
        # what nothing will write any more; publish a snapshot copy that completed
        # before the loss (the replicas on lost slices go with them).
        self.checkpointer.settle()
        self.snapshots.settle()
        self.watchdog.disarm()

    def on_scale_up(self, signal: ScaleUpSignal, retrying: bool) -> None:
        self.watchdog.arm(CHECKPOINT, self.status.progress.step + 1)
        self.snapshots.settle()
        self.watchdog.disarm()
        self.status.goodput.begin("waiting_for_slices", time.time())


def _stood_still(blamed: Blamed | None, median: float | None) -> float:
    """How long a hung step stood still before the watchdog noticed (beyond a normal
    step): its slice's blame says when it began and when it was found."""
    if blamed is None or blamed.fault_at is None:
        return 0.0
    return max(0.0, blamed.detected_at - blamed.fault_at - (median or 0.0))
