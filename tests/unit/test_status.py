"""The pure status core: slice health, conditions, recovery, counters, plans.

(The Ready/phase cascade row by row: test_status_ready.py.)"""
from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elastic_api.conditions import ConditionType as C
from elastic_api.conditions import Phase, Reason
from elastic_api.models import (
    CheckpointStatus,
    Counters,
    ElasticTrainingJob,
    ElasticTrainingJobStatus,
    RecoveryRecord,
    TrainingReport,
)
from elastic_api.names import APPLIED_SPEC_ANNOTATION
from elastic_operator.core.ownership import applied_spec
from elastic_operator.core.parsing import parse_job, parse_status, parse_training_report
from elastic_operator.core.patch import status_patch
from elastic_operator.core.plan import PatchJobSetSuspend, plan_reconcile
from elastic_operator.core.setter import get_condition
from elastic_operator.core.status import compute_status, invalid_spec_status
from elastic_operator.model.objects import Observed, ObservedJobSet
from tests.builders import (
    HOSTS,
    T0,
    WorkerPod,
    article_job,
    etj,
    head_pod,
    healthy_pods,
    nodes_for,
    observe,
    observed_jobset,
)
from tests.builders import at as s
from tests.support.merge_patch import apply_merge_patch


def cond(status: ElasticTrainingJobStatus, type_: str) -> tuple[str, str, str]:
    c = get_condition(status, type_)
    assert c is not None, f"no {type_} condition"
    return c.status, c.reason, c.message


def with_report(
    status: ElasticTrainingJobStatus, report: dict[str, Any],
) -> ElasticTrainingJobStatus:
    return status.model_copy(update={"training": TrainingReport.model_validate(report)})


def running(job: ElasticTrainingJob | None = None) -> ElasticTrainingJobStatus:
    job = job or article_job()
    n = job.spec.tpu.num_slices
    st1, _ = compute_status(job, observe(healthy_pods(n), nodes=nodes_for(n)), None, T0)
    return st1


def failed_pod(slice_index: int, host: int, when: datetime) -> WorkerPod:
    return WorkerPod(slice_index, host).failed(when)


def jobset(job: ElasticTrainingJob | None = None) -> ObservedJobSet:
    return observed_jobset(job).build()


# --- basics -----------------------------------------------------------------------------------


def test_no_jobset_yet_is_pending() -> None:
    status, events = compute_status(article_job(), Observed(jobset=None), None, T0)
    assert status.phase == Phase.PENDING
    assert cond(status, C.READY)[:2] == ("False", Reason.JOBSET_NOT_CREATED)
    assert [sl.state for sl in status.slices] == ["Pending"] * 3
    assert status.slices_desired == 3 and status.slices_ready == 0
    assert status.observed_generation == 1
    assert events == []


def test_all_hosts_ready_is_running() -> None:
    status = running()
    assert status.phase == Phase.RUNNING
    assert cond(status, C.READY)[:2] == ("True", Reason.ALL_SLICES_READY)
    assert cond(status, C.SLICE_DOWN)[0] == "False"
    assert cond(status, C.RECOVERING)[:2] == ("False", Reason.NO_FAILURE)
    assert status.slices_ready == 3
    assert all(sl.ready_hosts == HOSTS and sl.hosts == HOSTS for sl in status.slices)


def test_partially_started_slices_are_pending_not_down() -> None:
    pods = healthy_pods()
    pods[5] = WorkerPod(1, 1).pending().build()
    status, events = compute_status(article_job(), observe(pods), None, T0)
    assert status.slices[1].state == "Pending"
    assert status.counters.slice_failures == 0
    assert events == []
    assert status.phase == Phase.PENDING
    assert cond(status, C.READY)[:2] == ("False", Reason.SLICES_NOT_READY)


# --- the article's scenario -------------------------------------------------------------------


def test_failed_worker_pod_marks_its_slice_down_at_once() -> None:
    job = article_job()
    prev = running(job)
    pods = healthy_pods()
    pods[2 * HOSTS + 1] = failed_pod(2, 1, s(10)).build()
    status, events = compute_status(job, observe(pods), prev, s(11))
    assert status.phase == Phase.SLICE_DOWN
    sd = cond(status, C.SLICE_DOWN)
    assert sd[0] == "True" and sd[1] == "PodFailed"
    assert "slice 2" in sd[2] and "failed" in sd[2] and "exit code 1" in sd[2]
    assert [sl.state for sl in status.slices] == ["Ready", "Ready", "Down"]
    assert [sl.restarts for sl in status.slices] == [0, 0, 1]
    assert status.counters.slice_failures == 1
    assert cond(status, C.RECOVERING)[:2] == ("True", Reason.SLICE_DOWN)
    assert status.last_recovery is not None
    assert status.last_recovery.detected_at == s(10)
    assert status.last_recovery.slices == [2]
    slice_down = [e for e in events if e.reason == Reason.SLICE_DOWN]
    assert len(slice_down) == 1 and slice_down[0].slice_index == 2
    assert slice_down[0].failed_at == s(10) and slice_down[0].type == "Warning"


