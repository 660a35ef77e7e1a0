"""The worker pods of each slice, host by host, as the pod cache holds them, and each
slice as its job's last reconcile computed it: whether a paced pod change may still move
a slice's state (core/wakes.py `may_move`), so that one which cannot waits for the job's
next progress write instead of waking a reconcile that would write nothing.

Kept up to date by the pod cache's thread on every pod change (`pod_changed`, one host's
pods regrouped: no scan of the job's 4,096 pods), and told by the reconciler each slice
as each status computes it (`record_computed`). A change judged against a computed slice
that the reconcile in flight is about to replace is judged again by that reconcile:
`record_computed` answers whether any slice
may move given the pods as they are then, and the reconciler wakes the job once more if
so. A slice's live pods are counted by their node's pool (`NodePools`) as they change,
and counted whole again only once the nodes changed. Thread-safe.

The pods by slice are an index of the pod cache, kept here: they leave as the cache sees
them go, which may be after their job was forgotten. The slices as last computed are the
job's memory (`JobMemory.computed`, forgotten with its record), guarded by this index's
lock as before; the record is looked up before that lock is taken, never under it.
"""
from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from elastic_api.models import SliceStatus
from elastic_api.names import WORKER_REPLICATED_JOB
from elastic_operator.core.sliceview import newest
from elastic_operator.core.wakes import ComputedSlice, SliceTally, host_down, host_ready, may_move
from elastic_operator.model.job_memory import JobMemories
from elastic_operator.model.objects import ObservedPod
from elastic_operator.watch.node_index import JobKey


class NodePools(Protocol):
    """The nodes' pools (NodeIndex)."""

    @property
    def nodes_version(self) -> int: ...

    def pools_of_nodes(self, names: Collection[str]) -> dict[str, str | None]: ...


@dataclass
class _Slice:
    """One slice's pods by host (a host index, or the pod's name without one), each
    host's newest, and the counts of SliceTally kept as they change."""

    pods: dict[Any, dict[str, ObservedPod]] = field(default_factory=dict)
    newest: dict[Any, ObservedPod] = field(default_factory=dict)
    ready: int = 0
    down_jobs: Counter[str | None] = field(default_factory=Counter)
    jobs: Counter[str | None] = field(default_factory=Counter)  # of every host's newest
    latest: datetime | None = None
    latest_stale: bool = False  # the newest pod holding `latest` went: scan once asked
    live_nodes: Counter[str] = field(default_factory=Counter)  # of every live pod
    # The live pods by their node's pool, kept as they change (a replacement moves 64
    # pods one by one: regrouping them all per change cost more than the rest of an
    # event), counted again whole when the nodes changed since (`pools_version`).
    live_pools: Counter[str] = field(default_factory=Counter)
    pools_version: int = -1  # the nodes' version live_pools was counted at (-1: never)

    def regroup(self, host: Any) -> None:
        """Host `host`'s pods changed: its newest, and the counts, again."""
        before = self.newest.pop(host, None)
        group = self.pods.get(host)
        after = newest(list(group.values())) if group else None
        if before is not None:
            self._count(before, -1)
            if before.created_at is not None and before.created_at == self.latest:
                self.latest_stale = True
        if after is not None:
            self.newest[host] = after
            self._count(after, 1)
            if after.created_at is not None and not self.latest_stale and (
                    self.latest is None or after.created_at > self.latest):
                self.latest = after.created_at

    def _count(self, pod: ObservedPod, sign: int) -> None:
        self.ready += sign * host_ready(pod)
        _add(self.jobs, pod.job_uid, sign)
        if host_down(pod):
            _add(self.down_jobs, pod.job_uid, sign)

    def live(self, pod: ObservedPod, sign: int, nodes: NodePools | None) -> None:
        """`pod` joins (1) or leaves (-1) the slice's pods (core/pools.py slice_pool)."""
        node = pod.node_name
        if node and not pod.terminating and not pod.failed:
            _add(self.live_nodes, node, sign)
            if nodes is not None and self.pools_version >= 0:
                # A pool read at a newer nodes' version than pools_version (a node moved
                # meanwhile) is counted whole again before `_pool` reads it.
                pool = nodes.pools_of_nodes((node,)).get(node)
                if pool:
                    _add(self.live_pools, pool, sign)

    def tally(self, nodes: NodePools | None) -> SliceTally:
        if self.latest_stale:
            times = [p.created_at for p in self.newest.values() if p.created_at is not None]
            self.latest, self.latest_stale = max(times, default=None), False
        return SliceTally(hosts=len(self.newest), ready=self.ready,
                          down=sum(self.down_jobs.values()),
                          down_jobs=frozenset(self.down_jobs), latest_created=self.latest,
                          pool=self._pool(nodes), jobs=dict(self.jobs))

    def _pool(self, nodes: NodePools | None) -> str | None:
        if nodes is None:
            return None
        version = nodes.nodes_version  # before the pools: a node moving after counts again
        if self.pools_version != version:
            pools = nodes.pools_of_nodes(list(self.live_nodes))
            self.live_pools = Counter()
            for node, pods in self.live_nodes.items():
                if pools.get(node):
                    self.live_pools[pools[node] or ""] += pods
            self.pools_version = version
        counted = self.live_pools
        return min(counted.items(), key=lambda kv: (-kv[1], kv[0]))[0] if counted else None


