"""Node readiness as the node watch last showed it, which jobs have pods on which node
(learned from the pod watch), and which jobs' slices failed on which node pool with no
evidence against its nodes (learned from each job's status, after its reconcile).

The pod and node handlers update it through its methods; a node whose readiness changes
names the jobs to reconcile at once (a NotReady node is a slice down). The reconciler
reads nodes from it instead of asking the API server for each one, and tells it each
job's status.pools: a pool where slices of different jobs fail is suspect
(core/pools.py), which no single job's status can tell. A restarted operator learns them
again as its first resync reconciles every job; a deleted job's are forgotten. No I/O;
a lock makes it safe to read from the reconcile threads while the event loop writes.
"""
from __future__ import annotations

import threading
from collections.abc import Collection
from dataclasses import replace
from datetime import datetime

from elastic_api.clock import SYSTEM_CLOCK, Clock
from elastic_api.models import PoolStatus
from elastic_operator.model.objects import FailureMark, ObservedNode, ObservedPool

JobKey = tuple[str, str]  # (namespace, name)


class NodeIndex:
    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock = clock
        # When the watch saw a node's readiness change (a kubelet, or kwok, may report the
        # Ready condition's lastTransitionTime as the node's creation).
        self._changed_seen: dict[str, datetime] = {}
        self._lock = threading.Lock()
        self._nodes: dict[str, ObservedNode] = {}
        # Readiness as last seen, kept after a node is deleted (as not ready), so that a
        # node coming back Ready counts as a change.
        self._ready: dict[str, bool] = {}
        # node -> {(namespace, pod): its job}: a job stays on a node while any of its
        # pods does (a replacement may land where the pod it replaces was).
        self._pods_on: dict[str, dict[tuple[str, str], JobKey]] = {}
        # job -> (its uid, {pool: times its slices failed there, blamed on the job or
        # reported by it}).
        self._failures: dict[JobKey, tuple[str, dict[str, list[datetime]]]] = {}
        # The nodes of each TPU shape by pool, sorted, as of `_nodes_version` (bumped when
        # a node is added, changed or removed): each reconcile reads its job's shape, and
        # at one node per host, grouping every node anew was a tenth of a reconcile
        # (docs/benchmarks.md); the nodes change far more rarely than the pods, whose
        # churn is when reconciles come fastest.
        self._nodes_version = 0
        self._by_shape: dict[tuple[str, str], tuple[int, dict[str, tuple[ObservedNode, ...]]]] \
            = {}

    # --- the node watch ---

    def node_seen(self, node: ObservedNode) -> list[JobKey]:
        """Record a node; the jobs with pods on it if its readiness changed (not on the
        first sight of a node: the initial listing is the resync's business)."""
        with self._lock:
            if self._nodes.get(node.name) != node:  # not a heartbeat that changed nothing
                self._nodes_version += 1
            self._nodes[node.name] = node
            return self._readiness_changed(node.name, node.ready)

    def node_gone(self, name: str) -> list[JobKey]:
        """A deleted node is not ready: the jobs with pods on it, if it was."""
        with self._lock:
            if self._nodes.pop(name, None) is not None:
                self._nodes_version += 1
            return self._readiness_changed(name, False)

    def _readiness_changed(self, name: str, ready: bool) -> list[JobKey]:
        before = self._ready.get(name)
        self._ready[name] = ready
        if before is not None and before != ready:
            self._changed_seen[name] = self._clock.now()
        if before is None or before == ready:
            return []
        return sorted(set(self._pods_on.get(name, {}).values()))

    # --- the pod watch ---

    def pod_seen(self, job: JobKey, pod: str, node_name: str) -> None:
        """A pod of `job` (named `pod`, in the job's namespace) runs on `node_name`."""
        with self._lock:
            self._pods_on.setdefault(node_name, {})[(job[0], pod)] = job

    def pod_gone(self, job: JobKey, pod: str, node_name: str) -> None:
        with self._lock:
            self._pods_on.get(node_name, {}).pop((job[0], pod), None)

    def forget_job(self, job: JobKey) -> None:
        with self._lock:
            for pods in self._pods_on.values():
                for key in [k for k, owner in pods.items() if owner == job]:
                    del pods[key]
            self._failures.pop(job, None)

    def job_keys(self) -> set[JobKey]:
        """The jobs it holds anything for (job_stores.py)."""
        with self._lock:
            return self._failures.keys() | {
                job for pods in self._pods_on.values() for job in pods.values()}

    # --- the jobs' statuses ---

    def note_failures(self, job: JobKey, uid: str, pools: list[PoolStatus]) -> None:
        """The job's slice failures that blamed the job itself or that it reported
        (status.pools: its own word, which counts as its own failure unless the
        administrator trusts reports, core/pools.py), replacing what it said before."""
        marks = {p.name: [f.at for f in p.failures if f.blame in ("Job", "Reported")]
                 for p in pools}
        marks = {name: times for name, times in marks.items() if times}
        with self._lock:
            if marks:
                self._failures[job] = (uid, marks)
            else:
                self._failures.pop(job, None)

    def _marks_of_others(self, pool: str, job: JobKey) -> tuple[FailureMark, ...]:
        """(the caller holds the lock)"""
        return tuple(FailureMark(job=f"{other[0]}/{other[1]}", uid=uid, at=at,
                                 pools=len(marks))
                     for other, (uid, marks) in sorted(self._failures.items())
                     if other != job for at in marks.get(pool, ()))

    # --- reads ---

    def nodes(self, names: Collection[str]) -> dict[str, ObservedNode]:
        """The known nodes among `names` (a node not seen on the watch yet is missing)."""
        with self._lock:
            return {n: self._as_seen(self._nodes[n]) for n in names if n in self._nodes}

    @property
    def nodes_version(self) -> int:
        """Bumped whenever a node is added, changed or removed."""
        with self._lock:
            return self._nodes_version

    def pools_of_nodes(self, names: Collection[str]) -> dict[str, str | None]:
        """The pool of each known node among `names` (core/pools.py pod_pool)."""
        with self._lock:
            return {n: self._nodes[n].pool for n in names if n in self._nodes}

    def jobs_on(self, node_name: str) -> list[JobKey]:
        with self._lock:
            return sorted(set(self._pods_on.get(node_name, {}).values()))

    def all_nodes(self) -> list[ObservedNode]:
        with self._lock:
            return [self._as_seen(n) for n in self._nodes.values()]

    def _as_seen(self, node: ObservedNode) -> ObservedNode:
        """The node with its readiness transition no earlier than the watch saw it change
        (the caller holds the lock)."""
        seen = self._changed_seen.get(node.name)
        if seen is None or (node.ready_transition_time is not None
                            and node.ready_transition_time >= seen):
            return node
        return replace(node, ready_transition_time=seen)

    def pools(self, accelerator: str, topology: str, job: JobKey) -> tuple[ObservedPool, ...]:
        """The node pools whose nodes have this TPU accelerator and topology, each marked
        if pods of another job than `job` run on it (a spare must be free)."""
        with self._lock:
            return tuple(
                ObservedPool(
                    name=pool, nodes=nodes,
                    used_by_others=any(owner != job for n in nodes
                                       for owner in self._pods_on.get(n.name, {}).values()),
                    failures_of_others=self._marks_of_others(pool, job))
                for pool, nodes in self._pools_of(accelerator, topology).items())

    def _pools_of(self, accelerator: str, topology: str) -> dict[str, tuple[ObservedNode, ...]]:
        """The nodes of this shape by pool, pools and nodes sorted by name (the caller
        holds the lock): grouped again only when a node changed since the last time."""
        kept = self._by_shape.get((accelerator, topology))
        if kept is not None and kept[0] == self._nodes_version:
            return kept[1]
        members: dict[str, list[ObservedNode]] = {}
        for node in self._nodes.values():
            if node.pool and node.accelerator == accelerator and node.topology == topology:
                members.setdefault(node.pool, []).append(node)
        grouped = {pool: tuple(sorted(nodes, key=lambda n: n.name))
                   for pool, nodes in sorted(members.items())}
        self._by_shape[(accelerator, topology)] = (self._nodes_version, grouped)
        return grouped
