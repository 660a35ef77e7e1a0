"""The kopf wiring, and nothing else: every watch event names a job, which the
Scheduler reconciles (app.py builds the parts).

Pod events also tell the NodeIndex which jobs run on which node, and node events tell it
readiness: a node that turns NotReady reconciles its jobs at once. Where Kueue is
installed, a Workload's events reconcile the job whose JobSet owns it. A periodic resync
makes the whole thing level-based: a lost event costs at most one resync interval.
"""
from __future__ import annotations

import asyncio
import fnmatch
import logging
from dataclasses import dataclass
from typing import Any

import kopf

from elastic_api.names import (
    GROUP,
    JOB_NAME_LABEL,
    JOBSET_GROUP,
    JOBSET_PLURAL,
    JOBSET_VERSION,
    KUEUE_GROUP,
    KUEUE_VERSION,
    KUEUE_WORKLOAD_PLURAL,
    PLURAL,
    VERSION,
)
from elastic_operator.app import Operator
from elastic_operator.observed import node_from_dict

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
        loop = asyncio.get_running_loop()

        def reconcile_soon(namespace: str, name: str) -> None:  # from a scan thread
            if not loop.is_closed():
                asyncio.run_coroutine_threadsafe(op.scheduler.trigger(namespace, name), loop)

        op.scanner.on_result(reconcile_soon)
        background.append(asyncio.create_task(resync(op, scope, resync_interval_s)))
        if op.warden is not None:
            background.append(asyncio.create_task(sweep_pools(op)))

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**kw: Any) -> None:
        for task in background:
            task.cancel()
        op.close()

    return registry


def _register_watches(registry: kopf.OperatorRegistry, op: Operator) -> None:
    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
    async def job_event(**kw: Any) -> None:
        event, name, namespace = kw["event"], kw["name"], kw["namespace"]
        if event.get("type") == "DELETED":
            op.forget(namespace, name)
            return
        await op.scheduler.trigger(namespace, name)

    @kopf.on.event(JOBSET_GROUP, JOBSET_VERSION, JOBSET_PLURAL,
                   labels={JOB_NAME_LABEL: kopf.PRESENT}, registry=registry)
    async def jobset_event(**kw: Any) -> None:
        await op.scheduler.trigger(kw["namespace"], kw["labels"][JOB_NAME_LABEL])

    @kopf.on.event("", "v1", "pods", labels={JOB_NAME_LABEL: kopf.PRESENT}, registry=registry)
    async def pod_event(**kw: Any) -> None:
        event, body, name = kw["event"], kw["body"], kw["name"]
        job = (kw["namespace"], kw["labels"][JOB_NAME_LABEL])
        node = (body.get("spec") or {}).get("nodeName")
        if node:
            if event.get("type") == "DELETED":
                op.nodes.pod_gone(job, name, node)
            else:
                op.nodes.pod_seen(job, name, node)
        await op.scheduler.trigger(*job)

    @kopf.on.event("", "v1", "nodes", registry=registry)
    async def node_event(**kw: Any) -> None:
        event, body, name = kw["event"], kw["body"], kw["name"]
        if event.get("type") == "DELETED":
            jobs = op.nodes.node_gone(name)
        else:
            jobs = op.nodes.node_seen(node_from_dict(dict(body)))
        await asyncio.gather(*(op.scheduler.trigger(*job) for job in jobs))


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


async def resync(op: Operator, scope: WatchScope, interval_s: float) -> None:
    """Reconcile every job in scope, one at a time (a background sweep), forever."""
    namespaces: list[str | None] = (
        [None] if scope.clusterwide or scope.has_globs else list(scope.namespaces))
    while True:
        await asyncio.sleep(interval_s)
        try:
            jobs = []
            for ns in namespaces:
                jobs += await asyncio.to_thread(op.kube.list_jobs, ns)
            keys = sorted({(j["metadata"]["namespace"], j["metadata"]["name"]) for j in jobs
                           if scope.matches(j["metadata"]["namespace"])})
            for key in keys:
                await op.scheduler.trigger(*key)
        except Exception:
            logger.exception("resync failed; retrying in %.0f s", interval_s)


async def sweep_pools(op: Operator, interval_s: float = 5.0) -> None:
    """Release healthy quarantined node pools (the PoolWarden), forever."""
    assert op.warden is not None
    while True:
        await asyncio.sleep(interval_s)
        try:
            await asyncio.to_thread(op.warden.sweep)
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