def test_full_recovery_cycle_with_trainer_report() -> None:
    job = article_job()
    st0 = with_report(running(job), {"observedAt": s(5).isoformat(), "state": "Training",
                                     "step": 188, "activeSlices": 3})
    # 1. a worker of slice 2 fails
    pods = healthy_pods()
    pods[2 * HOSTS + 1] = failed_pod(2, 1, s(10)).build()
    st1, _ev1 = compute_status(job, observe(pods), st0, s(11))
    assert st1.last_recovery is not None and st1.last_recovery.step_at_detection == 188
    # 2. the Job controller creates a replacement that is not ready yet
    pods.append(WorkerPod(2, 1).replacement(s(12)).pending().build())
    st2, ev2 = compute_status(job, observe(pods), st1, s(13))
    assert st2.slices[2].state == "Restarting"
    assert cond(st2, C.SLICE_DOWN)[0] == "False"
    assert cond(st2, C.RECOVERING)[0] == "True"
    assert st2.phase == Phase.RECOVERING
    assert ev2 == []
    # 3. the replacement becomes ready: the slice is Ready again, still recovering
    pods[-1] = WorkerPod(2, 1).replacement(s(12)).build()
    st3, ev3 = compute_status(job, observe(pods), st2, s(60))
    assert st3.slices[2].state == "Ready" and st3.slices[2].restarts == 1
    assert [e.reason for e in ev3] == [Reason.SLICE_RESTORED]
    assert cond(st3, C.RECOVERING)[0] == "True"
    assert cond(st3, C.READY)[:2] == ("False", Reason.RECOVERING)
    # 4. the trainer reports its elastic event as resumed
    st3 = with_report(st3, {
        "observedAt": s(121).isoformat(), "state": "Training", "step": 101, "attempt": 1,
        "activeSlices": 3, "elasticEventsTotal": 1,
        "elasticEvent": {"id": 1, "phase": "Resumed", "detectedAt": s(23).isoformat(),
                         "failedStep": 188, "slicesDown": [2], "restoredFromStep": 100,
                         "restoreSource": "checkpoint", "resumedAt": s(120).isoformat(),
                         "resumedStep": 101},
    })
    st4, ev4 = compute_status(job, observe(pods), st3, s(122))
    rec = cond(st4, C.RECOVERING)
    assert rec[:2] == ("False", Reason.RECOVERED)
    assert "110.0 s" in rec[2] and "88 steps lost" in rec[2]
    lr = st4.last_recovery
    assert lr is not None
    assert lr.detected_at == s(10)  # the pod failure, earlier than the trainer's detection
    assert lr.resumed_at == s(120) and lr.downtime_seconds == 110.0
    assert lr.steps_lost == 88 and lr.restored_from_step == 100
    assert lr.restore_source == "checkpoint" and lr.elastic_event_id == 1
    assert st4.counters.elastic_events == 1 and st4.counters.slice_failures == 1
    assert st4.phase == Phase.RUNNING
    recovered = [e for e in ev4 if e.reason == Reason.RECOVERED]
    assert len(recovered) == 1
    assert recovered[0].downtime_seconds == 110.0 and recovered[0].steps_lost == 88
    # 5. nothing changes any more: same status, no events, no patch
    st5, ev5 = compute_status(job, observe(pods), st4, s(200))
    assert ev5 == []
    assert status_patch(st4, st5) is None


def test_trainer_detection_earlier_than_pods_sets_detected_at() -> None:
    job = article_job()
    prev = with_report(running(job), {
        "observedAt": s(9).isoformat(), "state": "Recovering", "step": 50,
        "elasticEvent": {"id": 1, "phase": "Detected", "detectedAt": s(8).isoformat(),
                         "failedStep": 50},
    })
    pods = healthy_pods()
    pods[0] = failed_pod(0, 0, s(10)).build()
    status, _ = compute_status(job, observe(pods), prev, s(11))
    assert status.last_recovery is not None
    assert status.last_recovery.detected_at == s(8)
    assert status.last_recovery.elastic_event_id == 1
    assert "trainer phase Detected" in cond(status, C.RECOVERING)[2]


def test_recovery_by_step_progress_without_elastic_event() -> None:
    job = article_job()
    prev = with_report(running(job), {"observedAt": s(5).isoformat(), "state": "Training",
                                      "step": 40})
    pods = healthy_pods()
    pods[0] = failed_pod(0, 0, s(10)).build()
    st1, _ = compute_status(job, observe(pods), prev, s(11))
    # A report at the same step after detection is not progress.
    st1 = with_report(st1, {"observedAt": s(12).isoformat(), "state": "Training", "step": 40})
    st2, _ev2 = compute_status(job, observe(pods), st1, s(13))
    assert cond(st2, C.RECOVERING)[0] == "True"
    # A later step while the slice is still down: the trainer has not noticed yet.
    early = with_report(st2, {"observedAt": s(14).isoformat(), "state": "Training", "step": 41})
    early, _ = compute_status(job, observe(pods), early, s(15))
    assert cond(early, C.RECOVERING)[0] == "True"
    # The slice is back and the trainer is past the failure: resumed.
    pods[0] = WorkerPod(0, 0).replacement(s(60)).build()
    st2 = with_report(st2, {"observedAt": s(70).isoformat(), "state": "Training", "step": 41})
    st3, ev3 = compute_status(job, observe(pods), st2, s(71))
    assert cond(st3, C.RECOVERING)[:2] == ("False", Reason.RECOVERED)
    assert st3.last_recovery is not None and st3.last_recovery.downtime_seconds == 60.0
    assert [e.reason for e in ev3] == [Reason.SLICE_RESTORED, Reason.RECOVERED]


def test_stale_resumed_event_does_not_end_a_new_recovery() -> None:
    job = article_job()
    old_event = {"id": 1, "phase": "Resumed", "detectedAt": s(-100).isoformat(),
                 "failedStep": 10, "restoredFromStep": 5, "resumedAt": s(-50).isoformat()}
    prev = running(job).model_copy(update={
        "counters": Counters(elastic_events=1),
        "last_recovery": RecoveryRecord(detected_at=s(-100), resumed_at=s(-50),
                                        elastic_event_id=1, downtime_seconds=50),
    })
    prev = with_report(prev, {"observedAt": s(5).isoformat(), "state": "Training",
                              "step": 60, "elasticEventsTotal": 1, "elasticEvent": old_event})
    pods = healthy_pods()
    pods[4] = failed_pod(1, 0, s(10)).build()
    status, events = compute_status(job, observe(pods), prev, s(11))
    assert cond(status, C.RECOVERING)[0] == "True"
    assert status.last_recovery is not None and status.last_recovery.resumed_at is None
    assert Reason.RECOVERED not in [e.reason for e in events]


