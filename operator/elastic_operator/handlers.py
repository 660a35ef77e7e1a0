"""Thin kopf handlers: every watch event names a job; the job is reconciled.

A reconcile reads the job, its JobSet, its pods and their nodes (kube.py), plans and
applies the few writes (status.plan_reconcile), computes the status with the pure
status.compute_status and writes it once (a merge patch that never touches
status.training), then posts the Events and records the metrics it implies.

Reconciles of one job never overlap, and events that arrive while one is waiting are
coalesced into it (it reads the cluster after they happened). A periodic resync makes
the whole thing level-based: a lost event costs at most one resync interval.
"""
from __future__ import annotations

import asyncio
import fnmatch
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import kopf

from elastic_api.models import CheckpointStatus, ElasticTrainingJob
from elastic_api.names import GROUP, JOB_NAME_LABEL, PLURAL, VERSION
from elastic_operator.core.checkpoint import same_checkpoint_result
from elastic_operator.core.parsing import InvalidJobSpec, parse_job, parse_status
from elastic_operator.core.patch import status_patch
from elastic_operator.core.plan import PatchJobSetSuspend, owned, plan_reconcile
from elastic_operator.core.status import compute_status, invalid_spec_status
from elastic_operator.kube import ApiError, Kube
from elastic_operator.metrics import OperatorMetrics
from elastic_operator.observed import (
    Observed,
    ObservedNode,
    jobset_from_dict,
    node_from_dict,
    pod_from_dict,
)

logger = logging.getLogger("elastic_operator")

JobKey = tuple[str, str]  # (namespace, name)


def scan_checkpoint(directory: str, now: datetime) -> CheckpointStatus | None:
    """The one place the operator asks about checkpoints (elastic_operator.checkpoints)."""
    try:
        from elastic_operator import checkpoints
    except ImportError:  # a build without checkpoint awareness
        return None
    result: CheckpointStatus = checkpoints.scan_checkpoints(directory, now=now)
    return result


@dataclass
class ReconcilerConfig:
    checkpoint_scan_interval_s: float = 30.0
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))


