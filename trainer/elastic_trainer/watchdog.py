"""The trainer's watchdog: a deadline for what the training thread does now, learned from
what this run's own steps, saves and restores took (docs/trainer.md, "Watchdog").

    Deadlines (pure)   what each phase may take: factor x the run's own measurements,
                       never below a floor; before a phase was ever measured, a long floor
    Watchdog (thread)  the training thread arms a phase (a step, the first step of an
                       attempt, a save, a restore) or disarms it (waiting for slices, a
                       maintenance hold); past its deadline the watchdog calls `on_stall`
                       once, from its own thread (the training thread is the one stuck)

Learned, not fixed, as NVRx's heartbeat timeouts are once it has seen intervals
(`calculate_and_set_hb_timeouts`: the longest interval seen x a safety factor): a fixed
timeout is either far too long for 0.1 s steps (NVRx's 60 s soft timeout, a 10 min
collective timeout) or a false alarm on the first compile of a large model. A step is
measured against the steps of its own mesh (a resize changes the step time); the first
step of an attempt (a compile, a resize), a save and a restore each against the longest
of their kind seen so far, and a false alarm that resolves (the phase completes after
all) raises the deadline, because that time is then measured.
"""
from __future__ import annotations

import logging
import math
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

STEP, FIRST_STEP, CHECKPOINT, RESTORE = "Step", "FirstStep", "Checkpoint", "Restore"
PHASES = (STEP, FIRST_STEP, CHECKPOINT, RESTORE)
# The defaults (etj train --watchdog-*; docs/trainer.md "Watchdog" says why these).
DEFAULT_FACTOR = 10.0
DEFAULT_FLOOR_SECONDS = 5.0
DEFAULT_LONG_FLOOR_SECONDS = 300.0
STEP_WINDOW = 200  # the steps of a mesh the quantile is taken over
STEP_QUANTILE = 0.99
STEPS_NEEDED = 3  # steps of a mesh measured before its own deadline applies


@dataclass(frozen=True)
class WatchdogOptions:
    factor: float = DEFAULT_FACTOR
    floor_seconds: float = DEFAULT_FLOOR_SECONDS
    long_floor_seconds: float = DEFAULT_LONG_FLOOR_SECONDS
    enabled: bool = True

    def problem(self) -> str | None:
        """What is wrong with these options, for the command line (None: nothing)."""
        if not self.factor >= 1:  # also nan
            return f"--watchdog-factor {self.factor} must be >= 1"
        if not 0 < self.floor_seconds <= self.long_floor_seconds:
            return (f"--watchdog-floor-seconds {self.floor_seconds} must be more than 0 and "
                    f"at most --watchdog-long-floor-seconds {self.long_floor_seconds}")
        return None


