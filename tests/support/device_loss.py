"""Google's fault model for Pathways, on CPU: pathwaysutils' `DeviceLossSimulator`
(pathwaysutils 0.1.13, `pathwaysutils/test/mock_fault_injection.py`) driving the trainer's
real `PathwaysBackend` (docs/trainer.md, "Google's fault model").

The simulator patches JAX so that reading an array (`np.asarray`, `float()`,
`block_until_ready`) that touched a lost device raises the `JaxRuntimeError(DATA_LOSS)`
Pathways raises, for good (sticky: a device that comes back does not revive what it
held), and carries that through `jax.jit`, `jax.pmap` and every primitive bind. Nothing is
deleted and nothing else is faked: pathwaysutils' own health check (a `pmap` per slice,
`elastic.get_active_slice_indices`) finds a lost slice by that DATA_LOSS, and the trainer
finds it where it reads a step's loss, as on Pathways.

`DeviceLoss` is the simulator with two fixes the trainer needs (both are upstream bugs):
- it reads an array's devices from its sharding: the upstream `is_array_corrupted` calls
  `arr.devices()` on every jit input after the call, which raises for an input donated to
  the call (`donate_argnums`: deleted by then), so any donating jit fails in the wrapper;
- it forgets an array when it dies: the upstream keys its records by `id()` and never
  drops one, so a new array that reuses a dead one's id inherits its loss.

`LosableSlices` groups CPU devices into slices that a test loses and brings back. Losing
a slice first registers every live array (the hardware loses every buffer on it, read
yet or not); bringing it back first marks every live array on it lost (a program that
ran on it meanwhile produced nothing). Programs jitted before the simulator started (the
trainer's `snapshots.to_pinned_host`) are judged by their devices when read, not by
their inputs: the sweeps cover what they made before or during a loss, not a copy made
after the return of a state lost with the slice.

`FaultsOnPathways` is the trainer's `PathwaysBackend`, unchanged, with a fault script
played at its hooks: when a step is dispatched ("step", step), when a checkpoint save of
a step starts ("save", step), when an attempt waits for slices and when its restore
starts ("wait" / "restore", attempt number). Actions: "lose" a slice now, "return" it now,
"return later" (a moment after: the wait for slices then waits for it), or "hang": lose
it and hold the training thread where it is (a step that does not come back although the
resource manager has the slice down) until the trainer asks for the slice to be replaced.
"""
from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.core
from pathwaysutils.elastic import manager as manager_lib
from pathwaysutils.test.mock_fault_injection import DeviceLossSimulator

from elastic_trainer.backends import PathwaysBackend, WriteHook

RETURN_LATER_SECONDS = 0.3
HANG_LIMIT_SECONDS = 300.0  # a hang nobody ends fails the test instead of stalling it


def _is_array(arr: Any) -> bool:
    return isinstance(arr, jax.Array) and not isinstance(arr, jax.core.Tracer)


class DeviceLoss(DeviceLossSimulator):
    """pathwaysutils' DeviceLossSimulator, its rule unchanged, with the two fixes above."""

    def __init__(self) -> None:
        super().__init__()
        self._watched: set[int] = set()

    def _register(self, arr: Any) -> None:
        arr_id = id(arr)
        if arr_id not in self._watched:
            self._watched.add(arr_id)
            weakref.finalize(arr, self._forget, arr_id)
        if arr_id not in self._array_devices:
            # The sharding outlives a donation; `devices()` of a deleted array raises.
            self._array_devices[arr_id] = {d.id for d in arr.sharding.device_set}

    def _forget(self, arr_id: int) -> None:
        self._watched.discard(arr_id)
        self._array_devices.pop(arr_id, None)
        self._array_generation.pop(arr_id, None)
        self._corrupted_array_ids.discard(arr_id)

    def track_array(self, arr: Any) -> None:
        if _is_array(arr):
            self._register(arr)
        super().track_array(arr)

    def bind_array_to_devices(self, arr: Any, devices: Sequence[Any]) -> None:
        if _is_array(arr):
            self._register(arr)
        super().bind_array_to_devices(arr, devices)

    def is_array_corrupted(self, arr: Any) -> bool:
        """The upstream rule, with the devices read as `track_array` registered them."""
        if not _is_array(arr):
            return False
        self.track_array(arr)
        arr_id = id(arr)
        if arr_id in self._corrupted_array_ids:
            return True
        dev_ids = self._array_devices[arr_id]
        generation = self._array_generation.get(arr_id, self._generation)
        if any(d in self._lost_devices for d in dev_ids) or any(
                generation <= lost for d in dev_ids
                for lost in self._device_lost_history.get(d, [])):
            self._corrupted_array_ids.add(arr_id)
            return True
        return False


