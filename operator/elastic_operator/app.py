"""The operator's composition root: every part built and wired here, once (by `etj
operator`, and by tests); the rest of the package only uses what it is handed.

    Caches (one Informer each, elastic_api.kube):             JobReader (what a
      jobs, pods, JobSets, nodes, Workloads ──▶ NodeIndex ──▶  reconcile reads)
      and SchemaWatch: our CRD (its verdict read by each pass; a change: resync)
        │ a change names a job (Wakes: not our own status write     ▲
        │ coming back, OwnWrites.wrote; a deleted job: JobStores)    │
        ▼                                                            │
    WorkQueue (the work queue; 8 worker threads) ──▶ ReconcileGate ──▶ Reconciler ──▶ core
        ▲ ▲ ▲          (queued_reconcile: requeued? start over)      │  ──▶ Kube (writes)
        │ │ └─ its Result: when to look again, and its follow-ups ◀───┘
        │ │    (replacement writes, Event posts), which the worker that ran the
        │ │    reconcile runs next ──▶ Kube; their outcome counts with the reconcile's
        │ └─── resync thread (every job of the job cache)
        └───── CheckpointScanner (a scan with a new result)
    LeaseElector ──▶ ReconcileGate ◀── PoolWarden sweep thread ──▶ Kube (node labels)
    kopf (entry/handlers.py): the process, login, /healthz probes, start and step_down

Everything the operator reacts to goes through the one work queue, as a job's name:
nothing else starts a reconcile, and a reconcile never calls the queue (it returns what it
wants of it). What it keeps per job (JobStores) goes with the job's
deletion, and the resync thread sweeps what a late write left of a deleted job. Every
replica keeps its caches warm; only the one holding the Lease (and whose caches are
synced) gets past the gate, and every write to the cluster goes through it: the
reconciles (status, Events, JobSet, Workload, worker Job recreation, stuck-pod
force-deletes, pool quarantine labels) and the PoolWarden's sweep. Becoming leader, or
the caches syncing, asks for a resync of every job at once.

May import: checkpoints, client, core, metrics, model, queue, reconcile, watch, writes.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

from elastic_api.clock import SYSTEM_CLOCK, Clock
from elastic_api.kube import Backoff, Informer, Key
from elastic_operator.checkpoints.roots import CheckpointRoots
from elastic_operator.checkpoints.scanner import CheckpointScanner
from elastic_operator.client.kube import Kube, NotLeading
from elastic_operator.core.eviction import PodsReadyTimeouts
from elastic_operator.core.pools import DEFAULT_QUARANTINE, QuarantinePolicy
from elastic_operator.metrics.metrics import OperatorMetrics
from elastic_operator.model.job_memory import JobMemories
from elastic_operator.model.job_stores import JobStore, JobStores
from elastic_operator.model.result import Result
from elastic_operator.model.server import NEWEST, ServerFeatures
from elastic_operator.queue.election import ElectionConfig, LeaseElector, ReconcileGate
from elastic_operator.queue.work_queue import (
    DEFAULT_WORKERS,
    RECONCILE_BACKOFF,
    ReconcileFunction,
    WorkQueue,
)
from elastic_operator.reconcile.dispatched import DispatchedReconciler
from elastic_operator.reconcile.own_writes import OwnWrites
from elastic_operator.reconcile.pacer import ProgressPacer
from elastic_operator.reconcile.ports import Reads, Writes
from elastic_operator.reconcile.reconciler import Reconciler, RecordComputed
from elastic_operator.reconcile.schema_guard import SchemaGuard, Verdict, always_current
from elastic_operator.reconcile.status_writer import StatusWriter
from elastic_operator.watch.caches import (
    DEFAULT_WATCH_TIMEOUT_S,
    EVERY_NAMESPACE,
    Caches,
    WatchScope,
)
from elastic_operator.watch.job_reader import CacheReader, JobReader
from elastic_operator.watch.job_refusals import JobRefusals
from elastic_operator.watch.node_index import NodeIndex
from elastic_operator.watch.schema_watch import SchemaWatch
from elastic_operator.watch.server_probe import ServerProbe
from elastic_operator.watch.slice_index import SliceIndex
from elastic_operator.writes.executor import ActionExecutor
from elastic_operator.writes.node_actions import NodeActionLimiter, NodeActionLimits
from elastic_operator.writes.outbox import EventOutbox
from elastic_operator.writes.pool_warden import PoolWarden
from elastic_operator.writes.replacement_followups import ReplacementFollowUps
from elastic_operator.writes.replacement_writes import ReplacementWrites

logger = logging.getLogger("elastic_operator")
POOL_SWEEP_INTERVAL_S = 5.0


@dataclass(frozen=True)
class ReplacementSettings:
    """The operator-wide knobs of slice replacement (`etj operator --help`)."""

    quarantine_pools: bool = True
    # Quarantines resting on what tenants control (core/pools.py): at least 2 jobs, no
    # job's own report alone.
    quarantine: QuarantinePolicy = DEFAULT_QUARANTINE
    limits: NodeActionLimits = field(default_factory=NodeActionLimits)
    release_after_s: float = 600.0
    repeated_failures_quarantine_s: float = 3600.0
    pods_ready: PodsReadyTimeouts = field(default_factory=PodsReadyTimeouts)  # Kueue's


@dataclass(frozen=True)
class Wakes:
    """What names a job to the work queue from outside its reconciles (a change the
    caches see, a checkpoint scan with a new result), only while the gate is open (a standby
    reconciles nothing). Built before the caches, which call it from their threads."""

    work_queue: WorkQueue
    gate: ReconcileGate
    pacer: ProgressPacer
    own_writes: OwnWrites
    metrics: OperatorMetrics
    forget: Callable[[str, str], None]  # a job was deleted: drop everything kept about it

    def wake(self, namespace: str, name: str, after_s: float = 0.0) -> None:
        """From any thread: reconcile the job soon, or in `after_s` seconds if not asked
        sooner."""
        if not self.gate.open:
            return
        if after_s > 0:
            self.work_queue.add_after(namespace, name, after_s)
        else:
            self.work_queue.add(namespace, name)

    def wake_paced(self, namespace: str, name: str, soon: bool) -> None:
        """A paced pod or worker-Job change (caches.py): at the progress interval if it
        may move a slice's state (`soon`), else at the job's next progress write, as
        progress only (a run it starts may start over if the job is requeued: core/startover.py)."""
        if soon:
            self.wake(namespace, name, after_s=self.pacer.interval_s)
        elif self.gate.open:
            self.work_queue.add_paced(namespace, name, self.pacer.next_write_in(namespace, name))

    def job_changed(self, key: Key, old: dict[str, Any] | None,
                    new: dict[str, Any] | None) -> None:
        """A change of the job itself (the job cache's thread)."""
        if new is None:
            self.forget(*key)
        elif not self.own_writes.wrote(*key, (new.get("metadata") or {}).get("resourceVersion")):
            self.metrics.count_wake("job")
            self.wake(*key)  # not our own status write coming back: a change


@dataclass
class Operator:
    kube: Kube
    metrics: OperatorMetrics
    nodes: NodeIndex
    scanner: CheckpointScanner
    caches: Caches
    schema: SchemaWatch
    stores: JobStores
    reconciler: Reconciler
    work_queue: WorkQueue
    gate: ReconcileGate
    elector: LeaseElector | None  # None: no election (one replica, standalone)
    warden: PoolWarden | None = None  # None: pools are not quarantined
    server: ServerProbe | None = None  # what the API server accepts (None: the newest)
    resync_interval_s: float = 30.0
    # Set to reconcile every job now (`request_resync`): a new leader, caches synced.
    resync_wanted: threading.Event = field(default_factory=threading.Event, repr=False)
    _stopping: threading.Event = field(default_factory=threading.Event, repr=False)
    _threads: list[threading.Thread] = field(default_factory=list, repr=False)

    def leading(self) -> bool:
        return self.elector is None or self.elector.is_leader()

    def request_resync(self) -> None:
        """From any thread: reconcile every job now."""
        self.resync_wanted.set()

    @property
    def informers(self) -> list[Informer[Any]]:
        """Every watch-fed cache (the probes' and the metrics')."""
        return [*self.caches.informers, self.schema.informer]

    @property
    def synced(self) -> bool:
        return self.caches.synced and self.schema.settled

    @property
    def stopping(self) -> bool:
        """Shutting down (`step_down` began): it will not lead again (readiness.py)."""
        return self._stopping.is_set()

    def start(self) -> None:
        server = self.server
        if server is not None:  # before any job renders: the answer it renders by
            server.try_refresh()
            self._spawn("server-probe", lambda: server.run(self._stopping))
        self.caches.start()
        self.schema.start()
        self.work_queue.start(self.gate.wrap(queued_reconcile(self.reconciler, self.work_queue)))
        if self.elector is not None:
            self.elector.start()
        self._spawn("resync", self._resync_loop)
        if self.warden is not None:
            self._spawn("pool-warden", self._sweep_loop)

    @property
    def alive(self) -> bool:
        """The work queue and the background threads run (the caches and the election
        are told apart by the probes)."""
        return self.work_queue.alive and all(t.is_alive() for t in self._threads)

    def step_down(self, drain_timeout_s: float = 5.0) -> None:
        """Shutdown (blocking): start no reconcile, let the running ones finish, then
        release the Lease so that a standby takes over at once."""
        self.gate.close()
        self._stopping.set()
        self.resync_wanted.set()  # the resync thread ends now, not at its next round
        self.work_queue.stop()
        if not self.gate.drain(drain_timeout_s):
            logger.warning("reconciles still running after %.0f s; stepping down anyway",
                           drain_timeout_s)
        # The follow-ups under way (Events, Job deletions), still leading.
        if not self.work_queue.drain(drain_timeout_s):
            logger.warning("follow-ups still running after %.0f s; the next leader "
                           "does what is left", drain_timeout_s)
        if self.elector is not None:
            self.elector.stop()
        self.caches.stop()
        self.schema.stop()

    def close(self) -> None:
        self.scanner.shutdown()

    def resync(self, urgent: bool) -> None:
        """Reconcile every job in the job cache: `urgent` (a new leader, caches synced)
        all at once, bounded by the workers; else one at a time, so that what events
        name never waits behind a whole sweep."""
        for namespace, name in self.caches.job_keys():
            if self._stopping.is_set() or (not urgent and self.resync_wanted.is_set()):
                return  # stopping, or an urgent resync replaces the rest of this one
            self.work_queue.add(namespace, name)
            if not urgent:
                self.work_queue.wait_idle(namespace, name, self.resync_interval_s)

    def _resync_loop(self) -> None:
        """While leading, resync every `resync_interval_s`, and at once when asked
        (`request_resync`): a lost event costs at most one interval."""
        while not self._stopping.is_set():
            urgent = self.resync_wanted.wait(self.resync_interval_s)
            self.resync_wanted.clear()
            if self._stopping.is_set():
                return
            if self.caches.synced:  # a standby's caches remember per job too
                self._sweep()
            if not self.gate.open:
                continue  # a standby, or caches not synced yet
            try:
                self.resync(urgent)
            except Exception:
                logger.exception("resync failed; retrying in %.0f s", self.resync_interval_s)

    def _sweep(self) -> None:
        """Drop from every per-job store the jobs the job cache no longer holds."""
        try:
            self.stores.sweep(self.caches.job_keys)
        except Exception:  # the next round sweeps again
            logger.exception("sweeping the per-job stores failed")

    def _sweep_loop(self) -> None:
        """Release healthy quarantined node pools (the PoolWarden), only while leading,
        through the same gate as the reconciles (a standby writes nothing)."""
        warden = self.warden
        assert warden is not None
        while not self._stopping.wait(POOL_SWEEP_INTERVAL_S):
            try:
                self.gate.call(warden.sweep)
            except NotLeading as e:  # deposed mid-sweep: the new leader sweeps
                logger.warning("node pool sweep stopped: %s", e)
            except Exception:
                logger.exception("node pool sweep failed; retrying in %.0f s",
                                 POOL_SWEEP_INTERVAL_S)

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()


def build_operator(
    kube: Kube, metrics: OperatorMetrics, *, scope: WatchScope = EVERY_NAMESPACE,
    watch_kube: Kube | None = None, election: ElectionConfig | None = None,
    watch_workloads: bool = False, watch_timeout_s: int = DEFAULT_WATCH_TIMEOUT_S,
    resync_interval_s: float = 30.0, checkpoint_scan_interval_s: float = 30.0,
    clock: Clock = SYSTEM_CLOCK, checkpoint_roots: CheckpointRoots | None = None,
    scan_executor: Executor | None = None, backoff: Backoff = RECONCILE_BACKOFF,
    workers: int = DEFAULT_WORKERS, replacement: ReplacementSettings | None = None,
) -> Operator:
    """`scope`: the namespaces served; `watch_kube`: the client for the watches (their
    own connection pool); `election`: None runs no election (this replica always leads);
    `watch_workloads`: Kueue's Workload API is served (checked once at start);
    `checkpoint_roots`: what it may list (None: the default, local paths only). Built in
    the order they are called: what the caches call (the work queue, the job memory,
    the wakes) before the caches, what reads them after."""
    settings = replacement or ReplacementSettings()
    nodes, memory = NodeIndex(clock), JobMemories()
    scanner = CheckpointScanner(interval_s=checkpoint_scan_interval_s, executor=scan_executor,
                                clock=clock, roots=checkpoint_roots or CheckpointRoots.default(),
                                memory=memory)
    resync = threading.Event()
    own_writes = OwnWrites(memory)
    elector = _elector(kube, metrics, election, resync.set, clock, own_writes) \
        if election is not None else None
    if elector is not None:  # a reconcile that outlives the leadership writes no more
        kube.client.may_write = elector.is_leader
    work_queue = WorkQueue(backoff, workers=workers, on_wait=metrics.queue_wait.observe,
                           memory=memory)
    metrics.queue_depth.set_function(lambda: work_queue.depth)
    slice_index = SliceIndex(nodes, memory)
    pacer = ProgressPacer(memory, metrics, clock)
    # Open once the caches and the CRD (made below) have synced, and while this leads.
    gate = ReconcileGate(lambda: caches.synced and schema.settled
                         and (elector is None or elector.is_leader()))
    stores = JobStores()
    wakes = Wakes(work_queue, gate, pacer, own_writes, metrics,
                  lambda namespace, name: stores.forget((namespace, name)))

    def relisted(resource: str, reason: str, objects: int) -> None:
        metrics.record_relist(resource, reason, objects)
        if resource.split("/")[0] == "jobs":
            own_writes.job_cache_listed()
        if caches.synced:
            resync.set()

    server = ServerProbe(kube, scope.dry_run_namespace, resync.set)
    caches = Caches(watch_kube or kube, nodes, scope, lambda job: wakes.wake(*job),
                    on_job=wakes.job_changed,
                    wake_paced=lambda job, soon: wakes.wake_paced(*job, soon),
                    slice_index=slice_index, count=metrics.count_wake,
                    watch_workloads=watch_workloads, watch_timeout_s=watch_timeout_s,
                    on_relist=relisted)
    # A new verdict on the CRD names every job again (level-based: each pass reads it).
    schema = SchemaWatch(watch_kube or kube, metrics, watch_timeout_s=watch_timeout_s,
                         on_change=resync.set, on_relist=relisted)
    for informer in [*caches.informers, schema.informer]:
        metrics.cache_objects.labels(informer.resource).set_function(informer.__len__)
    metrics.observe_quarantines(nodes.all_nodes)
    reader = CacheReader(kube, nodes, scanner, pods=caches.pods_of, jobsets=caches.jobset,
                         jobs=caches.job, worker_jobs=caches.worker_jobs,
                         seen_at=caches.pod_seen_at)
    reconciler = build_reconciler(kube, reader, metrics, clock, memory=memory,
                                  own_writes=own_writes, pacer=pacer,
                                  record_computed=slice_index.record_computed,
                                  limiter=NodeActionLimiter(settings.limits, clock),
                                  quarantine_pools=settings.quarantine_pools,
                                  quarantine=settings.quarantine,
                                  pods_ready=settings.pods_ready,
                                  schema=lambda: schema.verdict, server=server.features)
    scanner.on_result(wakes.wake)  # from a scan thread
    warden = PoolWarden(kube, nodes, metrics, release_after_s=settings.release_after_s,
                        repeated_failures_s=settings.repeated_failures_quarantine_s,
                        clock=clock) if settings.quarantine_pools else None
    _add_stores(stores, metrics, memory=memory, work_queue=work_queue, scanner=scanner,
                nodes=nodes, slice_index=slice_index, caches=caches, warden=warden)
    return Operator(kube=kube, metrics=metrics, nodes=nodes, scanner=scanner, caches=caches,
                    schema=schema, stores=stores, reconciler=reconciler, work_queue=work_queue,
                    gate=gate, elector=elector, warden=warden, server=server,
                    resync_interval_s=resync_interval_s, resync_wanted=resync)


class RequeueNews(Protocol):
    """What the work queue (work_queue.py) is to the reconciles, as their caller: it tells a running
    reconcile whether its job was requeued, and covers every naming so far when the
    pass starts over (it will see them)."""

    def running(self, namespace: str, name: str) -> tuple[bool, bool]: ...

    def cover(self, namespace: str, name: str) -> None: ...


def queued_reconcile(reconciler: Reconciler, queue: RequeueNews) -> ReconcileFunction:
    """The reconcile the work queue runs: told by the queue whether the job was requeued
    since it started; a pass cut short for it (Result.again) has the queue cover every
    naming so far, then runs the rest of the reconcile at once (core/startover.py)."""

    def reconcile(namespace: str, name: str) -> Result:
        result = reconciler.reconcile(namespace, name,
                                      requeued=partial(queue.running, namespace, name))
        if result.again is not None:
            queue.cover(namespace, name)
            result = result.again()
        return result

    return reconcile


def build_reconciler(
    kube: Kube, reader: JobReader, metrics: OperatorMetrics, clock: Clock = SYSTEM_CLOCK, *,
    memory: JobMemories, own_writes: OwnWrites, pacer: ProgressPacer,
    record_computed: RecordComputed | None = None,
    limiter: NodeActionLimiter | None = None, quarantine_pools: bool = True,
    quarantine: QuarantinePolicy = DEFAULT_QUARANTINE,
    pods_ready: PodsReadyTimeouts | None = None, schema: Verdict = always_current,
    server: Callable[[], ServerFeatures] = lambda: NEWEST, dry_run_missing_jobs: bool = True,
) -> Reconciler:
    """The reconciler and every collaborator of its pass, built once: `reader`: what it
    reads; `record_computed`: the slice index's;
    `schema`: the verdict on the served CRD (schema_watch.py), read at each pass;
    `server`: what the API server accepts (server_probe.py), read at each pass;
    `quarantine`: the administrator's policy on quarantines (core/pools.py);
    `dry_run_missing_jobs`: ask the server whether it refuses a Job JobSet has not
    created (job_refusals.py; off for a stand-in API that has no dry run)."""
    outbox = EventOutbox(kube, metrics, memory)
    guard = SchemaGuard(kube, clock, memory, own_writes, schema)
    writer = StatusWriter(kube, metrics, clock, outbox=outbox, own_writes=own_writes,
                          pacer=pacer, schema=guard)
    executor = ActionExecutor(kube, reader)
    replacing = ReplacementWrites(kube, metrics, limiter or NodeActionLimiter(),
                                  quarantine_pools=quarantine_pools)
    return Reconciler(
        reads=Reads(reader=reader, own_writes=own_writes, schema=guard, server=server,
                    refusals=JobRefusals(kube, memory) if dry_run_missing_jobs else None),
        writes=Writes(
            executor=executor, writer=writer, outbox=outbox,
            replacements=ReplacementFollowUps(replacing, reader, metrics, memory,
                                              quarantine),
            dispatched=DispatchedReconciler(reader, executor, writer, outbox, clock)),
        memory=memory, metrics=metrics, clock=clock,
        pods_ready=pods_ready or PodsReadyTimeouts(), recheck_after_s=pacer.interval_s,
        record_computed=record_computed)


def _add_stores(stores: JobStores, metrics: OperatorMetrics, *, memory: JobMemories,
                work_queue: WorkQueue, scanner: CheckpointScanner, nodes: NodeIndex,
                slice_index: SliceIndex, caches: Caches,
                warden: PoolWarden | None) -> None:
    """Every per-job store (job_stores.py lists what each keeps), forgotten with its job
    and counted in the metrics; the metrics keep which series a job has in its record."""
    metrics.remember_in(memory)
    named: dict[str, JobStore | None] = {
        "work-queue": work_queue, "checkpoint-scans": scanner,
        "node-index": nodes, "slice-index": slice_index, "torn-down-jobs": caches.torn_down,
        "metrics": metrics, "pool-warden": warden,
        # Last: the others forget what the job's record tells them (the metrics remove
        # the per-slice series it lists) before it goes.
        "job-memory": memory}
    for name, store in named.items():
        if store is not None:
            stores.register(name, store)
            metrics.job_memory.observe(name, partial(_count, store.job_keys))


def _count(jobs: Callable[[], Iterable[tuple[str, str]]]) -> int:
    return len(set(jobs()))


def _elector(kube: Kube, metrics: OperatorMetrics, election: ElectionConfig,
             started: Callable[[], None], clock: Clock, own_writes: OwnWrites) -> LeaseElector:
    """The LeaseElector, with the leader metric following its role. A new leader knows
    no status it wrote (another replica may have written every job meanwhile)."""
    leader = metrics.leader.labels(election.identity)
    leader.set(0)

    def on_started() -> None:
        own_writes.forget_statuses()
        leader.set(1)
        started()

    return LeaseElector(kube, election, on_started=on_started,
                        on_stopped=lambda: leader.set(0), clock=clock)
