"""In-memory snapshots of the training state, one replica per slice: orbax-checkpoint's
Pathways `Snapshotter`, with the rules the elastic loop needs around it.

orbax's Snapshotter (orbax.checkpoint.experimental.v1.training.pathways) copies the state
to `pinned_host` memory and splits the copy along the slice axis of the mesh
(pathwaysutils' `split_by_mesh_axis`), so each slice's hosts hold one full replica (the
parameters are replicated across slices, sharded within one). The copy runs in the
background while the next steps train; a background thread publishes it only once
`block_until_ready` succeeds for every replica. `load` keeps the replicas that are still
readable (a lost slice takes its replica with it), joins them and moves them onto the new
mesh: to pinned host memory there first, then to the devices.

What this module adds:
- the training thread only dispatches one jitted program that copies the whole state to
  pinned host memory on its own shardings (one dispatch instead of orbax's per-array
  `device_put`, which costs tens of milliseconds of Python on a large tree); a background
  thread hands that copy to the Snapshotter (the split, and the wait for completion);
- double-buffered: two host copies at most, the published one and the one in flight
  (`busy`); publishing the newer frees the older (the Snapshotter replaces it). The copy
  of step k is made only once the copy before is published (copies.py: a chosen cadence
  defers it a step, cadence.py; a period the job set waits), so with a copy every step
  the state to restore is at most one step back, and the training thread never queues
  behind the hand-off;
- `settle` after an elastic event publishes a copy that completed before the loss;
- a restore that fails is never tried again from the same snapshot (`discard`);
- no replica survived -> `NoSurvivingReplica`, and the loop restores the newest committed
  checkpoint instead.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from typing import Any

import jax

log = logging.getLogger(__name__)


class NoSurvivingReplica(RuntimeError):
    """Every replica of the snapshot was on a slice that was lost."""


@jax.jit
def to_pinned_host(state: Any) -> Any:
    """The whole state copied to pinned host memory, each array on its own sharding: one
    program, dispatched asynchronously. The copy is independent of `state`, so a step may
    donate `state` right after (the runtime lets it reuse the buffers only once read)."""
    return jax.tree.map(lambda x: jax.device_put(x, jax.memory.Space.Host), state)


class ReplicaSnapshots:
    def __init__(self, replica_axis_index: int = 0) -> None:
        self.replica_axis_index = replica_axis_index
        self._snapshotter = self._new()
        self.discarded = 0  # snapshots dropped after a failed restore (or made stale)
        # One copy in flight at most (the caller takes a copy only when not `busy`); a
        # scale-up's copy may queue behind one, briefly a third in host memory.
        self._handoff: queue.Queue[tuple[int, Any, Any, float]] = queue.Queue(maxsize=1)
        # (step, what it cost in seconds (see take()), its wall time from the step done to
        # published; None: not kept) of each snapshot handed off, for the cadence;
        # appended here, taken by the loop.
        self.costs: deque[tuple[int, float | None, float | None]] = deque(maxlen=64)
        threading.Thread(target=self._hand_off, name="snapshot-handoff", daemon=True).start()

    def _new(self) -> Any:
        from orbax.checkpoint.experimental.v1.training.pathways import Snapshotter

        return Snapshotter(replica_axis_index=self.replica_axis_index)

    def _hand_off(self) -> None:
        while True:
            step, pinned, ready, dispatch = self._handoff.get()
            cost: float | None = None
            wall: float | None = None
            try:
                self._snapshotter.join()  # the previous one first: none is skipped
                if ready is not None:
                    jax.block_until_ready(ready)  # the step is done: the copy starts
                started = time.monotonic()
                jax.block_until_ready(pinned)
                copied, cpu = time.monotonic() - started, time.thread_time()
                self._snapshotter.save(step, pinned)
                self._snapshotter.join()  # published, or failed
                if self.latest_step() == step:
                    cost = dispatch + copied + time.thread_time() - cpu
                    wall = time.monotonic() - started
            except Exception as err:  # e.g. the copy's slice was lost: not published
                log.warning("snapshot of step %d not kept: %s", step, err)
            finally:
                del pinned
                self.costs.append((step, cost, wall))
                self._handoff.task_done()

    def take(self, step: int, pinned: Any, ready: Any = None, dispatch: float = 0.0) -> None:
        """Keep `pinned` (`to_pinned_host` of the state after `step`) as the next
        snapshot, split per replica; it is published in the background once complete.

        What it costs the training (`costs`, for the cadence): `dispatch` (the training
        thread's time to dispatch the copy), the copy itself (from `ready`, an output of
        the step, being ready: the next step waits that long to reuse the donated
        buffers), and the CPU time this thread spends splitting and publishing it."""
        self._handoff.put((step, pinned, ready, dispatch))

    def busy(self) -> bool:
        """A snapshot handed off is not published (or dropped) yet."""
        # Queue.unfinished_tasks: put() counts up, task_done() down, under the queue's lock.
        return self._handoff.unfinished_tasks > 0

    def settle(self) -> int | None:
        """Wait until the copy in flight is published (or has failed); the newest
        published step."""
        self._handoff.join()
        self._snapshotter.join()
        return self.latest_step()

    def latest_step(self) -> int | None:
        latest = self._snapshotter.latest
        return None if latest is None else int(latest.step)

    def restore(self, target: Any) -> Any:
        """The newest published snapshot on `target`'s shardings (a tree of
        ShapeDtypeStruct), from the replicas that survived. Any failure discards the
        snapshot: it is never tried again."""
        self.settle()
        try:
            return self._snapshotter.load(target)
        except jax.errors.JaxRuntimeError:
            self.discard("its restore failed")
            raise  # a slice lost during the restore: an elastic event
        except RuntimeError as err:  # orbax: "No active replicas found."
            self.discard("no replica survived")
            raise NoSurvivingReplica(f"no replica of the snapshot survived ({err})") from err

    def discard(self, why: str) -> None:
        """Drop the snapshot and every replica of it (orbax's Snapshotter has no way to
        drop its snapshot: a new one replaces it; the old one's idle thread stays)."""
        self.settle()
        step = self.latest_step()
        if step is None:
            return
        log.info("dropping the snapshot of step %d: %s", step, why)
        self._snapshotter = self._new()
        self.discarded += 1
