"""How often to snapshot and to checkpoint when the job gives no period.

`choose_period` is the rule, a pure function (docs/trainer.md, "Cadence"):

    cost      what one copy costs the training: the median of the newest measurements
              (a snapshot's from its parts, a save's wall time: Cadences, below)
    step      the median of the newest steps with no copy in flight
    period    the shortest whole number of steps whose overhead
              cost / (period x step) stays within the budget: ceil(cost / (budget x step))
    failures  with failures seen, shorter toward the Young-Daly optimum
              sqrt(2 x cost x MTBF) (MTBF = seconds trained / failures)
    prior     given the MTBF the published rates give the job's hosts (checkpoints:
              elastic_api.budgets.mean_seconds_between), longer toward the Young-Daly
              period of that MTBF (or of the failures seen, if they come more often), at
              most LENGTHEN_AT_MOST times the budget's period
    floor     never shorter than twice a copy's own wall time: one must be done well
              before the next starts (a save waits for the one before)
    memory    host memory free for fewer than MEMORY_TIGHT more copies: twice as long;
              for less than one: as long as the run (MemoryPressure)
    change    longer at once (CopySlowed: slower against the step); shorter only below
              3/4 of the period in use, so noise does not make it flap
    bounds    1 <= period <= max_period

Every step is the rule for a snapshot, every N steps the fallback: a copy that costs at
most the budget's share of a step (cost <= budget x step) and lasts at most half a step
(the floor) gets period 1, so a lost slice costs only the step in flight (the copy of the
step before survives on the other slices' hosts). Snapshots are double-buffered: two host
copies at most, the published one and the one in flight, the older freed when the newer
is published (snapshots.py). A chosen snapshot due while the one before is still in
flight is deferred to the next step (`Cadence.deferred`, in the report's message), never
waited for. A copy that does not fit gets N > 1 steps: a loss then redoes up to N steps.

`budget_shares` splits the job's one overhead budget between the copies the trainer
schedules: the whole budget to one kind when the job fixes or turns off the other, half
each when it chooses both (so the user's number bounds what the copies cost together).

`Cadence` keeps one kind's samples and period through a run: user-set (fixed, or 0 =
off) or chosen. A chosen cadence starts by measuring: a first probe copy after WARMUP_STEPS
steps (its sample is dropped: it pays for compiling the copy, or orbax's first save), then
probes PROBE_PERIOD steps apart, each once the one before has been measured, until
PROBES_KEPT samples decide the period.
"""
from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from elastic_api.models import CadenceReport

COST_WINDOW = 5  # the newest copy costs the median is taken over
STEP_WINDOW = 32  # the newest clean steps
WARMUP_STEPS = 3  # steps of an attempt before its first probe (the first one compiles)
PROBE_PERIOD = 2  # steps between probes while measuring
PROBES_KEPT = 1  # measured probes (after the dropped first one) that decide the period
MEMORY_TIGHT = 2.0  # free host memory for fewer copies than this: twice the period
SHORTEN_BELOW = 0.75  # a shorter period replaces the one in use only below this share
# A period lengthened toward Young-Daly: at most this many times the budget's. The prior
# is a published rate, not this cluster's: a bound keeps a wrong one from costing much
# (a failure loses half a period on average).
LENGTHEN_AT_MOST = 4


@dataclass(frozen=True)
class CadenceInputs:
    budget: float  # share of step time one copy may cost, in (0, 0.5]
    costs: Sequence[float]  # seconds per copy, oldest first
    step_seconds: Sequence[float]  # seconds of steps with no copy in flight, oldest first
    max_period: int  # the longest period that makes sense (the run's steps)
    current: int | None = None  # the period in use (None: none chosen yet)
    failures: int = 0  # failures this copy would have saved steps from
    seconds_trained: float = 0.0  # the time those failures were seen in
    headroom: float | None = None  # free host memory / bytes of one copy (None: unknown)
    walls: Sequence[float] = ()  # the copies' own wall times (start to done), oldest first
    # The MTBF the published rates give the job's hosts for the failures this copy is
    # restored after (None: unknown, never lengthened toward Young-Daly).
    prior_mtbf: float | None = None


