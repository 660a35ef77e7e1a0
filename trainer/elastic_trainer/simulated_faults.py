"""Slice health for the simulated backend: the protocol, a fault schedule, and the
silent faults of a step.

A health source says which slices are down now and how many times each slice has gone
down so far (`losses`). The second matters: a slice that goes down and comes back while
one step runs has still lost everything it held, so the step fails, as on hardware, even
though the slice looks healthy again when the step ends.

Silent faults (`StepFaults`) leave a slice's health alone, as a hung TPU host leaves its
pods Ready: a hung slice's part of a step never finishes, a slow slice's takes FACTOR
times the mesh's usual step (`slow_part`). Both end when the slice is replaced (its loss
count grows: its worker Job was recreated) or, for a slow one, when the loop reaches step
BACK. A blocked step (`block=SECONDS`) keeps the controller in the device call that reads
the step's result for SECONDS (a collective every slice waits in: nothing tells one slice
apart), then completes with the step's own result (backends.SimulatedBackend.step_result).

They can also be injected while the run goes (`--fault-inbox DIR`, for the chaos soak,
which picks its moments from what it observes): a file `*.fault` in DIR holds
`SLICE:hang`, `SLICE:slow=FACTOR`, `SLICE:block=SECONDS` or `SLICE:slow=off` (that
slice's slowness ends); it
fires at the next step dispatched and is deleted once read, so a new trainer process
(the head container restarted) does not fire it again.
"""
from __future__ import annotations

import logging
import os
import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

log = logging.getLogger(__name__)

PHASES = ("step", "checkpoint", "restore")
# Silent faults: `hang`, `slow=FACTOR` and `block=SECONDS` (parse_fault).
SILENT = ("hang", "slow", "block")
# The simulation playing the operator (--slice-health schedule): after a replacement
# request, the operator's reaction (status write -> reconcile -> the worker Job deleted)
# and the slice's new pods being Ready, about what bench/replacement.py measures on the
# local control plane (docs/benchmarks.md).
REPLACE_REACTION_SECONDS = 0.5
# Unslowed steps of a mesh timed before a slow part is measured against them (else: this
# step's own time).
USUAL_STEPS_NEEDED = 3
REPLACE_SECONDS = 1.5


class SliceHealthSource(Protocol):
    def start(self) -> None: ...

    def down_slices(self) -> dict[int, float]:
        """{slice: unix time it went down} for every slice that is down now."""
        ...

    def losses(self) -> dict[int, int]:
        """{slice: how many times it went down so far} (slices never down: absent)."""
        ...

    def on_phase(self, phase: str, step: int) -> None:
        """The loop is at `phase` ("step", "restore", "checkpoint") of `step`."""
        ...

    def replace(self, slices: list[int]) -> bool:
        """The trainer asks for these slices to be replaced (status.training.
        sliceReplacement). True: this source plays the operator and replaces them itself;
        False: the operator does (their pods go away and come back)."""
        ...

    def close(self) -> None: ...


