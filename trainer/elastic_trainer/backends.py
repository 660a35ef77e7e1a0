"""The elastic runtime: one interface, two backends.

`Backend` is what the training loop sees: the slices and their devices, which slices are
healthy, waiting for slices (with a timeout), the default device of the active slices,
and what a lost slice does to a step and to a checkpoint write in flight.

- `SimulatedBackend` (CPU): the host's devices (`--xla_force_host_platform_device_count`)
  split into N equal slices. A `SliceHealthSource` (simulated_faults.py, pods.py) says which slices
  are down. It is as hostile as the hardware: a slice that went down, even for less than
  a step, fails the step with the `jax.errors.JaxRuntimeError(DATA_LOSS)` Pathways
  raises, fails a checkpoint write it took part in, and loses every array on its devices,
  device and pinned-host memory alike (its share of the training state and its replica
  of the snapshot). Silent faults (faults.StepFaults) hang or slow one slice's part of a
  step while its health stays good; each part is timed, which is the evidence the
  watchdog blames a slice on (`blame`) and the stragglers' step times. A blocked step
  keeps a device busy past the step's end: reading its result waits in the runtime, as
  a hung collective makes it wait (`step_result`; a spare host device, where `etj train`
  made one, so that the next step's dispatch does not wait too).
- `PathwaysBackend` (TPU): pathwaysutils' `Manager` (devices grouped by `slice_index`, its
  health check, `wait_for_slices`, the monitor thread for slices that come back). The
  runtime raises the errors and loses the memory by itself; for a hung step, each
  slice's answer to the health check is the evidence (slice_health.py).
"""
from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from elastic_trainer import slice_health
from elastic_trainer.errors import ElasticTimeout, slice_down_error
from elastic_trainer.simulated_faults import SliceHealthSource, StepFaults, slow_part
from elastic_trainer.slice_health import slices_text

log = logging.getLogger(__name__)

# Called in the background commit of a checkpoint step once its data is written; raising
# fails that save (see checkpoint.py).
WriteHook = Callable[[int], None]
# Each slice's part of the last steps on this mesh (sliceStepTimes: elastic_api.stragglers).
PARTS_WINDOW = 20
WAIT_POLL_SECONDS = 0.005
# How long a hung step's blame waits for each slice's health check (slice_health.py):
# an idle slice answers in well under a second; the stall is reported after it.
HEALTH_TIMEOUT_SECONDS = 20.0


class Backend(Protocol):
    name: str
    total_slices: int
    devices_per_slice: int

    def start(self) -> None: ...

    def slice_devices(self, slices: Sequence[int]) -> list[list[Any]]: ...

    def healthy_slices(self) -> set[int]: ...

    def wait_for_slices(self, count: int, timeout: float | None) -> set[int]:
        """Block until at least `count` slices are healthy; they become the active
        slices (the mesh of the next attempt), which are returned. Raises ElasticTimeout
        after `timeout` seconds."""
        ...

    def use_slices(self, slices: set[int]) -> None:
        """The next attempt's mesh is `slices`, of those `wait_for_slices` returned: the
        rest stand by, healthy and out of the mesh (standby.py; without standbys the
        mesh is every slice returned and this is never called)."""
        ...

    def default_device(self) -> Any:
        """The device jax defaults to during an attempt: on an active slice, chosen as
        `Manager.elastic_retry` chooses it."""
        ...

    def check(self, active: set[int]) -> None:
        """Raise the slice-down error if a slice of the mesh went down (simulated only:
        on Pathways the runtime raises it inside the step by itself)."""
        ...

    def returned_slices(self, active: set[int]) -> set[int]:
        """Inactive slices that are healthy again (replica resize scales up to them)."""
        ...

    def on_phase(self, phase: str, step: int) -> None: ...

    def step_result(self, step: int, loss: Any) -> Any:
        """`step`'s loss as the device hands it over (simulated: a blocked step's comes
        late); the loop reads it once the step after is dispatched."""
        ...

    def failed_slices(self, err: BaseException) -> tuple[list[int], float | None]:
        """The slices behind a slice-down error and when they went down (if known)."""
        ...

    def checkpoint_write_hook(self, active: set[int]) -> WriteHook | None:
        """For a save of the state on `active` that starts now: what its write does when
        a slice of it is lost meanwhile (None: the runtime fails the save by itself)."""
        ...

    def wait_step(self, step: int, active: set[int]) -> None:
        """Once the result of `step` is read: wait until every slice's part of it is done
        (simulated: the hung and slow parts; on Pathways reading the result was the
        wait). Raises the slice-down error if a slice of the mesh is lost meanwhile."""
        ...

    def blame(self) -> tuple[list[int], str]:
        """For a step past the watchdog's deadline: (the slices the evidence blames,
        what it rests on); no slices when nothing can be told."""
        ...

    def replace_slices(self, slices: list[int]) -> bool:
        """The trainer asked for these slices to be replaced: True when the backend does
        it itself (the simulation playing the operator), False when the operator does."""
        ...

    def slice_parts(self) -> list[dict[int, float]] | None:
        """Each active slice's part of the recent steps of this mesh ({slice: seconds},
        oldest first; not the first step of an attempt, which compiles), or None where
        the parts cannot be timed (Pathways)."""
        ...

    def on_elastic_event(self) -> None: ...

    def close(self) -> None: ...


