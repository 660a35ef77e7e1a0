"""A month of interruptions played on one job's timeline (pure): training advances at the
job's rate (slower while a slice is slow or the job trains on the slices left), each
interruption throws away the training since the copy its recovery restores, then pauses
training for the recovery's parts (bench/goodput_model.py's plans); an interruption that
comes during a recovery starts its own at once. Every second of the month is either
useful training or one cause of badput, so the causes add up to the month.

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
    recovery queue) up to a time; `interrupt` applies a recovery's plan."""

    job: Job
    hw: Hardware
    overhead: float  # the copies' share of training time
    now: float = 0.0
    useful: float = 0.0
    lost: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CAUSES, 0.0))
    since: dict[str, float] = field(default_factory=lambda: {"snapshot": 0.0,
                                                             "checkpoint": 0.0})
    queue: deque[tuple[str, float]] = field(default_factory=deque)  # ("reduced", s) too
    slow_until: float = 0.0

    def interrupt(self, recovery: Plan) -> None:
        if recovery.restores is not None:
            gone = min(self.since[recovery.restores], self.useful)
            self.useful -= gone
            self.lost["recomputedSteps"] += gone
            for copy in self.since:
                self.since[copy] = max(0.0, self.since[copy] - gone)
        later = [("reduced", recovery.reduced)] if recovery.reduced else []
        self.queue.extendleft(reversed([*recovery.pause, *later, *recovery.regrow]))

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
            self._copies(done)
        self.now += dt

    def _copies(self, done: float) -> None:
        periods = {"snapshot": self.hw.snapshot_period.value,
                   "checkpoint": self.hw.checkpoint_period.value}
        for copy, period in periods.items():
            self.since[copy] = (self.since[copy] + done) % period


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
    line = Timeline(job, hw, overhead)
    line.since["checkpoint"] = since_checkpoint
    budgets, spent = Budgets.of(job), []
    for e in expand(policy, events, hw):
        line.run_until(e.at)
        if e.kind == "slow":
            line.slow_until = max(line.slow_until, e.at + e.seconds)
            continue
        if ours and not budgets.charge(e):
            spent += budgets.spent
            budgets = Budgets.of(job)
            line.queue.appendleft(("other", hw.resubmit.value))  # resubmitted
        if e.kind == "move":  # the slow slice found and moved: it is slow no more
            line.slow_until = min(line.slow_until, line.now)
        line.interrupt(plan(policy, "slow" if e.kind == "move" else e.kind, job, hw, local))
    line.run_until(days * DAY)
    return Month(days * DAY, line.useful, line.lost, tuple(spent))


def expand(policy: str, events: Sequence[Event], hw: Hardware) -> list[Event]:
    """The events as the timeline plays them: a slow slice ours finds (one slow longer
    than it takes to find it) is slow that long, then moved (a `move`)."""
    out = []
    found = hw.slow_found.value
    for e in events:
        if e.kind == "slow" and policy.startswith("ours") and e.seconds > found:
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