@dataclass
class Fault:
    step: int
    slice: int
    phase: str = "step"  # "step": while STEP runs; "checkpoint": while the save of a
    #                      step >= STEP is written; "restore": during the first restore
    #                      after a failure at a step >= STEP
    back_at_step: int | None = None  # STEP-BACK: back when the loop reaches step BACK
    fired: bool = False

    @classmethod
    def parse(cls, text: str, total_slices: int) -> Fault:
        """A fault that takes a slice down (not a silent one: see parse_fault)."""
        parts = text.split(":")
        try:
            if len(parts) not in (2, 3):
                raise ValueError
            first, _, back = parts[0].partition("-")
            step, slice_index = int(first), int(parts[1])
            back_at_step = int(back) if back else None
            phase = parts[2] if len(parts) == 3 else "step"
        except ValueError:
            raise ValueError(
                f"--fail-at {text!r}: expected STEP:SLICE (e.g. 23:1), STEP-BACK:SLICE "
                "(down from step STEP until the loop reaches step BACK), "
                "STEP:SLICE:checkpoint, STEP:SLICE:restore, STEP:SLICE:hang or "
                "STEP[-BACK]:SLICE:slow=FACTOR"
            ) from None
        if phase not in PHASES:
            raise ValueError(f"--fail-at {text!r}: phase must be step, checkpoint or restore "
                             "(or a silent fault: hang, slow=FACTOR)")
        if not 0 <= slice_index < total_slices:
            raise ValueError(
                f"--fail-at {text!r}: slice {slice_index} does not exist "
                f"(--simulate-slices {total_slices} has slices 0..{total_slices - 1})"
            )
        if step < 1:
            raise ValueError(f"--fail-at {text!r}: STEP must be >= 1")
        if back_at_step is not None and (back_at_step <= step or phase != "step"):
            raise ValueError(f"--fail-at {text!r}: BACK must be a later step, phase step")
        return cls(step, slice_index, phase, back_at_step)

    def due(self, phase: str, step: int) -> bool:
        if self.fired or self.phase != phase:
            return False
        return step == self.step if phase == "step" else step >= self.step


@dataclass
class _Outage:
    since: float
    until: float | None  # unix time it comes back, or
    until_step: int | None  # the step at which it comes back


@dataclass
class FaultSchedule:
    """Slices go down when the loop reaches a scheduled step and come back after
    `duration` seconds (or, for STEP-BACK faults, when the loop reaches step BACK: only
    replica resize goes on training meanwhile). Each fault fires once, even if the loop
    rewinds past it."""

    faults: list[Fault]
    duration: float = 2.0
    replace_seconds: float = REPLACE_SECONDS  # a replaced slice's outage (replace())
    _down: dict[int, _Outage] = field(default_factory=dict)
    _losses: dict[int, int] = field(default_factory=dict)
    _replacing: list[tuple[float, int]] = field(default_factory=list)  # (when, slice)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        pass

    def close(self) -> None:
        pass

    def on_phase(self, phase: str, step: int) -> None:
        with self._lock:
            if phase == "step":
                for index in [i for i, o in self._down.items()
                              if o.until_step is not None and step >= o.until_step]:
                    del self._down[index]
                    log.info("slice %d is back at step %d", index, step)
            for fault in self.faults:
                if fault.due(phase, step):
                    fault.fired = True
                    self._fire(fault, phase, step)

    def replace(self, slices: list[int]) -> bool:
        """Play the operator: each slice goes down once the operator would have deleted
        its worker Job, and is back when its new pods would be Ready."""
        at = time.time() + REPLACE_REACTION_SECONDS
        with self._lock:
            self._replacing.extend((at, s) for s in slices)
        log.info("simulated operator: replacing slice(s) %s in %.1fs, back %.1fs later",
                 slices, REPLACE_REACTION_SECONDS, self.replace_seconds)
        return True

    def _replace_due(self, now: float) -> None:
        due = [(at, s) for at, s in self._replacing if at <= now]
        for at, index in due:
            self._replacing.remove((at, index))
            since = self._down[index].since if index in self._down else at
            self._down[index] = _Outage(since, at + self.replace_seconds, None)
            self._losses[index] = self._losses.get(index, 0) + 1
            log.info("simulated operator: slice %d's worker Job recreated", index)

    def _fire(self, fault: Fault, phase: str, step: int) -> None:
        now = time.time()
        since = self._down[fault.slice].since if fault.slice in self._down else now
        if fault.back_at_step is not None:
            self._down[fault.slice] = _Outage(since, None, fault.back_at_step)
            until = f"until step {fault.back_at_step}"
        else:
            self._down[fault.slice] = _Outage(since, now + self.duration, None)
            until = f"for {self.duration:.1f}s"
        self._losses[fault.slice] = self._losses.get(fault.slice, 0) + 1
        log.info("fault injected: slice %d down at %s %d %s", fault.slice, phase, step, until)

    def down_slices(self) -> dict[int, float]:
        now = time.time()
        with self._lock:
            self._replace_due(now)
            for index in [i for i, o in self._down.items()
                          if o.until is not None and o.until <= now]:
                del self._down[index]
            return {i: o.since for i, o in self._down.items()}

    def losses(self) -> dict[int, int]:
        with self._lock:
            self._replace_due(time.time())
            return dict(self._losses)