def test_late_report_of_an_older_event_does_not_close_a_new_recovery() -> None:
    job = article_job()
    pods = healthy_pods()
    pods[0] = failed_pod(0, 0, s(100)).build()
    st1, _ = compute_status(job, observe(pods), running(job), s(101))
    old = {"id": 1, "phase": "Resumed", "detectedAt": s(50).isoformat(), "failedStep": 9,
           "restoredFromStep": 5, "resumedAt": s(60).isoformat()}
    st1 = with_report(st1, {"observedAt": s(61).isoformat(), "state": "Training", "step": 12,
                            "elasticEventsTotal": 1, "elasticEvent": old})
    st2, ev2 = compute_status(job, observe(pods), st1, s(102))
    assert cond(st2, C.RECOVERING)[0] == "True"
    assert st2.last_recovery is not None and st2.last_recovery.elastic_event_id is None
    assert st2.counters.elastic_events == 1 and Reason.RECOVERED not in [e.reason for e in ev2]


def test_trainer_only_elastic_event_starts_and_ends_recovery() -> None:
    job = article_job()
    event = {"id": 1, "phase": "WaitingForSlices", "detectedAt": s(10).isoformat(),
             "failedStep": 30, "slicesDown": [1]}
    prev = with_report(running(job), {"observedAt": s(11).isoformat(), "state": "Recovering",
                                      "step": 30, "elasticEvent": event})
    st1, _ = compute_status(job, observe(healthy_pods()), prev, s(12))
    assert cond(st1, C.RECOVERING)[:2] == ("True", Reason.ELASTIC_EVENT)
    assert st1.counters.elastic_events == 1
    assert st1.phase == Phase.RECOVERING
    event2 = dict(event, phase="Resumed", restoredFromStep=25, restoreSource="snapshot",
                  resumedAt=s(30).isoformat())
    st1 = with_report(st1, {"observedAt": s(31).isoformat(), "state": "Training",
                            "step": 26, "elasticEvent": event2})
    st2, _ev2 = compute_status(job, observe(healthy_pods()), st1, s(32))
    assert cond(st2, C.RECOVERING)[:2] == ("False", Reason.RECOVERED)
    assert st2.last_recovery is not None
    assert st2.last_recovery.steps_lost == 5 and st2.last_recovery.restore_source == "snapshot"
    assert st2.last_recovery.slices == [1]


# --- other failure kinds ----------------------------------------------------------------------


def test_deleted_pod_is_down_from_its_delete_request() -> None:
    job = article_job()
    pods = healthy_pods()
    pods[HOSTS] = WorkerPod(1, 0).deleting(s(40), 30).build()
    status, events = compute_status(job, observe(pods), running(job), s(11))
    assert cond(status, C.SLICE_DOWN)[:2] == ("True", Reason.POD_DELETED)
    assert "slice 1" in cond(status, C.SLICE_DOWN)[2]
    assert events[0].failed_at == s(10)


def test_evicted_pod() -> None:
    job = article_job()
    pods = healthy_pods()
    pods[0] = WorkerPod(0, 0).evicted("node pressure").build()
    status, _ = compute_status(job, observe(pods), running(job), s(11))
    assert cond(status, C.SLICE_DOWN)[:2] == ("True", Reason.POD_EVICTED)


def test_node_not_ready() -> None:
    job = article_job()
    status, events = compute_status(
        job, observe(nodes=nodes_for(not_ready={"tpu-1-3": s(20)})), running(job), s(21))
    sd = cond(status, C.SLICE_DOWN)
    assert sd[:2] == ("True", Reason.NODE_NOT_READY) and "tpu-1-3" in sd[2] and "slice 1" in sd[2]
    assert events[0].failed_at == s(20)


def test_node_transition_before_pod_ready_is_clamped() -> None:
    job = article_job()
    # kwok reports the node's creation time as the NotReady transition.
    _status, events = compute_status(
        job, observe(nodes=nodes_for(not_ready={"tpu-0-0": s(-3600)})), running(job), s(21))
    assert events[0].failed_at == s(2)  # the pod's Ready transition


def test_siblings_deleted_after_a_host_failed_are_not_a_second_cause() -> None:
    job = article_job()
    pods = healthy_pods()
    pods[2 * HOSTS] = failed_pod(2, 0, s(10)).build()
    pods[2 * HOSTS + 1] = WorkerPod(2, 1).deleting(s(11), 30).build()
    status, _ = compute_status(job, observe(pods), running(job), s(12))
    sd = cond(status, C.SLICE_DOWN)
    assert sd[:2] == ("True", Reason.POD_FAILED)
    assert "host 0" in sd[2] and "host 1" in sd[2] and "is terminating" in sd[2]


def test_a_deleted_pod_alone_is_the_cause() -> None:
    job = article_job()
    pods = healthy_pods()
    pods[HOSTS + 2] = WorkerPod(1, 2).deleting(s(11), 30).build()
    status, _ = compute_status(job, observe(pods), running(job), s(12))
    assert cond(status, C.SLICE_DOWN)[:2] == ("True", Reason.POD_DELETED)


def test_two_slices_down_at_once() -> None:
    job = article_job()
    pods = healthy_pods()
    pods[0] = failed_pod(0, 0, s(10)).build()
    pods[2 * HOSTS + 3] = WorkerPod(2, 3).deleting(s(41), 30).build()
    status, events = compute_status(job, observe(pods), running(job), s(12))
    sd = cond(status, C.SLICE_DOWN)
    assert sd[:2] == ("True", Reason.MULTIPLE_CAUSES)
    assert "slice 0" in sd[2] and "slice 2" in sd[2]
    assert status.counters.slice_failures == 2
    assert status.last_recovery is not None and status.last_recovery.slices == [0, 2]
    assert status.last_recovery.detected_at == s(10)
    assert sorted(e.slice_index for e in events if e.reason == Reason.SLICE_DOWN) == [0, 2]
    assert "slices 0, 2 down" in cond(status, C.READY)[2]


