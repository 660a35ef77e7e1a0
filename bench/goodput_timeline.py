"""A month of interruptions played on one job's timeline (pure): training advances at the
job's rate (slower while a slice is slow or the job trains on the slices left), each
interruption throws away the training since the copy its recovery restores, then pauses
training for the recovery's parts (bench/goodput_model.py's plans); an interruption that
comes during a recovery starts its own at once in place of what was left of the first (a
slice of ours already coming back keeps coming): overlapping recoveries are not added. A
checkpoint counts once its write has ended. An interruption while the job waits to be
submitted again hits nothing of it. Every second of the month is either useful training
or one cause of badput, so the causes add up to the month.

The restart budgets are spent as the operator and the trainer spend them
(elastic_api.budgets, the API's defaults): a refused restart is taken to end the job, as
xpk's defaults do, until it is submitted again (pessimistic: a slice's spent budget
restarts the JobSet first).
"""
from __future__ import annotations

import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from statistics import mean, quantiles

from bench.goodput_model import (
    CAUSES,
    DAY,
    KINDS,
    MONTH_DAYS,
    SHARES,
    SLOW_FACTOR,
    SLOW_PER_1000_HOST_DAYS,
    SLOW_SECONDS,
    Hardware,
    Job,
    Local,
    Pause,
    Plan,
    cadenced,
    plan,
)
from elastic_api.budgets import Budget, budgets_of
from elastic_api.models import ElasticTrainingJobSpec

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Event:
    at: float  # seconds into the month
    kind: str
    slice: int
    seconds: float = 0.0  # a slow episode's length


def draw(job: Job, rate: float, seed: int, days: float = MONTH_DAYS) -> list[Event]:
    """A month's interruptions (a Poisson process per kind), in time order."""
    rng = random.Random(seed)
    horizon = days * DAY
    expected = {k: rate * SHARES[k] / 100 * job.hosts * days / 1000 for k in SHARES}
    expected["slow"] = SLOW_PER_1000_HOST_DAYS * job.hosts * days / 1000
    events = []
    for kind in KINDS:
        at = rng.expovariate(expected[kind] / horizon) if expected[kind] else horizon
        while at < horizon:
            lo, hi = SLOW_SECONDS
            length = lo * (hi / lo) ** rng.random() if kind == "slow" else 0.0
            events.append(Event(at, kind, rng.randrange(job.slices), length))
            at += rng.expovariate(expected[kind] / horizon)
    return sorted(events, key=lambda e: e.at)


