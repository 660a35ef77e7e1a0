"""Node pools: where a slice runs, which pools are hot spares, each pool's recent slice
failures, and when the operator's quarantine of a pool ends. Pure.

A TPU slice needs a whole node pool (JobSet's exclusive placement on
cloud.google.com/gke-nodepool). A spare is a pool of the job's TPU shape whose nodes are
all Ready, that is neither quarantined nor announced for maintenance, and that runs no
pod of any ElasticTrainingJob. Quarantine is a node label (names.QUARANTINE_LABEL) that
the worker pods' required node affinity refuses: the operator sets it on every node of a
pool before it replaces a slice that failed there (a dead node, maintenance, repeated
failures), and only while a spare exists, so a cluster without spares behaves as before.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta

from elastic_api.conditions import Reason
from elastic_api.models import PoolStatus, SliceStatus
from elastic_operator.observed import ObservedNode, ObservedPod, ObservedPool


def pod_pool(pod: ObservedPod, nodes: dict[str, ObservedNode]) -> str | None:
    node = nodes.get(pod.node_name or "")
    return node.pool if node is not None else None


def slice_pool(pods: list[ObservedPod], nodes: dict[str, ObservedNode]) -> str | None:
    """The pool most of the slice's live pods run on (None: none is scheduled)."""
    live = [pod_pool(p, nodes) for p in pods if not p.terminating and not p.failed]
    counted = Counter(p for p in live if p)
    if not counted:
        return None
    return sorted(counted.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]


def spare_pools(pools: tuple[ObservedPool, ...], in_use: set[str]) -> list[str]:
    """Healthy pools of the job's shape that nothing runs on (sorted by name)."""
    return sorted(p.name for p in pools
                  if p.name not in in_use and not p.used_by_others and p.all_ready
                  and p.quarantined is None and not p.maintenance)


def pools_in_use(slices: list[SliceStatus]) -> set[str]:
    return {s.pool for s in slices if s.pool}


def record_pools(
    previous: list[PoolStatus], slices: list[SliceStatus], failed_on: list[str],
    observed: tuple[ObservedPool, ...], now: datetime, window_s: int, keep: int,
) -> list[PoolStatus]:
    """status.pools: the pools this job runs on or failed on (recently), with the slice
    failures of this reconcile (`failed_on`: one pool name per failure) added, failures
    older than the window dropped (at most `keep` kept), and the quarantine as the
    nodes' label shows it."""
    by_name = {p.name: p for p in previous}
    horizon = now - timedelta(seconds=window_s)
    seen = {p.name: p for p in observed}
    names = set(by_name) | pools_in_use(slices) | set(failed_on)
    out = []
    for name in sorted(names):
        prev = by_name.get(name)
        failures = [t for t in (prev.recent_failures if prev else []) if t > horizon]
        failures += [now] * failed_on.count(name)
        pool = seen.get(name)
        quarantined = pool.quarantined if pool is not None else (
            prev.quarantined if prev else None)
        since = None
        if quarantined is not None:
            since = next((n.quarantined_at for n in pool.nodes if n.quarantined_at), None) \
                if pool is not None else None
            since = since or (prev.quarantined_at if prev else None)
        entry = PoolStatus(name=name, recent_failures=failures[-keep:], quarantined=quarantined,
                           quarantined_at=since)
        if failures or quarantined or name in pools_in_use(slices):
            out.append(entry)
    return out


def quarantine_reason(pool: PoolStatus | None, node_level: str | None,
                      threshold: int) -> str | None:
    """Why a pool a slice failed on should be avoided, if it should."""
    if node_level is not None:
        return node_level
    if pool is not None and len(pool.recent_failures) >= threshold:
        return Reason.REPEATED_FAILURES
    return None


# --- release (the operator's pool warden, not one job's reconcile) ----------------------


@dataclass(frozen=True)
class Release:
    pool: str
    nodes: tuple[str, ...]
    reason: str  # the quarantine's reason
    message: str


def pools_to_release(
    nodes: list[ObservedNode], now: datetime, healthy_for_s: float, repeated_for_s: float,
) -> list[Release]:
    """Quarantined pools whose every node has been Ready for `healthy_for_s` (a flapping
    pool stays quarantined) with no maintenance signal; a RepeatedFailures quarantine
    (nodes look fine, slices still failed) also lasts at least `repeated_for_s`."""
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
        healthy_since = [n.ready_transition_time for n in members]
        if not all(n.ready for n in members) or any(n.maintenance_signal for n in members) \
                or any(t is None for t in healthy_since):
            continue
        steady = max(t for t in healthy_since if t is not None)
        if now - steady < timedelta(seconds=healthy_for_s):
            continue
        since = min((n.quarantined_at for n in marked if n.quarantined_at), default=None)
        if reason == Reason.REPEATED_FAILURES and since is not None \
                and now - since < timedelta(seconds=repeated_for_s):
            continue
        releases.append(Release(
            pool=pool, nodes=tuple(sorted(n.name for n in marked)), reason=reason,
            message=f"node pool {pool} released (quarantined for {reason}); every node "
                    f"Ready for {healthy_for_s:.0f} s"))
    return releases
