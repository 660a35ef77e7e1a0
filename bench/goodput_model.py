"""The goodput model (pure): what one interruption costs a job, by cause, under each
recovery policy, and a seeded month of interruptions at the published rates composed from
those costs (issue 67; docs/benchmarks.md, "Goodput over a month").

A cost is seconds of training time lost, by cause (CAUSES: the words `kubectl etj
goodput` and the metrics use, elastic_api.badput). Each recovery's parts come from two
places: what the control plane and the processes do (detect the failure, replace the
slice or restart the JobSet, start a trainer process) is measured at real speed on the
local control plane (bench/goodput_costs.py: `Local`); what only hardware knows (a
slice's pods up, a restore, a compile, Pathways noticing a lost slice) is a named
parameter with its source (`Hardware`). The same model, given the local run's own
parameters and trace, predicts the hour-long replay's goodput (bench/goodput_check.py).

Policies (POLICIES): this operator with the API's defaults (a crash restarts `main` in
place, issue 66: the slices kept, resumed from the newest checkpoint); the same with the
snapshot kept through a crash too (as if Pathways kept the state in host memory while
`main` restarts); plain JobSet (every interruption restarts the whole JobSet from the newest
checkpoint, without end); xpk's defaults (maxRestarts 0: every interruption ends the
workload, someone submits it again). Interruptions that overlap are played on one timeline
(bench/goodput_timeline.py): the second recovery replaces what was left of the first,
except that ours' slice already being brought back keeps coming; they are not added.

Slow slices are moved only where the trainer can time a slice: the simulated backend
(`Job.backend`); on Pathways, the backend users run, it cannot (docs/trainer.md, "What can
be timed per slice"), so ours runs slow like the baselines there (issue 79).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from elastic_api.badput import CAUSES as BADPUT_CAUSES
from elastic_api.budgets import JOBSET_RESTARTS, mean_seconds_between
from elastic_api.resize import default_min_slices
from elastic_api.stragglers import SLOW_SLICE_SECONDS, SLOW_SLICE_STEPS
from elastic_trainer.cadence import LENGTHEN_AT_MOST

DAY = 86400.0
MONTH_DAYS = 30.0
# Interruptions per 1,000 host-days, and where each rate is from. Each is published per
# host of 8 GPUs; UNITS scale it to the job's hosts per host (a host fails as one whatever
# it holds: the headline, the pessimistic reading for a 4-chip host) or per accelerator
# (the GPU-tied causes, more than half of Llama 3's: faulty GPUs 30.1 %, their HBM3
# 17.2 %, scale with chips: a v5e host's 4 chips then fail half as often).
RATE_ACCELERATORS_PER_HOST = 8
UNITS = ("host", "chip")
RATES: dict[str, tuple[float, str]] = {
    "Llama 3": (419 / (54 * 2048) * 1000, "Llama 3 (Meta, 2024), 3.3.4: 419 unplanned "
                "interruptions in 54 days on 16,384 GPUs (2,048 hosts)"),
    "Meta RSC-1": (6.50, "Kokolis et al. (arXiv 2410.21680): 6.50 failures per 1,000 "
                   "node-days on RSC-1"),
}
# Llama 3's interruptions by kind, percent (the same paper, its causes grouped).
SHARES = {"hard": 30.1 + 17.2 + 8.4 + 1.4 + 20.7, "crash": 12.9, "maintenance": 7.6,
          "hang": 1.7}
SLOW_PER_1000_HOST_DAYS = 1.0  # FALCON publishes no rate per host: assumed
SLOW_FACTOR = 1.34  # FALCON: a fail-slow makes the job 1.34x slower on average
SLOW_SECONDS = (30.0, 10 * 3600.0)  # FALCON: from tens of seconds to nearly ten hours
KINDS = ("hard", "crash", "hang", "maintenance", "slow")
# The causes of badput: the job's own (elastic_api.badput: `kubectl etj goodput`, the
# metrics). `other` here is a resubmission: xpk's defaults, or a spent budget.
CAUSES = BADPUT_CAUSES
POLICIES = ("ours", "ours-snapshot-kept", "jobset", "jobset-recreated", "xpk")
# The month table's rows: a label, the policy, whether ours trains on the slices left
# whatever its batch (minSlices set, or a batch that splits over them), and the backend
# (slow slices moved on the simulated one only: Pathways cannot time a slice).
VARIANTS = (("ours", "ours", False, "pathways"),
            ("ours-finds-slow", "ours", False, "simulated"),
            ("ours-train-on", "ours", True, "pathways"),
            ("ours-snapshot-kept", "ours-snapshot-kept", False, "pathways"),
            ("jobset", "jobset", False, "pathways"),
            ("jobset-recreated", "jobset-recreated", False, "pathways"),
            ("xpk", "xpk", False, "pathways"))
# Where a variant is modelled: the JobSet recreated at the time measured here only from the
# size it was measured at (RECREATED_PODS, ~16,384 hosts' nearest); xpk's resubmission
# only up to 1,024 hosts (above, a 30-minute resubmission 15 to 62 times a day is a straw
# man no one runs).
RECREATED_PODS = 12737
XPK_MAX_HOSTS = 1024


def modelled(label: str, hosts: int) -> bool:
    """Whether the month table has the variant `label` at `hosts`."""
    if label == "jobset-recreated":
        return hosts >= RECREATED_PODS
    if label == "xpk":
        return hosts <= XPK_MAX_HOSTS
    return True


@dataclass(frozen=True)
class Param:
    """A value only real hardware (or an assumption) gives, and where it is from."""

    value: float
    source: str


@dataclass(frozen=True)
class Hardware:
    """What only hardware knows, each a named parameter with its source."""

    detect: Param = Param(13.0, "Pathways notices a lost slice: ~13 s (the article's v5e "
                          "run: a 10 s heartbeat window)")
    slice_up: Param = Param(50.0, "a replacement slice's pods up, TPU runtime ready: ~50 s "
                            "(the article's v5e run)")
    jobset_up: Param = Param(130.0, "a whole JobSet's pods back: 2 min 10 s at 5,000 nodes "
                             "(JobSet's InPlaceRestart write-up, issue 66)")
    jobset_recreated: Param = Param(1084.0, "a whole JobSet's pods back as measured here: "
                                    "12,736 pods deleted and recreated, p50 1,084 s (the "
                                    "scale benchmark at 199 x 64, 2026-12-07: the Job "
                                    "controller's and garbage collector's 20 requests/s); "
                                    "not scaled up to 16,384 pods (favours it)")
    in_place: Param = Param(10.0, "a pod's containers restarted in place: ~92 % less than "
                            "the 130 s above (the same write-up)")
    restore: Param = Param(5.4, "restoring the training state: 5.4 s for 7 GiB (the "
                           "article's run); a checkpoint from storage taken as fast (favours "
                           "the baselines)")
    compile: Param = Param(12.7, "the first step after a restore (compile): 12.7 s (the "
                           "article's run; Pathways turns the persistent cache off)")
    compile_back: Param = Param(12.7, "the first step after growing back onto every "
                                "slice: compiled again for the new slice's devices "
                                "(assumed as long as the first)")
    step: Param = Param(5.0, "seconds per step of a large model at this scale: assumed")
    collective_timeout: Param = Param(600.0, "a hung collective ends after NCCL's and "
                                      "torch.distributed's default 10 min timeout")
    watchdog: Param = Param(100.0, "the trainer's watchdog: 10 x the step (elastic_api."
                            "phases), a hang noticed after ~100 s at 5 s steps")
    snapshot_cost: Param = Param(2.0, "a snapshot copy's cost to the training: the state's "
                                 "per-host share copied to host memory (assumed)")
    checkpoint_cost: Param = Param(2.0, "an async checkpoint save's cost to the training: "
                                   "its copy off the device (assumed as the snapshot's)")
    checkpoint_wall: Param = Param(60.0, "a checkpoint's write to storage, start to commit "
                                   "(assumed): the trainer never saves more often than "
                                   "twice that")
    copy_budget: Param = Param(0.01, "each copy's share of step time the trainer's cadence "
                               "may spend: the API's 2 % overheadBudgetPercent, halved")
    baseline_checkpoint: Param = Param(1800.0, "derived: the baselines' checkpoint period "
                                       "at their own best, Young-Daly's sqrt(2 x the save's "
                                       "cost x the mean time between interruptions), never "
                                       "under one write (`cadenced`)")
    snapshot_period: Param = Param(200.0, "derived: `cadenced`")
    checkpoint_period: Param = Param(1800.0, "derived: `cadenced`")
    snapshot_overhead: Param = Param(0.01, "derived: `cadenced`")
    checkpoint_overhead: Param = Param(0.01, "derived: `cadenced`")
    slow_found: Param = Param(SLOW_SLICE_SECONDS + SLOW_SLICE_STEPS * 5.0, "a slow slice "
                              "moved once slow 60 s on end, after the 10 steps the rule "
                              "needs (elastic_api.stragglers; 5 s steps)")
    resubmit: Param = Param(1800.0, "xpk's defaults end the workload at the first "
                            "failure: someone notices and submits it again within 30 min "
                            "(assumed)")


@dataclass(frozen=True)
class Local:
    """What the control plane and the processes add to a recovery, seconds (measured at
    real speed on the local control plane, bench/goodput_costs.py; zero: none measured).
    `detect`: a fault until the trainer (or JobSet) notices; `back`: noticed until the
    slice is back or a new trainer process runs; `start`: a new trainer process until it
    restores (imports, connecting). `restore`, `compile`: what the local run's own
    restores and compiles took, for the model of that run (goodput_check); absent, the
    hardware's parameters."""

    detect: Mapping[tuple[str, str], float] = field(default_factory=dict)
    back: Mapping[tuple[str, str], float] = field(default_factory=dict)
    start: float = 0.0
    restore: Mapping[tuple[str, str], float] = field(default_factory=dict)
    compile: Mapping[tuple[str, str], float] = field(default_factory=dict)

    def of(self, what: str, policy: str, kind: str, default: float = 0.0) -> float:
        table = {"detect": self.detect, "back": self.back, "restore": self.restore,
                 "compile": self.compile}[what]
        side = "ours" if policy.startswith("ours") else "baseline"
        return table.get((side, kind), default)


