"""Node pools: where a slice runs, which pools are hot spares, each pool's recent slice
failures, whether a failure calls for a quarantine, and when a quarantine ends. Pure.

A TPU slice needs a whole node pool (JobSet's exclusive placement on
cloud.google.com/gke-nodepool). A spare is a pool of the job's TPU shape whose nodes are
all Ready with healthy TPU chips, that is neither quarantined nor announced for
maintenance, and that runs no pod of any ElasticTrainingJob. Quarantine is a node label
(names.QUARANTINE_LABEL) that the worker pods' required node affinity refuses: the
operator sets it on every node of a pool before it replaces a slice that failed there,
only on evidence against the pool (core/blame.py), and only while a spare exists, so a
cluster without spares behaves as before. The nodes' cause annotation says which job and
which evidence; the quarantine ends when the evidence does.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from elastic_api.conditions import Reason
from elastic_api.models import PoolFailure, PoolStatus, RecoverySpec, SliceStatus
from elastic_operator.core.blame import JOB_EVIDENCE_REASONS, NODE_EVIDENCE_REASONS, Evidence
from elastic_operator.core.wording import fmt_slices, plural
from elastic_operator.model.objects import ObservedNode, ObservedPod, ObservedPool

# Pools named in a NoHealthyPool message (the rest are counted).
MAX_POOLS_LISTED = 8


def pod_pool(pod: ObservedPod, nodes: Mapping[str, ObservedNode]) -> str | None:
    node = nodes.get(pod.node_name or "")
    return node.pool if node is not None else None


def slice_pool(pods: Iterable[ObservedPod], nodes: Mapping[str, ObservedNode]) -> str | None:
    """The pool most of the slice's live pods run on (None: none is scheduled)."""
    live = [pod_pool(p, nodes) for p in pods if not p.terminating and not p.failed]
    counted = Counter(p for p in live if p)
    if not counted:
        return None
    return sorted(counted.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]


def spare_pools(pools: tuple[ObservedPool, ...], in_use: set[str]) -> list[str]:
    """Healthy pools of the job's shape that nothing runs on (sorted by name)."""
    return sorted(p.name for p in pools
                  if p.name not in in_use and not p.used_by_others and p.healthy
                  and p.quarantined is None and not p.maintenance)


def pools_in_use(slices: list[SliceStatus]) -> set[str]:
    return {s.pool for s in slices if s.pool}


def refusal(pool: ObservedPool, slices: list[SliceStatus], waiting: set[int]) -> str | None:
    """Why a slice waiting for a pool cannot take this one (None: it could)."""
    own = [s.index for s in slices if s.pool == pool.name and s.index not in waiting]
    if own:
        return f"runs {fmt_slices(own)} of this job"
    if pool.used_by_others:
        return "runs pods of another job"
    if pool.quarantined is not None:
        cause = pool.cause
        return f"quarantined ({pool.quarantined}" + (
            f", by {cause.describe()})" if cause is not None else ")")
    sick = [n for n in pool.nodes if not n.healthy]
    if sick:
        what = "is NotReady" if not sick[0].ready else "has unhealthy TPU chips"
        more = f" (and {plural(len(sick) - 1, 'other node')})" if len(sick) > 1 else ""
        return f"node {sick[0].name} {what}{more}"
    if pool.maintenance:
        return "maintenance announced on its nodes"
    return None


def refusals(pools: tuple[ObservedPool, ...], slices: list[SliceStatus],
             waiting: set[int]) -> str:
    """Each pool of the shape and why the `waiting` slices cannot take it, for a
    NoHealthyPool message."""
    said = [f"{p.name}: {why}" for p in pools
            if (why := refusal(p, slices, waiting)) is not None]
    if len(said) > MAX_POOLS_LISTED:
        said = [*said[:MAX_POOLS_LISTED], f"{len(said) - MAX_POOLS_LISTED} more"]
    return "; ".join(said)


def record_pools(
    previous: list[PoolStatus], slices: list[SliceStatus],
    failed_on: list[tuple[str, Evidence]], observed: tuple[ObservedPool, ...],
    now: datetime, window_s: int, keep: int,
) -> list[PoolStatus]:
    """status.pools: the pools this job runs on or failed on (recently), with the slice
    failures of this reconcile (`failed_on`: the pool and evidence of each) added,
    failures older than the window dropped (at most `keep` kept), and the quarantine
    as the nodes' label and cause annotation show it."""
    by_name = {p.name: p for p in previous}
    horizon = now - timedelta(seconds=window_s)
    seen = {p.name: p for p in observed}
    in_use = pools_in_use(slices)
    names = set(by_name) | in_use | {name for name, _ in failed_on}
    out = []
    for name in sorted(names):
        prev = by_name.get(name)
        failures = [f for f in (prev.failures if prev else []) if f.at > horizon]
        failures += [PoolFailure(at=now, blame=e.blame, reason=e.reason)
                     for pool, e in failed_on if pool == name]
        pool = seen.get(name)
        quarantined = pool.quarantined if pool is not None else (
            prev.quarantined if prev else None)
        since, cause = None, None
        if quarantined is not None:
            since = next((n.quarantined_at for n in pool.nodes if n.quarantined_at), None) \
                if pool is not None else None
            since = since or (prev.quarantined_at if prev else None)
            found = pool.cause if pool is not None else None
            cause = found.describe() if found is not None else (
                prev.quarantine_cause if prev else None)
        entry = PoolStatus(name=name, failures=failures[-keep:], quarantined=quarantined,
                           quarantined_at=since, quarantine_cause=cause)
        if failures or quarantined or name in in_use:
            out.append(entry)
    return out