@dataclass
class Timeline:
    """One job's month, second by second in segments: `run_until` trains (or serves the
    recovery queue) up to a time; `interrupt` applies a recovery's plan.

    A checkpoint is committed when its write ends (`checkpoint_wall` after it starts), not
    when it starts: until then a restore goes to the one before, and an interruption that
    restores anything (a process or a slice's hosts lost) loses the write in flight.
    `behind_at_start`: the training between the newest committed checkpoint and the newest
    one started, which a restore loses too while that one is in flight or lost."""

    job: Job
    hw: Hardware
    overhead: float  # the copies' share of training time
    parallel: bool = False  # ours: slices replaced apart, one still coming back keeps coming
    now: float = 0.0
    useful: float = 0.0
    lost: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CAUSES, 0.0))
    since: dict[str, float] = field(default_factory=lambda: {"snapshot": 0.0,
                                                             "checkpoint": 0.0})
    queue: deque[tuple[str, float]] = field(default_factory=deque)  # ("reduced", s) too
    slow_until: float = 0.0
    commits_at: float = -1.0  # the newest checkpoint write's end (wall time)
    written_lost: bool = False  # the newest write was lost (it never commits)
    behind_at_start: float = 0.0  # training between the newest committed and newest started

    @property
    def submitted(self) -> bool:
        """False while the job waits to be submitted again: nothing of it to interrupt."""
        return not self.queue or self.queue[0][0] != "other"

    def checkpoint_behind(self) -> float:
        """The training a restore from the newest committed checkpoint throws away."""
        in_flight = self.now < self.commits_at - 1e-9
        if in_flight or self.written_lost:
            return self.since["checkpoint"] + self.behind_at_start
        return self.since["checkpoint"]

    def interrupt(self, recovery: Plan, before: Pause = ()) -> None:
        """The recovery starts at once and replaces what was left of one in progress (a
        JobSet restarted again, a process started again): overlapping recoveries are not
        added. Ours' slices come back apart (`parallel`): a slice already being brought
        back keeps coming, so the new recovery waits (or trains on the slices left) at
        least until it is back. `before`: a pause ahead of it (a resubmission)."""
        back_in = self._slice_back_in() if self.parallel else 0.0
        old_regrow = self._regrow_left()
        if recovery.restores is not None:
            behind = self.checkpoint_behind()
            if self.now < self.commits_at - 1e-9:  # the write in flight dies with it
                self.written_lost = True
            gone = behind if recovery.restores == "checkpoint" else \
                self.since[recovery.restores]
            gone = min(gone, self.useful)
            self.useful -= gone
            self.lost["recomputedSteps"] += gone
            for copy in self.since:
                self.since[copy] = max(0.0, self.since[copy] - gone)
            if recovery.restores == "checkpoint":  # back at the newest committed one
                self.written_lost, self.behind_at_start, self.commits_at = False, 0.0, -1.0
        pause = [*before, *recovery.pause]
        reduced, regrow = recovery.reduced, list(recovery.regrow)
        if back_in > 0:
            if self.job.train_on:
                reduced = max(reduced, back_in - sum(s for _, s in pause))
                regrow = regrow or old_regrow
            else:
                pause = _wait_at_least(pause, back_in)
        later = [("reduced", reduced)] if reduced > 0 else []
        self.queue = deque([*pause, *later, *(regrow if later else [])])

    def _slice_back_in(self) -> float:
        """Seconds until a slice being brought back is back: the end of the queue's last
        wait for slices (or of its training on the slices left)."""
        t = end = 0.0
        for what, seconds in self.queue:
            t += seconds
            if what in ("waitingForSlices", "reduced"):
                end = t
        return end

    def _regrow_left(self) -> list[tuple[str, float]]:
        """The grow-back still queued after the training on the slices left."""
        items = list(self.queue)
        at = max((i for i, (w, _) in enumerate(items) if w == "reduced"), default=None)
        return items[at + 1:] if at is not None else []

    def run_until(self, t: float) -> None:
        while self.now < t - 1e-9:
            if self.queue:
                self._serve(t)
            else:
                self._train(t - self.now, 1.0)

    def _serve(self, t: float) -> None:
        what, seconds = self.queue[0]
        dt = min(seconds, t - self.now)
        if what == "reduced":
            self._train(dt, self.job.speed_on_fewer, "fewerSlices")
        else:
            self.lost[what] += dt
            self.now += dt
        if dt >= seconds - 1e-9:
            self.queue.popleft()
        else:
            self.queue[0] = (what, seconds - dt)

    def _train(self, dt: float, factor: float, cause: str = "") -> None:
        """`dt` seconds of training at `factor` of full speed (and a slow slice's)."""
        slow = min(dt, max(0.0, self.slow_until - self.now))
        rates = ((slow, factor / SLOW_FACTOR), (dt - slow, factor))
        for seconds, rate in rates:
            if cause:
                self.lost[cause] += seconds * (1 - factor)
            self.lost["slowSlices"] += seconds * (factor - rate)
            self.lost["checkpointing"] += seconds * rate * self.overhead
            done = seconds * rate * (1 - self.overhead)
            self.useful += done
            self._copies(done, done / seconds if seconds > 0 else 0.0)
            self.now += seconds

    def _copies(self, done: float, pace: float) -> None:
        """`done` seconds of training from now at `pace` (training a wall second): each
        copy's period advances; a checkpoint started in it commits a write's time later."""
        periods = {"snapshot": self.hw.snapshot_period.value,
                   "checkpoint": self.hw.checkpoint_period.value}
        for copy, period in periods.items():
            total = self.since[copy] + done
            self.since[copy] = total % period
            if copy == "checkpoint" and total >= period:
                # The newest start in this stretch; the one before it committed, or was
                # lost (the training since the committed one then grows by its period).
                started = self.now + (done - self.since[copy]) / pace
                committed_before = total >= 2 * period or (
                    not self.written_lost and self.commits_at <= started + 1e-9)
                self.behind_at_start = period if committed_before \
                    else self.behind_at_start + period
                self.commits_at = started + self.hw.checkpoint_wall.value
                self.written_lost = False


def _wait_at_least(pause: list[tuple[str, float]], until: float) -> list[tuple[str, float]]:
    """The pause with its last wait for slices ending no sooner than `until` seconds in."""
    t, last = 0.0, None
    for i, (what, seconds) in enumerate(pause):
        t += seconds
        if what == "waitingForSlices":
            last, end = i, t
    if last is None or end >= until:
        return pause
    what, seconds = pause[last]
    return [*pause[:last], (what, seconds + until - end), *pause[last + 1:]]


def spec_of(job: Job) -> ElasticTrainingJobSpec:
    """The job's spec with the API's defaults: v5e slices of its hosts."""
    topology = {64: "16x16", 16: "8x8", 4: "4x4", 2: "2x4"}[job.hosts_per_slice]
    return ElasticTrainingJobSpec.model_validate({
        "tpu": {"type": "v5e", "topology": topology, "numSlices": job.slices},
        "checkpoint": {"directory": "gs://b/c"}, "trainer": {"image": "t", "steps": 1},
        "pathways": {"gcsScratch": "gs://b/s"}})