def test_ready_slice_that_lost_a_host_unseen_is_down() -> None:
    job = article_job()
    pods = [p for p in healthy_pods() if not (p.slice_index == 1 and p.host_index == 2)]
    pods.append(WorkerPod(1, 2).replacement(s(5)).pending().build())
    status, events = compute_status(job, observe(pods), running(job), s(6))
    assert status.slices[1].state == "Down" and status.slices[1].reason == Reason.HOST_LOST
    assert "host 2" in (status.slices[1].message or "") and "replacement" in (
        status.slices[1].message or "")
    assert status.counters.slice_failures == 1
    assert events[0].failed_at == s(5)  # at the latest when the replacement was created


def test_host_replaced_and_ready_again_between_two_looks_is_counted() -> None:
    job = article_job()
    pods = [p for p in healthy_pods() if not (p.slice_index == 2 and p.host_index == 0)]
    pods.append(WorkerPod(2, 0).replacement(s(5)).build())  # replaced, and Ready already
    status, events = compute_status(job, observe(pods), running(job), s(8))
    assert status.slices[2].state == "Down" and status.slices[2].reason == Reason.HOST_LOST
    assert "was replaced" in (status.slices[2].message or "")
    assert status.counters.slice_failures == 1
    assert events[0].failed_at == s(5)
    # The next look sees the slice Ready again and does not count it twice.
    again, _ = compute_status(job, observe(pods), status, s(9))
    assert again.slices[2].state == "Ready" and again.counters.slice_failures == 1
    later, _ = compute_status(job, observe(pods), again, s(30))
    assert later.slices[2].state == "Ready" and later.counters.slice_failures == 1


def test_ready_slice_with_a_host_turning_unready_is_down() -> None:
    job = article_job()
    pods = healthy_pods()
    pods[HOSTS + 3] = WorkerPod(1, 3).named("w-1-3").not_ready(since=s(7)).build()
    status, events = compute_status(job, observe(pods), running(job), s(8))
    assert status.slices[1].state == "Down" and status.slices[1].reason == Reason.HOST_NOT_READY
    assert "host 3 (pod w-1-3) is not ready" in (status.slices[1].message or "")
    assert events[0].failed_at == s(7)


def test_superseded_failed_pod_does_not_keep_slice_down() -> None:
    job = article_job()
    pods = healthy_pods()
    pods[0] = failed_pod(0, 0, s(10)).build()
    st1, _ = compute_status(job, observe(pods), running(job), s(11))
    pods.append(WorkerPod(0, 0).replacement(s(10)).build())  # same second: live pod wins
    st2, ev = compute_status(job, observe(pods), st1, s(30))
    assert st2.slices[0].state == "Ready"
    assert [e.reason for e in ev] == [Reason.SLICE_RESTORED]


def test_slice_down_again_increments_restarts() -> None:
    """Each failure of the slice's current Job, replaced by a new one each time."""
    job = article_job()
    pods = healthy_pods()
    prev = running(job)
    restarts = []
    for gen in range(1, 4):
        down = [p if not (p.slice_index == 2 and p.host_index == 0)
                else failed_pod(2, 0, s(gen * 100)).build() for p in pods]
        prev, _ = compute_status(job, observe(down), prev, s(gen * 100 + 1))
        pods = [p for p in pods if p.slice_index != 2]
        pods += [WorkerPod(2, h).recreated(s(gen * 100 + 5), gen).build() for h in range(4)]
        prev, _ = compute_status(job, observe(pods), prev, s(gen * 100 + 50))
        restarts.append(prev.slices[2].restarts)
    assert restarts == [1, 2, 3]
    assert prev.counters.slice_failures == 3


def test_without_replacement_each_failure_of_the_same_job_counts() -> None:
    """replaceSlices off: the Job controller replaces the pod on the same Job each time."""
    job = etj().uid("uid-1").generation(1).spec(recovery={"replaceSlices": False}).build()
    pods = healthy_pods()
    prev = running(job)
    for gen in range(1, 4):
        down = [p if not (p.slice_index == 2 and p.host_index == 0)
                else failed_pod(2, 0, s(gen * 100)).build() for p in pods]
        prev, _ = compute_status(job, observe(down), prev, s(gen * 100 + 1))
        pods = [p for p in pods if not (p.slice_index == 2 and p.host_index == 0)]
        pods.append(WorkerPod(2, 0).replacement(s(gen * 100 + 5), gen).build())
        prev, _ = compute_status(job, observe(pods), prev, s(gen * 100 + 50))
    assert prev.slices[2].restarts == 3 and prev.counters.slice_failures == 3


# --- conventions ------------------------------------------------------------------------------


def test_last_transition_time_only_moves_on_status_change() -> None:
    job = article_job()
    st1 = running(job)
    st2, _ = compute_status(job, observe(healthy_pods()), st1, s(500))
    for c1, c2 in zip(st1.conditions, st2.conditions, strict=True):
        assert c1 == c2
    pods = healthy_pods()
    pods[0] = failed_pod(0, 0, s(600)).build()
    st3, _ = compute_status(job, observe(pods), st2, s(601))
    assert get_condition(st3, C.SLICE_DOWN).last_transition_time == s(601)  # type: ignore[union-attr]
    assert get_condition(st3, C.READY).last_transition_time == s(601)  # type: ignore[union-attr]
    assert get_condition(st3, C.SUSPENDED).last_transition_time == T0  # type: ignore[union-attr]
    # The message changes (another slice down too) but the status does not: time stays.
    pods[HOSTS] = failed_pod(1, 0, s(700)).build()
    st4, _ = compute_status(job, observe(pods), st3, s(701))
    c3 = get_condition(st3, C.SLICE_DOWN)
    c4 = get_condition(st4, C.SLICE_DOWN)
    assert c3 is not None and c4 is not None
    assert c4.message != c3.message and c4.last_transition_time == s(601)