# --- whether a failure calls for a quarantine ---------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """Quarantine the pool: why, on what evidence, and the other jobs it rests on."""

    reason: str
    evidence: str
    other_jobs: tuple[str, ...] = ()


@dataclass(frozen=True)
class QuarantinePolicy:
    """The administrator's say on quarantines that rest on what tenants control (etj
    operator --quarantine-min-jobs, --quarantine-on-job-report; chart `quarantine`). A
    pool serves other teams too, and a job's spec (quarantineAfterFailures,
    hardwareExitCodes, hardwareReasons) and its trainer's report are the tenant's to
    write: so without evidence against the nodes, slices of at least `min_jobs` distinct
    jobs must have failed there, whatever the job asks, and the job's own report counts
    as its own failure unless `trust_reports`. Evidence read from the nodes is never
    weighed against this."""

    min_jobs: int = 2
    trust_reports: bool = False


# The default: one job alone never quarantines a pool without evidence against its nodes.
DEFAULT_QUARANTINE = QuarantinePolicy()
# What the administrator can at most allow: the job's spec and report as they stand.
TRUSTING = QuarantinePolicy(min_jobs=1, trust_reports=True)


def _own_blames(policy: QuarantinePolicy) -> tuple[str, ...]:
    """The blames that count as the job's own failure (a report not trusted is one)."""
    return ("Job",) if policy.trust_reports else ("Job", "Reported")


def _recent(pools: list[PoolStatus], blames: tuple[str, ...], horizon: datetime) -> set[str]:
    """The pools on which this job had failures so blamed since `horizon`."""
    return {p.name for p in pools
            if any(f.blame in blames and f.at > horizon for f in p.failures)}


def _jobs_needed(recovery: RecoverySpec, policy: QuarantinePolicy) -> int:
    return max(recovery.quarantine_after_failures, policy.min_jobs)


def _others(observed: ObservedPool | None, horizon: datetime) -> list[str]:
    """The other jobs whose own failures on the pool count (none that follow their job)."""
    return sorted({m.job for m in (observed.failures_of_others if observed else ())
                   if m.at > horizon and m.pools <= 1})


def quarantine_verdict(
    evidence: Evidence, pool: str, own: list[PoolStatus], observed: ObservedPool | None,
    recovery: RecoverySpec, now: datetime, policy: QuarantinePolicy = DEFAULT_QUARANTINE,
) -> Verdict | None:
    """Whether the failure on `pool` calls for its quarantine (`own`: this job's
    status.pools, this failure in it already). Evidence against the nodes does; the
    job's own report does, if the administrator trusts reports, unless it came from
    another pool too (the fault follows the job); an exit on a healthy node (or a report
    not trusted) does only when slices of enough different jobs failed there (the job's
    quarantineAfterFailures, at least the policy's min_jobs), none of them one whose
    failures follow it."""
    horizon = now - timedelta(seconds=recovery.quarantine_window_seconds)
    if evidence.blame == "Node":
        return Verdict(evidence.reason, evidence.detail)
    if evidence.blame == "Reported" and policy.trust_reports:
        if _recent(own, ("Reported",), horizon) - {pool}:
            return None
        return Verdict(Reason.HARDWARE_FAILURE, evidence.detail)
    if evidence.blame not in _own_blames(policy) \
            or len(_recent(own, _own_blames(policy), horizon) | {pool}) > 1:
        return None
    others = _others(observed, horizon)
    if 1 + len(others) < _jobs_needed(recovery, policy):
        return None
    window = recovery.quarantine_window_seconds
    jobs = plural(1 + len(others), "job")
    return Verdict(Reason.REPEATED_FAILURES,
                   f"slices of {jobs} failed on it within {window} s with no evidence "
                   f"against its nodes ({evidence.detail}"
                   + (f"; also {', '.join(others)})" if others else ")"),
                   tuple(others))


def declined(
    evidence: Evidence, pool: str, own: list[PoolStatus], observed: ObservedPool | None,
    recovery: RecoverySpec, now: datetime, policy: QuarantinePolicy,
) -> str | None:
    """Why the pool is not quarantined when only the administrator's policy keeps it
    from it (the job's spec and report alone would have), naming the flag; None
    otherwise."""
    args = (evidence, pool, own, observed, recovery, now)
    if quarantine_verdict(*args, policy) is not None or quarantine_verdict(*args, TRUSTING) is None:
        return None
    horizon = now - timedelta(seconds=recovery.quarantine_window_seconds)
    jobs = plural(1 + len(_others(observed, horizon)), "job")
    needed = _jobs_needed(recovery, policy)
    if evidence.blame == "Reported" and not policy.trust_reports:
        return (f"node pool {pool} not quarantined: the job's own report is no evidence "
                "against a pool other teams use unless the administrator allows it "
                f"(--quarantine-on-job-report); it counts as the job's own failure, and "
                f"slices of {jobs} failed there, fewer than {needed}")
    return (f"node pool {pool} not quarantined: slices of {jobs} failed there, fewer than "
            f"the {policy.min_jobs} jobs the administrator requires without evidence "
            "against its nodes (--quarantine-min-jobs)")