@dataclass
class Budgets:
    """The API's default restart budgets, spent as the operator and the trainer spend
    them; what each refused restart was."""

    slice_budget: Budget
    retries: Budget
    jobset: Budget
    times: dict[str, list[datetime]] = field(default_factory=dict)
    spent: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, job: Job) -> Budgets:
        b = budgets_of(spec_of(job))
        return cls(b.slice_restarts, b.elastic_retries, b.jobset_restarts)

    def charge(self, event: Event) -> bool:
        """Charge what the operator and the trainer charge for it; False: one is spent."""
        now = EPOCH + timedelta(seconds=event.at)
        if event.kind == "crash":
            return self._one("jobset", self.jobset, now)
        return self._one(f"slice {event.slice}", self.slice_budget, now) and \
            self._one("retries", self.retries, now)

    def _one(self, key: str, budget: Budget, now: datetime) -> bool:
        charge = budget.charge(0, self.times.get(key, []), now)
        self.times[key] = list(charge.recent)
        if not charge.allowed:
            self.spent.append(f"{budget.kind.field} on day {(now - EPOCH).days + 1}")
        return charge.allowed


@dataclass(frozen=True)
class Month:
    """One month of one policy: seconds lost by cause, and the budgets spent."""

    seconds: float
    useful: float
    lost: dict[str, float]
    budgets_spent: tuple[str, ...]

    @property
    def goodput(self) -> float:
        return self.useful / self.seconds


def month(policy: str, job: Job, events: Sequence[Event], hw: Hardware, local: Local,
          days: float = MONTH_DAYS, since_checkpoint: float = 0.0) -> Month:
    """The timeline played over `days` (`since_checkpoint`: training done since the
    newest checkpoint when it starts)."""
    overhead = hw.checkpoint_overhead.value + hw.snapshot_overhead.value
    ours = policy.startswith("ours")
    line = Timeline(job, hw, overhead, parallel=ours)
    line.since["checkpoint"] = since_checkpoint
    budgets, spent = Budgets.of(job), []
    for e in expand(policy, events, hw, job):
        line.run_until(e.at)
        if e.kind == "slow":
            line.slow_until = max(line.slow_until, e.at + e.seconds)
            continue
        if not line.submitted:  # no job running to interrupt until it is submitted again
            continue
        before: Pause = ()
        if ours and not budgets.charge(e):
            spent += budgets.spent
            budgets = Budgets.of(job)
            before = (("other", hw.resubmit.value),)  # resubmitted
        if e.kind == "move":  # the slow slice found and moved: it is slow no more
            line.slow_until = min(line.slow_until, line.now)
        line.interrupt(plan(policy, "slow" if e.kind == "move" else e.kind, job, hw, local),
                       before)
    line.run_until(days * DAY)
    return Month(days * DAY, line.useful, line.lost, tuple(spent))


def expand(policy: str, events: Sequence[Event], hw: Hardware, job: Job) -> list[Event]:
    """The events as the timeline plays them: a slow slice ours finds (one slow longer
    than it takes to find it, on a backend that times each slice) is slow that long, then
    moved (a `move`); on Pathways it stays slow to its end, as for the baselines."""
    out = []
    found = hw.slow_found.value
    for e in events:
        if e.kind == "slow" and policy.startswith("ours") and job.finds_slow and \
                e.seconds > found:
            out += [replace(e, seconds=found), Event(e.at + found, "move", e.slice)]
        else:
            out.append(e)
    return sorted(out, key=lambda e: e.at)


@dataclass(frozen=True)
class Spread:
    """A figure over seeds: its mean and the 5th and 95th percentiles."""

    mean: float
    p5: float
    p95: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        if len(values) < 2:
            return cls(values[0], values[0], values[0])
        cut = quantiles(values, n=20, method="inclusive")
        return cls(mean(values), cut[0], cut[-1])


def months(policy: str, job: Job, rate: float, seeds: Sequence[int], hw: Hardware,
           local: Local) -> dict[str, object]:
    """The policy's months over `seeds`: goodput and each cause's share, with spread."""
    hw = cadenced(policy, job, rate, hw)
    runs = [month(policy, job, draw(job, rate, seed), hw, local) for seed in seeds]
    return {"goodput": Spread.of([m.goodput for m in runs]).__dict__,
            "copies": {"snapshot_period": round(hw.snapshot_period.value, 1),
                       "checkpoint_period": round(hw.checkpoint_period.value, 1),
                       "overhead": round(hw.snapshot_overhead.value
                                         + hw.checkpoint_overhead.value, 5)},
            "causes": {c: Spread.of([m.lost[c] / m.seconds for m in runs]).__dict__
                       for c in CAUSES},
            "budgets_spent": sum(len(m.budgets_spent) for m in runs),
            "budgets_spent_first": next((m.budgets_spent[0] for m in runs
                                         if m.budgets_spent), None)}
