"""The trainer's watchdog: a deadline for what the training thread does now, learned from
what this run's own steps and phases took (docs/trainer.md, "Watchdog").

    Deadlines (pure)   what each phase may take: a step, factor x the recent steps of its
                       mesh, never below a floor; any other phase (elastic_api.phases:
                       a compile, a save, a restore, an evaluation, a data wait) by
                       `phase_deadline`, the rule the operator applies to the same history
    Watchdog (thread)  the training thread arms a phase (a step, the first step of an
                       attempt, a save, ...), beats inside a long one (an evaluation),
                       runs one inside another (`during`: a data wait inside a step) or
                       disarms (waiting for slices, a maintenance hold); past its deadline
                       the watchdog names where the training thread is (frames.py) and
                       calls `on_stall` once, from its own thread (the training thread is
                       the one stuck). It moves the reported activity (own_activity.py) as it
                       goes, so what is watched and what is reported are one thing.

Learned, not fixed, as NVRx's heartbeat timeouts are once it has seen intervals
(`calculate_and_set_hb_timeouts`: the longest interval seen x a safety factor): a fixed
timeout is either far too long for 0.1 s steps (NVRx's 60 s soft timeout, a 10 min
collective timeout) or a false alarm on the first compile of a large model. A step is
measured against the steps of its own mesh (a resize changes the step time), a step
beside a copy of the state against those of its kind; every other phase against the
longest of its kind so far, with a long first floor before it was seen, and a false alarm
that resolves (the phase completes after all) raises the deadline, because that time is
then measured.
"""
from __future__ import annotations

import logging
import math
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Final

from elastic_api.phases import Phase, phase_deadline
from elastic_trainer.frames import where
from elastic_trainer.own_activity import Activity
from elastic_trainer.phase_book import PhaseBook
from elastic_trainer.stack_phases import Reading

log = logging.getLogger(__name__)

STEP: Final[Phase] = "TrainStep"
COMPILE: Final[Phase] = "Compile"  # the first step of an attempt (a new mesh, a resize)
CHECKPOINT: Final[Phase] = "CheckpointSave"
RESTORE: Final[Phase] = "Restore"
EVALUATION: Final[Phase] = "Evaluation"
DATA_WAIT: Final[Phase] = "DataWait"
# status.training.stall.phase keeps the values an older operator and the CRD's enum know
# (a value the enum lacks would have the API server reject the whole report): a phase
# with none of its own holds up the step after it, and status.training.activity says
# which it is.
STALL_PHASES: Final[dict[Phase, str]] = {
    STEP: "Step", COMPILE: "FirstStep", CHECKPOINT: "Checkpoint", RESTORE: "Restore",
    EVALUATION: "Step", DATA_WAIT: "Step"}
# The defaults (etj train --watchdog-*; docs/trainer.md "Watchdog" says why these).
DEFAULT_FACTOR = 10.0
DEFAULT_FLOOR_SECONDS = 5.0
STEP_WINDOW = 200  # the steps of a mesh the quantile is taken over
STEP_QUANTILE = 0.99
STEPS_NEEDED = 3  # steps of a mesh measured before its own deadline applies


@dataclass(frozen=True)
class WatchdogOptions:
    factor: float = DEFAULT_FACTOR
    floor_seconds: float = DEFAULT_FLOOR_SECONDS
    enabled: bool = True

    def problem(self) -> str | None:
        """What is wrong with these options, for the command line (None: nothing)."""
        if not self.factor >= 1:  # also nan
            return f"--watchdog-factor {self.factor} must be >= 1"
        if not self.floor_seconds > 0:
            return f"--watchdog-floor-seconds {self.floor_seconds} must be more than 0"
        return None


@dataclass(frozen=True)
class Clock:
    """The watchdog's clock: monotonic seconds for deadlines, unix time for what it
    reports (a test gives one that jumps, so a 3-minute save takes no 3 minutes)."""

    monotonic: Callable[[], float] = time.monotonic
    time: Callable[[], float] = time.time