def withdrawn(pool: ObservedPool, me: str, own: list[PoolStatus], recovery: RecoverySpec,
              now: datetime, policy: QuarantinePolicy = DEFAULT_QUARANTINE) -> str | None:
    """Why a quarantine resting on this job's failures no longer holds (None: it does):
    the job's failures of that kind now come from other pools too: they follow the job."""
    cause = pool.cause
    if pool.quarantined not in JOB_EVIDENCE_REASONS or cause is None \
            or me not in {name for name, _ in cause.jobs}:
        return None
    blames = ("Reported",) if pool.quarantined == Reason.HARDWARE_FAILURE \
        else _own_blames(policy)
    horizon = now - timedelta(seconds=recovery.quarantine_window_seconds)
    elsewhere = sorted(_recent(own, blames, horizon) - {pool.name})
    if not elsewhere:
        return None
    return (f"its evidence is withdrawn: {me}'s failures follow the job to "
            f"{', '.join(elsewhere)}")


def taken_back(pool: ObservedPool) -> bool:
    """A pool quarantined on evidence against its nodes whose nodes are healthy again
    (Ready, every TPU chip healthy, no maintenance): a slice that waits for a pool may
    take it back rather than wait for a spare that will not come."""
    return (pool.quarantined in NODE_EVIDENCE_REASONS and pool.healthy
            and not pool.maintenance and not pool.used_by_others)


# --- release (the operator's pool warden, not one job's reconcile) ----------------------


@dataclass(frozen=True)
class Release:
    pool: str
    nodes: tuple[str, ...]
    reason: str  # the quarantine's reason
    message: str


def cited_jobs(nodes: list[ObservedNode]) -> set[tuple[str, str]]:
    """The jobs ((namespace/name, uid)) that quarantines resting on jobs' failures cite:
    the warden asks whether each still exists."""
    return {job for n in nodes if n.quarantined in JOB_EVIDENCE_REASONS
            and n.quarantine_cause is not None for job in n.quarantine_cause.jobs}


def pools_to_release(
    nodes: list[ObservedNode], now: datetime, healthy_for_s: float, repeated_for_s: float,
    gone: frozenset[tuple[str, str]] = frozenset(),
) -> list[Release]:
    """Quarantined pools whose evidence has ended: a quarantine resting on jobs'
    failures (HardwareFailure, RepeatedFailures) once a job it cites is `gone` (deleted:
    its failures go with it), or else after `repeated_for_s`; any quarantine once every
    node has been Ready with healthy chips for `healthy_for_s` (a flapping pool stays
    quarantined) with no maintenance signal."""
    by_pool: dict[str, list[ObservedNode]] = {}
    for node in nodes:
        if node.pool:
            by_pool.setdefault(node.pool, []).append(node)
    releases = []
    for pool, members in sorted(by_pool.items()):
        marked = [n for n in members if n.quarantined]
        if not marked:
            continue
        reason = marked[0].quarantined or ""
        names = tuple(sorted(n.name for n in marked))
        left = _jobs_gone(marked, gone)
        if reason in JOB_EVIDENCE_REASONS and left:
            releases.append(Release(pool, names, reason,
                                    f"node pool {pool} released (quarantined for {reason}): "
                                    f"{', '.join(left)} no longer exists"))
        elif _healthy_long_enough(members, marked, reason, now, healthy_for_s,
                                  repeated_for_s):
            releases.append(Release(pool, names, reason,
                                    f"node pool {pool} released (quarantined for {reason}); "
                                    f"every node Ready for {healthy_for_s:.0f} s"))
    return releases


def _jobs_gone(marked: list[ObservedNode], gone: frozenset[tuple[str, str]]) -> list[str]:
    cause = next((n.quarantine_cause for n in marked if n.quarantine_cause), None)
    return sorted(name for name, uid in (cause.jobs if cause else ()) if (name, uid) in gone)


def _healthy_long_enough(members: list[ObservedNode], marked: list[ObservedNode],
                         reason: str, now: datetime, healthy_for_s: float,
                         repeated_for_s: float) -> bool:
    healthy_since = [n.ready_transition_time for n in members]
    if not all(n.healthy for n in members) or any(n.maintenance_signal for n in members) \
            or any(t is None for t in healthy_since):
        return False
    steady = max(t for t in healthy_since if t is not None)
    if now - steady < timedelta(seconds=healthy_for_s):
        return False
    since = min((n.quarantined_at for n in marked if n.quarantined_at), default=None)
    return not (reason in JOB_EVIDENCE_REASONS and since is not None
                and now - since < timedelta(seconds=repeated_for_s))