@dataclass(frozen=True)
class Job:
    """The job a month is composed for: slices of `hosts_per_slice` hosts (each
    `devices_per_slice` devices), the bundled trainer's global `batch`: ours trains on
    the slices left while one is replaced where the API's default minSlices says so, for
    that batch (elastic_api.resize). `reduced_speed`: the job's speed then (None: the
    slices left's share, a step's time following each device's share of the batch)."""

    slices: int
    hosts_per_slice: int = 64
    batch: int = 4096  # sequences a step (assumed: a power of two)
    devices_per_slice: int = 256  # v5e 16x16: 256 chips
    reduced_speed: float | None = None
    trains_on: bool = False  # trains on whatever the batch (spec.elastic.minSlices set)
    backend: str = "pathways"  # "simulated": the trainer times each slice, moves slow ones

    @property
    def hosts(self) -> int:
        return self.slices * self.hosts_per_slice

    @property
    def chips_per_host(self) -> float:
        return self.devices_per_slice / self.hosts_per_slice

    @property
    def finds_slow(self) -> bool:
        """Whether ours' trainer finds and moves a slow slice: only where it can time one
        (docs/trainer.md: on Pathways a slice's part is inside the collective)."""
        return self.backend == "simulated"

    def rate(self, per_host: float, unit: str = "host") -> float:
        """A published rate (per 1,000 hosts of RATE_ACCELERATORS_PER_HOST accelerators a
        day) as interruptions per 1,000 of this job's hosts a day, per host or per chip."""
        if unit == "chip":
            return per_host * self.chips_per_host / RATE_ACCELERATORS_PER_HOST
        return per_host

    @property
    def min_slices(self) -> int:
        return default_min_slices(self.slices, self.batch, self.devices_per_slice)

    @property
    def train_on(self) -> bool:
        return self.trains_on or self.min_slices < self.slices

    @property
    def speed_on_fewer(self) -> float:
        return self.reduced_speed or (self.slices - 1) / self.slices


