"""Kueue's waitForPodsReady and its other evictions in the status (core/eviction.py,
core/admission.py, core/slices.py's admission epoch): EvictionPending and its deadline,
the Warning Event half-way, evictions counted once (also one Kueue readmitted between two
looks), pods of an earlier admission that are no slice failure, a recovery closed by the
trainer process that replaced the evicted one. Workload shapes as Kueue v0.19.2 writes
them (tests/integration/test_kueue_pods_ready.py, test_kueue_tas.py)."""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

import pytest

from elastic_api.conditions import Reason
from elastic_api.models import ElasticTrainingJobStatus, RecoveryRecord
from elastic_api.queueing import (
    ADMITTED,
    EVICTED_BY_NODE_FAILURES,
    EVICTED_BY_PODS_READY_TIMEOUT,
    EVICTION_PENDING,
    REASON_ADMITTED,
    REASON_EVICTED,
    REASON_NOT_ADMITTED,
    REASON_PODS_READY,
    REASON_WAITING_FOR_RECOVERY,
    REASON_WAITING_FOR_START,
    counts_as_eviction,
)
from elastic_operator.core.eviction import PodsReadyTimeouts, next_look_in
from elastic_operator.core.setter import get_condition
from elastic_operator.core.status import compute_status
from elastic_operator.core.status_events import StatusEvent
from elastic_operator.model.objects import ObservedJobSet, ObservedWorkload, workload_from_dict
from tests.builders import HOSTS, WorkerPod, at, healthy_pods, iso, observe, observed_jobset, report
from tests.kueue_builders import queued_job, workload

Status = ElasticTrainingJobStatus
TIMEOUTS = PodsReadyTimeouts(timeout_s=300, recovery_timeout_s=60)
ADMITTED_AT = at(30)


def jobset() -> ObservedJobSet:
    return replace(observed_jobset(queued_job()).build(), uid="article-js-uid")


def step(prev: Status | None, now: datetime, wl: ObservedWorkload, *,
         pods: list[Any] | None = None, training: Any = None
         ) -> tuple[Status, list[StatusEvent]]:
    if training is not None and prev is not None:
        prev = prev.model_copy(update={"training": training})
    pods = pods if pods is not None else healthy_pods(created=ADMITTED_AT)
    return compute_status(queued_job(), observe(pods, jobset(), workload=wl), prev, now,
                          pods_ready=TIMEOUTS)


def running() -> Status:
    status, _ = step(None, at(35), workload().admitted(ADMITTED_AT)
                     .pods_ready(True, at(33), recovering=False).build())
    return status


def cond(status: Status, type_: str) -> tuple[str, str, str]:
    c = get_condition(status, type_)
    assert c is not None, f"no {type_} condition"
    return c.status, c.reason, c.message


def slice_one_down(now: datetime) -> list[Any]:
    pods = healthy_pods(created=ADMITTED_AT)
    pods[HOSTS] = WorkerPod(1, 0).created(ADMITTED_AT).failed(now).build()
    return pods


# --- EvictionPending ---------------------------------------------------------------------


def test_every_pod_ready_is_no_eviction_pending() -> None:
    status = running()
    assert cond(status, EVICTION_PENDING)[:2] == ("False", REASON_PODS_READY)
    assert status.admission is not None and status.admission.pods_ready_deadline is None


def test_a_slice_down_starts_kueues_clock_and_the_condition_names_the_deadline() -> None:
    wl = workload().admitted(ADMITTED_AT).pods_ready(False, at(100))
    status, events = step(running(), at(101), wl.build(), pods=slice_one_down(at(100)))
    state, reason, message = cond(status, EVICTION_PENDING)
    assert (state, reason) == ("True", REASON_WAITING_FOR_RECOVERY)
    deadline = at(160)  # the PodsReady transition + recoveryTimeout
    assert status.admission is not None and status.admission.pods_ready_deadline == deadline
    assert f"Kueue evicts the whole job at {iso(deadline)}, in 59 s" in message
    assert "recoveryTimeout 60 s (--kueue-recovery-timeout-seconds)" in message
    assert "slice 1 (Down: PodFailed)" in message
    assert "resumes from its newest committed checkpoint" in message
    assert [e for e in events if e.reason == EVICTION_PENDING] == []  # not half-way yet


