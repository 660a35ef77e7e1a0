"""The kopf wiring: kopf runs the process and nothing else. It logs in, starts the
operator's parts (app.py) at startup and steps down at cleanup, and serves the liveness
probes (/healthz: the role, the caches, the work queue; it fails only if the election,
a cache or the work queue has stopped: a standby is healthy).

kopf watches no resource: jobs, Workloads, pods, JobSets and nodes are the informers'
(caches.py), and everything they report goes through the one work queue
(work_queue.py). So kopf needs no CRD scanning, no namespace listing (namespace globs are
matched by the informers) and no peering (the Lease elects the leader).
"""
from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import kopf

from elastic_operator.app import Operator


def build_registry(op: Operator) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    def login(**kw: Any) -> Any:
        # A custom registry has none of kopf's default login handlers: in-cluster service
        # account, else KUBECONFIG, through the kubernetes client. kopf itself only reads
        # the API's discovery with it.
        return kopf.login_via_client(**kw)

    @kopf.on.startup(registry=registry)
    async def startup(**kw: Any) -> None:
        configure_settings(kw["settings"])
        op.start()

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**kw: Any) -> None:
        op.gate.close()  # no reconcile starts from here on
        # Let the running reconciles finish, then release the Lease: a standby takes
        # over at its next look (graceful handover). In a thread of its own: it blocks.
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
        stopped = [i.resource for i in op.informers if not i.alive]
        if stopped:
            raise kopf.PermanentError(f"watch-fed caches stopped: {', '.join(stopped)}")
        now = time.monotonic()
        return {"synced": op.synced,
                "objects": {i.resource: len(i) for i in op.informers},
                # Seconds since each cache last heard anything (event, bookmark, list).
                "idle_seconds": {i.resource: round(now - i.last_event_at, 1)
                                 for i in op.informers if i.last_event_at is not None},
                "crd_schema": op.schema.verdict.state}

    @kopf.on.probe(id="queue", registry=registry)
    def queue(**kw: Any) -> dict[str, Any]:
        if not op.alive:
            raise kopf.PermanentError("the work queue or the resync has stopped")
        return {"waiting": op.work_queue.depth}


def configure_settings(settings: kopf.OperatorSettings) -> None:
    """kopf settings: standalone (the Lease elects the leader), no scanning of CRDs or
    namespaces (kopf watches nothing), no finalizers (it handles no object)."""
    settings.peering.standalone = True
    settings.scanning.disabled = True
    settings.networking.request_timeout = 60