def test_observed_generation_follows_the_job() -> None:
    status, _ = compute_status(article_job(generation=7), observe(healthy_pods()), None, T0)
    assert status.observed_generation == 7
    assert all(c.observed_generation == 7 for c in status.conditions)


def test_counters_never_go_backwards() -> None:
    job = article_job()
    prev = running(job).model_copy(update={
        "counters": Counters(slice_failures=5, elastic_events=4, jobset_restarts=2)})
    prev = with_report(prev, {"observedAt": s(1).isoformat(), "state": "Training",
                              "elasticEventsTotal": 1})  # a new trainer process
    restarted = observed_jobset().restarts(1).build()
    status, _ = compute_status(job, observe(jobset=restarted), prev, s(2))
    assert status.counters == Counters(slice_failures=5, elastic_events=4, jobset_restarts=2)
    restarted = observed_jobset().restarts(3).build()
    status, _ = compute_status(job, observe(jobset=restarted), prev, s(2))
    assert status.counters.jobset_restarts == 3


def _process_report(pid: int, started: float, step: int = 10) -> dict[str, Any]:
    return {"observedAt": s(started + 5).isoformat(), "state": "Training", "step": step,
            "processId": pid, "hostName": "head-0", "processStartedAt": s(started).isoformat()}


def test_a_replacement_trainer_process_is_counted_once_with_an_event() -> None:
    job = article_job()
    first, events = compute_status(job, observe(healthy_pods()),
                                   with_report(running(job), _process_report(100, 1)), s(10))
    assert first.trainer_process is not None and first.trainer_process.process_id == 100
    assert first.counters.trainer_restarts == 0 and not events

    # The same process reporting again changes nothing.
    again, events = compute_status(job, observe(healthy_pods()),
                                   with_report(first, _process_report(100, 1, step=20)), s(12))
    assert again.counters.trainer_restarts == 0 and not events

    replaced, events = compute_status(job, observe(healthy_pods()),
                                      with_report(again, _process_report(200, 60)), s(70))
    assert replaced.counters.trainer_restarts == 1
    assert replaced.trainer_process is not None and replaced.trainer_process.process_id == 200
    (event,) = [e for e in events if e.reason == Reason.TRAINER_RESTARTED]
    assert event.type == "Warning" and "pid 200" in event.message and "pid 100" in event.message

    # Level-based: reconciling the same observation again neither counts nor emits.
    steady, events = compute_status(job, observe(healthy_pods()), replaced, s(71))
    assert steady.counters.trainer_restarts == 1 and not events
    # A late report of the old process (started earlier) is not a restart either.
    late, events = compute_status(job, observe(healthy_pods()),
                                  with_report(steady, _process_report(100, 1, step=30)), s(72))
    assert late.counters.trainer_restarts == 1 and not events
    assert late.trainer_process == replaced.trainer_process


def test_trainer_process_survives_a_wire_round_trip() -> None:
    job = article_job()
    status, _ = compute_status(job, observe(healthy_pods()),
                               with_report(running(job), _process_report(100, 1)), s(10))
    wire = status_patch(ElasticTrainingJobStatus(), status)
    assert wire is not None and wire["status"]["trainerProcess"]["processId"] == 100
    parsed, problem = parse_status(status.to_wire())
    assert problem is None and parsed.trainer_process == status.trainer_process


def test_a_checkpoint_scan_that_finds_nothing_new_writes_nothing() -> None:
    job = article_job()

    def scanned(when: float, step: int) -> Observed:
        return observe(checkpoint=CheckpointStatus(directory="gs://b/ckpt",
                                                   latest_committed_step=step,
                                                   observed_at=s(when)))

    first, _ = compute_status(job, scanned(10, 100), running(job), s(10))
    assert first.checkpoint is not None and first.checkpoint.observed_at == s(10)
    same, _ = compute_status(job, scanned(40, 100), first, s(40))
    assert same.checkpoint == first.checkpoint
    assert status_patch(first, same) is None
    newer, _ = compute_status(job, scanned(70, 200), same, s(70))
    assert newer.checkpoint is not None and newer.checkpoint.latest_committed_step == 200
    assert newer.checkpoint.observed_at == s(70)
    assert status_patch(same, newer) is not None


def test_a_failed_checkpoint_scan_keeps_the_last_good_step_and_shows_the_error() -> None:
    """docs/operations.md: the checkpoint directory cannot be listed -> status.checkpoint
    .error says why; the last good latestCommittedStep is kept."""
    job = article_job()
    good = CheckpointStatus(directory="gs://b/ckpt", latest_committed_step=100,
                            incomplete_steps=[200], observed_at=s(10))
    first, _ = compute_status(job, observe(checkpoint=good), running(job), s(10))

    def failed(when: float) -> Observed:
        return observe(checkpoint=CheckpointStatus(
            directory="gs://b/ckpt", observed_at=s(when), error="cannot list: timeout"))

    broken, _ = compute_status(job, failed(40), first, s(40))
    assert broken.checkpoint is not None
    assert broken.checkpoint.latest_committed_step == 100
    assert broken.checkpoint.incomplete_steps == [200]
    assert broken.checkpoint.error == "cannot list: timeout"
    patch = status_patch(first, broken)
    assert patch is not None and patch["status"]["checkpoint"] == {
        "directory": "gs://b/ckpt", "latestCommittedStep": 100, "incompleteSteps": [200],
        "abandonedSteps": [], "observedAt": "2026-11-29T12:00:40Z",
        "error": "cannot list: timeout"}
    still, _ = compute_status(job, failed(70), broken, s(70))
    assert status_patch(broken, still) is None  # the same failure again: no write
    healed, _ = compute_status(job, observe(checkpoint=good.model_copy(
        update={"observed_at": s(100)})), still, s(100))
    assert healed.checkpoint is not None and healed.checkpoint.error is None
    # Another directory (the spec cannot change, but a stored status may say anything):
    # nothing to keep.
    elsewhere = CheckpointStatus(directory="gs://b/other", observed_at=s(130), error="x")
    moved, _ = compute_status(job, observe(checkpoint=elsewhere), healed, s(130))
    assert moved.checkpoint == elsewhere