def test_half_way_to_the_deadline_one_warning_event() -> None:
    wl = workload().admitted(ADMITTED_AT).pods_ready(False, at(100)).build()
    first, _ = step(running(), at(101), wl, pods=slice_one_down(at(100)))
    assert next_look_in(first.admission, TIMEOUTS, at(101)) == pytest.approx(29.0)
    status, events = step(first, at(131), wl, pods=slice_one_down(at(100)))
    (warning,) = [e for e in events if e.reason == EVICTION_PENDING]
    assert warning.type == "Warning"
    assert warning.message.startswith("slice 1 (Down: PodFailed) not Ready for 31 s: ")
    assert f"evicts the whole job at {iso(at(160))} (in 29 s)" in warning.message
    assert status.admission is not None and status.admission.eviction_warned == at(160)
    assert next_look_in(status.admission, TIMEOUTS, at(131)) is None
    again, events = step(status, at(140), wl, pods=slice_one_down(at(100)))
    assert [e for e in events if e.reason == EVICTION_PENDING] == []
    # Recovered: the clock stops; a later one warns again.
    back = workload().admitted(ADMITTED_AT).pods_ready(True, at(150)).build()
    ready, _ = step(again, at(151), back)
    assert cond(ready, EVICTION_PENDING)[:2] == ("False", REASON_PODS_READY)
    assert ready.admission is not None and ready.admission.pods_ready_deadline is None


def test_not_all_ready_since_admission_is_kueues_start_timeout() -> None:
    wl = workload().admitted(ADMITTED_AT).pods_ready(False, at(30), recovering=False)
    pods = [WorkerPod(i, h).created(ADMITTED_AT).pending().build()
            for i in range(3) for h in range(HOSTS)]
    status, _ = step(None, at(40), wl.build(), pods=pods)
    state, reason, message = cond(status, EVICTION_PENDING)
    assert (state, reason) == ("True", REASON_WAITING_FOR_START)
    assert status.admission is not None and status.admission.pods_ready_deadline == at(330)
    assert "timeout 5 min (--kueue-pods-ready-timeout-seconds)" in message


def test_held_by_kueue_no_clock_and_without_waitforpodsready_no_condition() -> None:
    wl = workload().admitted(ADMITTED_AT).preempted(at(100)).pods_ready(False, at(100),
                                                                        recovering=False)
    status, _ = step(running(), at(101), wl.build(), pods=[])
    assert cond(status, EVICTION_PENDING)[:2] == ("False", REASON_NOT_ADMITTED)
    plain, _ = step(None, at(35), workload().admitted(ADMITTED_AT).build())
    assert get_condition(plain, EVICTION_PENDING) is None


def test_the_wake_covers_either_clock() -> None:
    """The status keeps the deadline, not which clock runs: the earlier half-way time
    first, then the other, then none."""
    wl = workload().admitted(ADMITTED_AT).pods_ready(False, at(100)).build()
    status, _ = step(running(), at(101), wl, pods=slice_one_down(at(100)))
    assert next_look_in(status.admission, TIMEOUTS, at(101)) == pytest.approx(29.0)
    # After that time (nothing due when the start clock's half-way comes): the other.
    long = PodsReadyTimeouts(timeout_s=60, recovery_timeout_s=600)
    assert next_look_in(status.admission, long, at(101)) == pytest.approx(29.0)
    assert next_look_in(status.admission, long, at(131)) == 0.0


# --- Kueue's other evictions -------------------------------------------------------------


@pytest.mark.parametrize(("reason", "counted"), [
    ("PodsReadyTimeout", True), ("NodeFailures", True), ("ClusterQueueStopped", True),
    ("Preempted", False), ("Deactivated", False), ("DeactivatedDueToRequeuingLimitExceeded",
                                                   False), ("", False)])
def test_which_evictions_count(reason: str, counted: bool) -> None:
    assert counts_as_eviction(reason) is counted