class Reconciler:
    """One reconcile of one job (synchronous; runs in a worker thread)."""

    def __init__(self, kube: Kube, metrics: OperatorMetrics,
                 config: ReconcilerConfig | None = None) -> None:
        self.kube = kube
        self.metrics = metrics
        self.config = config or ReconcilerConfig()
        # Called (from a scan thread) when a checkpoint scan finishes; set by the handlers.
        self.on_scan_done: Callable[[str, str], object] | None = None
        # Node readiness as last seen on the node watch (kept by the node handler).
        self.nodes: dict[str, ObservedNode] = {}
        self._children_ensured: set[tuple[str, str, str]] = set()
        self._last_scan: dict[JobKey, float] = {}
        self._scans: dict[JobKey, Future[CheckpointStatus | None]] = {}
        self._scan_results: dict[JobKey, CheckpointStatus | None] = {}  # the last finished
        self._scan_lock = threading.Lock()
        self._scan_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="ckpt-scan")

    def forget(self, namespace: str, name: str) -> None:
        self._last_scan.pop((namespace, name), None)
        with self._scan_lock:
            self._scans.pop((namespace, name), None)
            self._scan_results.pop((namespace, name), None)
        self._children_ensured = {k for k in self._children_ensured
                                  if (k[0], k[1]) != (namespace, name)}
        self.metrics.forget(namespace, name)

    def reconcile(self, namespace: str, name: str) -> None:
        started = time.monotonic()
        try:
            self._reconcile(namespace, name)
        except ApiError as e:
            job_gone = e.status == 404 and f'"kind":"{PLURAL}"' in e.body
            if job_gone or (e.status == 403 and "NamespaceTerminating" in e.body):
                # The job or its namespace went away while we looked: nothing to do.
                logger.debug("reconcile of %s/%s: %s", namespace, name, e)
                return
            self.metrics.reconcile_errors.inc()
            logger.exception("reconcile of %s/%s failed; retried on the next event or resync",
                             namespace, name)
        except Exception:
            self.metrics.reconcile_errors.inc()
            logger.exception("reconcile of %s/%s failed; retried on the next event or resync",
                             namespace, name)
        finally:
            self.metrics.reconcile_duration.observe(time.monotonic() - started)

    def _reconcile(self, namespace: str, name: str) -> None:
        from elastic_operator.render import jobset_name, render

        raw = self.kube.get_job(namespace, name)
        if raw is None or raw.get("metadata", {}).get("deletionTimestamp"):
            return
        try:
            parsed = parse_job(raw)
            rendered = render(parsed.job)
        except (InvalidJobSpec, ValueError) as e:
            self._report_invalid_spec(raw, str(e))
            return
        job = parsed.job
        uid = job.metadata.uid or ""
        js_name = jobset_name(job)
        jobset_raw = self.kube.get_jobset(namespace, js_name)
        jobset = jobset_from_dict(jobset_raw) if jobset_raw else None

        plan = plan_reconcile(job, rendered, jobset, parsed.previous)
        suspend = next((a.suspend for a in plan.actions if isinstance(a, PatchJobSetSuspend)),
                       None)
        if plan.creates:
            for obj in plan.creates:
                try:
                    created = self.kube.create(obj)
                except ApiError as e:
                    if not e.refuses_object:
                        raise
                    # Admitted, yet what it renders to is refused (an int32 overflow, a
                    # quantity or name the CRD schema cannot check): say so in the status,
                    # once; raising would only repeat the refusal at every resync.
                    self._report_invalid_spec(raw, refusal_message(obj, e))
                    return
                # "found" is no news (a job whose JobSet is refused retries every resync).
                logger.log(logging.INFO if created else logging.DEBUG, "%s %s %s for %s/%s",
                           "created" if created else "found", obj["kind"],
                           obj["metadata"]["name"], namespace, name)
            self._children_ensured.add((namespace, name, uid))
            jobset_raw = self.kube.get_jobset(namespace, js_name)
            jobset = jobset_from_dict(jobset_raw) if jobset_raw else None
        elif jobset is not None and (namespace, name, uid) not in self._children_ensured \
                and plan.why_not is None:
            # First look at this job in this process: the trainer's RBAC may be missing.
            for obj in owned(job, rendered):
                if obj["kind"] != "JobSet":
                    self.kube.create(obj)
            self._children_ensured.add((namespace, name, uid))
        if plan.why_not:
            logger.debug("%s/%s: %s", namespace, name, plan.why_not)
        if suspend is not None and jobset is not None:
            self.kube.patch_jobset_suspend(namespace, jobset.name, suspend)
            logger.info("%s JobSet %s/%s", "suspended" if suspend
                        else "resumed", namespace, jobset.name)
            jobset_raw = self.kube.get_jobset(namespace, js_name)
            jobset = jobset_from_dict(jobset_raw) if jobset_raw else None

        pods = tuple(pod_from_dict(p) for p in self.kube.list_job_pods(namespace, name))
        node_names = {p.node_name for p in pods if p.node_name}
        nodes = {n: self.nodes[n] for n in node_names if n in self.nodes}
        missing = node_names - set(nodes)
        if missing:  # not seen on the node watch yet
            nodes.update((n.name, n) for n in map(node_from_dict, self.kube.get_nodes(missing)))
        checkpoint = self._maybe_scan(namespace, name, job)
        observed = Observed(jobset=jobset, pods=pods, nodes=nodes, checkpoint=checkpoint)

        now = self.config.clock()
        new_status, events = compute_status(job, observed, parsed.previous, now,
                                             report_problem=parsed.report_problem)
        patch = status_patch(parsed.previous, new_status)
        written_at = time.time()
        if patch is not None:
            self.kube.patch_job_status(namespace, name, patch)
            written_at = time.time()
        self.metrics.record_status(namespace, name, parsed.previous, new_status)
        self.metrics.record_events(namespace, events, written_at)
        for event in events:
            logger.info("%s/%s: %s: %s", namespace, name, event.reason, event.message)
            try:
                self.kube.post_event(raw, event, now)
            except ApiError as e:  # an Event is best effort; the status is the record
                logger.warning("could not post event %s on %s/%s: %s", event.reason,
                               namespace, name, e)

    def _maybe_scan(self, namespace: str, name: str,
                    job: ElasticTrainingJob) -> CheckpointStatus | None:
        """The newest finished scan (or None); starts the next one when due. Scans run
        off the reconcile path: listing a bucket must never delay slice detection."""
        key = (namespace, name)
        started: Future[CheckpointStatus | None] | None = None
        with self._scan_lock:
            running = self._scans.get(key)
            result = None
            if running is not None and running.done():
                del self._scans[key]
                try:
                    result = running.result()
                except Exception:  # the scanner promises not to raise; never let it hurt
                    logger.exception("checkpoint scan of %s/%s failed", namespace, name)
                running = None
            last = self._last_scan.get(key)
            due = last is None or (
                time.monotonic() - last >= self.config.checkpoint_scan_interval_s)
            if running is None and due:
                self._last_scan[key] = time.monotonic()
                future = self._scan_pool.submit(
                    scan_checkpoint, job.spec.checkpoint.directory, self.config.clock())
                self._scans[key] = future
                started = future
        # Outside the lock: a scan that has already finished (a bad URL fails at once)
        # runs the callback right here, and the callback takes the lock.
        if started is not None and self.on_scan_done is not None:
            started.add_done_callback(lambda f: self._scan_done(namespace, name, f))
        return result

    def _scan_done(self, namespace: str, name: str,
                   future: Future[CheckpointStatus | None]) -> None:
        """Publish a finished scan now (not at the next resync), unless it found what the
        previous one did: that reconcile would change nothing."""
        try:
            result = future.result()
        except Exception:  # reported by the reconcile that collects it
            result = None
        key = (namespace, name)
        with self._scan_lock:
            before = self._scan_results.get(key)
            self._scan_results[key] = result
        if not same_checkpoint_result(before, result) and self.on_scan_done is not None:
            self.on_scan_done(namespace, name)

    def _report_invalid_spec(self, raw: dict[str, Any], message: str) -> None:
        meta = raw.get("metadata", {})
        raw_status = raw.get("status")
        previous, _ = parse_status(raw_status if isinstance(raw_status, dict) else {})
        new = invalid_spec_status(previous, message, self.config.clock(),
                                  meta.get("generation"))
        patch = status_patch(previous, new)
        if patch is None:  # already reported: a resync must not repeat the warning
            logger.debug("%s/%s: invalid spec: %s", meta.get("namespace"), meta.get("name"),
                         message)
            return
        self.kube.patch_job_status(meta.get("namespace", ""), meta.get("name", ""), patch)
        logger.warning("%s/%s: invalid spec: %s", meta.get("namespace"), meta.get("name"),
                       message)