Pause = tuple[tuple[str, float], ...]  # (cause, seconds), one after another


@dataclass(frozen=True)
class Plan:
    """A recovery as the timeline plays it: the pause before training resumes (causes in
    order), the copy it restores (`snapshot`, `checkpoint`; None: a planned move, which
    copies first and redoes nothing), then `reduced` seconds on the slices left (the same
    global batch, each step `job.slices / (slices - 1)` longer) and the pause that grows
    back."""

    pause: Pause
    restores: str | None
    reduced: float = 0.0
    regrow: Pause = ()


def replace_slice(job: Job, hw: Hardware, detect: float, back: float,
                  restores: str | None = "snapshot",
                  resume: Pause | None = None) -> Plan:
    """Ours: one slice lost and replaced, the others kept: trained on, or paused until it
    is back (`back`: the control plane's part, beside the hardware's pods up), then
    resumed (`resume`: its restore and compile) from the snapshot."""
    up = hw.slice_up.value + back
    resume = resume or (("restore", hw.restore.value), ("recompile", hw.compile.value))
    if job.train_on:
        regrow = (("restore", hw.restore.value), ("recompile", hw.compile_back.value))
        return Plan((("waitingForSlices", detect), *resume), restores, up, regrow)
    return Plan((("waitingForSlices", detect + up), *resume), restores)


