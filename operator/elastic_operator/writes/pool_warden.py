"""Ends the operator's quarantine of node pools once its evidence has ended.

A job's reconcile quarantines a pool (core/replacement.py); no job owns the release,
since the job that quarantined it may be gone. The warden sweeps the node index (no API
read) every few seconds and removes the label from pools whose every node has been Ready
with healthy TPU chips for --quarantine-release-after seconds with no maintenance signal
(core/pools.py), and from pools quarantined on jobs' failures (HardwareFailure,
RepeatedFailures) as soon as a job their cause annotation names no longer exists: a
job's deletion takes its evidence with it. Whether a named job exists is one GET of it,
remembered for a while when it does. Each release has an Event on the pool's first node.
"""
from __future__ import annotations

import logging
import threading

from elastic_api.clock import SYSTEM_CLOCK, Clock
from elastic_api.conditions import Reason
from elastic_api.names import (
    QUARANTINE_CAUSE_ANNOTATION,
    QUARANTINE_LABEL,
    QUARANTINED_AT_ANNOTATION,
)
from elastic_operator.client.kube import ApiError, Kube
from elastic_operator.core.pools import Release, cited_jobs, pools_to_release
from elastic_operator.core.status_events import StatusEvent
from elastic_operator.metrics.metrics import OperatorMetrics
from elastic_operator.watch.node_index import NodeIndex

logger = logging.getLogger("elastic_operator")

# A job seen to exist is not asked about again for this long.
EXISTS_FOR_S = 30.0


class PoolWarden:
    def __init__(self, kube: Kube, nodes: NodeIndex, metrics: OperatorMetrics, *,
                 release_after_s: float = 600.0, repeated_failures_s: float = 3600.0,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.kube = kube
        self.nodes = nodes
        self.metrics = metrics
        self.release_after_s = release_after_s
        self.repeated_failures_s = repeated_failures_s
        self.clock = clock
        self._seen: dict[tuple[str, str], float] = {}  # job -> when it last existed
        self._lock = threading.Lock()  # the sweep's thread and the stores' (job_stores.py)

    def sweep(self) -> list[Release]:
        """Release what is due; the releases done."""
        now = self.clock.now()
        nodes = self.nodes.all_nodes()
        cited = cited_jobs(nodes)
        with self._lock:  # only what a quarantine still cites is worth remembering
            self._seen = {job: at for job, at in self._seen.items() if job in cited}
        gone = frozenset(job for job in cited if not self._exists(job))
        done = []
        for release in pools_to_release(nodes, now, self.release_after_s,
                                        self.repeated_failures_s, gone):
            try:
                for node in release.nodes:
                    self.kube.label_node(node, {QUARANTINE_LABEL: None},
                                         {QUARANTINED_AT_ANNOTATION: None,
                                          QUARANTINE_CAUSE_ANNOTATION: None})
            except ApiError as e:
                logger.warning("could not release node pool %s: %s", release.pool, e)
                continue
            logger.info(release.message)
            self.metrics.pool_releases.inc()
            done.append(release)
            node_ref = {"apiVersion": "v1", "kind": "Node",
                        "metadata": {"name": release.nodes[0], "namespace": "default"}}
            try:
                self.kube.post_event(node_ref, StatusEvent(
                    reason=Reason.POOL_RELEASED, message=release.message), now)
            except ApiError as e:
                logger.warning("could not post event %s: %s", Reason.POOL_RELEASED, e)
        return done

    def job_keys(self) -> list[tuple[str, str]]:
        """The jobs ((namespace, name)) it remembers as existing (job_stores.py)."""
        with self._lock:
            cited = [job for job, _uid in self._seen]
        return [(job.partition("/")[0], job.partition("/")[2]) for job in cited]

    def forget_job(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._seen = {job: at for job, at in self._seen.items()
                          if job[0] != "/".join(key)}

    def _exists(self, job: tuple[str, str]) -> bool:
        """Whether the job ("<namespace>/<name>", uid) exists; an error says yes (a
        quarantine is never released on a failed read)."""
        with self._lock:
            seen = self._seen.get(job)
        if seen is not None and self.clock.monotonic() - seen < EXISTS_FOR_S:
            return True
        namespace, _, name = job[0].partition("/")
        try:
            raw = self.kube.get_job(namespace, name)
        except ApiError as e:
            logger.warning("could not tell whether job %s exists: %s", job[0], e)
            return True
        uid = ((raw or {}).get("metadata") or {}).get("uid")
        exists = raw is not None and (not job[1] or uid == job[1])
        with self._lock:
            if exists:
                self._seen[job] = self.clock.monotonic()
            else:
                self._seen.pop(job, None)
        return exists