# The API server's reason in a condition message: enough to act on, bounded.
MAX_REFUSAL_MESSAGE = 1024


def refusal_message(obj: dict[str, Any], error: ApiError) -> str:
    """Why the job cannot run: the object the API server refused and its reason."""
    reason = error.message.strip().rstrip(".")
    if len(reason) > MAX_REFUSAL_MESSAGE:
        reason = reason[:MAX_REFUSAL_MESSAGE - 3] + "..."
    return (f"the API server refused the {obj.get('kind')} "
            f"{obj.get('metadata', {}).get('name')} rendered from this spec "
            f"(HTTP {error.status}): {reason}")


class Scheduler:
    """Serializes and coalesces reconciles per job on the operator's event loop."""

    def __init__(self, reconciler: Reconciler) -> None:
        self.reconciler = reconciler
        self._locks: dict[JobKey, asyncio.Lock] = {}
        self._waiting: set[JobKey] = set()

    async def trigger(self, namespace: str, name: str) -> None:
        key = (namespace, name)
        if key in self._waiting:
            return  # a reconcile that has not started yet will see this change too
        self._waiting.add(key)
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            self._waiting.discard(key)
            await asyncio.to_thread(self.reconciler.reconcile, namespace, name)

    def forget(self, namespace: str, name: str) -> None:
        self._locks.pop((namespace, name), None)
        self.reconciler.forget(namespace, name)


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


