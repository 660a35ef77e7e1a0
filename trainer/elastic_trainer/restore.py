"""Where an attempt starts from: the newer of the snapshot (from the replicas that survived
a slice loss) and the newest committed checkpoint, else a fresh start. A restore that
fails drops the snapshot (it is never tried again); one with no surviving replica falls
back to the checkpoint. What was restored, its bytes and how long it took, is
status.training.lastRestore (docs/status-contract.md).
"""
from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import Any

import jax

from elastic_api.restores import TRAINER, restore_report
from elastic_trainer import train
from elastic_trainer.backends import Backend
from elastic_trainer.checkpoint import Checkpointer
from elastic_trainer.snapshots import NoSurvivingReplica, ReplicaSnapshots
from elastic_trainer.training_status import TrainingStatus

log = logging.getLogger("elastic_trainer")


class Restorer:
    def __init__(self, spec: train.StateSpec, snapshots: ReplicaSnapshots,
                 checkpointer: Checkpointer, backend: Backend, status: TrainingStatus
                 ) -> None:
        self.spec, self.snapshots, self.checkpointer = spec, snapshots, checkpointer
        self.backend, self.status = backend, status

    def restore(self, compiled: train.CompiledStep, active: set[int]
                ) -> tuple[Any, int, str, float]:
        """The state on `compiled`'s mesh over `active`: (state, its step, its source:
        snapshot, checkpoint or none, seconds the restore took)."""
        t0 = time.time()
        self.status.goodput.begin("restore", t0)
        try:
            state, from_step, source = self._newest(compiled)
            jax.block_until_ready(state)
            # A slice lost during the restore fails this attempt like a lost step would.
            # The phase carries the step that was running when the event hit.
            self.backend.on_phase("restore", self.status.progress.step + 1)
            self.backend.check(active)
        except BaseException:
            self.snapshots.discard("the restore from it failed")
            raise
        restored = time.time()
        self.status.goodput.restored(from_step, restored)
        self._record(state, from_step, source, restored - t0, restored)
        return state, from_step, source, restored - t0

    def _newest(self, compiled: train.CompiledStep) -> tuple[Any, int, str]:
        target = self.spec.target(compiled.shardings)
        snap_step = self.snapshots.latest_step()
        ckpt_step = self.checkpointer.latest_committed_step()
        if snap_step is not None and (ckpt_step is None or snap_step >= ckpt_step):
            try:
                return self.snapshots.restore(target), snap_step, "snapshot"
            except NoSurvivingReplica as err:
                log.warning("snapshot of step %d: %s; restoring from the newest committed "
                            "checkpoint", snap_step, err)
        elif snap_step is not None:
            self.snapshots.discard(f"the checkpoint of step {ckpt_step} is newer")
        if ckpt_step is not None:
            return self.checkpointer.restore(ckpt_step, target), ckpt_step, "checkpoint"
        return compiled.init_fn(), 0, "none"

    def _record(self, state: Any, step: int, source: str, seconds: float, at: float) -> None:
        """status.training.lastRestore: bytes as the operator's scan counts a checkpoint
        step, or the state's bytes for a snapshot."""
        if source == "none":
            return
        if source == "checkpoint":
            size = self.checkpointer.step_size(step)
            nbytes = size.bytes if size is not None else None
        else:
            nbytes = sum(int(leaf.nbytes) for leaf in jax.tree.leaves(state))
        self.status.last_restore = restore_report(
            source=source, step=step, nbytes=nbytes, seconds=seconds,
            restored_at=datetime.fromtimestamp(at, UTC), measured_by=TRAINER)
        log.info("restored step %d from %s: %s bytes in %.3fs", step, source, nbytes, seconds)
