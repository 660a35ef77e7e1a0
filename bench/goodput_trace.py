"""The failure trace `python -m bench --only goodput` replays (pure): a week of a large
job's interruptions at the published rates and mix, and the inputs only hardware knows.

Rates and shares, each from its paper (docs/benchmarks.md, section 7, cites the same):

- Llama 3 (Meta, 2024, "The Llama 3 Herd of Models", section 3.3.4): 419 unplanned
  interruptions in 54 days on 16,384 H100 GPUs, i.e. 2,048 hosts of 8: 3.79 per 1,000
  host-days. By cause: faulty GPU 30.1 %, GPU HBM3 17.2 %, software bug 12.9 %, network
  switch or cable 8.4 %, host maintenance 7.6 %, NCCL watchdog timeouts 1.7 %, silent
  data corruption 1.4 %, the other 20.7 % (other hardware: SRAM, system processor, NIC,
  power, ...; dependencies). The 47 planned interruptions (whole-job maintenance) are left
  out: both sides pay them alike.
- Meta's research clusters (Kokolis et al., arXiv 2410.21680): 2.34 and 6.50 failures per
  1,000 node-days (RSC-2, RSC-1): the range Llama 3's rate sits in; the result gives the
  week's count at both.
- Alibaba FALCON (Wu et al., arXiv 2410.12588): fail-slows last "from tens of seconds to
  nearly ten hours" and delay a job 1.34x on average: durations log-uniform over 30 s to
  10 h, each slowing the job 1.34x while it lasts. FALCON gives no rate per host: one per
  1,000 host-days is an assumption (SLOW_PER_1000_HOST_DAYS).

How each cause is replayed (KINDS): a hardware failure, silent data corruption included,
is a worker of the slice failing (`hard`); a software bug is the training program itself
crashing (`crash`: in-process recovery cannot help, both sides restart); host
maintenance is GKE's announced maintenance of the slice's node pool (`maintenance`); an
NCCL watchdog timeout is a slice's part of a step that never returns (`hang`).

Counts are the expected ones (rounded), at least one of each kind, at uniform random
times (seeded): a Poisson process's times given its count. So a run replays the mix the
papers publish, not a lucky draw.
"""
from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

DAY = 86400.0
WEEK_DAYS = 7.0

# Llama 3: unplanned interruptions per 1,000 host-days, and their causes by kind.
LLAMA3_INTERRUPTIONS, LLAMA3_DAYS, LLAMA3_HOSTS = 419, 54, 2048
UNPLANNED_PER_1000_HOST_DAYS = LLAMA3_INTERRUPTIONS / (LLAMA3_DAYS * LLAMA3_HOSTS) * 1000
LLAMA3_SHARES: dict[str, dict[str, float]] = {
    "hard": {"faulty GPU": 30.1, "GPU HBM3": 17.2, "network switch or cable": 8.4,
             "silent data corruption": 1.4, "other hardware and dependencies": 20.7},
    "crash": {"software bug": 12.9},
    "maintenance": {"host maintenance": 7.6},
    "hang": {"NCCL watchdog timeout": 1.7},
}
META_RSC_PER_1000_NODE_DAYS = {"RSC-2": 2.34, "RSC-1": 6.50}
# FALCON: the range of a fail-slow's duration and the job's slowdown while it lasts.
SLOW_SECONDS_RANGE = (30.0, 10 * 3600.0)
SLOW_FACTOR = 1.34
SLOW_PER_1000_HOST_DAYS = 1.0  # an assumption: FALCON publishes no rate per host
KINDS = ("hard", "crash", "hang", "maintenance", "slow")


@dataclass(frozen=True)
class Input:
    """A time only real hardware knows: its value (trace seconds) and where it is from."""

    seconds: float
    source: str


# What only hardware knows, injected into the replay divided by the compression factor
# (docs/benchmarks.md, section 7). The article's run: v5e slices on Pathways, qwen3-0.6b,
# 7 GiB of training state ("We terminated a TPU mid-training and it recovered in
# seconds", README).
INPUTS: dict[str, Input] = {
    "detect": Input(13.0, "Pathways notices a lost slice: ~13 s in the article's run "
                          "(a 10 s heartbeat window and async dispatch)"),
    "slice_back": Input(50.0, "a slice's pods rescheduled, started and their TPU runtime "
                              "up: ~50 s for a replacement pod in the article's run"),
    "restore": Input(5.4, "the restore of the training state: 5.4 s in the article's run"),
    "compile": Input(12.7, "the first step after a recovery (compiling): 12.7 s in the "
                           "article's run (steady steps 0.16-0.2 s)"),
    "collective_timeout": Input(600.0, "a hung collective ends after NCCL's and "
                                       "torch.distributed's default 10 min timeout "
                                       "(bench/hang.py's anchor)"),
}
# Which inputs each recovery waits for: ours notices a hard failure through Pathways;
# a hang ends for the baseline only by the collective timeout; every recovery then
# waits for new pods, a restore and a compile.
BACK = ("slice_back", "restore", "compile")


