"""The metrics' cardinality at the record job's size: a job's series do not grow with
its slices (nor ever with its hosts: no series has a host or pod label); per-slice
series exist only for the slices down or restarted, at most MAX_SLICE_SERIES of each.
Counted on the real OperatorMetrics, from statuses compute_status wrote."""
from __future__ import annotations

from collections import Counter

from prometheus_client import CollectorRegistry

from elastic_api.models import ElasticTrainingJobStatus
from elastic_operator.metrics.job_metrics import MAX_SLICE_SERIES
from elastic_operator.metrics.metrics import OperatorMetrics
from tests.builders import at
from tests.support.large_jobs import RECORD, LargeRun

PER_SLICE = ("etj_slice_down", "etj_slice_restarts")


def job_series(registry: CollectorRegistry, job: str = "article") -> Counter[str]:
    """The series of one job, by metric (a counter's _created sample left out)."""
    return Counter(s.name for family in registry.collect() for s in family.samples
                   if s.labels.get("job") == job and not s.name.endswith("_created"))


def every_label(registry: CollectorRegistry) -> set[str]:
    return {label for family in registry.collect() for s in family.samples
            for label in s.labels}


def recorded(run: LargeRun, statuses: list[ElasticTrainingJobStatus]) -> CollectorRegistry:
    registry = CollectorRegistry()
    metrics = OperatorMetrics(registry)
    metrics.record_spec("ns", "article", run.job.spec)
    previous = ElasticTrainingJobStatus()
    for status in statuses:
        metrics.record_status("ns", "article", previous, status)
        previous = status
    return registry


def test_a_199_slice_job_has_the_series_of_a_3_slice_one() -> None:
    big, small = LargeRun(*RECORD), LargeRun(3, "v5e", "4x4", 4)
    counts = {}
    for run in (big, small):
        healthy, _ = run.look(run.healthy(), 5)
        down, _ = run.look(run.failed({1: [3]}, at(9)), 10)
        counts[run.num_slices] = job_series(recorded(run, [healthy, down]))
    assert counts[199] == counts[3]
    assert {name: counts[199][name] for name in PER_SLICE} == {n: 1 for n in PER_SLICE}
    assert sum(counts[199].values()) < 60
    assert not every_label(recorded(big, [big.status])) & {"host", "pod", "node", "hostname"}


def test_per_slice_series_are_bounded_when_every_slice_fails() -> None:
    run = LargeRun(*RECORD)
    healthy, _ = run.look(run.healthy(), 5)
    assert not any(job_series(recorded(run, [healthy]))[n] for n in PER_SLICE)
    down, _ = run.look(run.failed({i: range(64) for i in range(199)}, at(9)), 10)
    series = job_series(recorded(run, [healthy, down]))
    assert {n: series[n] for n in PER_SLICE} == {n: MAX_SLICE_SERIES for n in PER_SLICE}


def test_a_slice_back_keeps_its_series_while_it_counts_restarts_and_the_rest_go() -> None:
    run = LargeRun(*RECORD)
    registry = CollectorRegistry()
    metrics = OperatorMetrics(registry)
    previous = ElasticTrainingJobStatus()
    for pods, seconds in ((run.healthy(), 5), (run.failed({42: [5]}, at(9)), 10)):
        status, _ = run.look(pods, seconds)
        metrics.record_status("ns", "article", previous, status)
        previous = status

    def value(name: str, index: int) -> float | None:
        return registry.get_sample_value(name, {"namespace": "ns", "job": "article",
                                                "slice": str(index)})

    assert (value("etj_slice_down", 42), value("etj_slice_restarts", 42)) == (1, 1)
    assert value("etj_slice_down", 41) is None
    # Back Ready: down 0, its restart still counted (the budget alert reads it).
    back = previous.model_copy(update={"slices": [
        s.model_copy(update={"state": "Ready"}) for s in previous.slices]})
    metrics.record_status("ns", "article", previous, back)
    assert (value("etj_slice_down", 42), value("etj_slice_restarts", 42)) == (0, 1)
    # A status that no longer shows it (a new job of the same name): its series go.
    fresh = back.model_copy(update={"slices": [
        s.model_copy(update={"restarts": 0}) for s in back.slices]})
    metrics.record_status("ns", "article", back, fresh)
    assert value("etj_slice_down", 42) is None and value("etj_slice_restarts", 42) is None
