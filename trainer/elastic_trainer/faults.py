"""Slice health for the simulated backend: the protocol, and a fault schedule.

A health source says which slices are down now and how many times each slice has gone
down so far (`losses`). The second matters: a slice that goes down and comes back while
one step runs has still lost everything it held, so the step fails, as on hardware, even
though the slice looks healthy again when the step ends.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Protocol

log = logging.getLogger(__name__)

PHASES = ("step", "checkpoint", "restore")


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
                "STEP:SLICE:checkpoint or STEP:SLICE:restore"
            ) from None
        if phase not in PHASES:
            raise ValueError(f"--fail-at {text!r}: phase must be step, checkpoint or restore")
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
    _down: dict[int, _Outage] = field(default_factory=dict)
    _losses: dict[int, int] = field(default_factory=dict)
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
            for index in [i for i, o in self._down.items()
                          if o.until is not None and o.until <= now]:
                del self._down[index]
            return {i: o.since for i, o in self._down.items()}

    def losses(self) -> dict[int, int]:
        with self._lock:
            return dict(self._losses)