@dataclass
class _Wait:
    """The step whose slices' parts the loop waits for."""

    step: int
    started: float  # when its parts started (dispatched, or the step before done)
    parts: dict[int, float]  # slice: seconds its part takes (not a hung one)
    hung: set[int]


class SimulatedBackend:
    name = "simulated"

    def __init__(self, total_slices: int, devices_per_slice: int,
                 health: SliceHealthSource, write_seconds: float = 0.0,
                 step_faults: StepFaults | None = None) -> None:
        import jax

        devices = jax.devices()
        need = total_slices * devices_per_slice
        if len(devices) < need:
            raise RuntimeError(
                f"--simulate-slices {total_slices} x --devices-per-slice {devices_per_slice} "
                f"needs {need} devices, jax sees {len(devices)}: XLA_FLAGS must carry "
                f"--xla_force_host_platform_device_count={need} before jax is imported"
            )
        self.total_slices, self.devices_per_slice = total_slices, devices_per_slice
        self.write_seconds = write_seconds  # how long the slices take to write their shards
        self._devices = devices[:need]
        # A host device no slice uses, if there is one: what a blocked step keeps busy,
        # so that the next step's dispatch does not wait behind it (on a TPU dispatch is
        # asynchronous: only reading the result waits).
        self._spare = devices[need] if len(devices) > need else None
        self.health = health
        self._active: frozenset[int] = frozenset()
        # Losses per slice when its memory was last known good (the start of an attempt):
        # a slice whose count has grown since then has lost what it held.
        self._baseline: dict[int, int] = {}
        self._last_failure: tuple[list[int], float | None] = ([], None)
        self.step_faults = step_faults or StepFaults([])
        self._dispatched: dict[int, float] = {}  # step: when the loop dispatched it
        self._last_done = 0.0
        self._waiting: _Wait | None = None  # read by the watchdog's thread
        self._parts: deque[dict[int, float]] = deque(maxlen=PARTS_WINDOW)
        self._usual: deque[float] = deque(maxlen=PARTS_WINDOW)  # unslowed steps' times
        self._lock = threading.Lock()

    def start(self) -> None:
        self.health.start()
        for index in self.step_faults.blocking_slices():
            _spinner(self._blocked_device(index))  # compiled now, not in the step it blocks

    def slice_devices(self, slices: Sequence[int]) -> list[list[Any]]:
        d = self.devices_per_slice
        return [list(self._devices[i * d : (i + 1) * d]) for i in slices]

    def healthy_slices(self) -> set[int]:
        return set(range(self.total_slices)) - set(self.health.down_slices())

    def _lost(self, slices: set[int] | frozenset[int]) -> dict[int, float | None]:
        """{slice: when it went down (if still down)} for `slices` that are down now or
        went down since their memory was last known good."""
        down, losses = self.health.down_slices(), self.health.losses()
        return {s: down.get(s) for s in slices
                if s in down or losses.get(s, 0) > self._baseline.get(s, 0)}

    def wait_for_slices(self, count: int, timeout: float | None) -> set[int]:
        self.forget_lost_memory()
        start = time.monotonic()
        while True:
            healthy = self.healthy_slices()
            if len(healthy) >= count:
                break
            if timeout is not None and time.monotonic() - start > timeout:
                raise ElasticTimeout(
                    f"waited {timeout:g}s for {count} healthy slice(s), have {len(healthy)} "
                    f"({sorted(healthy)}); raise --elastic-timeout or lower --min-slices"
                )
            time.sleep(0.05)
        self.forget_lost_memory()  # slices that blinked while we waited
        losses = self.health.losses()
        for s in healthy:  # their memory is fresh (empty) from here on
            self._baseline[s] = losses.get(s, 0)
        self._active = frozenset(healthy)
        with self._lock:  # a new mesh: its parts are timed afresh
            self._parts.clear()
            self._usual.clear()
            self._dispatched.clear()
            self._last_done = 0.0
        return healthy

    def use_slices(self, slices: set[int]) -> None:
        self._active = frozenset(slices)

    def forget_lost_memory(self) -> list[int]:
        """Delete every array that has a shard on a slice that is down or went down since
        its memory was last known good: device memory and pinned-host memory, as a real
        slice loss takes both. Returns those slices."""
        import jax

        lost = self._lost(frozenset(range(self.total_slices)))
        if lost:
            devices = {d for devs in self.slice_devices(sorted(lost)) for d in devs}
            for array in jax.live_arrays():
                if not array.is_deleted() and array.sharding.device_set & devices:
                    array.delete()
        return sorted(lost)

    def default_device(self) -> Any:
        # As pathwaysutils' Manager.default_device: the first device of the first slice
        # the active set yields.
        return self.slice_devices([next(iter(self._active))])[0][0]

    def check(self, active: set[int]) -> None:
        lost = self._lost(active)
        if lost:
            times = [t for t in lost.values() if t is not None]
            self._last_failure = (sorted(lost), min(times) if times else time.time())
            raise slice_down_error(sorted(lost))

    def failed_slices(self, err: BaseException) -> tuple[list[int], float | None]:
        if self._last_failure[0]:
            failure, self._last_failure = self._last_failure, ([], None)
            return failure
        # Raised elsewhere (e.g. a checkpoint write): what is down or lost now.
        lost = self._lost(frozenset(range(self.total_slices)))
        times = [t for t in lost.values() if t is not None]
        return sorted(lost), (min(times) if times else None)

    def returned_slices(self, active: set[int]) -> set[int]:
        return self.healthy_slices() - active

    def on_phase(self, phase: str, step: int) -> None:
        self.health.on_phase(phase, step)
        if phase == "step":
            self.step_faults.on_step(step, self.health.losses())
            with self._lock:
                self._dispatched[step] = time.time()

    def step_result(self, step: int, loss: Any) -> Any:
        blocked = self.step_faults.blocked(step, self.health.losses())
        if blocked is None:
            return loss
        index, seconds = blocked
        return device_block(loss, seconds, self._blocked_device(index))

    def _blocked_device(self, index: int) -> Any:
        return self._spare if self._spare is not None else self.slice_devices([index])[0][0]

    # --- each slice's part of a step: silent faults, the evidence ---

    def wait_step(self, step: int, active: set[int]) -> None:
        """The device's result of `step` is read: the healthy slices' parts are done. A
        slow slice's part ends `faults.slow_part` after the part started; a hung
        one's never (until the slice is replaced, which fails the step with DATA_LOSS)."""
        now = time.time()
        losses = self.health.losses()
        with self._lock:
            started = max(self._dispatched.pop(step, now), self._last_done)
            usual = list(self._usual)
        base = max(now - started, 0.0)
        hung = self.step_faults.hung(step, losses) & active
        slow = {s: f for s, f in self.step_faults.slowdown(step, losses).items()
                if s in active}
        parts = {s: slow_part(base, usual, slow[s]) if s in slow else base
                 for s in sorted(active - hung)}
        end = started + max(parts.values(), default=base)
        with self._lock:
            self._waiting = _Wait(step, started, parts, hung)
        was_hung = bool(hung)
        try:
            # Nothing outstanding: done, and a slice lost since (in the step dispatched
            # after this one) fails that step, at its own check, not this one.
            while hung or time.time() < end:
                self.check(active)  # a slice lost (a hung one replaced) fails the step
                now = time.time()
                hung = self.step_faults.hung(step, self.health.losses()) & active
                if now >= end and not hung:
                    break
                time.sleep(min(WAIT_POLL_SECONDS, max(end - now, WAIT_POLL_SECONDS / 5))
                           if not hung else WAIT_POLL_SECONDS)
            if was_hung:  # a hung part ends only with its slice replaced: lost
                self.check(active)
        finally:
            with self._lock:
                self._waiting = None
        with self._lock:
            if self._last_done > 0:  # not the attempt's first step: it compiles
                self._parts.append(parts)
                if not slow and not was_hung:
                    self._usual.append(base)
            self._last_done = time.time()

    def blame(self) -> tuple[list[int], str]:
        with self._lock:
            wait = self._waiting
        if wait is None:
            return [], ("no slice's part of a step is outstanding: the controller waits "
                        "elsewhere (the threads' stacks are in the log)")
        now = time.time()
        pending = sorted(wait.hung | {s for s, t in wait.parts.items()
                                      if wait.started + t > now})
        finished = sorted(set(wait.parts) - set(pending))
        if not pending or not finished:
            return [], (f"every slice's part of step {wait.step} is "
                        f"{'outstanding' if pending else 'done'}: no slice stands out")
        slowest = max(wait.parts[s] for s in finished)
        return pending, (
            f"{slices_text(pending)}'s part of step {wait.step} has not finished after "
            f"{now - wait.started:.1f}s; {slices_text(finished)} finished theirs in "
            f"{slowest:.2f}s or less")

    def replace_slices(self, slices: list[int]) -> bool:
        return bool(self.health.replace(slices))

    def slice_parts(self) -> list[dict[int, float]] | None:
        with self._lock:
            return [p for p in self._parts if set(p) == set(self._active)]

    def checkpoint_write_hook(self, active: set[int]) -> WriteHook:
        """The slices write their shards (for `write_seconds`); a slice of the save's mesh
        lost meanwhile loses its shards and the save fails, as on hardware."""
        at_start = {s: self.health.losses().get(s, 0) for s in active}

        def write(step: int) -> None:
            if self.write_seconds > 0:
                time.sleep(self.write_seconds)
            self.health.on_phase("checkpoint", step)
            down, losses = self.health.down_slices(), self.health.losses()
            lost = sorted(s for s in active if s in down or losses.get(s, 0) > at_start[s])
            if lost:
                raise slice_down_error(lost, "went down during the checkpoint write")

        return write

    def on_elastic_event(self) -> None:
        pass  # compiled steps per mesh stay valid: the devices are the same objects

    def close(self) -> None:
        self.health.close()