@dataclass(frozen=True)
class CadenceChoice:
    period: int
    reason: str  # Measuring, WithinBudget, CopySlowed, MemoryPressure, YoungDaly
    message: str
    cost_seconds: float | None = None
    step_seconds: float | None = None

    @property
    def overhead(self) -> float | None:
        if self.cost_seconds is None or not self.step_seconds:
            return None
        return self.cost_seconds / (self.period * self.step_seconds)


def _median(values: Iterable[float], window: int) -> float | None:
    """The median of the newest `window` values that are finite and >= 0."""
    kept = [float(v) for v in values if isinstance(v, int | float)
            and not isinstance(v, bool) and math.isfinite(v) and v >= 0][-window:]
    if not kept:
        return None
    kept.sort()
    mid = len(kept) // 2
    return kept[mid] if len(kept) % 2 else (kept[mid - 1] + kept[mid]) / 2


def _steps(seconds: float, step: float, max_period: int) -> int:
    """ceil(seconds / step) within [1, max_period], for any finite or infinite ratio."""
    try:
        ratio = seconds / step
    except ZeroDivisionError:  # a step so short that budget x step underflowed
        ratio = math.inf if seconds > 0 else 0.0
    if not ratio < max_period:  # also inf and nan
        return max_period
    return max(1, math.ceil(ratio - 1e-9))


def _check(inputs: CadenceInputs) -> int:
    """The settings (not measurements): a bad one is a bug of the caller."""
    budget, max_period = inputs.budget, inputs.max_period
    if isinstance(budget, bool) or not isinstance(budget, int | float) \
            or not 0 < budget <= 0.5:
        raise ValueError(f"the overhead budget must be in (0, 0.5] of step time, got {budget!r}")
    if isinstance(max_period, bool) or not isinstance(max_period, int) or max_period < 1:
        raise ValueError(f"max_period must be an int >= 1, got {max_period!r}")
    return max_period


def choose_period(inputs: CadenceInputs) -> CadenceChoice:
    """The period (steps) for one kind of copy, and why. Samples that are not finite
    numbers >= 0 are ignored; a step time of 0 counts as unmeasured."""
    max_period = _check(inputs)
    current = min(inputs.current, max_period) if isinstance(inputs.current, int) \
        and not isinstance(inputs.current, bool) \
        and inputs.current >= 1 else None
    cost = _median(inputs.costs, COST_WINDOW)
    step = _median(inputs.step_seconds, STEP_WINDOW)
    if cost is None or not step:
        kept = min(current or PROBE_PERIOD, max_period)
        return CadenceChoice(kept, "Measuring", "no measured copy or step yet", cost, step)
    wall = _median(inputs.walls, COST_WINDOW)
    floor = 1 if wall is None else _steps(2.0 * wall, step, max_period)
    period = max(floor, _steps(cost, inputs.budget * step, max_period))
    reason = "WithinBudget"
    why = (f"a copy costs {cost * 1e3:.1f} ms, a step {step * 1e3:.1f} ms: every {period} "
           f"step(s) stays within {inputs.budget:.1%}")
    if wall is not None and period == floor > 1:
        why += f" (no sooner: a copy lasts {wall * 1e3:.0f} ms)"
    young_daly = _young_daly(inputs, cost, step, max_period)
    if young_daly is not None and max(floor, young_daly[0]) < period:
        period, reason, why = max(floor, young_daly[0]), "YoungDaly", young_daly[1]
    elif (longer := _lengthened(inputs, cost, step, max_period, period)) is not None:
        period, reason, why = longer[0], "YoungDaly", longer[1]
    pressure = _memory(inputs.headroom, period, max_period)
    if pressure is not None:
        period, reason, why = pressure[0], "MemoryPressure", pressure[1]
    if current is not None and current > period >= SHORTEN_BELOW * current:
        period, why = current, why + f"; kept at {current} (less than a quarter shorter)"
    elif current is not None and period > current and reason == "WithinBudget":
        reason, why = "CopySlowed", f"lengthened from {current}: " + why
    return CadenceChoice(period, reason, why, cost, step)