def quantile(values: list[float], q: float) -> float:
    """The q-quantile (nearest rank, the higher one) of a non-empty list."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


@dataclass(frozen=True)
class BesideCopy:
    """What a step beside a copy of the state (it waits for the copy to read the state)
    is timed against: the steps of its kind on its mesh."""

    mesh: Hashable


@dataclass
class Deadlines:
    """What each phase may take, from what this run measured of it. Pure: durations in,
    seconds out; `history` is what the trainer reports as status.training.phases."""

    opts: WatchdogOptions = field(default_factory=WatchdogOptions)
    history: PhaseBook = field(default_factory=PhaseBook)
    _steps: dict[Hashable, deque[float]] = field(default_factory=dict)

    def observe(self, phase: Phase, seconds: float, mesh: Hashable = None) -> None:
        if phase == STEP:
            self._steps.setdefault(mesh, deque(maxlen=STEP_WINDOW)).append(seconds)
        self.history.add(phase, seconds)

    def step_quantile(self, mesh: Hashable = None) -> float | None:
        steps = self._steps.get(mesh)
        if not steps or len(steps) < STEPS_NEEDED:
            return None
        return quantile(list(steps), STEP_QUANTILE)

    def step_deadline(self, mesh: Hashable = None) -> float:
        q = self.step_quantile(mesh)
        if q is None:  # a mesh not measured yet: as long as its compile may take
            return phase_deadline(COMPILE, self.history.longest(COMPILE), 0.0)
        return max(self.opts.floor_seconds, self.opts.factor * q)

    def deadline(self, phase: Phase, mesh: Hashable = None) -> float:
        """`mesh`: the step's mesh, or BesideCopy(its mesh) for a step beside a copy
        (never less than a plain step of the mesh may take)."""
        own = mesh.mesh if isinstance(mesh, BesideCopy) else mesh
        step = self.step_deadline(own)
        if phase == STEP:
            return step if own is mesh else max(step, self.step_deadline(mesh))
        deadline = phase_deadline(phase, self.history.longest(phase), step)
        # A synchronous save waits for the step in flight: never less than it may take.
        return max(deadline, step) if phase == CHECKPOINT else deadline


@dataclass(frozen=True)
class Stall:
    """A phase past its deadline."""

    phase: Phase
    step: int
    started_at: float  # unix time
    detected_at: float
    deadline_seconds: float
    quiet_seconds: float  # since the phase's last heartbeat (its start, without one)
    where: Reading | None = None  # where the training thread was

    @property
    def seconds(self) -> float:
        return self.detected_at - self.started_at

    @property
    def stall_phase(self) -> str:
        """As status.training.stall.phase says it (STALL_PHASES)."""
        return STALL_PHASES[self.phase]

    @property
    def what(self) -> str:
        """'step 53', 'first step 51', 'save around step 50', 'evaluation before step 41'."""
        return {STEP: "step", COMPILE: "first step", CHECKPOINT: "save around step",
                RESTORE: "restore before step", EVALUATION: "evaluation before step",
                DATA_WAIT: "data wait before step"}[self.phase] + f" {self.step}"

    def describe(self) -> str:
        quiet = (f" ({self.quiet_seconds:.1f}s since its last heartbeat)"
                 if self.seconds - self.quiet_seconds > 0.05 else "")
        return (f"{self.what} has run {self.seconds:.1f}s{quiet}, past the watchdog's "
                f"deadline of {self.deadline_seconds:.1f}s")


@dataclass
class _Armed:
    phase: Phase
    step: int
    mesh: Hashable  # what a step is timed against (its mesh, or BesideCopy(mesh))
    started: float  # monotonic
    started_at: float  # unix time
    deadline: float
    thread: int  # the training thread's ident
    beat: float  # monotonic: the start, or the last heartbeat
    fired: bool = False


class Watchdog:
    """Calls `on_stall(stall)` once per armed phase that runs past its deadline.

    The training thread calls `arm` when it starts something (a step, a save, a restore,
    an evaluation), `beat` inside a long one, `during` around one nested in what is armed
    (a data wait or a synchronous save inside a step: the step's clock stops meanwhile),
    `done` when it completed (measured), and `disarm` where waiting is no failure of its
    own (slices coming back, a maintenance hold: each has its own deadline elsewhere).
    `activity` is moved along: what the trainer reports it is doing."""

    def __init__(self, opts: WatchdogOptions, on_stall: Callable[[Stall], None],
                 activity: Activity | None = None, clock: Clock | None = None) -> None:
        self.opts, self.on_stall = opts, on_stall
        self.activity = activity or Activity()
        self.deadlines = Deadlines(opts, self.activity.history)
        self.clock = clock or Clock()
        self._armed: _Armed | None = None
        self._cond = threading.Condition()
        self._closing = False
        self._judged = 0  # times the thread looked at what is armed
        self.stalls = 0
        self._thread: threading.Thread | None = None
        if opts.enabled:
            self._thread = threading.Thread(target=self._run, name="watchdog", daemon=True)
            self._thread.start()

    def _new(self, phase: Phase, step: int, mesh: Hashable) -> _Armed:
        now = self.clock.monotonic()
        return _Armed(phase, step, mesh, now, self.clock.time(),
                      self.deadlines.deadline(phase, mesh), threading.get_ident(), now)

    def arm(self, phase: Phase, step: int, mesh: Hashable = None) -> None:
        with self._cond:
            self._armed = self._new(phase, step, mesh)
            self.activity.enter(phase, self._armed.started_at)
            self._cond.notify_all()

    def beside_copy(self) -> None:
        """The step armed goes on beside a copy of its state (it waits for the copy to
        read it): timed as the steps beside a copy of its mesh are, if that is longer."""
        with self._cond:
            a = self._armed
            if a is None or a.fired or a.phase != STEP or isinstance(a.mesh, BesideCopy):
                return
            a.mesh = BesideCopy(a.mesh)
            a.deadline = max(a.deadline, self.deadlines.deadline(STEP, a.mesh))
            self._cond.notify_all()

    def beat(self) -> None:
        """A sign of life inside what is armed: its deadline counts from now."""
        with self._cond:
            a = self._armed
            if a is not None and not a.fired:
                a.beat = self.clock.monotonic()
                self.activity.beat(self.clock.time())
                self._cond.notify_all()

    @contextmanager
    def during(self, phase: Phase, step: int, measured: bool = True) -> Iterator[None]:
        """`phase` nested in what is armed (timed and measured on its own, unless not
        `measured`, e.g. a commit wait that found its save done); what was armed goes on
        after it as it was, its clock stopped meanwhile. A failure inside leaves `phase`
        armed, for whatever handles the failure to arm what comes next."""
        with self._cond:
            outer = self._armed
            inner = self._armed = self._new(phase, step, None if outer is None else
                                            outer.mesh)
            self.activity.enter(phase, inner.started_at)
            self._cond.notify_all()
        yield
        with self._cond:
            seconds = self.clock.monotonic() - inner.started
            if self._armed is inner:
                self._armed = outer and replace(outer, started=outer.started + seconds,
                                                started_at=outer.started_at + seconds,
                                                beat=outer.beat + seconds)
                self.activity.enter(None if outer is None else outer.phase, self.clock.time())
                self._cond.notify_all()
            if measured:
                self.deadlines.observe(phase, seconds, inner.mesh)

    def done(self, measured: bool = True) -> float | None:
        """What was armed completed: its seconds (learned from, if `measured`)."""
        with self._cond:
            a, self._armed = self._armed, None
            if a is None:
                return None
            seconds = self.clock.monotonic() - a.started
            if measured:
                self.deadlines.observe(a.phase, seconds, a.mesh)
            if a.fired:  # out of what it was found blocked in
                self.activity.enter(a.phase, self.clock.time())
        return seconds

    def disarm(self) -> None:
        with self._cond:
            self._armed = None
            self.activity.enter(None, self.clock.time())

    def judge(self, timeout: float = 10.0) -> None:
        """Have the thread look at what is armed now, and wait until it has: for a clock
        that jumped (a test's), which no timer of the thread's would notice."""
        with self._cond:
            if self._thread is None:
                return
            target = self._judged + 1
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._judged >= target or self._closing, timeout)

    def close(self) -> None:
        with self._cond:
            self._closing = True
            self._armed = None
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(5)

    def _overdue(self) -> Stall | None:
        """What is armed, if it is past its deadline now (under the lock): the training
        thread's frame is read at once, and the activity says where it is blocked."""
        a = self._armed
        now = self.clock.monotonic()
        if a is None or a.fired or now < a.beat + a.deadline:
            return None
        a.fired = True
        found = where(a.thread)
        if found is not None and found.frame is not None:
            self.activity.blocked(found.frame, a.started_at, found.device_call)
        wall = self.clock.time()
        return Stall(a.phase, a.step, a.started_at, wall, a.deadline, now - a.beat, found)

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._closing:
                        return
                    stall = self._overdue()
                    self._judged += 1
                    self._cond.notify_all()
                    if stall is not None:
                        break
                    a = self._armed
                    left = None if a is None or a.fired else \
                        a.beat + a.deadline - self.clock.monotonic()
                    self._cond.wait(left)
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
