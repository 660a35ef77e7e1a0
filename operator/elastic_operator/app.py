"""The operator's parts, built and wired once (by `etj operator`, and by tests).

    kopf handlers (jobs, Workloads) ──▶ Scheduler ──▶ ReconcileGate ──▶ Reconciler ──▶ core
    Caches (pods, JobSets, nodes) ──wake──▲  ▲                         │ └──▶ Replacer ──▶ Kube
         └──▶ NodeIndex ◀── Observations ◀┼──┼─────────────────────────┤──▶ Kube (writes)
                 └──▶ PoolWarden ─────────┼──┼──▶ ReconcileGate ──▶ Kube (node labels)
    LeaseElector ──▶ ReconcileGate        │  └── wake (grace periods end)
    CheckpointScanner ──▶ wake ───────────┘

Every replica keeps its caches warm; only the one holding the Lease (and whose caches
are synced) gets past the gate, and every write to the cluster goes through it: the
reconciles (status, Events, JobSet, Workload, worker Job recreation, stuck-pod
force-deletes, pool quarantine labels) and the PoolWarden's sweep. Becoming leader, or
the caches syncing, asks for a resync of every job at once.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from datetime import UTC, datetime

from elastic_operator.caches import DEFAULT_WATCH_TIMEOUT_S, Caches
from elastic_operator.election import ElectionConfig, LeaseElector, ReconcileGate
from elastic_operator.kube import Kube
from elastic_operator.metrics import OperatorMetrics
from elastic_operator.node_actions import NodeActionLimiter, NodeActionLimits
from elastic_operator.node_index import NodeIndex
from elastic_operator.observations import ApiObservations
from elastic_operator.pool_warden import PoolWarden
from elastic_operator.reconciler import Reconciler
from elastic_operator.scanner import CheckpointScanner
from elastic_operator.scheduler import Backoff, Scheduler

logger = logging.getLogger("elastic_operator")


@dataclass(frozen=True)
class ReplacementSettings:
    """The operator-wide knobs of slice replacement (`etj operator --help`)."""

    quarantine_pools: bool = True
    limits: NodeActionLimits = field(default_factory=NodeActionLimits)
    release_after_s: float = 600.0
    repeated_failures_quarantine_s: float = 3600.0


@dataclass
class Operator:
    kube: Kube
    metrics: OperatorMetrics
    nodes: NodeIndex
    scanner: CheckpointScanner
    caches: Caches
    reconciler: Reconciler
    scheduler: Scheduler
    gate: ReconcileGate
    elector: LeaseElector | None  # None: no election (one replica, standalone)
    warden: PoolWarden | None = None  # None: pools are not quarantined
    _loop: asyncio.AbstractEventLoop | None = field(default=None, repr=False)
    _resync_wanted: asyncio.Event | None = field(default=None, repr=False)
    _resync_pending: bool = field(default=False, repr=False)

    def leading(self) -> bool:
        return self.elector is None or self.elector.is_leader()

    def attach(self, loop: asyncio.AbstractEventLoop) -> asyncio.Event:
        """Called on the event loop at startup: returns the event that asks for a resync."""
        self._loop = loop
        self._resync_wanted = asyncio.Event()
        if self._resync_pending:
            self._resync_wanted.set()
        self.scheduler.attach(loop)
        return self._resync_wanted

    def request_resync(self) -> None:
        """From any thread: reconcile every job now."""
        loop, wanted = self._loop, self._resync_wanted
        if loop is None or wanted is None:
            self._resync_pending = True
        elif not loop.is_closed():
            loop.call_soon_threadsafe(wanted.set)

    def start(self) -> None:
        self.caches.start()
        if self.elector is not None:
            self.elector.start()

    def forget(self, namespace: str, name: str) -> None:
        """A job was deleted: drop everything kept about it."""
        self.scheduler.forget(namespace, name)
        self.reconciler.forget(namespace, name)
        self.scanner.forget((namespace, name))
        self.nodes.forget_job((namespace, name))
        self.metrics.forget(namespace, name)

    def step_down(self, drain_timeout_s: float = 5.0) -> None:
        """Shutdown (blocking): start no reconcile, let the running ones finish, then
        release the Lease so that a standby takes over at once."""
        self.gate.close()
        if not self.gate.drain(drain_timeout_s):
            logger.warning("reconciles still running after %.0f s; stepping down anyway",
                           drain_timeout_s)
        if self.elector is not None:
            self.elector.stop()
        self.caches.stop()

    def close(self) -> None:
        self.scanner.shutdown()


def build_operator(
    kube: Kube, metrics: OperatorMetrics, *, namespaces: Sequence[str | None] = (None,),
    watch_kube: Kube | None = None, election: ElectionConfig | None = None,
    watch_timeout_s: int = DEFAULT_WATCH_TIMEOUT_S, checkpoint_scan_interval_s: float = 30.0,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    scan_executor: Executor | None = None, backoff: Backoff | None = None,
    replacement: ReplacementSettings | None = None,
) -> Operator:
    """`namespaces`: where the pod cache watches (None: every namespace); `watch_kube`:
    the client for the watches (their own connection pool); `election`: None runs no
    election (this replica always leads)."""
    settings = replacement or ReplacementSettings()
    nodes = NodeIndex()
    scanner = CheckpointScanner(interval_s=checkpoint_scan_interval_s, executor=scan_executor,
                                clock=clock)
    op: Operator | None = None

    def wake(job: tuple[str, str]) -> None:
        if op is not None and op.gate.open:  # a standby reconciles nothing
            op.scheduler.trigger_soon(*job)

    def relisted(resource: str, reason: str, objects: int) -> None:
        metrics.record_relist(resource, reason, objects)
        if op is not None and caches.synced:
            op.request_resync()

    def started() -> None:
        if op is not None:
            op.request_resync()

    caches = Caches(watch_kube or kube, nodes, namespaces, wake,
                    watch_timeout_s=watch_timeout_s, on_relist=relisted)
    for informer in caches.informers:
        metrics.cache_objects.labels(informer.resource).set_function(informer.__len__)
    metrics.observe_quarantines(nodes.all_nodes)
    observations = ApiObservations(kube, nodes, scanner, pods=caches.pods_of,
                                   jobsets=caches.jobset)
    reconciler = Reconciler(kube, observations, metrics, clock,
                            limiter=NodeActionLimiter(settings.limits),
                            quarantine_pools=settings.quarantine_pools)
    elector = _elector(kube, metrics, election, started) if election is not None else None
    if elector is not None:  # a reconcile that outlives the leadership writes no more
        kube.may_write = elector.is_leader
    gate = ReconcileGate(lambda: caches.synced and (elector is None or elector.is_leader()))
    scheduler = Scheduler(gate.wrap(reconciler.reconcile), backoff)
    reconciler.wake = scheduler.trigger_later
    warden = PoolWarden(kube, nodes, metrics, release_after_s=settings.release_after_s,
                        repeated_failures_s=settings.repeated_failures_quarantine_s,
                        clock=clock) if settings.quarantine_pools else None
    op = Operator(kube=kube, metrics=metrics, nodes=nodes, scanner=scanner, caches=caches,
                  reconciler=reconciler, scheduler=scheduler, gate=gate, elector=elector,
                  warden=warden)
    return op


def _elector(kube: Kube, metrics: OperatorMetrics, election: ElectionConfig,
             started: Callable[[], None]) -> LeaseElector:
    """The LeaseElector, with the leader metric following its role."""
    leader = metrics.leader.labels(election.identity)
    leader.set(0)

    def on_started() -> None:
        leader.set(1)
        started()

    return LeaseElector(kube, election, on_started=on_started,
                        on_stopped=lambda: leader.set(0))
