"""What Kueue must hear of a MultiKueue job's pods on the manager cluster: its Workload's
PodsReady condition, from the status the worker's copy sends back. Pure.

With waitForPodsReady (on by default from Kueue v0.19) Kueue evicts an admitted Workload
whose PodsReady is not True within its timeout (30 min), or not True again within
recoveryTimeout. On a worker Kueue's JobSet integration sets it; on the manager, where no
pod runs, nothing but this operator (Kueue's integration for the job there) can, and
without it MultiKueue would take every job back after 30 minutes.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any

from elastic_api.models import ElasticTrainingJobStatus
from elastic_operator.core.failure import is_terminal
from elastic_operator.core.text import iso
from elastic_operator.observed import ObservedWorkload

# Kueue's PodsReady condition of a Workload (kueue.x-k8s.io/v1beta2), and its reasons.
WORKLOAD_PODS_READY = "PodsReady"
PODS_READY = "PodsReady"
WAIT_FOR_START = "WaitForStart"
WAIT_FOR_RECOVERY = "WaitForRecovery"


def pods_ready_condition(workload: ObservedWorkload | None,
                         status: ElasticTrainingJobStatus,
                         now: datetime) -> dict[str, Any] | None:
    """The PodsReady condition the manager's Workload should carry, from the worker's
    status copied onto the job (every slice Ready: True; not yet: WaitForStart; no
    longer: WaitForRecovery), or None when it already does (or the job is not running on
    a worker yet)."""
    if workload is None or workload.cluster_name is None or is_terminal(status) \
            or status.slices_desired is None:
        return None
    previous = workload.condition(WORKLOAD_PODS_READY)
    ready = (status.slices_ready or 0) >= status.slices_desired > 0
    was_ready = previous is not None and previous.status == "True"
    reason = PODS_READY if ready else WAIT_FOR_RECOVERY if was_ready or (
        previous is not None and previous.reason == WAIT_FOR_RECOVERY) else WAIT_FOR_START
    state = "True" if ready else "False"
    if previous is not None and (previous.status, previous.reason) == (state, reason):
        return None
    return {"type": WORKLOAD_PODS_READY, "status": state, "reason": reason,
            "message": f"{status.slices_ready or 0} of {status.slices_desired} slices Ready "
                       f"in worker cluster {workload.cluster_name} (the job's status)",
            "lastTransitionTime": iso(now)}
