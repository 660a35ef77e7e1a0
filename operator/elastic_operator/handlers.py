"""The kopf wiring, and nothing else: every job event names a job, which the Scheduler
reconciles (app.py builds the parts). Pods, JobSets and nodes are not kopf's: the
watch-fed caches (caches.py) keep them and wake the jobs they concern.

Where Kueue is installed, a Workload's events reconcile the job whose JobSet owns it. A
periodic resync makes the whole thing level-based: a lost event costs at most one resync
interval. It runs at once when this replica becomes the leader or its caches sync. The
liveness endpoint (/healthz) reports the role and the caches; it fails only if the
election or a cache has stopped (a standby is healthy).
"""
from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import kopf

from elastic_api.names import (
    GROUP,
    JOBSET_GROUP,
    KUEUE_GROUP,
    KUEUE_VERSION,
    KUEUE_WORKLOAD_PLURAL,
    PLURAL,
    VERSION,
)
from elastic_operator.app import Operator

logger = logging.getLogger("elastic_operator")


@dataclass
class WatchScope:
    clusterwide: bool
    namespaces: list[str]

    @property
    def has_globs(self) -> bool:
        return not self.clusterwide and any(
            any(ch in p for ch in "*?[") for p in self.namespaces)

    def matches(self, namespace: str) -> bool:
        return self.clusterwide or any(fnmatch.fnmatchcase(namespace, p) for p in self.namespaces)

    @property
    def list_namespaces(self) -> list[str | None]:
        """Where to list and watch (None: every namespace, filtered by `matches`)."""
        return [None] if self.clusterwide or self.has_globs else list(self.namespaces)


def build_registry(op: Operator, scope: WatchScope, resync_interval_s: float, *,
                   watch_workloads: bool = True) -> kopf.OperatorRegistry:
    """watch_workloads: Kueue's Workload API is served (checked once at start: with CRD
    scanning off, kopf would only warn about a resource that is not)."""
    registry = kopf.OperatorRegistry()
    background: list[asyncio.Task[None]] = []

    @kopf.on.login(registry=registry)
    def login(**kw: Any) -> Any:
        # A custom registry has none of kopf's default login handlers: in-cluster service
        # account, else KUBECONFIG, through the kubernetes client (as kube.py does).
        return kopf.login_via_client(**kw)

    _register_watches(registry, op)
    if watch_workloads:
        _register_workload_watch(registry, op)

    @kopf.on.startup(registry=registry)
    async def startup(**kw: Any) -> None:
        configure_settings(kw["settings"], scope)
        wanted = op.attach(asyncio.get_running_loop())
        op.scanner.on_result(op.scheduler.trigger_soon)  # from a scan thread
        op.start()
        background.append(asyncio.create_task(resync(op, scope, resync_interval_s, wanted)))
        if op.warden is not None:
            background.append(asyncio.create_task(sweep_pools(op)))

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**kw: Any) -> None:
        op.gate.close()  # no reconcile starts from here on
        for task in background:
            task.cancel()
        # Let the running reconciles finish, then release the Lease: a standby takes
        # over at its next look (graceful handover). In a thread of its own: the shared
        # worker threads may all be busy with reconciles.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="step-down") as pool:
            await asyncio.get_running_loop().run_in_executor(pool, op.step_down)
        op.close()

    _register_probes(registry, op)
    return registry


def _register_probes(registry: kopf.OperatorRegistry, op: Operator) -> None:
    @kopf.on.probe(id="leadership", registry=registry)
    def leadership(**kw: Any) -> dict[str, Any]:
        elector = op.elector
        if elector is None:
            return {"role": "leader", "election": "off"}
        if not elector.alive:
            raise kopf.PermanentError("the leader election thread has stopped")
        return {"role": "leader" if elector.is_leader() else "standby",
                "identity": elector.identity, "holder": elector.holder}

    @kopf.on.probe(id="caches", registry=registry)
    def caches(**kw: Any) -> dict[str, Any]:
        stopped = [i.resource for i in op.caches.informers if not i.alive]
        if stopped:
            raise kopf.PermanentError(f"watch-fed caches stopped: {', '.join(stopped)}")
        now = time.monotonic()
        return {"synced": op.caches.synced,
                "objects": {i.resource: len(i) for i in op.caches.informers},
                # Seconds since each cache last heard anything (event, bookmark, list).
                "idle_seconds": {i.resource: round(now - i.last_event_at, 1)
                                 for i in op.caches.informers if i.last_event_at is not None}}