def test_a_pods_ready_timeout_is_an_eviction_not_a_slice_failure() -> None:
    down, _ = step(running(), at(101), workload().admitted(ADMITTED_AT)
                   .pods_ready(False, at(100)).build(), pods=slice_one_down(at(100)))
    assert down.counters.slice_failures == 1
    wl = workload().admitted(ADMITTED_AT).evicted_by_kueue(
        at(160), EVICTED_BY_PODS_READY_TIMEOUT, "Exceeded the PodsReady timeout ns/wl",
        requeue_at=at(220))
    gone = [WorkerPod(i, h).created(ADMITTED_AT).deleting(at(161), 0).build()
            for i in range(3) for h in range(HOSTS)]
    status, events = step(down, at(162), wl.build(), pods=gone)
    state, reason, message = cond(status, ADMITTED)
    assert (state, reason) == ("False", REASON_EVICTED)
    assert "PodsReadyTimeout: Exceeded the PodsReady timeout ns/wl; waitForPodsReady" in message
    assert f"not readmitted before {iso(at(220))}" in message
    assert (status.counters.evictions, status.counters.slice_failures,
            status.counters.preemptions) == (1, 1, 0)
    assert status.admission is not None
    assert status.admission.last_eviction_reason == EVICTED_BY_PODS_READY_TIMEOUT
    assert status.admission.evicted_at == at(160) and status.admission.requeue_at == at(220)
    assert [s.replacement for s in status.slices] == [None, None, None]
    assert {s.state for s in status.slices} == {"Pending"}
    assert [e.reason for e in events if e.type == "Warning"] == [REASON_EVICTED]
    again, events = step(status, at(163), wl.build(), pods=[])
    assert again.counters.evictions == 1 and events == []


def test_a_node_failures_eviction_readmitted_between_two_looks_is_counted_once() -> None:
    """Kueue's Topology-Aware Scheduling evicts and readmits within a second: the operator
    never sees the hold. The old pods going and the new ones starting are no failure."""
    wl = (workload().admitted(ADMITTED_AT)
          .evicted_by_kueue(at(100), EVICTED_BY_NODE_FAILURES,
                            "Workload was evicted as there was no replacement for unhealthy "
                            "node(s): tpu-1-0")
          .admitted(at(101)))
    old = [WorkerPod(i, h).created(ADMITTED_AT).deleting(at(100), 0).build()
           for i in range(3) for h in range(HOSTS)]
    new = [WorkerPod(i, h).recreated(at(101)).pending().build()
           for i in range(3) for h in range(HOSTS)]
    status, events = step(running(), at(102), wl.build(), pods=old + new)
    assert cond(status, ADMITTED)[:2] == ("True", REASON_ADMITTED)
    assert (status.counters.evictions, status.counters.slice_failures) == (1, 0)
    assert status.admission is not None
    assert status.admission.last_eviction_reason == EVICTED_BY_NODE_FAILURES
    assert status.admission.admitted_at == at(101)
    assert {s.state for s in status.slices} == {"Pending"}
    (evicted,) = [e for e in events if e.reason == REASON_EVICTED]
    assert "NodeFailures" in evicted.message and "between two looks" in evicted.message
    ready, events = step(status, at(110), wl.build(),
                         pods=[WorkerPod(i, h).recreated(at(101)).build()
                               for i in range(3) for h in range(HOSTS)])
    assert {s.state for s in ready.slices} == {"Ready"}
    assert (ready.counters.evictions, ready.counters.slice_failures) == (1, 0)
    assert not [e for e in events if e.reason in (REASON_EVICTED, Reason.SLICE_DOWN)]


def test_a_missed_pods_ready_timeout_is_dated_by_kueues_pods_ready_condition() -> None:
    wl = (workload().admitted(ADMITTED_AT)
          .evicted_by_kueue(at(100), EVICTED_BY_PODS_READY_TIMEOUT, "Exceeded")
          .admitted(at(111)))
    status, _ = step(running(), at(112), wl.build(), pods=[])
    assert status.admission is not None
    assert status.admission.evicted_at == at(100)  # not the readmission's at(111)
    assert status.admission.last_eviction_reason == EVICTED_BY_PODS_READY_TIMEOUT