class PathwaysBackend:
    """pathwaysutils' Manager as `Manager.elastic_retry` and MaxText use it. Needs TPU
    slices behind a Pathways proxy (devices with `slice_index`), or a Manager given by
    the caller (the contract tests give one over CPU devices)."""

    name = "pathways"

    def __init__(self, poll_interval: float = 10.0, manager: Any = None,
                 health_timeout: float = HEALTH_TIMEOUT_SECONDS) -> None:
        from pathwaysutils.elastic import manager as manager_lib

        if manager is None:
            import pathwaysutils

            # The IFRT proxy backend (JAX_PLATFORMS=proxy). It also turns JAX's persistent
            # compilation cache off: Pathways keeps its own (docs/trainer.md).
            pathwaysutils.initialize()
            manager = manager_lib.Manager()
        self.manager = manager
        self.poll_interval, self.health_timeout = poll_interval, health_timeout
        self.total_slices = manager.total_slice_count
        sizes = {len(d) for d in manager.slice_to_devices.values()}
        if len(sizes) != 1:
            raise RuntimeError(f"slices have different device counts: {sorted(sizes)}")
        self.devices_per_slice = sizes.pop()

    def start(self) -> None:
        # The monitor thread fills available_inactive_slices when a slice returns.
        self.manager.start_monitoring(self.poll_interval)

    def slice_devices(self, slices: Sequence[int]) -> list[list[Any]]:
        return [list(self.manager.slice_to_devices[i]) for i in slices]

    def healthy_slices(self) -> set[int]:
        from pathwaysutils.elastic import elastic

        return set(elastic.get_active_slice_indices(self.manager.slice_to_devices))

    def wait_for_slices(self, count: int, timeout: float | None) -> set[int]:
        from pathwaysutils.elastic import elastic

        try:
            active = elastic.wait_for_slices(
                slice_count=count, slice_to_devices=self.manager.slice_to_devices,
                poll_interval=self.poll_interval, timeout=timeout,
            )
        except TimeoutError as err:
            raise ElasticTimeout(
                f"waited {timeout}s for {count} healthy slice(s): {err}; raise "
                "--elastic-timeout or lower --min-slices"
            ) from err
        # As elastic_retry at the start of each attempt: the new active set, and no
        # returned slices left over from before it (they may be stale).
        self.manager.active_slice_indices = active
        self.manager.available_inactive_slices = frozenset()
        return set(active)

    def use_slices(self, slices: set[int]) -> None:
        # The standbys are inactive: the monitor thread checks them as it does lost ones.
        self.manager.active_slice_indices = frozenset(slices)

    def default_device(self) -> Any:
        return self.manager.default_device

    def check(self, active: set[int]) -> None:
        pass

    def failed_slices(self, err: BaseException) -> tuple[list[int], float | None]:
        # Pathways does not say which slice or when: the slices its health check misses.
        down = set(self.manager.all_slice_indices) - self.healthy_slices()
        return sorted(down), None

    def returned_slices(self, active: set[int]) -> set[int]:
        """The monitor's `available_inactive_slices`, confirmed by a health check now: the
        monitor polls every `poll_interval` s, so a slice it saw come back may have gone
        down again since, and scaling up to it would only restart on the same mesh."""
        from pathwaysutils.elastic import elastic

        candidates = set(self.manager.available_inactive_slices) - active
        if not candidates:
            return set()
        confirmed = set(elastic.get_active_slice_indices(
            {i: self.manager.slice_to_devices[i] for i in candidates})) & candidates
        if confirmed != candidates:
            log.info("slices %s are not back after all (stale monitor result)",
                     sorted(candidates - confirmed))
            self.manager.available_inactive_slices = frozenset(confirmed)
        return confirmed

    def on_phase(self, phase: str, step: int) -> None:
        pass

    def step_result(self, step: int, loss: Any) -> Any:
        return loss

    def checkpoint_write_hook(self, active: set[int]) -> WriteHook | None:
        return None  # a lost slice fails the save's write with a JaxRuntimeError

    def wait_step(self, step: int, active: set[int]) -> None:
        pass  # reading the step's result waited for every slice's part

    def blame(self) -> tuple[list[int], str]:
        """Each active slice asked whether it can run a program now (bounded): the down
        slices, and the busy ones when others are idle (slice_health.verdict)."""
        active = sorted(self.manager.active_slice_indices)
        answers = slice_health.probe({i: self.manager.slice_to_devices[i] for i in active},
                                     self.health_timeout)
        return slice_health.verdict(answers, self.health_timeout)

    def replace_slices(self, slices: list[int]) -> bool:
        return False  # the operator recreates their worker Jobs: DATA_LOSS follows

    def slice_parts(self) -> list[dict[int, float]] | None:
        return None

    def on_elastic_event(self) -> None:
        import jax

        with contextlib.suppress(RuntimeError, ValueError):  # no trace running
            jax.profiler.stop_trace()
        jax.clear_caches()  # executables loaded on the old slices; recompiled on use

    def close(self) -> None:
        self.manager.close()


