"""The multi-tenant chaos soak (issue 33, point 2: `make soak SOAK_JOBS=K`): who the K
jobs are (two teams, each a namespace, a LocalQueue and a Kueue priority), how one seed
spreads the faults over them, and the invariants that span jobs, each a pure function of
what the run recorded that returns its violations in words (none: held). The per-job
invariants are tests/support/chaos_checks.py's, applied to each job.

Pure on purpose: tests/unit/test_chaos_tenants.py feeds each check recorded or made-up
samples with the fault it must catch, so none passes by construction.
"""
from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from elastic_api.names import (
    JOB_NAME_LABEL,
    NODE_POOL_LABEL,
    QUARANTINE_CAUSE_ANNOTATION,
    QUARANTINE_LABEL,
    TPU_ACCELERATOR_LABEL,
)
from elastic_api.queueing import REASON_PREEMPTED
from elastic_devtools.background import BackgroundLoop
from tests.support.chaos_faults import Fault

# Team a runs at the high priority, team b at the low one: a new job of team a is the
# one that preempts (Kueue's withinClusterQueue LowerPriority) a running job of team b.
TEAMS = ("team-a", "team-b")
PRIORITIES = {"team-a": ("soak-high", 1000), "team-b": ("soak-low", 100)}


@dataclass(frozen=True)
class Tenant:
    """One job of the soak and where it runs."""

    job: str
    team: str
    namespace: str
    local_queue: str
    priority_class: str

    @property
    def name(self) -> str:  # as the summary and the quarantine cause name it
        return f"{self.namespace}/{self.job}"


def tenants(count: int, namespaces: Mapping[str, str], queues: Mapping[str, str],
            job: str = "chaos") -> list[Tenant]:
    """`count` jobs, alternating teams (job 0 team a, job 1 team b, ...), so that K >= 2
    always has both teams; `namespaces` and `queues` by team."""
    out = []
    for i in range(count):
        team = TEAMS[i % len(TEAMS)]
        out.append(Tenant(f"{job}-{i}", team, namespaces[team], queues[team],
                          PRIORITIES[team][0]))
    return out


def interleave(rng: random.Random, plans: Sequence[Sequence[Fault]]) -> list[tuple[int, Fault]]:
    """One sequence of (job index, fault) from a plan per job, the next job drawn by the
    seed among those with faults left: each job's own order is kept (its every kind
    first), and the same seed gives the same sequence."""
    left = [list(plan) for plan in plans]
    out: list[tuple[int, Fault]] = []
    while any(left):
        index = rng.choice([i for i, plan in enumerate(left) if plan])
        out.append((index, left[index].pop(0)))
    return out


@dataclass(frozen=True)
class CapacitySample:
    """At `t` (seconds): how many node pools of the jobs' shape were free (Ready, not
    quarantined, no pod of any job), the jobs then short of a slice (one down and
    waiting for somewhere to run), and whether a fault kept the API server from serving
    the operator then (`held_back`: APF throttling it, or the server restarting)."""

    t: float
    free_pools: int
    short: tuple[str, ...]
    held_back: bool = False


def capacity_left_idle(samples: Sequence[CapacitySample], bound: float) -> list[str]:
    """No job short of a slice for longer than `bound` seconds while a pool was free all
    that time (a replacement must take the spare; a bound, since placing it takes a
    scheduling round or two). A stretch ends at the first sample where the job is not
    short, no pool is free, or the API server held the operator back: under APF
    throttling the server tells the operator how long to wait (Retry-After, up to 32 s
    at a time), so what the job waits then is the server's doing, not capacity the
    operator left idle; the bound starts again once the server serves it."""
    since: dict[str, float] = {}
    reported: set[tuple[str, float]] = set()
    problems = []
    for sample in sorted(samples, key=lambda s: s.t):
        waiting = set(sample.short) if sample.free_pools > 0 and not sample.held_back \
            else set()
        for job in list(since):
            if job not in waiting:
                del since[job]
        for job in sorted(waiting):
            start = since.setdefault(job, sample.t)
            if sample.t - start > bound and (job, start) not in reported:
                reported.add((job, start))
                problems.append(f"{job} short of a slice from t={start:.1f}s for over "
                                f"{bound:.0f}s while {sample.free_pools} pool(s) stood free")
    return problems


