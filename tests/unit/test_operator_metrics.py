"""Operator metrics follow the status: deltas of its counters, one observation per event."""
from __future__ import annotations

from datetime import UTC, datetime

import pytest
from prometheus_client import CollectorRegistry

from elastic_api.conditions import Reason
from elastic_api.models import Counters, ElasticTrainingJobStatus, TrainingReport
from elastic_operator.core.status_events import StatusEvent
from elastic_operator.metrics.metrics import OperatorMetrics

T = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def test_counters_follow_status_deltas_and_gauges_the_latest() -> None:
    registry = CollectorRegistry()
    m = OperatorMetrics(registry)
    before = ElasticTrainingJobStatus(counters=Counters(slice_failures=2, elastic_events=1))
    after = ElasticTrainingJobStatus(
        counters=Counters(slice_failures=3, elastic_events=1), slices_desired=3, slices_ready=2,
        training=TrainingReport(observed_at=T, state="Training", active_slices=2))
    m.record_status("ns", "job", before, after)
    m.record_status("ns", "job", after, after)  # no change: no increment
    assert value(registry, "etj_slice_failures_total", namespace="ns", job="job") == 1
    # Born at 0 with the job, so that increase() sees its first event.
    assert value(registry, "etj_elastic_events_total", namespace="ns", job="job") == 0
    assert value(registry, "etj_recovery_duration_seconds_count", namespace="ns") == 0
    assert value(registry, "etj_slice_replacements_total", namespace="ns", job="job",
                 action="Replace") == 0
    assert value(registry, "etj_badput_seconds_total", namespace="ns", job="job",
                 cause="waitingForSlices") == 0
    assert value(registry, "etj_desired_slices", namespace="ns", job="job") == 3
    assert value(registry, "etj_ready_slices", namespace="ns", job="job") == 2
    assert value(registry, "etj_active_slices", namespace="ns", job="job") == 2
    m.forget_job(("ns", "job"))
    assert value(registry, "etj_desired_slices", namespace="ns", job="job") is None
    assert value(registry, "etj_elastic_events_total", namespace="ns", job="job") is None
    assert value(registry, "etj_badput_seconds_total", namespace="ns", job="job",
                 cause="waitingForSlices") is None


def test_events_feed_the_histograms() -> None:
    registry = CollectorRegistry()
    m = OperatorMetrics(registry)
    m.record_events("ns", [
        StatusEvent(Reason.SLICE_DOWN, "slice 2", "Warning", slice_index=2, failed_at=T),
        StatusEvent(Reason.SLICE_DOWN, "slice 1", "Warning", slice_index=1),  # no failure time
        StatusEvent(Reason.RECOVERED, "ok", downtime_seconds=110.0, steps_lost=88),
        StatusEvent(Reason.SLICE_RESTORED, "slice 2"),
    ], written_at_s=T.timestamp() + 1.5)
    assert value(registry, "etj_slice_down_detection_seconds_count", namespace="ns") == 1
    assert value(registry, "etj_slice_down_detection_seconds_sum", namespace="ns") == 1.5
    assert value(registry, "etj_recovery_duration_seconds_sum", namespace="ns") == 110.0
    assert value(registry, "etj_recovery_steps_lost_sum", namespace="ns") == 88


def test_alerting_gauges_copy_the_status_and_the_spec() -> None:
    """What the alert rules compare: per slice, down and restarts; per job, the phase
    (one-hot), the restart budgets, the trainer's step and the newest checkpoint."""
    from elastic_api.models import CheckpointStatus, Condition, SliceStatus
    from elastic_api.validation import validate_job
    from elastic_operator.core.budget_tracking import Spending, track_budgets
    from tests.builders import etj

    registry = CollectorRegistry()
    m = OperatorMetrics(registry)
    job = validate_job(etj("job").spec(elastic={"maxSliceRestarts": 5},
                                       checkpoint={"periodSteps": 50}).max_restarts(3).obj())
    m.record_spec("ns", "job", job.spec)
    status = ElasticTrainingJobStatus(
        phase="SliceDown",
        slices=[SliceStatus(index=0, state="Ready", restarts=1),
                SliceStatus(index=1, state="Restarting", restarts=4),
                SliceStatus(index=2, state="Down", restarts=0)],
        counters=Counters(jobset_restarts=2),
        conditions=[Condition(type="Recovering", status="True", reason="PodFailed",
                              last_transition_time=T)],
        training=TrainingReport(observed_at=T, state="Training", step=420),
        checkpoint=CheckpointStatus(directory="gs://b/c", latest_committed_step=300))
    budgets, _ = track_budgets(job.spec, ElasticTrainingJobStatus(), status.slices,
                               Spending(0, 2, False, False), T)
    status = status.model_copy(update={"budgets": budgets})
    m.record_status("ns", "job", ElasticTrainingJobStatus(), status)

    def job_value(name: str) -> float | None:
        return value(registry, name, namespace="ns", job="job")

    assert [value(registry, "etj_slice_down", namespace="ns", job="job", slice=str(i))
            for i in range(3)] == [0, 1, 1]
    assert [value(registry, "etj_slice_restarts", namespace="ns", job="job", slice=str(i))
            for i in range(3)] == [1, 4, 0]
    phases = {p: value(registry, "etj_job_phase", namespace="ns", job="job", phase=p)
              for p in ("SliceDown", "Running", "Failed")}
    assert phases == {"SliceDown": 1, "Running": 0, "Failed": 0}
    def budget(name: str, which: str) -> float | None:
        return value(registry, name, namespace="ns", job="job", budget=which)

    assert job_value("etj_jobset_restarts") == 2
    assert (budget("etj_restart_budget_allowed", "sliceRestarts"),
            budget("etj_restart_budget_used", "sliceRestarts")) == (5, 4)  # slice 1's
    assert (budget("etj_restart_budget_allowed", "jobSetRestarts"),
            budget("etj_restart_budget_used", "jobSetRestarts")) == (3, 2)
    assert budget("etj_restart_budget_allowed", "stallRestarts") == 3  # derived per hour
    assert job_value("etj_recovering") == 1
    assert (job_value("etj_training_step"), job_value("etj_checkpoint_latest_committed_step"),
            job_value("etj_checkpoint_period_steps")) == (420, 300, 50)
    assert job_value("etj_checkpoint_scan_failing") == 0

    m.forget_job(("ns", "job"))
    for name in ("etj_jobset_restarts", "etj_recovering",
                 "etj_training_step", "etj_checkpoint_latest_committed_step"):
        assert job_value(name) is None, name
    assert budget("etj_restart_budget_allowed", "sliceRestarts") is None
    assert budget("etj_restart_budget_used", "jobSetRestarts") is None
    assert value(registry, "etj_slice_down", namespace="ns", job="job", slice="1") is None
    assert value(registry, "etj_job_phase", namespace="ns", job="job", phase="SliceDown") is None