@dataclass
class SilentFault:
    """A slice's part of the steps misbehaves while its health stays good: `hang` (its
    part of STEP never finishes), `slow` (from STEP on, its part takes `factor` times
    the others') or `block` (the device call that reads STEP's result takes `seconds`);
    each until the slice is replaced, a slow one at most until step BACK."""

    step: int
    slice: int
    kind: str  # "hang", "slow" or "block"
    factor: float = 1.0
    until_step: int | None = None
    losses_at_fire: int | None = None  # None: not fired yet
    seconds: float = 0.0  # a block's

    def active(self, step: int, losses: dict[int, int]) -> bool:
        if self.losses_at_fire is None or losses.get(self.slice, 0) > self.losses_at_fire:
            return False  # not yet, or the slice was replaced since
        if self.kind in ("hang", "block"):
            return step == self.step
        return self.until_step is None or step < self.until_step


def parse_fault(text: str, total_slices: int) -> Fault | SilentFault:
    """One --fail-at: STEP:SLICE:hang, STEP[-BACK]:SLICE:slow=FACTOR,
    STEP:SLICE:block=SECONDS, else Fault.parse."""
    parts = text.split(":")
    kind = parts[2].partition("=")[0] if len(parts) == 3 else ""
    if kind not in SILENT:
        return Fault.parse(text, total_slices)
    down = Fault.parse(":".join(parts[:2]), total_slices)
    factor = 1.0
    if kind == "hang" and (down.back_at_step is not None or parts[2] != "hang"):
        raise ValueError(f"--fail-at {text!r}: a hang is STEP:SLICE:hang (the slice's part "
                         "of STEP never finishes; it is back once replaced)")
    if kind == "block":
        return _parse_block(text, down)
    if kind == "slow":
        try:
            factor = float(parts[2].partition("=")[2])
        except ValueError:
            factor = 0.0
        if not 1.0 < factor < 1e6:  # also nan
            raise ValueError(f"--fail-at {text!r}: slow=FACTOR needs a FACTOR above 1 "
                             "(the slice's part takes FACTOR times longer), e.g. slow=3")
    return SilentFault(down.step, down.slice, kind, factor, down.back_at_step)


def _parse_block(text: str, down: Fault) -> SilentFault:
    try:
        seconds = float(text.split(":")[2].partition("=")[2])
    except ValueError:
        seconds = 0.0
    if down.back_at_step is not None or not 0 < seconds < 1e5:  # also nan
        raise ValueError(f"--fail-at {text!r}: a block is STEP:SLICE:block=SECONDS (the "
                         "device call reading STEP's result takes SECONDS), e.g. block=30")
    return SilentFault(down.step, down.slice, "block", seconds=seconds)


INBOX_SUFFIX = ".fault"


def parse_injected(text: str, step: int, total_slices: int) -> SilentFault | int:
    """One injected fault (a --fault-inbox file) due at `step`: a SilentFault, or the
    slice whose slowness `SLICE:slow=off` ends."""
    text = text.strip()
    head, _, kind = text.partition(":")
    if kind == "slow=off":
        return Fault.parse(f"{step}:{head}", total_slices).slice
    fault = parse_fault(f"{step}:{text}", total_slices)
    if not isinstance(fault, SilentFault):
        raise ValueError(f"injected fault {text!r}: SLICE:hang, SLICE:slow=FACTOR, "
                         "SLICE:block=SECONDS or SLICE:slow=off")
    return fault