@dataclass(frozen=True)
class PoolFault:
    """A fault injected into `job`'s slice on node pool `pool` at `t` (seconds)."""

    job: str
    pool: str
    t: float


@dataclass(frozen=True)
class Quarantine:
    """A pool the operator quarantined at `t`, naming `jobs` in its cause annotation
    (elastic_api.names.QUARANTINE_CAUSE_ANNOTATION's "<namespace>/<name>")."""

    pool: str
    t: float
    jobs: tuple[str, ...]


def quarantined_for_own_faults(quarantines: Sequence[Quarantine], faults: Sequence[PoolFault],
                               team_of: Mapping[str, str], window: float) -> list[str]:
    """Each job a quarantine names had a fault of its own on that pool in the `window`
    seconds before it: a job never quarantines a pool for another's faults; when the
    faults it stands on are the other team's, the violation says so."""
    problems = []
    for q in quarantines:
        recent = [f for f in faults if f.pool == q.pool and q.t - window <= f.t <= q.t]
        for job in q.jobs:
            if any(f.job == job for f in recent):
                continue
            others = sorted({f.job for f in recent})
            foreign = [j for j in others if team_of.get(j) != team_of.get(job)]
            whose = (f"the other team's faults ({', '.join(foreign)})" if foreign else
                     f"faults of {', '.join(others)}" if others else "no fault at all")
            problems.append(f"{job} ({team_of.get(job, '?')}) quarantined pool {q.pool} at "
                            f"t={q.t:.1f}s on {whose}")
    return problems


def counted_once_per_job(injected: Mapping[str, int], counted: Mapping[str, int]) -> list[str]:
    """Each job's slice failures (counters.sliceFailures) are its own injected ones,
    each once: one more is a fault counted twice or another job's counted as its own,
    one less a fault not counted. Jobs on one side only count as zero on the other."""
    problems = []
    for job in sorted(set(injected) | set(counted)):
        want, got = injected.get(job, 0), counted.get(job, 0)
        if got > want:
            problems.append(f"{job}: {got} slice failures counted for {want} injected "
                            "(one counted twice, or another job's counted as its own)")
        elif got < want:
            problems.append(f"{job}: {got} slice failures counted for {want} injected "
                            "(a fault not counted)")
    return problems


@dataclass(frozen=True)
class Preemption:
    """What the soak saw of one job Kueue preempted: the Admitted reasons its status
    showed (sampled), its final counters, how often it was preempted (the high-priority
    job created while it ran), its newest committed checkpoint step when it was evicted,
    and where the trainer process after it started from (step, source)."""

    job: str
    admitted_reasons: tuple[str, ...]
    counters: Mapping[str, int]
    preempted: int
    slice_failures_injected: int
    committed_at_eviction: int | None
    resumed_from: tuple[int, str] | None


def preempted_as_the_contract_says(p: Preemption) -> list[str]:
    """elastic_api.queueing: a preemption shows as Admitted False, reason Preempted; it
    counts in counters.preemptions, not in counters.evictions (counts_as_eviction) nor
    in any failure counter (no slice failure, no retry spent); the job runs again once
    re-admitted, from its newest committed checkpoint."""
    problems = []
    if p.preempted and REASON_PREEMPTED not in p.admitted_reasons:
        problems.append(f"{p.job}: Admitted never showed {REASON_PREEMPTED} "
                        f"(seen: {sorted(set(p.admitted_reasons))})")
    if (got := p.counters.get("preemptions", 0)) != p.preempted:
        problems.append(f"{p.job}: counters.preemptions {got}, preempted {p.preempted}")
    if got := p.counters.get("evictions", 0):
        problems.append(f"{p.job}: counters.evictions {got}: a preemption counted as an "
                        "eviction")
    if (got := p.counters.get("sliceFailures", 0)) != p.slice_failures_injected:
        problems.append(f"{p.job}: sliceFailures {got} for {p.slice_failures_injected} "
                        "injected: the preemption counted as slice failures")
    if p.preempted and p.resumed_from != (p.committed_at_eviction, "checkpoint"):
        problems.append(f"{p.job}: resumed from {p.resumed_from}, not the newest committed "
                        f"checkpoint {p.committed_at_eviction}")
    return problems


# --- from what the API shows to what the checks take ---------------------------------


def _ready(node: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True"
               for c in (node.status.conditions or []))