def test_a_failing_checkpoint_scan_is_flagged_and_an_unknown_step_is_no_series() -> None:
    from elastic_api.models import CheckpointStatus

    registry = CollectorRegistry()
    m = OperatorMetrics(registry)
    never_listed = ElasticTrainingJobStatus(
        checkpoint=CheckpointStatus(directory="gs://b/c", error="403 Forbidden"))
    m.record_status("ns", "job", ElasticTrainingJobStatus(), never_listed)
    assert value(registry, "etj_checkpoint_scan_failing", namespace="ns", job="job") == 1
    assert value(registry, "etj_checkpoint_latest_committed_step",
                 namespace="ns", job="job") is None
    # A listing that found nothing committed: step 0, so a trainer far ahead is seen.
    empty = ElasticTrainingJobStatus(checkpoint=CheckpointStatus(directory="gs://b/c"))
    m.record_status("ns", "job", never_listed, empty)
    assert value(registry, "etj_checkpoint_scan_failing", namespace="ns", job="job") == 0
    assert value(registry, "etj_checkpoint_latest_committed_step",
                 namespace="ns", job="job") == 0


def test_quarantined_pools_are_read_from_the_nodes_at_each_scrape() -> None:
    from elastic_operator.model.objects import ObservedNode

    registry = CollectorRegistry()
    m = OperatorMetrics(registry)
    nodes = [
        ObservedNode("a-0", ready=False, pool="a", quarantined="NodeNotReady",
                     quarantined_at=T),
        ObservedNode("a-1", ready=True, pool="a", quarantined="NodeNotReady",
                     quarantined_at=T.replace(minute=5)),
        ObservedNode("b-0", ready=True, pool="b"),
        ObservedNode("c-0", ready=True, pool="c", quarantined="Maintenance"),  # no time
    ]
    m.observe_quarantines(lambda: nodes)
    name = "etj_pool_quarantined_timestamp_seconds"
    assert value(registry, name, pool="a", reason="NodeNotReady") == T.timestamp()
    assert value(registry, name, pool="b", reason="") is None
    assert value(registry, name, pool="c", reason="Maintenance") is None
    nodes.clear()  # released
    assert value(registry, name, pool="a", reason="NodeNotReady") is None


def test_api_requests_are_counted_by_verb_resource_and_code() -> None:
    class Response:
        def __init__(self, status: int) -> None:
            self.status = status

    class ApiClient:
        def __init__(self) -> None:
            self.answers = [Response(200), Response(409), Response(200)]

        def call_api(self, method: str, url: str, *args: object, **kwargs: object) -> Response:
            if not self.answers:
                raise TimeoutError("no answer")
            return self.answers.pop(0)

    registry = CollectorRegistry()
    m = OperatorMetrics(registry)
    api = ApiClient()
    m.count_requests(api)
    host = "https://10.0.0.1:6443"
    api.call_api("GET", f"{host}/api/v1/namespaces/team/pods?labelSelector=x&watch=true",
                 {}, None, None, _request_timeout=5)
    api.call_api("PATCH", f"{host}/apis/elastic.pathways.dev/v1alpha1/namespaces/team/"
                 "elastictrainingjobs/article/status")
    api.call_api("GET", f"{host}/api/v1/nodes?limit=500")
    with pytest.raises(TimeoutError):  # no answer: counted, and raised on
        api.call_api("POST", f"{host}/apis/coordination.k8s.io/v1/namespaces/x/leases")
    name = "etj_api_requests_total"
    assert value(registry, name, verb="watch", resource="pods", code="200") == 1
    assert value(registry, name, verb="patch", resource="elastictrainingjobs/status",
                 code="409") == 1
    assert value(registry, name, verb="list", resource="nodes", code="200") == 1
    assert value(registry, name, verb="create", resource="leases", code="error") == 1


def test_every_badput_cause_has_its_ml_goodput_name() -> None:
    from pydantic.alias_generators import to_camel

    from elastic_api.badput import BADPUT_TYPES
    from elastic_api.models import BadputSeconds

    assert set(BADPUT_TYPES) == {to_camel(c) for c in BadputSeconds.model_fields}
    registry = CollectorRegistry()
    OperatorMetrics(registry)
    assert value(registry, "etj_badput_cause_info", cause="recomputedSteps",
                 badput_type="WASTED_PROGRESS_FROM_DISRUPTION") == 1