def test_a_slice_state_and_a_replacement_from_before_the_admission_start_over() -> None:
    down, _ = step(running(), at(101), workload().admitted(ADMITTED_AT).build(),
                   pods=slice_one_down(at(100)))
    assert down.slices[1].replacement is not None and down.slices[1].state == "Down"
    wl = workload().admitted(ADMITTED_AT).evicted_by_kueue(
        at(120), "NodeFailures", "no replacement").admitted(at(121))
    new = [WorkerPod(i, h).recreated(at(121)).build() for i in range(3) for h in range(HOSTS)]
    status, _ = step(down, at(130), wl.build(), pods=new)
    assert {s.state for s in status.slices} == {"Ready"}
    assert [s.replacement for s in status.slices] == [None, None, None]
    assert [s.last_replacement for s in status.slices] == [None, None, None]
    assert [s.restarts for s in status.slices] == [0, 1, 0]  # the real failure, once


# --- the trainer that replaced the evicted one -------------------------------------------


def test_a_recovery_of_an_evicted_trainer_closes_when_the_next_process_trains() -> None:
    prev = running().model_copy(update={"last_recovery": RecoveryRecord(
        detected_at=at(100), slices=[1], elastic_event_id=2, step_at_detection=1405)})
    later = report(observedAt=iso(at(150)), state="Training", step=1300, processId=8,
                   hostName="head", processStartedAt=iso(at(140)), elasticEventsTotal=2)
    status, events = step(prev, at(151), workload().admitted(ADMITTED_AT).build(),
                          training=later)
    record = status.last_recovery
    assert record is not None and record.resumed_at == at(150)
    assert record.downtime_seconds == 50.0
    assert [e.reason for e in events if e.reason == Reason.RECOVERED] == [Reason.RECOVERED]
    # The same report from the process that had the event: still waiting for it.
    same = later.model_copy(update={"process_started_at": at(10)})
    status, _ = step(prev, at(151), workload().admitted(ADMITTED_AT).build(), training=same)
    assert status.last_recovery is not None and status.last_recovery.resumed_at is None


# --- the Workload as read ----------------------------------------------------------------


def test_a_workloads_eviction_counts_and_backoff_are_read() -> None:
    obj = workload().admitted(ADMITTED_AT).obj()
    obj["status"]["schedulingStats"] = {"evictions": [
        {"reason": "Preempted", "underlyingCause": "", "count": 2},
        {"reason": "PodsReadyTimeout", "underlyingCause": "WaitForRecovery", "count": 1},
        {"reason": "NodeFailures", "underlyingCause": "", "count": 3},
        {"reason": "Deactivated", "underlyingCause": "", "count": 1}]}
    obj["status"]["requeueState"] = {"count": 1, "requeueAt": iso(at(99))}
    wl = workload_from_dict(obj)
    assert (wl.preemptions, wl.evictions) == (2, 4)
    assert wl.eviction_reasons == ("PodsReadyTimeout", "NodeFailures")
    assert wl.requeue_at == at(99)
    assert wl.last_counted_eviction is None  # two kinds, and no Requeued naming one
    obj["status"]["conditions"].append({"type": "Requeued", "status": "True",
                                        "reason": "NodeFailures", "message": "",
                                        "lastTransitionTime": iso(at(98))})
    assert workload_from_dict(obj).last_counted_eviction == "NodeFailures"


def test_no_workload_seen_leaves_no_deadline_to_wake_for() -> None:
    wl = workload().admitted(ADMITTED_AT).pods_ready(False, at(100)).build()
    ticking, _ = step(running(), at(101), wl, pods=slice_one_down(at(100)))
    assert ticking.admission is not None and ticking.admission.pods_ready_deadline is not None
    status, _ = compute_status(queued_job(), observe(slice_one_down(at(100)), jobset()),
                               ticking, at(140), pods_ready=TIMEOUTS)
    assert status.admission is not None and status.admission.pods_ready_deadline is None
    assert next_look_in(status.admission, TIMEOUTS, at(140)) is None