def build_registry(scheduler: Scheduler, scope: WatchScope,
                   resync_interval_s: float) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()
    # node name -> the jobs with pods on it (learned from pod events).
    jobs_on_node: dict[str, set[JobKey]] = {}
    node_ready: dict[str, bool] = {}
    background: list[asyncio.Task[None]] = []

    @kopf.on.login(registry=registry)
    def login(**kw: Any) -> Any:
        # A custom registry has none of kopf's default login handlers: in-cluster service
        # account, else KUBECONFIG, through the kubernetes client (as kube.py does).
        return kopf.login_via_client(**kw)

    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
    async def job_event(**kw: Any) -> None:
        event, name, namespace = kw["event"], kw["name"], kw["namespace"]
        if event.get("type") == "DELETED":
            scheduler.forget(namespace, name)
            return
        await scheduler.trigger(namespace, name)

    @kopf.on.event("jobset.x-k8s.io", "v1alpha2", "jobsets",
                   labels={JOB_NAME_LABEL: kopf.PRESENT}, registry=registry)
    async def jobset_event(**kw: Any) -> None:
        await scheduler.trigger(kw["namespace"], kw["labels"][JOB_NAME_LABEL])

    @kopf.on.event("", "v1", "pods", labels={JOB_NAME_LABEL: kopf.PRESENT}, registry=registry)
    async def pod_event(**kw: Any) -> None:
        event, body = kw["event"], kw["body"]
        key = (kw["namespace"], kw["labels"][JOB_NAME_LABEL])
        node = (body.get("spec") or {}).get("nodeName")
        if node:
            if event.get("type") == "DELETED":
                jobs_on_node.get(node, set()).discard(key)
            else:
                jobs_on_node.setdefault(node, set()).add(key)
        await scheduler.trigger(*key)

    @kopf.on.event("", "v1", "nodes", registry=registry)
    async def node_event(**kw: Any) -> None:
        event, body, name = kw["event"], kw["body"], kw["name"]
        if event.get("type") == "DELETED":
            scheduler.reconciler.nodes.pop(name, None)
            ready = False
        else:
            node = node_from_dict(dict(body))
            scheduler.reconciler.nodes[name] = node
            ready = node.ready
        before = node_ready.get(name)
        node_ready[name] = ready
        if before is None or before == ready:
            return  # heartbeats, or the initial listing (the resync covers that)
        await asyncio.gather(*(scheduler.trigger(ns, job)
                               for ns, job in sorted(jobs_on_node.get(name, set()))))

    async def resync() -> None:
        kube = scheduler.reconciler.kube
        while True:
            await asyncio.sleep(resync_interval_s)
            try:
                namespaces: list[str | None] = (
                    [None] if scope.clusterwide or scope.has_globs else list(scope.namespaces))
                jobs = []
                for ns in namespaces:
                    jobs += await asyncio.to_thread(kube.list_jobs, ns)
                keys = sorted({(j["metadata"]["namespace"], j["metadata"]["name"]) for j in jobs
                               if scope.matches(j["metadata"]["namespace"])})
                for key in keys:  # one at a time: a resync is a background sweep
                    await scheduler.trigger(*key)
            except Exception:
                logger.exception("resync failed; retrying in %.0f s", resync_interval_s)

    @kopf.on.startup(registry=registry)
    async def startup(**kw: Any) -> None:
        configure_settings(kw["settings"], scope)
        loop = asyncio.get_running_loop()

        def reconcile_soon(namespace: str, name: str) -> None:
            if not loop.is_closed():
                asyncio.run_coroutine_threadsafe(scheduler.trigger(namespace, name), loop)

        scheduler.reconciler.on_scan_done = reconcile_soon
        background.append(asyncio.create_task(resync()))

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**kw: Any) -> None:
        for task in background:
            task.cancel()

    return registry


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