_SPIN = 128  # the side of the matrix a blocked device multiplies, again and again
PROBES = 5  # timings of the spinning program, the fastest taken


@functools.cache
def _spinner(device: Any) -> tuple[Any, float]:
    """(the program that keeps `device` busy for n rounds and then hands `value` over
    unchanged, the seconds one round takes there), compiled and timed once per device."""
    import jax
    import jax.numpy as jnp

    def spin(value: Any, rounds: Any) -> Any:
        def round_(carry: Any) -> Any:
            i, m = carry
            return i + 1, jnp.tanh(m @ m)

        start = jnp.full((_SPIN, _SPIN), 1e-3, jnp.float32)
        _, m = jax.lax.while_loop(lambda c: c[0] < rounds, round_, (0, start))
        # Both outputs of one program are ready together: `value` waits for the rounds.
        return value, m[0, 0]

    program = jax.jit(spin)
    probe, zero = 200, jax.device_put(jnp.float32(0), device)
    jax.block_until_ready(program(zero, probe))  # compiled for the device
    timed = []
    for _ in range(PROBES):
        wall, cpu = time.perf_counter(), time.process_time()
        jax.block_until_ready(program(zero, probe))
        timed.append((time.perf_counter() - wall, time.process_time() - cpu))
    return program, round_seconds(timed, probe)


def round_seconds(timed: Sequence[tuple[float, float]], rounds: int) -> float:
    """One round's seconds from probes of `rounds` rounds, each (wall, process CPU): the
    least of either. Load around the process slows a probe's wall time only (6 busy
    processes on 2 cores: 3.5e-4 s a round by the wall, 4.1e-5 s of CPU, 3.7e-5 s
    unloaded), and rounds counted from a slowed probe made blocks too short by as much:
    a 16 s block lasted under the 8 s deadline it was to pass, later a 30 s one 11.5 s
    when every probe at the start ran beside a loaded test run. So a block lasts about
    `seconds` on a quiet machine, longer on a loaded one."""
    return max(min(min(wall, cpu) for wall, cpu in timed) / rounds, 1e-7)


def device_block(value: Any, seconds: float, device: Any) -> Any:
    """`value` (an array), handed over by `device` after it computed about `seconds`:
    whoever reads it waits in the runtime meanwhile, as for a device call that hangs."""
    import jax

    program, per_round = _spinner(device)
    return program(jax.device_put(value, device), int(seconds / per_round))[0]