def _young_daly(inputs: CadenceInputs, cost: float, step: float, max_period: int
                ) -> tuple[int, str] | None:
    failures, seconds = inputs.failures, inputs.seconds_trained
    if isinstance(failures, bool) or not isinstance(failures, int) or failures < 1 \
            or isinstance(seconds, bool) or not isinstance(seconds, int | float) \
            or not math.isfinite(seconds) or seconds <= 0:
        return None
    mtbf = seconds / failures
    period = _steps(math.sqrt(2.0 * cost * mtbf), step, max_period)
    return period, (f"{failures} failure(s) in {seconds:.0f} s (one every {mtbf:.0f} s): "
                    f"the Young-Daly period sqrt(2 x {cost * 1e3:.1f} ms x {mtbf:.0f} s) is "
                    f"{period} step(s)")


def _lengthened(inputs: CadenceInputs, cost: float, step: float, max_period: int,
                within: int) -> tuple[int, str] | None:
    """Longer than the budget's period `within`, toward the Young-Daly period of the
    prior MTBF, or of the failures seen where they come more often; None: not longer."""
    prior = inputs.prior_mtbf
    if isinstance(prior, bool) or not isinstance(prior, int | float) \
            or not math.isfinite(prior) or prior <= 0:
        return None
    mtbf, source = float(prior), "the published rate for the job's hosts"
    failures, seconds = inputs.failures, inputs.seconds_trained
    if isinstance(failures, int) and not isinstance(failures, bool) and failures >= 1 \
            and isinstance(seconds, int | float) and not isinstance(seconds, bool) \
            and math.isfinite(seconds) and 0 < seconds / failures < mtbf:
        mtbf, source = seconds / failures, f"{failures} failure(s) in {seconds:.0f} s"
    cap = min(LENGTHEN_AT_MOST * within, max_period)
    period = min(_steps(math.sqrt(2.0 * cost * mtbf), step, max_period), cap)
    if period <= within:
        return None
    return period, (f"one failure every {mtbf:.0f} s ({source}): toward the Young-Daly "
                    f"period sqrt(2 x {cost * 1e3:.1f} ms x {mtbf:.0f} s), {period} step(s)"
                    + (f", at most {LENGTHEN_AT_MOST}x the budget's {within}"
                       if period == cap else ""))


def _memory(headroom: float | None, period: int, max_period: int) -> tuple[int, str] | None:
    if headroom is None or not isinstance(headroom, int | float) or math.isnan(headroom) \
            or headroom >= MEMORY_TIGHT:
        return None
    if headroom < 1:
        return max_period, (f"free host memory holds {max(headroom, 0.0):.2f} more copies: "
                            f"one every {max_period} step(s)")
    longer = min(2 * period, max_period)
    return longer, (f"free host memory holds only {headroom:.1f} more copies: every "
                    f"{longer} step(s) instead of {period}")


def budget_shares(budget: float, snapshot_period: int | None,
                  checkpoint_period: int | None) -> tuple[float, float]:
    """(snapshot, checkpoint) shares of `budget` (a share of step time) for the cadences
    the trainer chooses (a period of None). Half each when it chooses both: the budget is
    what the copies may cost together, not each (two full shares added up past it,
    docs/benchmarks.md). A period the job set costs what the job chose."""
    if snapshot_period is None and checkpoint_period is None:
        return budget / 2, budget / 2
    return budget, budget