def test_status_survives_a_wire_round_trip_mid_recovery() -> None:
    """What a restarted operator reads back is what it wrote: nothing is lost."""
    job = article_job()
    pods = healthy_pods()
    pods[2 * HOSTS] = failed_pod(2, 0, s(10)).build()
    st1, _ = compute_status(job, observe(pods), running(job), s(11))
    wire = json.loads(json.dumps(st1.to_wire()))
    back, problem = parse_status(wire)
    assert problem is None
    pods.append(WorkerPod(2, 0).replacement(s(15)).pending().build())
    st2, ev2 = compute_status(job, observe(pods), back, s(16))
    assert st2.counters.slice_failures == 1 and st2.slices[2].restarts == 1
    assert st2.last_recovery == st1.last_recovery
    assert st2.slices[2].state == "Restarting" and ev2 == []


def test_status_patch_never_touches_training_and_nulls_removed_fields() -> None:
    job = article_job()
    prev = with_report(running(job), {"observedAt": s(1).isoformat(), "state": "Training"})
    prev = prev.model_copy(update={"last_recovery": RecoveryRecord(detected_at=s(0))})
    new = prev.model_copy(update={"last_recovery": None, "phase": "Pending"})
    patch = status_patch(prev, new)
    assert patch is not None
    assert "training" not in patch["status"]
    assert patch["status"]["lastRecovery"] is None
    assert patch["status"]["phase"] == Phase.PENDING
    assert status_patch(prev, prev) is None


def test_a_new_recovery_replaces_the_old_one_on_the_server() -> None:
    """Found by the soak: a new lastRecovery (no resumedAt yet) sent whole was merged into
    the old one on the server, which kept the old resumedAt and downtime; the operator then
    read the recovery back as over."""
    job = article_job()
    old = RecoveryRecord(detected_at=s(0), resumed_at=s(30), downtime_seconds=30.0,
                         steps_lost=3, restored_from_step=97, restore_source="snapshot",
                         slices=[1], elastic_event_id=1)
    prev = running(job).model_copy(update={"last_recovery": old})
    new = prev.model_copy(update={"last_recovery": RecoveryRecord(
        detected_at=s(100), slices=[2], step_at_detection=200)})
    patch = status_patch(prev, new)
    assert patch is not None
    on_server = apply_merge_patch(prev.to_wire(), patch["status"])
    assert on_server == new.to_wire()
    parsed, problem = parse_status(on_server)
    assert problem is None and parsed.last_recovery is not None
    assert parsed.last_recovery.resumed_at is None  # still recovering


@given(st.data())
@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
def test_every_status_patch_lands_exactly_the_new_status(data: st.DataObject) -> None:
    job = article_job()
    base = running(job).model_copy(update={"last_recovery": RecoveryRecord(
        detected_at=s(0), resumed_at=s(30), downtime_seconds=30.0, elastic_event_id=1,
        slices=[0, 1], steps_lost=2)})
    pick = st.sampled_from([None, base.last_recovery, RecoveryRecord(detected_at=s(50)),
                            RecoveryRecord(detected_at=s(60), elastic_event_id=2)])
    prev = base.model_copy(update={"last_recovery": data.draw(pick),
                                   "phase": data.draw(st.sampled_from(["Running", None]))})
    new = base.model_copy(update={"last_recovery": data.draw(pick),
                                  "phase": data.draw(st.sampled_from(["SliceDown", None]))})
    patch = status_patch(prev, new)
    if patch is None:
        assert prev.to_wire() == new.to_wire()
    else:
        assert apply_merge_patch(prev.to_wire(), patch["status"]) == new.to_wire()


# --- suspend, terminal states, spec changes ---------------------------------------------------


def test_suspend_is_planned_and_reported_without_counting_failures() -> None:
    job = article_job(suspend=True)
    prev = running(article_job())
    plan = plan_reconcile(job, [], jobset(), prev)
    assert plan.actions == (PatchJobSetSuspend("ns", "article", True),)
    # pods are being deleted while the JobSet suspends: not failures
    pods = [WorkerPod(i, h).deleting(s(40), 30).build()
            for i in range(3) for h in range(HOSTS)]
    suspended = observed_jobset().suspended().build()
    status, events = compute_status(job, observe(pods, suspended), prev, s(11))
    assert status.phase == Phase.SUSPENDED
    assert cond(status, C.SUSPENDED)[:2] == ("True", Reason.SUSPENDED)
    assert cond(status, C.SLICE_DOWN)[0] == "False"
    assert [sl.state for sl in status.slices] == ["Pending"] * 3
    assert status.counters.slice_failures == 0 and events == []
    # resume
    resumed = article_job()
    plan = plan_reconcile(resumed, [], observed_jobset().suspended().build(), status)
    assert plan.actions == (PatchJobSetSuspend("ns", "article", False),)
    st2, ev2 = compute_status(resumed, observe(healthy_pods()), status, s(50))
    assert st2.phase == Phase.RUNNING and cond(st2, C.SUSPENDED)[0] == "False" and ev2 == []


