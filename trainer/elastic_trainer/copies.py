"""The copies of the training state the loop makes after a step: a snapshot (snapshots.py)
and a checkpoint (checkpoint.py) when their cadences (cadence.py) make them due, and what
they cost measured against the steps, so that a period the trainer chooses (the job gave
none) is decided again as the costs, the failures and the free host memory change.

Both copies of a step work from one copy in pinned host memory, made by one program the
training thread only dispatches; the rest happens in the background while the next steps
run. Only clean steps are measured: not an attempt's first (it compiles), none with a
copy in flight.
"""
from __future__ import annotations

import logging
import time
from typing import Any

from elastic_trainer.backends import Backend
from elastic_trainer.cadence import Cadence, Cadences, host_memory_available
from elastic_trainer.checkpoint import Checkpointer
from elastic_trainer.snapshots import ReplicaSnapshots, to_pinned_host
from elastic_trainer.training_status import TrainingStatus

log = logging.getLogger("elastic_trainer")


class Copies:
    def __init__(self, cadences: Cadences, snapshots: ReplicaSnapshots,
                 checkpointer: Checkpointer, backend: Backend, status: TrainingStatus,
                 state_bytes: int) -> None:
        """`state_bytes`: the size of the training state (of one replica of a snapshot)."""
        self.cadences, self.snapshots, self.checkpointer = cadences, snapshots, checkpointer
        self.backend, self.status, self.state_bytes = backend, status, state_bytes
        self._attempt_step = 0  # the step the current attempt started from
        self._copy_until = 0  # the steps up to this one ran with a copy in flight

    def attempt_started(self, step: int) -> None:
        self.cadences.attempt_started(step)
        self._attempt_step = step

    def due(self, step: int) -> tuple[bool, bool]:
        """(snapshot, checkpoint) of the state after `step`, by the cadences."""
        return self.cadences.due(step, self.snapshots.busy(), self.checkpointer.saving())

    def make(self, step: int, state: Any, ready: Any, active: set[int], snapshot: bool,
             checkpoint: bool) -> None:
        """Dispatch the copy of `state` (after `step`) and hand it to the snapshot and/or
        the checkpoint save. `ready`: an output of the step, ready once the state is."""
        if snapshot and self.snapshots.busy():
            # A period the job set (a chosen one defers instead: Cadences.due): its copy
            # is kept, once the one before is published: two host copies at most.
            self.snapshots.settle()
        # This thread's CPU time, not its wall time: on CPU the dispatch also waits for
        # the step that makes `state`, which is no cost of the copy.
        cpu = time.thread_time()
        pinned = to_pinned_host(state)
        if snapshot:
            self.snapshots.take(step, pinned, ready, dispatch=time.thread_time() - cpu)
            self.cadences.snapshot.made(step)
        if checkpoint and self.checkpointer.save(
                step, pinned, write_hook=self.backend.checkpoint_write_hook(active)):
            self.cadences.checkpoint.made(step)
        self._copy_until = step + 1  # the next step waits for the copy to read the state

    def in_flight(self, step: int) -> bool:
        """`step` runs beside a copy (it waits for the copy to read the state)."""
        return step <= self._copy_until

    def step_done(self, step: int, seconds: float) -> None:
        """`step` took `seconds`: measured if clean; the cadences whose copies were
        measured since are decided again."""
        if step > self._attempt_step + 1 and not self.checkpointer.saving():
            self.cadences.step_done(seconds, beside_snapshot=self.in_flight(step)
                                    or self.snapshots.busy())
        for cadence in self.cadences.measured():
            self.decide(cadence)

    def decide(self, cadence: Cadence) -> None:
        before = (cadence.period, cadence.choice.reason)
        snapshot = cadence is self.cadences.snapshot
        # Failures this kind of copy would have saved steps from: any slice loss for a
        # snapshot; for a checkpoint, those a snapshot did not cover.
        failures = sum(1 for e in self.status.events if e.kind == "slice_down" and (
            snapshot or e.restore_source in ("checkpoint", "none")))
        choice = cadence.decide(failures, time.time() - self.status.process_started_at,
                                self._memory_headroom() if snapshot else None)
        if choice.period != before[0] or before[1] == "Measuring":
            log.info("%s cadence: every %d step(s) (%s: %s)",
                     "snapshot" if snapshot else "checkpoint", choice.period, choice.reason,
                     choice.message)
            self.status.report()

    def _memory_headroom(self) -> float | None:
        """Free host memory in copies of the snapshot (one replica per active slice). On
        the simulated backend the slices' pinned host memory is this host's; on Pathways
        it is the TPU hosts', which the controller cannot see (None: not weighed)."""
        if self.backend.name != "simulated":
            return None
        available = host_memory_available()
        copy = self.state_bytes * max(1, self.status.progress.active_slices or 1)
        return None if available is None or copy <= 0 else available / copy

    def settle(self) -> None:
        """Let the snapshot hand-off and the checkpoint save in flight finish (bounded)
        before the run returns: a daemon thread still inside the runtime (a copy being
        waited for) when the process exits makes the C++ runtime abort the process."""
        for name, wait in (("snapshot", self.snapshots.settle), ("checkpoint",
                                                                  self.checkpointer.wait)):
            try:
                wait()
            except Exception as err:  # the run's own outcome is what to report
                log.info("waiting for the %s in flight at the end: %s", name, err)