class Cadence:
    """One kind of copy through a run: when it is due, what it costs, the period in use."""

    def __init__(self, period: int | None, budget: float, max_period: int,
                 prior_mtbf: float | None = None) -> None:
        """`period`: the user's (0 = off), None = chosen here within `budget` (a share of
        step time); `prior_mtbf`: see CadenceInputs."""
        self.user_period, self.budget, self.prior_mtbf = period, budget, prior_mtbf
        self.max_period = max(1, max_period)
        self.costs: deque[float] = deque(maxlen=COST_WINDOW)
        self.walls: deque[float] = deque(maxlen=COST_WINDOW)
        self.step_seconds: deque[float] = deque(maxlen=STEP_WINDOW)
        self.choice = CadenceChoice(PROBE_PERIOD, "Measuring", "no measured copy yet")
        self._dropped_first = False
        self._measured = 0  # samples kept
        self._probes_pending = 0  # copies made whose cost has not come back yet
        self._last: int | None = None  # the step of the newest copy (or restored state)
        self._start = 0  # the first step of the current attempt
        self.deferred = 0  # copies due while the one before was in flight (Cadences.due)

    @property
    def chosen(self) -> bool:
        return self.user_period is None

    @property
    def period(self) -> int:
        """Steps between copies in use now; 0 = off."""
        return self.user_period if self.user_period is not None else self.choice.period

    @property
    def measuring(self) -> bool:
        return self.chosen and self._measured < PROBES_KEPT

    def attempt_started(self, step: int) -> None:
        """An attempt starts from `step` (a restore, or a fresh start): the state there is
        the newest copy there is; warm up again before probing."""
        self._start = step
        self._last = step if self._last is None else min(self._last, step)
        self._probes_pending = 0  # a copy in flight when the attempt failed is gone

    def due(self, step: int, quiet: bool = True) -> bool:
        """Make a copy of the state after `step` now? `quiet`: no other copy in flight; a
        probe waits for it (a copy measured against another one costs more than alone)."""
        if self.user_period is not None:
            return self.user_period > 0 and step % self.user_period == 0
        if step - self._start < WARMUP_STEPS:
            return False
        last = self._last if self._last is not None else self._start
        if self.measuring:
            return quiet and self._probes_pending == 0 and step - last >= PROBE_PERIOD
        return step - last >= self.choice.period

    def made(self, step: int) -> None:
        self._last = step
        self._probes_pending += 1

    def add_step(self, seconds: float) -> None:
        self.step_seconds.append(seconds)

    def lost(self) -> None:
        """A copy made was not kept (it failed): it brings no measurement."""
        self._probes_pending = max(0, self._probes_pending - 1)

    def add_cost(self, seconds: float, wall: float | None = None) -> bool:
        """A copy's measured cost (and its own wall time); whether the period should be
        decided again."""
        self._probes_pending = max(0, self._probes_pending - 1)
        if not self._dropped_first:
            self._dropped_first = True  # compiling the copy, or orbax's first save
            return False
        self.costs.append(seconds)
        self.walls.append(seconds if wall is None else wall)
        self._measured += 1
        return self.chosen

    def decide(self, failures: int = 0, seconds_trained: float = 0.0,
               headroom: float | None = None) -> CadenceChoice:
        if not self.chosen or self.measuring:
            return self.choice
        self.choice = choose_period(CadenceInputs(
            budget=self.budget, costs=list(self.costs), step_seconds=list(self.step_seconds),
            max_period=self.max_period, current=None if self.choice.reason == "Measuring"
            else self.choice.period, failures=failures, seconds_trained=seconds_trained,
            headroom=headroom, walls=list(self.walls), prior_mtbf=self.prior_mtbf))
        return self.choice

    def report(self) -> CadenceReport:
        budget = round(self.budget * 100, 6)
        if self.user_period is not None:
            cost, step = _median(self.costs, COST_WINDOW), _median(self.step_seconds,
                                                                   STEP_WINDOW)
            overhead = cost / (self.user_period * step) if cost is not None and step and \
                self.user_period else None
            return CadenceReport(
                period_steps=self.user_period, chosen_by="User",
                reason="UserSet" if self.user_period else "Off",
                message="set by the job" if self.user_period else "turned off by the job",
                cost_seconds=cost, step_seconds=step, overhead_percent=_percent(overhead))
        c = self.choice
        message = c.message if not self.deferred else \
            f"{c.message}; {self.deferred} deferred a step (the copy before in flight)"
        return CadenceReport(
            period_steps=c.period, chosen_by="Trainer", reason=c.reason, message=message,
            cost_seconds=c.cost_seconds, step_seconds=c.step_seconds,
            overhead_percent=_percent(c.overhead), budget_percent=budget)