class LosableSlices:
    """`slices` x `per_slice` CPU devices as slices, lost and brought back under one
    `DeviceLoss` (started by `with`)."""

    def __init__(self, devices: Sequence[Any], slices: int, per_slice: int) -> None:
        self.slice_to_devices: Mapping[int, list[Any]] = {
            i: list(devices[i * per_slice:(i + 1) * per_slice]) for i in range(slices)}
        self.sim = DeviceLoss()
        self._lock = threading.Lock()

    def __enter__(self) -> LosableSlices:
        self.sim.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.sim.stop()

    def lose(self, index: int) -> None:
        with self._lock:
            for array in jax.live_arrays():
                self.sim.track_array(array)
            self.sim.mark_slice_lost(index, self.slice_to_devices)

    def bring_back(self, index: int) -> None:
        with self._lock:
            for array in jax.live_arrays():
                self.sim.is_array_corrupted(array)
            self.sim.mark_slice_connected(index, self.slice_to_devices)

    def manager(self) -> manager_lib.Manager:
        """pathwaysutils' Manager over these slices: built on no devices, then given the
        slices through its public attributes (CPU devices have no `slice_index`); its
        health check is pathwaysutils' own, under the simulator."""
        m = manager_lib.Manager(devices=[])
        m.slice_to_devices = self.slice_to_devices
        m.all_slice_indices = frozenset(self.slice_to_devices)
        m.active_slice_indices = frozenset(self.slice_to_devices)
        return m


@dataclass(frozen=True)
class Fault:
    at: str  # "step", "save" (a step's number), "wait", "restore" (an attempt's number)
    when: int
    action: str  # "lose", "return", "return later", "hang"
    slice: int


class FaultsOnPathways(PathwaysBackend):
    """The trainer's PathwaysBackend over `hw`, with `faults` played at its hooks."""

    def __init__(self, hw: LosableSlices, faults: Sequence[Fault],
                 poll_interval: float = 0.05) -> None:
        super().__init__(poll_interval=poll_interval, manager=hw.manager())
        self.hw, self.faults = hw, list(faults)
        self.fired: list[Fault] = []
        self._step = 0  # the step dispatched last
        self._attempt = 0
        self._timers: list[threading.Timer] = []
        self._hung: dict[int, threading.Event] = {}
        # Called before a slice is lost (e.g. the snapshots' settle: the loss then comes
        # after the copies in flight are published).
        self.before_loss: Callable[[], object] | None = None

    def _play(self, at: str, when: int) -> None:
        for fault in [f for f in self.faults if f.at == at and f.when == when]:
            self.faults.remove(fault)
            self.fired.append(fault)
            if fault.action in ("lose", "hang") and self.before_loss is not None:
                self.before_loss()
            if fault.action == "lose":
                self.hw.lose(fault.slice)
            elif fault.action == "hang":
                self._hang(fault.slice)
            elif fault.action == "return":
                self.hw.bring_back(fault.slice)
            else:
                timer = threading.Timer(RETURN_LATER_SECONDS, self.hw.bring_back,
                                        (fault.slice,))
                self._timers.append(timer)
                timer.start()

    def _hang(self, index: int) -> None:
        released = self._hung.setdefault(index, threading.Event())
        self.hw.lose(index)
        if not released.wait(HANG_LIMIT_SECONDS):
            raise AssertionError(f"slice {index} hung and nobody asked for its replacement")

    def replace_slices(self, slices: list[int]) -> bool:
        """The operator recreates the slices' worker Jobs: the hung step comes back (with
        DATA_LOSS, the slice being down); the slices return when a fault script says."""
        for index in slices:
            self._hung.setdefault(index, threading.Event()).set()
        return super().replace_slices(slices)

    def on_phase(self, phase: str, step: int) -> None:
        super().on_phase(phase, step)
        if phase == "step":
            self._step = step
            self._play("step", step)

    def checkpoint_write_hook(self, active: set[int]) -> WriteHook | None:
        self._play("save", self._step)  # the save of the step dispatched last starts now
        return super().checkpoint_write_hook(active)

    def wait_for_slices(self, count: int, timeout: float | None) -> set[int]:
        self._attempt += 1
        self._play("wait", self._attempt)
        active = super().wait_for_slices(count, timeout)
        self._play("restore", self._attempt)
        return active

    def close(self) -> None:
        for timer in self._timers:
            timer.join()
        super().close()