def test_suspending_while_jobset_still_running() -> None:
    status, _ = compute_status(article_job(suspend=True), observe(healthy_pods()), running(), s(1))
    assert cond(status, C.SUSPENDED)[:2] == ("True", Reason.SUSPENDING)


def test_plan_creates_owned_objects_with_applied_spec() -> None:
    job = article_job()
    rendered = [{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "a"}},
                {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                 "metadata": {"name": "article"}, "spec": {}}]
    plan = plan_reconcile(job, rendered, None, ElasticTrainingJobStatus())
    assert [o["kind"] for o in plan.creates] == ["ServiceAccount", "JobSet"]
    for obj in plan.creates:
        ref = obj["metadata"]["ownerReferences"][0]
        assert ref["uid"] == "uid-1" and ref["controller"] is True
        assert ref["kind"] == "ElasticTrainingJob" and obj["metadata"]["namespace"] == "ns"
    assert plan.creates[1]["metadata"]["annotations"][APPLIED_SPEC_ANNOTATION] == applied_spec(job)
    assert "ownerReferences" not in rendered[0]["metadata"]  # the input is not mutated


def test_finished_jobset_is_never_recreated() -> None:
    job = article_job()
    done = ElasticTrainingJobStatus(jobset_name="article")
    plan = plan_reconcile(job, [{"kind": "JobSet"}], None, done)
    assert plan.actions == () and plan.why_not
    plan = plan_reconcile(job, [], observed_jobset().terminal("Failed").build(),
                          ElasticTrainingJobStatus())
    assert plan.actions == ()


def test_lost_jobset_is_reported_not_recreated() -> None:
    job = article_job()
    prev = running(job)
    assert prev.jobset_name == "article"
    status, events = compute_status(job, Observed(jobset=None), prev, s(5))
    assert cond(status, C.FAILED)[:2] == ("True", Reason.JOBSET_LOST)
    assert status.phase == Phase.FAILED
    assert [e.reason for e in events] == [Reason.JOBSET_LOST]
    assert plan_reconcile(job, [{"kind": "JobSet"}], None, status).actions == ()


def test_failed_head_pod_names_the_head() -> None:
    job = article_job()
    head = head_pod(failed=True)
    js = observed_jobset(job).terminal("Failed").build()
    status, _ = compute_status(job, observe([*healthy_pods(), head], js), running(job), s(5))
    assert cond(status, C.FAILED)[:2] == ("True", Reason.HEAD_FAILED)


@pytest.mark.parametrize(("head_failed", "restarts", "max_restarts", "reason"), [
    (True, 0, 0, Reason.HEAD_FAILED),
    (False, 0, 0, Reason.MAX_RESTARTS_EXCEEDED),
    (False, 2, 2, Reason.MAX_RESTARTS_EXCEEDED),
    (False, 1, 2, Reason.JOBSET_FAILED),
])
def test_failed_jobset_reasons(head_failed: bool, restarts: int, max_restarts: int,
                               reason: str) -> None:
    job = article_job(max_restarts=max_restarts)
    failed = observed_jobset(job).terminal("Failed").restarts(restarts)
    js = (failed.head_failed() if head_failed else failed).build()
    status, events = compute_status(job, observe([], js), running(job), s(5))
    assert cond(status, C.FAILED)[:2] == ("True", reason)
    assert status.phase == Phase.FAILED and events[0].reason == reason
    # sticky, and no second event
    again, events2 = compute_status(job, observe([], js), status, s(50))
    assert cond(again, C.FAILED)[:2] == ("True", reason) and events2 == []


@pytest.mark.parametrize("reason", [Reason.ELASTIC_TIMEOUT, Reason.ELASTIC_RETRIES_EXHAUSTED])
def test_trainer_failure_reasons_fail_the_job(reason: str) -> None:
    job = article_job()
    prev = with_report(running(job), {"observedAt": s(1).isoformat(), "state": "Failed",
                                      "reason": reason, "message": "slices did not return"})
    status, events = compute_status(job, observe(healthy_pods()), prev, s(2))
    assert cond(status, C.FAILED) == ("True", reason, "slices did not return")
    assert status.phase == Phase.FAILED
    assert [(e.reason, e.type) for e in events] == [(reason, "Warning")]


def test_completed_jobset_succeeds_and_freezes_slices() -> None:
    job = article_job()
    prev = running(job)
    completed = observed_jobset().terminal("Completed").build()
    status, _ = compute_status(job, observe([], completed), prev, s(9))
    assert status.phase == Phase.SUCCEEDED and cond(status, C.SUCCEEDED)[0] == "True"
    assert status.slices == prev.slices and status.counters.slice_failures == 0


def test_unappliable_spec_change_is_reported() -> None:
    old = article_job()
    new = article_job(num_slices=4, generation=2)
    status, _ = compute_status(new, observe(healthy_pods(), jobset(old)), running(old), s(3))
    sa = cond(status, C.SPEC_APPLIED)
    assert sa[:2] == ("False", Reason.IMMUTABLE_SPEC_CHANGED)
    assert "spec.tpu.numSlices" in sa[2]
    ok, _ = compute_status(old, observe(healthy_pods(), jobset(old)), None, s(3))
    assert cond(ok, C.SPEC_APPLIED)[:2] == ("True", Reason.APPLIED)


def test_invalid_spec_status_keeps_other_conditions() -> None:
    prev = running()
    st1 = invalid_spec_status(prev, "spec.tpu.topology: bad", s(1), 3)
    assert cond(st1, C.SPEC_APPLIED)[:2] == ("False", Reason.INVALID_SPEC)
    assert cond(st1, C.READY)[:2] == ("False", Reason.INVALID_SPEC)
    assert get_condition(st1, C.SUSPENDED) is not None and st1.observed_generation == 3