def _percent(share: float | None) -> float | None:
    return None if share is None or not math.isfinite(share) else round(share * 100, 4)


# --- the edges: what the loop feeds the cadences --------------------------------------------

# (step, what the copy cost in seconds, its own wall time); None: it was not kept.
Costs = deque[tuple[int, float | None, float | None]]


class Cadences:
    """The snapshot and the checkpoint cadence of a run, fed from the loop's clean step
    times and what the snapshot hand-off and the checkpoint saves measure (`costs`
    deques appended on their threads, drained here on the training thread).

    What a copy costs comes measured: a snapshot's from its parts (snapshots.py: the
    dispatch and the split in CPU time, the copy in wall time); a save's is its wall
    time, from the state ready to committed (checkpoint.py): what it would cost if none
    of it overlapped the steps, an upper bound. (The steps a save slows cannot tell it
    apart: on a loaded machine their noise is larger than the save, and a cost measured
    as 0 would make the period 1, and the steps, all slowed, none clean to measure by.)"""

    def __init__(self, snapshot: Cadence, checkpoint: Cadence, snapshot_costs: Costs,
                 save_costs: Costs) -> None:
        self.snapshot, self.checkpoint = snapshot, checkpoint
        self._sources = ((snapshot, snapshot_costs), (checkpoint, save_costs))

    def attempt_started(self, step: int) -> None:
        """A new attempt from `step`: the copies of the failed attempt (settled by now)
        are not measured (the slice loss may have cut or slowed them)."""
        self.snapshot.attempt_started(step)
        self.checkpoint.attempt_started(step)
        for _cadence, costs in self._sources:
            costs.clear()

    def due(self, step: int, snapshot_busy: bool, saving: bool) -> tuple[bool, bool]:
        """(snapshot, checkpoint) of the state after `step`? The checkpoint's probes wait
        until the snapshot's are done: each is measured alone. A chosen snapshot due while
        the one before is in flight waits for the next step, not the training thread for
        the hand-off (double-buffered: two host copies at most)."""
        snapshot = self.snapshot.due(step, quiet=not saving)
        if snapshot and snapshot_busy and self.snapshot.chosen:
            self.snapshot.deferred += 1
            snapshot = False
        snapshot_measuring = self.snapshot.measuring and self.snapshot.period > 0
        checkpoint = self.checkpoint.due(
            step, quiet=not (snapshot or snapshot_busy or snapshot_measuring))
        return snapshot, checkpoint

    def step_done(self, seconds: float, beside_snapshot: bool = False) -> None:
        """A step (not compiling, no save in flight) took `seconds`; `beside_snapshot`: a
        snapshot's copy was in flight. Such a step is measured only while every step has
        one (a chosen period of 1): no step would be clean, and the step it gives is
        longer by at most the copy's cost, within the budget's share (1 % by default), so
        a step that gets shorter still makes a copy that no longer fits less frequent."""
        if beside_snapshot and not self.every_step():
            return
        self.snapshot.add_step(seconds)
        self.checkpoint.add_step(seconds)

    def every_step(self) -> bool:
        """A snapshot after every step, the period chosen (not the job's, nor a probe's)."""
        s = self.snapshot
        return s.chosen and not s.measuring and s.period == 1

    def measured(self) -> list[Cadence]:
        """Take the copies measured since the last call: the cadences to decide again."""
        changed = []
        for cadence, costs in self._sources:
            while costs:
                _step, cost, wall = costs.popleft()
                if cost is None:
                    cadence.lost()
                elif cadence.add_cost(cost, wall) and cadence not in changed:
                    changed.append(cadence)
        return changed


def host_memory_available() -> int | None:
    """MemAvailable of this host (bytes), None where /proc/meminfo cannot say."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