def quantile(values: list[float], q: float) -> float:
    """The q-quantile (nearest rank, the higher one) of a non-empty list."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


@dataclass
class Deadlines:
    """What each phase may take, from what this run measured of it. Pure: durations in,
    seconds out."""

    opts: WatchdogOptions = field(default_factory=WatchdogOptions)
    _steps: dict[Hashable, deque[float]] = field(default_factory=dict)
    _longest: dict[str, float] = field(default_factory=dict)

    def observe(self, phase: str, seconds: float, mesh: Hashable = None) -> None:
        if phase == STEP:
            self._steps.setdefault(mesh, deque(maxlen=STEP_WINDOW)).append(seconds)
        else:
            self._longest[phase] = max(self._longest.get(phase, 0.0), seconds)

    def step_quantile(self, mesh: Hashable = None) -> float | None:
        steps = self._steps.get(mesh)
        if not steps or len(steps) < STEPS_NEEDED:
            return None
        return quantile(list(steps), STEP_QUANTILE)

    def deadline(self, phase: str, mesh: Hashable = None) -> float:
        o = self.opts
        if phase == STEP:
            q = self.step_quantile(mesh)
            if q is None:  # a mesh not measured yet: as long as a first step may take
                return self.deadline(FIRST_STEP, mesh)
            return max(o.floor_seconds, o.factor * q)
        longest = self._longest.get(phase)
        own = o.long_floor_seconds if longest is None else max(o.floor_seconds,
                                                               o.factor * longest)
        if phase == CHECKPOINT:
            # A save runs beside a step (the copy, the step that waits for it): never less
            # than that step may take.
            q = self.step_quantile(mesh)
            return max(own, o.floor_seconds if q is None else o.factor * q)
        return own


@dataclass(frozen=True)
class Stall:
    """A phase past its deadline."""

    phase: str
    step: int
    started_at: float  # unix time
    detected_at: float
    deadline_seconds: float

    @property
    def seconds(self) -> float:
        return self.detected_at - self.started_at

    @property
    def what(self) -> str:
        """'step 53', 'first step 51', 'save around step 50', 'restore before step 51'."""
        return {STEP: "step", FIRST_STEP: "first step", CHECKPOINT: "save around step",
                RESTORE: "restore before step"}[self.phase] + f" {self.step}"

    def describe(self) -> str:
        return (f"{self.what} has run {self.seconds:.1f}s, past the watchdog's deadline of "
                f"{self.deadline_seconds:.1f}s")


@dataclass
class _Armed:
    phase: str
    step: int
    mesh: Hashable
    started: float  # monotonic
    started_at: float  # unix time
    deadline: float
    fired: bool = False


class Watchdog:
    """Calls `on_stall(stall)` once per armed phase that runs past its deadline.

    The training thread calls `arm` when it starts something (a step, a save, a
    restore), `relabel` when what it is in the middle of turns out to be longer (a save
    started beside the step in flight), `done` when it completed (measured), and
    `disarm` where waiting is no failure of its own (slices coming back, a maintenance
    hold: each has its own deadline elsewhere)."""

    def __init__(self, opts: WatchdogOptions, on_stall: Callable[[Stall], None],
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.opts, self.on_stall = opts, on_stall
        self.deadlines = Deadlines(opts)
        self._clock, self._wall = clock, wall
        self._armed: _Armed | None = None
        self._cond = threading.Condition()
        self._closing = False
        self.stalls = 0
        self._thread: threading.Thread | None = None
        if opts.enabled:
            self._thread = threading.Thread(target=self._run, name="watchdog", daemon=True)
            self._thread.start()

    def arm(self, phase: str, step: int, mesh: Hashable = None) -> None:
        with self._cond:
            self._armed = _Armed(phase, step, mesh, self._clock(), self._wall(),
                                 self.deadlines.deadline(phase, mesh))
            self._cond.notify()

    def relabel(self, phase: str) -> None:
        """What is armed goes on as `phase` (from the same start), if that is longer."""
        with self._cond:
            a = self._armed
            if a is None or a.fired:
                return
            deadline = self.deadlines.deadline(phase, a.mesh)
            if deadline >= a.deadline:
                a.phase, a.deadline = phase, deadline
                self._cond.notify()

    def done(self, measured: bool = True) -> float | None:
        """What was armed completed: its seconds (learned from, if `measured`)."""
        with self._cond:
            a, self._armed = self._armed, None
        if a is None:
            return None
        seconds = self._clock() - a.started
        if measured:
            self.deadlines.observe(a.phase, seconds, a.mesh)
        return seconds

    def disarm(self) -> None:
        with self._cond:
            self._armed = None

    def close(self) -> None:
        with self._cond:
            self._closing = True
            self._armed = None
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._closing:
                        return
                    a = self._armed
                    if a is not None and not a.fired:
                        left = a.started + a.deadline - self._clock()
                        if left <= 0:
                            a.fired = True
                            break
                        self._cond.wait(left)
                    else:
                        self._cond.wait()
                stall = Stall(a.phase, a.step, a.started_at, self._wall(), a.deadline)
            self.stalls += 1
            try:
                self.on_stall(stall)
            except Exception:  # the watchdog outlives a failed report
                log.exception("watchdog: handling %s", stall.describe())


def log_stacks(logger: logging.Logger) -> None:
    """Every thread's Python stack to the log, one record per thread (as pathwaysutils'
    debug.watchdog does; faulthandler would write past the log's handlers to fd 2)."""
    names = {t.ident: t.name for t in threading.enumerate()}
    for ident, frame in sys._current_frames().items():
        stack = "".join(traceback.format_stack(frame))
        logger.error("watchdog: thread %s (%s):\n%s", names.get(ident, "?"), ident,
                     stack.rstrip())