def _add(counts: Counter[Any], key: Any, sign: int) -> None:
    counts[key] += sign
    if not counts[key]:
        del counts[key]


def _host(pod: ObservedPod) -> Any:
    return pod.host_index if pod.host_index is not None else pod.name


class SliceIndex:
    """Per job, its worker pods by slice and host, and its slices as last computed.
    `nodes`: the nodes' pools (None: a slice's pool is never read, nor judged);
    `memory`: the job records its slices as computed are kept in (None: its own)."""

    def __init__(self, nodes: NodePools | None = None,
                 memory: JobMemories | None = None) -> None:
        self._nodes = nodes
        self._memory = memory if memory is not None else JobMemories()
        self._lock = threading.Lock()
        # An index of the pod cache, not the job's memory: a pod's going after its job
        # was forgotten must still find its slice's entry (the record's would be gone).
        self._slices: dict[tuple[JobKey, int], _Slice] = {}

    def pod_changed(self, job: JobKey, old: ObservedPod | None,
                    new: ObservedPod | None) -> None:
        """A pod of `job` changed from `old` to `new` (None: absent)."""
        with self._lock:
            for pod, sign in ((old, -1), (new, 1)):
                if pod is None or pod.replicated_job != WORKER_REPLICATED_JOB \
                        or pod.slice_index is None:
                    continue
                key = (job, pod.slice_index)
                entry = self._slices.get(key)
                if entry is None:
                    entry = self._slices[key] = _Slice()
                host = _host(pod)
                group = entry.pods.setdefault(host, {})
                if sign > 0:
                    group[pod.name] = pod
                else:
                    group.pop(pod.name, None)
                if not group:
                    del entry.pods[host]
                entry.live(pod, sign, self._nodes)
                entry.regroup(host)
                if not entry.pods:
                    del self._slices[key]

    def may_move(self, job: JobKey, index: int | None) -> bool:
        """Whether slice `index` of `job` may now be in another state than last computed
        (True for a job or slice not computed yet, or not judged: `record_computed`)."""
        remembered = self._memory.peek(job)
        with self._lock:
            computed = remembered.computed if remembered is not None else None
            if computed is None or index is None:
                return True
            return self._may_move(job, index, computed.get(index))

    def record_computed(self, job: JobKey, slices: Iterable[SliceStatus], *,
                        exact: bool = True) -> bool:
        """The job's slices as a reconcile just computed them; whether any may already be
        in another state, given the pods as they are now (a change that came during the
        reconcile, judged against the slices before it). `exact`: False where the status
        reads more of the pods' nodes than a slice's pool (Kueue's topology domains):
        then every paced change of the job may move a state."""
        if not exact:
            forgotten = self._memory.peek(job)
            with self._lock:
                if forgotten is not None:
                    forgotten.computed = None
            return False
        computed = {s.index: ComputedSlice.of(s) for s in slices}
        remembered = self._memory.of(job)
        with self._lock:
            remembered.computed = computed
            indexes = set(computed) | {i for (j, i) in self._slices if j == job}
            return any(self._may_move(job, i, computed.get(i)) for i in indexes)

    def _may_move(self, job: JobKey, index: int, last: ComputedSlice | None) -> bool:
        entry = self._slices.get((job, index))
        return may_move(last, entry.tally(self._nodes) if entry is not None else SliceTally())

    def record_job(self, job: JobKey, index: int | None) -> str | None:
        """The Job slice `index`'s replacement tears down, as last computed (None: none
        recorded, or not computed)."""
        remembered = self._memory.peek(job)
        with self._lock:
            computed = remembered.computed if remembered is not None else None
            last = (computed or {}).get(index) if index is not None else None
            return last.record_job if last is not None else None

    def tally(self, job: JobKey, index: int) -> SliceTally:
        with self._lock:
            entry = self._slices.get((job, index))
            return entry.tally(self._nodes) if entry is not None else SliceTally()

    def job_keys(self) -> set[JobKey]:
        """The jobs it holds anything for (job_stores.py): pods, or slices as computed."""
        records = self._memory.items()
        with self._lock:
            return ({key for key, remembered in records if remembered.computed is not None}
                    | {job for job, _ in self._slices})

    def forget_job(self, job: JobKey) -> None:
        """The job was deleted: its computed go (its pods leave as the cache sees them go);
        they go with its record too."""
        remembered = self._memory.peek(job)
        with self._lock:
            if remembered is not None:
                remembered.computed = None