def inputs_of(kind: str, ours: bool) -> tuple[str, ...]:
    if kind == "hard" and ours:
        return ("detect", *BACK)
    if kind == "hang" and not ours:
        return ("collective_timeout", *BACK)
    return BACK


# Assumptions of the replay (stated beside the inputs in the result).
CHECKPOINT_PERIOD_SECONDS = 1800.0  # both sides save a checkpoint every 30 min
MAINTENANCE_SECONDS = 3600.0  # a node pool's maintenance lasts an hour
NOTICE_LEAD_SECONDS = 3600.0  # GKE's notice comes (at least) an hour before


@dataclass(frozen=True)
class JobShape:
    """The large job the trace is for."""

    slices: int
    hosts_per_slice: int
    days: float = WEEK_DAYS

    @property
    def hosts(self) -> int:
        return self.slices * self.hosts_per_slice

    @property
    def host_days(self) -> float:
        return self.hosts * self.days

    @property
    def seconds(self) -> float:
        return self.days * DAY


@dataclass(frozen=True)
class TraceEvent:
    """One interruption: `at` trace seconds into the run, on `slice` of the large job;
    a slow one lasts `seconds` and slows the job `factor` times."""

    at: float
    kind: str
    slice: int
    seconds: float = 0.0
    factor: float = 1.0


def kind_shares() -> dict[str, float]:
    """Percent of Llama 3's unplanned interruptions, by kind."""
    return {kind: sum(causes.values()) for kind, causes in LLAMA3_SHARES.items()}


def expected_counts(job: JobShape) -> dict[str, float]:
    """The expected number of events of each kind over the job's days."""
    unplanned = UNPLANNED_PER_1000_HOST_DAYS * job.host_days / 1000
    counts = {kind: unplanned * share / 100 for kind, share in kind_shares().items()}
    counts["slow"] = SLOW_PER_1000_HOST_DAYS * job.host_days / 1000
    return {kind: counts[kind] for kind in KINDS}


def counts_of(job: JobShape) -> dict[str, int]:
    """What the trace holds: each kind's expected count rounded, at least one."""
    return {kind: max(1, round(n)) for kind, n in expected_counts(job).items()}


def slow_seconds(rng: random.Random) -> float:
    low, high = SLOW_SECONDS_RANGE
    return math.exp(rng.uniform(math.log(low), math.log(high)))


def generate(job: JobShape, seed: int) -> list[TraceEvent]:
    """The trace, in time order (deterministic for a seed)."""
    rng = random.Random(seed)
    events = []
    for kind, count in counts_of(job).items():
        for _ in range(count):
            at, where = rng.uniform(0.0, job.seconds), rng.randrange(job.slices)
            if kind == "slow":
                events.append(TraceEvent(at, kind, where, slow_seconds(rng), SLOW_FACTOR))
            else:
                events.append(TraceEvent(at, kind, where))
    return sorted(events, key=lambda e: (e.at, e.kind, e.slice))


@dataclass(frozen=True)
class Action:
    """What the replay does at trace second `at` for trace event `event`: the event
    itself, or what follows from it (a slow slice back to speed; a maintenance's notice
    before it and its end after)."""

    at: float
    what: str  # ACTIONS
    slice: int
    event: int
    factor: float = 1.0


ACTIONS = ("hard", "crash", "hang", "notice", "maintenance", "maintenance_end", "slow",
           "slow_off")


def actions(events: Sequence[TraceEvent], end: float) -> list[Action]:
    """The replay's actions in trace-time order."""
    out = []
    for i, e in enumerate(events):
        if e.kind == "slow":
            out += [Action(e.at, "slow", e.slice, i, e.factor),
                    Action(min(e.at + e.seconds, end), "slow_off", e.slice, i)]
        elif e.kind == "maintenance":
            out += [Action(max(0.0, e.at - NOTICE_LEAD_SECONDS), "notice", e.slice, i),
                    Action(e.at, "maintenance", e.slice, i),
                    Action(min(e.at + MAINTENANCE_SECONDS, end), "maintenance_end",
                           e.slice, i)]
        else:
            out.append(Action(e.at, e.kind, e.slice, i))
    return sorted(out, key=lambda a: (a.at, ACTIONS.index(a.what), a.event))


def gaps(times: Sequence[float], end: float, factor: float) -> list[float]:
    """Wall seconds of training before each action and after the last, compressed
    `factor` times: the replay trains this long between one recovery and the next
    action, so a recovery takes no trace time of its own (its cost is added up in
    bench/goodput_account.py, each part at its own scale)."""
    points = [0.0, *times, end]
    return [max(0.0, b - a) / factor for a, b in pairwise(points)]


def meta_counts(job: JobShape) -> dict[str, float]:
    """The same job's unplanned interruptions at Meta's research clusters' rates."""
    return {name: rate * job.host_days / 1000
            for name, rate in META_RSC_PER_1000_NODE_DAYS.items()}