def test_degraded_when_training_on_fewer_slices() -> None:
    job = article_job()
    prev = with_report(running(job), {"observedAt": s(1).isoformat(), "state": "Training",
                                      "activeSlices": 2})
    status, _ = compute_status(job, observe(healthy_pods()), prev, s(2))
    assert cond(status, C.DEGRADED) == ("True", Reason.FEWER_SLICES, "training on 2 of 3 slices")
    assert status.phase == Phase.DEGRADED


# --- hostile trainer reports ------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "kept", "mentions"), [
    ("garbage", False, "not an object"),
    ({"state": "Training"}, False, "observedAt"),
    ({"observedAt": "yesterday", "state": "Training"}, False, "observedAt"),
    ({"observedAt": T0.isoformat(), "state": "Training", "step": "abc"}, True, "step"),
    ({"observedAt": T0.isoformat(), "state": "Training", "activeSlices": [1]}, True,
     "activeSlices"),
    ({"observedAt": T0.isoformat(), "state": "Training",
      "elasticEvent": {"id": 1, "phase": "Exploded", "detectedAt": T0.isoformat()}}, True,
     "elasticEvent"),
    ({"observedAt": T0.isoformat(), "state": "Training",
      "elasticEvent": {"id": 1, "phase": "Resumed", "detectedAt": T0.isoformat(),
                       "failedStep": "x"}}, True, "elasticEvent.failedStep"),
])
def test_bad_trainer_report_is_reported_not_fatal(raw: Any, kept: bool, mentions: str) -> None:
    report, problem = parse_training_report(raw)
    assert (report is not None) == kept
    assert problem is not None and mentions in problem
    job = article_job()
    prev = running(job).model_copy(update={"training": report})
    status, _ = compute_status(job, observe(healthy_pods()), prev, s(1), report_problem=problem)
    c = cond(status, C.TRAINING_REPORT_VALID)
    assert c[:2] == ("False", Reason.INVALID_REPORT) and mentions in c[2]


def test_naive_timestamps_are_read_as_utc() -> None:
    report, problem = parse_training_report({
        "observedAt": "2026-11-29T12:00:05", "state": "Recovering",
        "elasticEvent": {"id": 1, "phase": "Detected", "detectedAt": "2026-11-29T12:00:03"}})
    assert problem is None and report is not None
    assert report.observed_at.tzinfo is not None
    job = article_job()
    pods = healthy_pods()
    pods[0] = failed_pod(0, 0, s(1)).build()
    prev = running(job).model_copy(update={"training": report})
    status, _ = compute_status(job, observe(pods), prev, s(6))
    assert status.last_recovery is not None and status.last_recovery.detected_at == s(1)


def test_a_naive_timestamp_in_a_list_is_read_as_utc() -> None:
    stored = {"slices": [
        {"index": 0, "state": "Ready", "lastTransitionTime": "2026-11-29T12:00:00Z"},
        {"index": 1, "state": "Down", "lastTransitionTime": "2026-11-29T12:00:05"}]}
    previous, _ = parse_status(stored)
    assert [sl.last_transition_time for sl in previous.slices] == [
        datetime(2026, 11, 29, 12, 0, tzinfo=UTC), datetime(2026, 11, 29, 12, 0, 5, tzinfo=UTC)]
    # With every time zoned (nothing to copy), the same status.
    zoned = {"slices": [dict(sl, lastTransitionTime=sl["lastTransitionTime"].rstrip("Z") + "Z")
                        for sl in stored["slices"]]}
    again, _ = parse_status(zoned)
    assert again == previous


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=3),
    max_leaves=12,
)
report_keys = st.sampled_from(["observedAt", "state", "step", "activeSlices", "attempt",
                               "elasticEventsTotal", "elasticEvent", "reason", "loss"])
event_like = st.fixed_dictionaries({}, optional={
    "id": st.integers(-2, 5) | json_values, "phase": st.sampled_from(
        ["Detected", "Resumed", "Failed", "bogus"]),
    "detectedAt": st.sampled_from([T0.isoformat(), "2026-11-29T11:00:00", "x"]),
    "resumedAt": st.sampled_from([s(30).isoformat(), "nope"]), "failedStep": json_values,
    "restoredFromStep": st.integers(-5, 500) | json_values, "slicesDown": json_values,
})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=st.dictionaries(report_keys, json_values | event_like, max_size=8)
       | json_values,
       failing=st.booleans())
def test_any_trainer_report_never_crashes(raw: Any, failing: bool) -> None:
    job = article_job()
    body = {"metadata": job.metadata.model_dump(), "spec": job.spec.to_wire(),
            "status": {**running(job).to_wire(), "training": raw}}
    parsed = parse_job(body)
    pods = healthy_pods()
    if failing:
        pods[0] = failed_pod(0, 0, s(1)).build()
    status, _ = compute_status(parsed.job, observe(pods), parsed.previous, s(2),
                               report_problem=parsed.report_problem)
    assert status.slices_desired == 3
    assert status.counters.elastic_events >= 0
    patch = status_patch(parsed.previous, status)
    assert patch is None or "training" not in patch["status"]


def test_recovered_message_counts_steps_in_good_english() -> None:
    from elastic_api.models import RecoveryRecord
    from elastic_operator.core.recovery import recovered_message

    def message(lost: int, slices: list[int]) -> str:
        return recovered_message(RecoveryRecord(detected_at=s(0), resumed_at=s(2),
                                                downtime_seconds=2.0, steps_lost=lost,
                                                slices=slices))

    assert "; 1 step lost" in message(1, [2]) and "(slice 2 went down)" in message(1, [2])
    assert "; 0 steps lost" in message(0, [0, 1])
    assert "(slices 0, 1 went down)" in message(0, [0, 1])