def restart_jobset(policy: str, kind: str, hw: Hardware, local: Local,
                   snapshot_kept: bool = False) -> Plan:
    """The whole JobSet restarted (ours: `main` restarted in place, the slices kept): every
    pod back, a new trainer process, resumed from the newest checkpoint (or the snapshot
    it kept)."""
    up = hw.in_place.value if policy.startswith("ours") else \
        hw.jobset_recreated.value if policy == "jobset-recreated" else hw.jobset_up.value
    waiting = local.of("detect", policy, kind) + local.of("back", policy, kind) + up
    return Plan((("waitingForSlices", waiting), ("startup", local.start),
                 *_resume(policy, kind, hw, local)),
                "snapshot" if snapshot_kept else "checkpoint")


def _resume(policy: str, kind: str, hw: Hardware, local: Local) -> Pause:
    """A recovery's restore and compile: the local run's own where it measured them."""
    return (("restore", local.of("restore", policy, kind, hw.restore.value)),
            ("recompile", local.of("compile", policy, kind, hw.compile.value)))


def plan(policy: str, kind: str, job: Job, hw: Hardware, local: Local) -> Plan:
    """How `policy` recovers from an interruption of `kind` (not a slow slice)."""
    if not policy.startswith("ours"):
        before: Pause = (("stalled", hw.collective_timeout.value),) if kind == "hang" else ()
        if policy == "xpk":
            before += (("other", hw.resubmit.value),)
        restart = restart_jobset(policy, kind, hw, local)
        return replace(restart, pause=before + restart.pause)
    if kind == "crash":
        return restart_jobset(policy, kind, hw, local, snapshot_kept=policy == "ours-snapshot-kept")
    back, resume = local.of("back", policy, kind), _resume(policy, kind, hw, local)
    if kind == "hang":  # the watchdog's deadline, then the blamed slice replaced
        moved = replace_slice(job, hw, 0.0, back, resume=resume)
        return replace(moved, pause=(("stalled", hw.watchdog.value), *moved.pause))
    if kind in ("maintenance", "slow"):  # announced, or found: copied, then moved
        return replace_slice(job, hw, 0.0, back, restores=None, resume=resume)
    return replace_slice(job, hw, hw.detect.value + local.of("detect", policy, kind), back,
                         resume=resume)