class StepFaults:
    """The silent faults of a run: which slices' parts of a step hang or run slow."""

    def __init__(self, faults: list[SilentFault], inbox: Path | None = None,
                 total_slices: int = 0) -> None:
        self.faults = faults
        self.inbox, self.total_slices = inbox, total_slices
        self._spent: set[int] = set()  # the blocks that fired (by id)
        self._lock = threading.Lock()

    def _take_inbox(self, step: int) -> None:
        """The faults injected since the last step, due at `step` (each file read once,
        then deleted: consumed)."""
        if self.inbox is None:
            return
        try:
            names = sorted(n for n in os.listdir(self.inbox) if n.endswith(INBOX_SUFFIX))
        except FileNotFoundError:
            return
        for name in names:
            path = self.inbox / name
            text = path.read_text()
            path.unlink()
            try:
                got = parse_injected(text, step, self.total_slices)
            except ValueError as err:
                log.error("%s: %s (ignored)", path, err)
                continue
            if isinstance(got, SilentFault):
                self.faults.append(got)
                continue
            for fault in self.faults:
                if fault.kind == "slow" and fault.slice == got and (
                        fault.until_step is None or fault.until_step > step):
                    fault.until_step = step
            log.info("fault ended: slice %d's part of the steps from %d on runs at its "
                     "own speed again", got, step)

    def on_step(self, step: int, losses: dict[int, int]) -> None:
        """The loop dispatches `step`: faults due fire (once each, even if the loop
        rewinds past them)."""
        with self._lock:
            self._take_inbox(step)
            for fault in self.faults:
                if fault.losses_at_fire is None and fault.step == step:
                    fault.losses_at_fire = losses.get(fault.slice, 0)
                    what = ("hangs" if fault.kind == "hang" else
                            f"blocks the device call reading it {fault.seconds:g}s"
                            if fault.kind == "block" else
                            f"runs {fault.factor:g}x slower"
                            + (f" until step {fault.until_step}" if fault.until_step else ""))
                    log.info("fault injected: slice %d's part of step %d %s (its pods stay "
                             "Ready)", fault.slice, step, what)

    def hung(self, step: int, losses: dict[int, int]) -> set[int]:
        with self._lock:
            return {f.slice for f in self.faults
                    if f.kind == "hang" and f.active(step, losses)}

    def blocking_slices(self) -> list[int]:
        """The slices whose device a block keeps busy (named by --fail-at)."""
        return sorted({f.slice for f in self.faults if f.kind == "block"})

    def blocked(self, step: int, losses: dict[int, int]) -> tuple[int, float] | None:
        """(slice, seconds) of a block of `step`'s device call, if one fires (once: a
        step done again after a rewind is not blocked again)."""
        with self._lock:
            for f in self.faults:
                if f.kind == "block" and id(f) not in self._spent and f.active(step, losses):
                    self._spent.add(id(f))
                    return f.slice, f.seconds
        return None

    def slowdown(self, step: int, losses: dict[int, int]) -> dict[int, float]:
        """{slice: factor} for the slices whose part of `step` runs slow."""
        out: dict[int, float] = {}
        with self._lock:
            for f in self.faults:
                if f.kind == "slow" and f.active(step, losses):
                    out[f.slice] = max(out.get(f.slice, 1.0), f.factor)
        return out


def slow_part(base: float, usual: Sequence[float], factor: float) -> float:
    """A slow slice's part of a step: `factor` x the mesh's usual step (the median of its
    recent steps with no slice slow or hung), or the step's own time if that is longer.

    Not `factor` x this step's own time: on the simulation a step's own time is noise
    (load, a save in flight) and, once a slice runs slow, shrinks (the next step computes
    during the wait), so a product would be a hang under load and barely slow when
    quiet. A slice at 1/FACTOR speed makes each step that waits on it take FACTOR times
    its usual time, and no more: the step sits between the slow-steps rule's 2x
    (elastic_api.progress_rules) and the watchdog's 10x (watchdog.Deadlines) for a FACTOR in
    between, whatever the load (tests/trainer/test_trainer_watchdog.py)."""
    if len(usual) < USUAL_STEPS_NEEDED:
        return factor * base
    return max(base, factor * statistics.median(usual))