def free_pools(nodes: Iterable[Any], pods: Iterable[Any]) -> list[str]:
    """The TPU node pools every node of which is Ready, unquarantined and runs no pod
    of any job (a pod not yet ended counts: its pool is not free until it is gone)."""
    busy = {p.spec.node_name for p in pods if p.spec.node_name
            and (p.metadata.labels or {}).get(JOB_NAME_LABEL)
            and p.status.phase not in ("Succeeded", "Failed")}
    pools: dict[str, bool] = {}
    for node in nodes:
        labels = node.metadata.labels or {}
        if TPU_ACCELERATOR_LABEL not in labels:
            continue  # the CPU pool
        pool = labels.get(NODE_POOL_LABEL, node.metadata.name)
        free = _ready(node) and QUARANTINE_LABEL not in labels \
            and node.metadata.name not in busy
        pools[pool] = pools.get(pool, True) and free
    return sorted(pool for pool, free in pools.items() if free)


def short_of_a_slice(status: Mapping[str, Any], slices: int) -> bool:
    """The job runs (Kueue admitted it: a suspended job is short of quota, not of
    capacity) and has fewer Ready slices than it asks for."""
    admitted = next((c for c in status.get("conditions") or []
                     if c.get("type") == "Admitted"), None)
    if admitted is not None and admitted.get("status") != "True":
        return False
    return int(status.get("slicesReady") or 0) < slices


def quarantines(nodes: Iterable[Any], t: float) -> list[Quarantine]:
    """The pools quarantined now, one per pool, with the jobs their cause annotation
    names (elastic_api.names.QUARANTINE_CAUSE_ANNOTATION's JSON)."""
    found: dict[str, Quarantine] = {}
    for node in nodes:
        labels = node.metadata.labels or {}
        if QUARANTINE_LABEL not in labels:
            continue
        pool = labels.get(NODE_POOL_LABEL, node.metadata.name)
        try:
            cause = json.loads((node.metadata.annotations or {})
                               .get(QUARANTINE_CAUSE_ANNOTATION) or "{}")
        except ValueError:
            cause = {}
        jobs = tuple(sorted(j["name"] for j in cause.get("jobs") or []))
        if pool not in found or len(jobs) > len(found[pool].jobs):
            found[pool] = Quarantine(pool, t, jobs)
    return list(found.values())


@dataclass
class TenantSampler(BackgroundLoop):
    """All through a multi-tenant soak, every half second: the free TPU pools and the
    jobs short of a slice (CapacitySample), the Admitted reasons each job showed, and
    each quarantine as first seen (pool, naming jobs). `statuses` reads every job's
    status by name; `slices` is each job's numSlices."""

    THREAD_NAME = "tenant-sampler"
    api: Any
    statuses: Callable[[], dict[str, dict[str, Any]]]
    slices: int
    held_back: Callable[[], bool] = lambda: False  # a fault keeps the server from the operator
    capacity: list[CapacitySample] = field(default_factory=list)
    admitted: dict[str, list[str]] = field(default_factory=dict)
    seen_quarantines: list[Quarantine] = field(default_factory=list)


    def _run(self) -> None:
        from kubernetes import client

        core = client.CoreV1Api(self.api)
        started = time.monotonic()
        while not self._stop.wait(0.5):
            try:
                nodes = core.list_node().items
                pods = core.list_pod_for_all_namespaces(label_selector=JOB_NAME_LABEL).items
                statuses = self.statuses()
            except Exception:  # the API server busy or restarting (a fault): next round
                continue
            t = time.monotonic() - started
            self._take(t, nodes, pods, statuses)

    def _take(self, t: float, nodes: list[Any], pods: list[Any],
              statuses: dict[str, dict[str, Any]]) -> None:
        short = tuple(sorted(n for n, s in statuses.items()
                             if short_of_a_slice(s, self.slices)))
        self.capacity.append(CapacitySample(t, len(free_pools(nodes, pods)), short,
                                            self.held_back()))
        for name, status in statuses.items():
            reason = next((c.get("reason", "") for c in status.get("conditions") or []
                           if c.get("type") == "Admitted"), "")
            seen = self.admitted.get(name, [])
            if reason and (not seen or seen[-1] != reason):
                self.admitted[name] = [*seen, reason]
        known = {(q.pool, q.jobs) for q in self.seen_quarantines}
        self.seen_quarantines += [q for q in quarantines(nodes, t)
                                  if (q.pool, q.jobs) not in known]