def hardware_table(hw: Hardware) -> dict[str, dict[str, object]]:
    return {name: {"value": p.value, "source": p.source} for name, p in vars(hw).items()}


def with_values(hw: Hardware, **values: float) -> Hardware:
    """The same parameters with some values replaced (their sources kept)."""
    return replace(hw, **{k: replace(getattr(hw, k), value=v) for k, v in values.items()})


def young_daly(cost: float, failures_per_day: float) -> float:
    """The period that minimises a copy's cost and the work its failures lose."""
    return (2.0 * cost * DAY / failures_per_day) ** 0.5 if failures_per_day > 0 else 1e18


def failures_per_day(kinds: tuple[str, ...], job: Job, rate: float, hw: Hardware) -> float:
    """Interruptions a day of `kinds` (`slow`: the slow episodes long enough to move)."""
    out = sum(rate * SHARES[k] / 100 for k in kinds if k in SHARES) * job.hosts / 1000
    if "slow" in kinds:
        lo, hi = SLOW_SECONDS
        longer = min(1.0, max(0.0, math.log(hi / max(hw.slow_found.value, lo))
                              / math.log(hi / lo)))
        out += SLOW_PER_1000_HOST_DAYS * longer * job.hosts / 1000
    return out


def cadenced(policy: str, job: Job, rate: float, hw: Hardware) -> Hardware:
    """The copies' periods and costs as each side runs them: ours' trainer chooses each
    period within its budget and shorter toward Young-Daly for the failures that restore
    that copy, the checkpoint's longer toward the Young-Daly period of its prior
    (trainer/elastic_trainer/cadence.py), never under twice a copy's own wall time. The
    baselines take no snapshots and checkpoint at their own best period: Young-Daly's for
    every interruption (each restores their checkpoint), never under one write (one save
    at a time), not a fixed 30 minutes (issue 79)."""
    if not policy.startswith("ours"):
        every = failures_per_day(("hard", "crash", "hang", "maintenance"), job, rate, hw)
        period = max(hw.checkpoint_wall.value, young_daly(hw.checkpoint_cost.value, every))
        return with_values(hw, snapshot_period=1e18, snapshot_overhead=0.0,
                           checkpoint_period=period, baseline_checkpoint=period,
                           checkpoint_overhead=hw.checkpoint_cost.value / period)
    kept = policy == "ours-snapshot-kept"
    # The slice losses the trainer counts for its snapshot (a slow slice's move is one,
    # where it moves them: not on Pathways); with the snapshot kept, crashes too.
    from_snapshot = ("hard", "hang") + (("slow",) if job.finds_slow else ()) + \
        (("crash",) if kept else ())
    periods = {}
    for copy, kinds, floor in (("snapshot", from_snapshot, hw.snapshot_cost.value),
                               ("checkpoint", () if kept else ("crash",),
                                hw.checkpoint_wall.value)):
        cost = getattr(hw, f"{copy}_cost").value
        within = cost / hw.copy_budget.value
        shorter = young_daly(cost, failures_per_day(kinds, job, rate, hw))
        period = min(within, shorter)
        if copy == "checkpoint":
            # Longer toward the prior's Young-Daly period (the crashes' MTBF for the
            # job's hosts at the highest published rate), at most LENGTHEN_AT_MOST x the
            # budget's. A crash starts a new process, which has seen none: only the prior.
            # With the snapshot kept through a crash no failure restores a checkpoint (no
            # prior): the longest the rule allows, not the crashes' period, which paid for
            # copies the month never restores (issue 79).
            prior = young_daly(cost, DAY / mean_seconds_between(JOBSET_RESTARTS, job.hosts))
            period = max(period, min(1e18 if kept else prior, LENGTHEN_AT_MOST * within))
        periods[copy] = max(2.0 * floor, period)
    return with_values(hw, snapshot_period=periods["snapshot"],
                       checkpoint_period=periods["checkpoint"],
                       snapshot_overhead=hw.snapshot_cost.value / periods["snapshot"],
                       checkpoint_overhead=hw.checkpoint_cost.value / periods["checkpoint"])
