"""Ends the operator's quarantine of node pools that are healthy again.

A job's reconcile quarantines a pool (core/replacement.py); no job owns the release,
since the job that quarantined it may be gone. The warden sweeps the node index (no API
read) every few seconds and removes the label from pools whose every node has been Ready
for --quarantine-release-after seconds with no maintenance signal (core/pools.py), with
an Event on the pool's first node.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime

from elastic_api.conditions import Reason
from elastic_api.names import QUARANTINE_LABEL, QUARANTINED_AT_ANNOTATION
from elastic_operator.core.events import StatusEvent
from elastic_operator.core.pools import Release, pools_to_release
from elastic_operator.kube import ApiError, Kube
from elastic_operator.metrics import OperatorMetrics
from elastic_operator.node_index import NodeIndex

logger = logging.getLogger("elastic_operator")


class PoolWarden:
    def __init__(self, kube: Kube, nodes: NodeIndex, metrics: OperatorMetrics, *,
                 release_after_s: float = 600.0, repeated_failures_s: float = 3600.0,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.kube = kube
        self.nodes = nodes
        self.metrics = metrics
        self.release_after_s = release_after_s
        self.repeated_failures_s = repeated_failures_s
        self.clock = clock

    def sweep(self) -> list[Release]:
        """Release what is due; the releases done."""
        now = self.clock()
        done = []
        for release in pools_to_release(self.nodes.all_nodes(), now, self.release_after_s,
                                        self.repeated_failures_s):
            try:
                for node in release.nodes:
                    self.kube.label_node(node, {QUARANTINE_LABEL: None},
                                         {QUARANTINED_AT_ANNOTATION: None})
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