def _register_watches(registry: kopf.OperatorRegistry, op: Operator) -> None:
    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
    async def job_event(**kw: Any) -> None:
        event, name, namespace = kw["event"], kw["name"], kw["namespace"]
        if event.get("type") == "DELETED":
            op.forget(namespace, name)
            return
        if op.reconciler.wrote(namespace, name, kw["body"]["metadata"].get("resourceVersion")):
            return  # our own status write coming back: nothing new
        await op.scheduler.trigger(namespace, name)


def _register_workload_watch(registry: kopf.OperatorRegistry, op: Operator) -> None:
    @kopf.on.event(KUEUE_GROUP, KUEUE_VERSION, KUEUE_WORKLOAD_PLURAL, registry=registry)
    async def workload_event(**kw: Any) -> None:
        job = owning_job(kw["body"])
        # Only jobs already known: other teams' JobSets have Workloads too.
        if job is not None and op.scheduler.knows(kw["namespace"], job):
            await op.scheduler.trigger(kw["namespace"], job)


def owning_job(workload: Any) -> str | None:
    """The job whose JobSet owns this Workload (a JobSet is named after its job)."""
    for ref in (workload.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == "JobSet" and \
                str(ref.get("apiVersion", "")).startswith(f"{JOBSET_GROUP}/"):
            return str(ref.get("name", "")) or None
    return None


async def resync(op: Operator, scope: WatchScope, interval_s: float,
                 wanted: asyncio.Event) -> None:
    """While leading, reconcile every job in scope every `interval_s`, and at once when
    `wanted` is set (this replica just became leader, or its caches synced), forever."""
    namespaces = scope.list_namespaces
    while True:
        urgent = False
        with contextlib.suppress(TimeoutError):
            urgent = await asyncio.wait_for(wanted.wait(), interval_s)
        wanted.clear()
        if not op.gate.open:
            continue  # a standby, or caches not synced yet
        try:
            jobs = []
            for ns in namespaces:
                jobs += await asyncio.to_thread(op.kube.list_jobs, ns)
            keys = sorted({(j["metadata"]["namespace"], j["metadata"]["name"]) for j in jobs
                           if scope.matches(j["metadata"]["namespace"])})
            if urgent:  # a new leader: every job at once (bounded by the worker threads)
                await asyncio.gather(*(op.scheduler.trigger(*key) for key in keys))
            for key in () if urgent else keys:  # the periodic sweep: one job at a time
                await op.scheduler.trigger(*key)
        except Exception:
            logger.exception("resync failed; retrying in %.0f s", interval_s)


async def sweep_pools(op: Operator, interval_s: float = 5.0) -> None:
    """Release healthy quarantined node pools (the PoolWarden), forever; only while
    leading, through the same gate as the reconciles (a standby writes nothing)."""
    warden = op.warden
    assert warden is not None
    while True:
        await asyncio.sleep(interval_s)
        try:
            await asyncio.to_thread(op.gate.call, warden.sweep)
        except Exception:
            logger.exception("node pool sweep failed; retrying in %.0f s", interval_s)


def configure_settings(settings: kopf.OperatorSettings, scope: WatchScope) -> None:
    """kopf settings: standalone, no finalizers, bounded watch timeouts."""
    settings.peering.standalone = True
    # No watching of CRDs and namespaces (which would need cluster-wide list/watch on
    # both): the CRDs must exist when the operator starts; only namespace globs need it.
    settings.scanning.disabled = not scope.has_globs
    settings.posting.level = logging.WARNING  # kopf's own warnings become k8s Events
    # Reconnect watches regularly so a half-open connection cannot hide events for long.
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 10
    settings.networking.request_timeout = 60
    settings.queueing.worker_limit = 64
