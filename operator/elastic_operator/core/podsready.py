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
from elastic_api.queueing import (
    EVICTED_BY_NODE_FAILURES,
    EVICTED_BY_PREEMPTION,
    PODS_READY_WAIT_FOR_RECOVERY,
    PODS_READY_WAIT_FOR_START,
    WORKLOAD_ADMITTED,
    WORKLOAD_EVICTED,
    WORKLOAD_PODS_READY,
    WORKLOAD_QUOTA_RESERVED,
    WORKLOAD_REQUEUED,
)
from elastic_operator.core.failure import is_terminal
from elastic_operator.core.wording import iso
from elastic_operator.model.objects import ObservedWorkload

# The reason of Kueue's PodsReady condition when True.
PODS_READY = "PodsReady"


def pods_ready_condition(workload: ObservedWorkload | None,
                         status: ElasticTrainingJobStatus,
                         now: datetime) -> dict[str, Any] | None:
    """The PodsReady condition the manager's Workload should carry, from the worker's
    status copied onto the job (every slice Ready: True; not yet: WaitForStart; no
    longer: WaitForRecovery), or None when it already does (or the job is not running on
    a worker yet)."""
    if workload is None or workload.cluster_name is None or is_terminal(status) \
            or status.slices_desired is None or workload.is_true(WORKLOAD_EVICTED):
        return None
    previous = workload.condition(WORKLOAD_PODS_READY)
    ready = (status.slices_ready or 0) >= status.slices_desired > 0
    was_ready = previous is not None and previous.status == "True"
    reason = PODS_READY if ready else PODS_READY_WAIT_FOR_RECOVERY if was_ready or (
        previous is not None and previous.reason == PODS_READY_WAIT_FOR_RECOVERY) \
        else PODS_READY_WAIT_FOR_START
    state = "True" if ready else "False"
    if previous is not None and (previous.status, previous.reason) == (state, reason):
        return None
    return {"type": WORKLOAD_PODS_READY, "status": state, "reason": reason,
            "message": f"{status.slices_ready or 0} of {status.slices_desired} slices Ready "
                       f"in worker cluster {workload.cluster_name} (the job's status)",
            "lastTransitionTime": iso(now)}


# The reasons an integration writes on Kueue's Workload conditions when it has stopped an
# evicted job (pkg/controller/jobframework: "the job is no longer active, clear the
# workload's admission").
QUOTA_PENDING = "Pending"
NO_RESERVATION = "NoReservation"
# The evictions after which Kueue requeues at once (the others: when the cause ends).
REQUEUED_AT_ONCE = (EVICTED_BY_PREEMPTION, EVICTED_BY_NODE_FAILURES)


def release_after_eviction(workload: ObservedWorkload | None,
                           now: datetime) -> list[dict[str, Any]] | None:
    """JSON patch operations (RFC 6902, each replacement guarded by a test of the
    condition's type) that release an evicted Workload's quota, or None when there is
    nothing to release. Kueue evicts (preemption, a deactivation for spec.suspend, its
    MultiKueue check reset when a worker is lost) and then waits for the job's
    integration to say the job has stopped before it frees the quota: on the manager no
    pod of the job runs, so it has stopped at once, and the operator (Kueue's integration
    for the job there) says so, as Kueue's own integrations do."""
    if workload is None or not workload.is_true(WORKLOAD_EVICTED) \
            or not workload.is_true(WORKLOAD_QUOTA_RESERVED):
        return None
    evicted = workload.condition(WORKLOAD_EVICTED)
    assert evicted is not None
    at = iso(now)
    wanted = {
        WORKLOAD_QUOTA_RESERVED: ("False", QUOTA_PENDING, evicted.message),
        WORKLOAD_ADMITTED: ("False", NO_RESERVATION, "The workload has no reservation"),
        WORKLOAD_REQUEUED: ("True" if evicted.reason in REQUEUED_AT_ONCE else "False",
                            evicted.reason, evicted.message),
    }
    ops: list[dict[str, Any]] = []
    for index, cond in enumerate(workload.conditions):
        if cond.type not in wanted:
            continue
        state, reason, message = wanted.pop(cond.type)
        since = at if cond.status != state else iso(cond.last_transition_time or now)
        ops += [{"op": "test", "path": f"/status/conditions/{index}/type", "value": cond.type},
                {"op": "replace", "path": f"/status/conditions/{index}",
                 "value": {"type": cond.type, "status": state, "reason": reason,
                           "message": message, "lastTransitionTime": since}}]
    for type_, (state, reason, message) in wanted.items():
        if type_ != WORKLOAD_ADMITTED:  # absent: nothing to unset
            ops.append({"op": "add", "path": "/status/conditions/-",
                        "value": {"type": type_, "status": state, "reason": reason,
                                  "message": message, "lastTransitionTime": at}})
    if workload.cluster_queue is not None:  # status.admission, the reserved quota
        ops.append({"op": "remove", "path": "/status/admission"})
    return ops
