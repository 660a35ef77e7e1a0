"""What the operator's writes carry (kube_bodies.py), without a client."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from elastic_api.conditions import Reason
from elastic_api.names import (
    SUSPENDED_AFTER_WORKER_LOST_ANNOTATION,
    SUSPENDED_BY_OPERATOR_ANNOTATION,
)
from elastic_operator.client import kube_bodies as bodies
from elastic_operator.core.status_events import StatusEvent

JOB = {"apiVersion": "elastic.pathways.dev/v1alpha1", "kind": "ElasticTrainingJob",
       "metadata": {"name": "train", "namespace": "ml", "uid": "u-1", "resourceVersion": "7"}}


def test_an_event_names_the_job_and_its_change_in_utc() -> None:
    at = datetime(2026, 11, 29, 13, 0, tzinfo=timezone(timedelta(hours=1)))
    event = StatusEvent(Reason.SLICE_DOWN, "x" * 2000, "Warning", slice_index=1)
    named = bodies.event(JOB, event, at, name="train.abc")
    assert named["metadata"] == {"name": "train.abc", "namespace": "ml"}
    assert named["involvedObject"] == {
        "apiVersion": "elastic.pathways.dev/v1alpha1", "kind": "ElasticTrainingJob",
        "name": "train", "namespace": "ml", "uid": "u-1", "resourceVersion": "7"}
    assert (named["reason"], named["type"], len(named["message"])) == (
        Reason.SLICE_DOWN, "Warning", 1024)
    assert named["firstTimestamp"] == named["lastTimestamp"] == "2026-11-29T12:00:00Z"
    assert named["source"] == {"component": "elastic-training-operator"}
    unnamed = bodies.event({"metadata": {"name": "train"}}, event, at.astimezone(UTC))
    assert unnamed["metadata"] == {"generateName": "train.", "namespace": "default"}


def test_a_deactivation_carries_the_operators_marks_and_a_reactivation_lifts_them() -> None:
    stop = bodies.workload_active(False, "worker-a")
    assert stop["spec"] == {"active": False}
    assert stop["metadata"]["annotations"] == {SUSPENDED_BY_OPERATOR_ANNOTATION: "true",
                                               SUSPENDED_AFTER_WORKER_LOST_ANNOTATION: "worker-a"}
    resume = bodies.workload_active(True, "worker-a")
    assert resume["metadata"]["annotations"] == {SUSPENDED_BY_OPERATOR_ANNOTATION: None,
                                                 SUSPENDED_AFTER_WORKER_LOST_ANNOTATION: None}
    assert bodies.jobset_suspend(True) == {
        "metadata": {"annotations": {SUSPENDED_BY_OPERATOR_ANNOTATION: "true"}},
        "spec": {"suspend": True}}


def test_conditional_writes_carry_their_preconditions() -> None:
    patch = {"status": {"phase": "Running"}}
    assert bodies.if_at_version(patch, "7") == {**patch, "metadata": {"resourceVersion": "7"}}
    assert bodies.if_at_version(patch, None) == patch
    assert bodies.backoff_limit_raised("u-1", 2, 4) == [
        {"op": "test", "path": "/metadata/uid", "value": "u-1"},
        {"op": "test", "path": "/spec/backoffLimit", "value": 2},
        {"op": "replace", "path": "/spec/backoffLimit", "value": 5}]
    # A Job ended through its own deadline: the same Job only; `add` sets a field unset.
    assert bodies.job_ended_now("u-1") == [
        {"op": "test", "path": "/metadata/uid", "value": "u-1"},
        {"op": "replace", "path": "/spec/backoffLimit", "value": 0},
        {"op": "add", "path": "/spec/activeDeadlineSeconds", "value": 0}]
