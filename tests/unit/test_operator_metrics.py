"""Operator metrics follow the status: deltas of its counters, one observation per event."""
from __future__ import annotations

from datetime import UTC, datetime

from prometheus_client import CollectorRegistry

from elastic_api.conditions import Reason
from elastic_api.models import Counters, ElasticTrainingJobStatus, TrainingReport
from elastic_operator.core.events import StatusEvent
from elastic_operator.metrics import OperatorMetrics

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
    assert value(registry, "etj_elastic_events_total", namespace="ns", job="job") is None
    assert value(registry, "etj_desired_slices", namespace="ns", job="job") == 3
    assert value(registry, "etj_ready_slices", namespace="ns", job="job") == 2
    assert value(registry, "etj_active_slices", namespace="ns", job="job") == 2
    m.forget("ns", "job")
    assert value(registry, "etj_desired_slices", namespace="ns", job="job") is None


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
