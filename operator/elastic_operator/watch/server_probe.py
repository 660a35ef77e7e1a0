"""What the API server accepts, learnt at start and again every `interval_s` (a control
plane upgraded under the operator is seen within that): its version (GET /version), and
where the version cannot tell (1.34), a server-side dry run of a Job whose container
carries a restart rule. core/server_features.py decides; this holds the one answer for
the operator (every job shares the API server) and resyncs every job when it changes.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from elastic_operator.client.kube import ApiError, Kube
from elastic_operator.core.server_features import (
    DryRun,
    dry_run_outcome,
    judge,
    needs_dry_run,
)
from elastic_operator.model.server import NEWEST, ServerFeatures

logger = logging.getLogger("elastic_operator")

PROBE_INTERVAL_S = 600.0
PROBE_CONTAINER = "probe"


def probe_job() -> dict[str, Any]:
    """The smallest Job whose container carries a rule like main's (never stored)."""
    container = {"name": PROBE_CONTAINER, "image": "registry.k8s.io/pause:3.10",
                 "restartPolicy": "Never", "restartPolicyRules": [
                     {"action": "Restart", "exitCodes": {"operator": "NotIn", "values": [0]}}]}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"generateName": "etj-restart-rules-probe-"},
            "spec": {"template": {"spec": {"restartPolicy": "Never",
                                           "containers": [container]}}}}


class ServerProbe:
    """`namespace`: where the dry run is sent (one the operator may create Jobs in);
    `on_change`: called when the answer changes (the operator resyncs every job)."""

    def __init__(self, kube: Kube, namespace: str, on_change: Callable[[], None],
                 interval_s: float = PROBE_INTERVAL_S) -> None:
        self.kube, self.namespace, self.on_change = kube, namespace, on_change
        self.interval_s = interval_s
        self._features = NEWEST
        self._lock = threading.Lock()

    def features(self) -> ServerFeatures:
        with self._lock:
            return self._features

    def _dry_run(self) -> DryRun:
        try:
            stored = self.kube.dry_run_job(self.namespace, probe_job())
        except ApiError as e:
            if e.status == 422:  # Invalid: the server refuses the field
                return DryRun("refused", str(e.api_status.get("message") or e))
            return DryRun("failed", str(e))
        except OSError as e:
            return DryRun("failed", str(e))
        return dry_run_outcome(stored or {}, PROBE_CONTAINER)

    def refresh(self) -> ServerFeatures:
        """Ask the server once; log and tell `on_change` when the answer changed."""
        version = self.kube.server_version()
        features = judge(version, self._dry_run() if needs_dry_run(version) else None)
        with self._lock:
            changed, self._features = features != self._features, features
        if changed:
            logger.info("API server: %s; main's container restart rules %s", features.detail,
                        "rendered" if features.restart_rules else "not rendered (a crash of "
                        "main restarts the JobSet)")
            self.on_change()
        return features

    def run(self, stopping: threading.Event) -> None:
        """Refresh every interval until `stopping` (an error keeps the last answer)."""
        while not stopping.wait(self.interval_s):
            self.try_refresh()

    def try_refresh(self) -> None:
        try:
            self.refresh()
        except (ApiError, OSError) as e:
            logger.warning("reading the API server's version failed (%s); keeping: %s",
                           e, self.features().detail)
