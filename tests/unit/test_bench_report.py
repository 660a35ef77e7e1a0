"""The pure parts of bench/: statistics, the operator request classifier, the docs table."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench import report
from bench.common import percentile, ratio, stats, union_seconds
from bench.opshim import classify
from elastic_operator.metrics.metrics import RECONCILE_PHASES


@given(st.lists(st.floats(min_value=-1e6, max_value=1e6), min_size=1, max_size=50),
       st.floats(min_value=0, max_value=100))
def test_percentile_lies_between_neighbours(values: list[float], q: float) -> None:
    got = percentile(values, q)
    assert got is not None
    ordered = sorted(values)
    assert ordered[0] <= got <= ordered[-1]
    assert percentile(values, 0) == ordered[0] and percentile(values, 100) == ordered[-1]


def test_percentile_interpolates_like_numpy() -> None:
    np = pytest.importorskip("numpy")
    rng = random.Random(7)
    values = [rng.expovariate(1.0) for _ in range(101)]
    for q in (1, 50, 90, 99):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))


def test_stats_and_ratio_of_nothing() -> None:
    assert stats([]) == {"n": 0, "p50": None, "p99": None, "mean": None, "min": None,
                         "max": None}
    assert ratio(1.0, 0.0) is None and ratio(None, 2.0) is None and ratio(1.0, 4.0) == 0.25


def test_union_seconds_counts_nested_and_overlapping_spans_once() -> None:
    spans = [(0.0, 10.0), (2.0, 3.0), (9.0, 12.0), (20.0, 21.0)]
    assert union_seconds(spans, 1.0, 20.5) == pytest.approx(9.0 + 2.0 + 0.5)
    assert union_seconds(spans, 12.0, 20.0) == 0.0
    assert union_seconds([], 0.0, 1.0) == 0.0


@pytest.mark.parametrize(("method", "url", "key"), [
    ("GET", "https://h:1/api/v1/namespaces/ns/pods?labelSelector=x", "LIST pods"),
    ("GET", "https://h:1/api/v1/namespaces/ns/pods?watch=true&resourceVersion=3", "WATCH pods"),
    ("GET", "/api/v1/namespaces/ns/pods/p1", "GET pods"),
    ("patch", "/apis/elastic.pathways.dev/v1alpha1/namespaces/ns/elastictrainingjobs/j/status",
     "PATCH elastictrainingjobs/status"),
    ("GET", "/apis/jobset.x-k8s.io/v1alpha2/jobsets?watch=1", "WATCH jobsets"),
    ("GET", "/api/v1/nodes", "LIST nodes"),
    ("POST", "/api/v1/namespaces/ns/events", "POST events"),
    ("GET", "/healthz", "GET /healthz"),
])
def test_classify_names_verb_and_resource(method: str, url: str, key: str) -> None:
    assert classify(method, url) == key


def _summary() -> dict:
    phases = {"failed_step": 36, "restored_from_step": 35, "restore_source": "snapshot",
              "steps_lost": 1, "detect_seconds": 0.01, "wait_seconds": 0.9,
              "restore_seconds": 0.004, "compile_seconds": 0.0, "first_step_seconds": 0.02,
              "other_seconds": 0.1, "detect_to_resumed_seconds": 1.02,
              "compilation_cache_hits": 0}
    s = stats([0.5, 1.0, 2.0])
    return {"machine": {"cpus": 2}, "revision": "abc", "benchmarks": {
        "detection": {"measured_at": "T1", "result": {
            "n_jobs": 3, "slices_per_job": 4, "hosts_per_slice": 4, "pods": 51,
            "operator_slice_down_seconds": s, "jobset_ready_drop_seconds": s,
            "ratio_p50_operator_vs_jobset": 0.5, "ratio_p99_operator_vs_jobset": None,
            "operator_cpu_seconds_per_1000_pods": {"startup": 1.0, "quiet_per_minute": 2.0},
            "operator_rss_bytes": {"peak": 2**27},
            "operator_peak_rss_mib_per_1000_pods": 10.0,
            "api_requests_per_slice_event": 9.0,
            "api_requests_per_slice_event_net_of_resync": 4.5}},
        "recovery": {"measured_at": "T2", "result": {
            "configs": {"tiny": {
                "from_snapshot": phases, "from_checkpoint": {**phases, "steps_lost": 16},
                "resize_without_compilation_cache": phases,
                "resize_with_warm_compilation_cache": phases,
                "ratio_restore_seconds_snapshot_vs_checkpoint": 0.1,
                "ratio_detect_to_resumed_snapshot_vs_checkpoint": 0.9,
                "ratio_compile_seconds_cache_vs_none": None,
                "ratio_detect_to_resumed_cache_vs_none": 1.0}},
            "steps_lost_vs_snapshot_period": [
                {"snapshot_period": 1, "steps_lost": 0, "restore_source": "snapshot"},
                {"snapshot_period": 0, "steps_lost": 17, "restore_source": "checkpoint"}],
            "steps_lost_sweep_checkpoint_period": 20, "steps_lost_sweep_fail_at": "38:1"}},
    }}


def test_table_has_a_row_per_figure_and_keeps_the_rest_of_the_page(tmp_path: Path) -> None:
    page = tmp_path / "benchmarks.md"
    page.write_text(f"# Benchmarks\n\nintro\n\n{report.START}\nold table\n{report.END}\n\nafter\n")
    report.update_docs(page, _summary())
    text = page.read_text()
    assert text.startswith("# Benchmarks\n\nintro\n") and text.rstrip().endswith("after")
    assert "old table" not in text and text.count(report.START) == 1
    assert "3 jobs x 4 slices x 4 hosts (51 pods)" in text
    assert "| 1.00 s | 1.00 s | 0.50 |" in text  # p50 ours, baseline, ratio
    assert "off: 17 (checkpoint)" in text and "1: 0 (snapshot)" in text
    assert "Trainer overhead" not in text  # not measured: no section
    report.update_docs(page, _summary())
    assert page.read_text() == text  # idempotent


def test_before_and_scale_sections(tmp_path: Path) -> None:
    summary = _summary()
    detection = summary["benchmarks"]["detection"]["result"]
    before = {**detection, "operator_slice_down_seconds": stats([1.0, 2.0, 4.0]),
              "operator_rss_bytes": {"peak": 2**28},
              "api_requests_per_slice_event": 18.0}
    summary["benchmarks"]["detection_before"] = {"measured_at": "T0", "result": before}
    big = {**detection, "shape": "1 job x 64 slices x 64 hosts (4097 pods, packed on CPU "
           "nodes)", "operator_cpu_seconds": {"startup": 10.0, "quiet": 1.0, "events": 2.0},
           "operator_requests": {"quiet_window_seconds": 30.0},
           "operator_rss_bytes": {"idle": 2**26, "peak": 2**27},
           "operator_cpu_seconds_per_1000_pods": {"per_slice_event": 0.05}}
    summary["benchmarks"]["scale"] = {"measured_at": "T3", "result": {"sizes": [
        big, {"shape": "1 job x 64 slices x 16 hosts", "error": "TimeoutError: nodes"}]}}
    page = tmp_path / "benchmarks.md"
    report.update_docs(page, summary)
    text = page.read_text()
    # ours against before: p50 1.00 s against 2.00 s, RSS 128 against 256 MiB, requests 9/18
    assert "| 1.00 s | 2.00 s | 0.50 |" in text
    assert "| 128 MiB | 256 MiB | 0.50 |" in text and "| 9.0 | 18.0 | 0.50 |" in text
    assert "64 hosts (4097 pods, packed on CPU nodes): operator RSS, idle -> peak | " \
           "64 MiB -> 128 MiB" in text
    assert "| 10.0 s; 2.0 s; 0.050 s |" in text  # startup; per minute; per event
    assert "1 job x 64 slices x 16 hosts: not measured | TimeoutError: nodes" in text


def test_scale_sizes_parse_and_refuse_what_the_catalog_lacks() -> None:
    from bench.__main__ import parse_sizes

    assert parse_sizes("64x16:pathways, 64x64:simulated,4x4,4xv5p-16x16x24:simulated") == [
        (64, "v5e", "8x8", "pathways"), (64, "v5e", "16x16", "simulated"),
        (4, "v5e", "4x4", "pathways"), (4, "v5p", "16x16x24", "simulated")]
    # A host count no v5e slice has: the catalog's first shape of that many.
    assert parse_sizes("4x1536:simulated,1x2304") == [
        (4, "v5p", "16x16x24", "simulated"), (1, "tpu7x", "16x24x24", "pathways")]
    for bad in ("64x3", "4x1535", "64", "ax4", "4x4:gpu", "4xv5p", "4xv5p-8x8x9", "4xgpu-8x8"):
        with pytest.raises(ValueError, match="--scale-sizes"):
            parse_sizes(bad)
    with pytest.raises(ValueError, match=r"not a v5p topology; use one of .*16x16x24"):
        parse_sizes("4xv5p-8x8x9")


def test_a_catalog_shape_sizes_its_job_and_cluster() -> None:
    from bench.detection import Shape, job_manifest

    shape = Shape(1, 4, "16x16x24", "simulated", "v5p")
    assert (shape.hosts, shape.pods) == (1536, 4 * 1536 + 1)
    assert "(v5p 16x16x24)" in shape.label
    assert job_manifest("big", shape)["spec"]["tpu"] == {
        "type": "v5p", "topology": "16x16x24", "numSlices": 4}


def test_a_size_that_cannot_run_fails_the_scale_benchmark(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Its refusal is kept in the result and the run exits non-zero, naming it."""
    import bench.__main__ as bench_main
    from bench import detection

    def refused(*_: object, shape: detection.Shape, **__: object) -> dict[str, object]:
        if shape.slices > 2:
            raise RuntimeError("HTTP 422: spec.tpu.numSlices: must be at most 256")
        return {"shape": shape.label}

    monkeypatch.setattr(detection, "run", refused)
    code = bench_main.main(["--only", "scale", "--scale-sizes", "2x4:simulated,300x4:simulated",
                            "--load", "0", "--results-dir", str(tmp_path), "--no-docs"])
    assert code == 1
    result = json.loads((tmp_path / "scale.json").read_text())["result"]
    assert [("error" in r) for r in result["sizes"]] == [False, True]
    assert result["failed"] == [result["sizes"][1]["shape"]]
    assert "must be at most 256" in result["sizes"][1]["error"]


def test_a_benchmark_not_run_keeps_its_section(tmp_path: Path) -> None:
    page = tmp_path / "benchmarks.md"
    page.write_text("intro\n")
    report.update_docs(page, _summary())
    before = page.read_text()
    detection = report.sections_of(before)["Detection at scale"]
    assert detection[0].startswith("| **Detection at scale** (measured T1")
    rerun = _summary()
    del rerun["benchmarks"]["detection"]
    rerun["benchmarks"]["recovery"]["measured_at"] = "T3"
    report.update_docs(page, rerun)
    after = page.read_text()
    assert report.sections_of(after)["Detection at scale"] == detection
    assert "(measured T3" in after and "(measured T2" not in after
    assert after.index("Detection at scale") < after.index("Trainer recovery")


def test_replacement_rows_say_when_the_baseline_never_came_back() -> None:
    result = {
        "consecutive_failures": 6,
        "consecutive_seconds": {"ours": [4.0, 4.1, 3.9, 4.2, 4.0, 3.8],
                                "baseline": [11.8, 21.4, 40.2, 80.7, 162.7, 321.8]},
        "last_failure_seconds": {"ours": 3.8, "baseline": 321.8},
        "ratio_last_failure_ours_vs_baseline": 3.8 / 321.8,
        "dead_node": {"ours": {"seconds": 5.0}, "baseline": {"seconds": None}},
        "dead_node_timeout_seconds": 360.0,
        "ratio_dead_node_ours_vs_baseline_at_most": 5.0 / 360.0,
    }
    rows = report.replacement_rows(result, {})
    assert rows[0][0].startswith("The 6th consecutive failure")
    assert rows[0][1:] == ("3.80 s", "322 s", "0.012")
    assert rows[2][2] == "not Ready after 360 s" and rows[2][3] == "<= 0.014"


def test_histogram_quantiles_interpolate_within_buckets_like_prometheus() -> None:
    from bench.internals import histogram, quantile

    # 10 observations: 4 <= 0.1, 9 <= 0.5, 10 <= 1 (cumulative, as exported).
    assert quantile({0.1: 4, 0.5: 9, 1.0: 10, float("inf"): 10}, 0.5) == pytest.approx(
        0.1 + 0.4 * (1 / 5))
    assert quantile({0.1: 4, 0.5: 9, 1.0: 10, float("inf"): 10}, 0.99) == pytest.approx(
        0.5 + 0.5 * 0.9)
    assert quantile({0.1: 0, float("inf"): 0}, 0.5) is None
    assert quantile({0.1: 1, float("inf"): 3}, 0.99) == 0.1  # past the last bound
    name = "etj_work_queue_wait_seconds"
    start = {f'{name}_bucket{{le="0.1"}}': 2.0, f'{name}_bucket{{le="+Inf"}}': 2.0,
             f"{name}_count": 2.0, f"{name}_sum": 0.1}
    end = {f'{name}_bucket{{le="0.1"}}': 6.0, f'{name}_bucket{{le="+Inf"}}': 12.0,
           f"{name}_count": 12.0, f"{name}_sum": 5.1}
    h = histogram(start, end, name)  # only what the phase added: 10 observations
    assert h["count"] == 10 and h["mean"] == pytest.approx(0.5)
    assert h["p50"] == pytest.approx(0.1)  # 4 of the 10 in the first bucket, the rest above


def test_request_breakdown_subtracts_the_quiet_rate_per_kind() -> None:
    from bench.internals import request_breakdown

    got = request_breakdown({"PATCH leases": 100, "DELETE jobs": 64},
                            {"PATCH leases": 30}, quiet_s=30.0, events_s=100.0, events=64)
    assert got["DELETE jobs"] == {"gross": 1.0, "net": 1.0}
    assert got["PATCH leases"]["gross"] == pytest.approx(100 / 64)
    assert got["PATCH leases"]["net"] == pytest.approx(0.0)  # renewals: time, not work


def test_internals_read_the_operators_metrics_over_the_phase() -> None:
    from bench.internals import internals

    start = {'etj_status_writes_total{kind="change"}': 5.0,
             "etj_reconcile_duration_seconds_sum": 1.0,
             "etj_reconcile_duration_seconds_count": 10.0}
    end = {'etj_status_writes_total{kind="change"}': 9.0,
           'etj_status_writes_total{kind="progress"}': 2.0,
           "etj_status_writes_deferred_total": 7.0,
           "etj_reconcile_started_over_total": 3.0,
           "etj_reconcile_duration_seconds_sum": 6.0,
           "etj_reconcile_duration_seconds_count": 30.0,
           'etj_api_request_duration_seconds_count{verb="delete",resource="jobs"}': 2.0,
           'etj_api_request_duration_seconds_sum{verb="delete",resource="jobs"}': 0.5,
           'etj_api_request_duration_seconds_count{verb="watch",resource="pods"}': 1.0}
    got = internals(start, end, seconds=10.0)
    assert got["status_writes"] == {"change": 4.0, "progress": 2.0, "deferred": 7.0}
    assert got["reconcile_seconds"]["count"] == 20
    assert got["reconcile_seconds"]["mean"] == pytest.approx(0.25)
    assert got["reconcile_busy_ratio"] == pytest.approx(0.5)
    assert got["started_over"] == 3.0
    assert got["api_request_mean_seconds"] == {"delete jobs": 0.25}  # watches: not latency
    assert got["reconcile_cpu_seconds"]["count"] == 0  # not in either scrape
    assert set(got["reconcile_phase_seconds"]) == set(RECONCILE_PHASES)


def test_the_phases_row_says_each_phase_and_the_cpu() -> None:
    h = {"count": 2, "mean": 0.1, "p50": 0.1, "p99": 0.5}
    d = {"shape": "s", "operator_internals": {
        "reconcile_phase_seconds": dict.fromkeys(RECONCILE_PHASES, h),
        "reconcile_cpu_seconds": {"count": 2, "mean": 0.02, "p50": 0.02, "p99": 0.06}}}
    [(label, value, _, _)] = report._reconcile_phase_rows(d)
    assert label.startswith("s: a reconcile's phases")
    assert value == "; ".join(f"{p} 100 ms / 500 ms" for p in RECONCILE_PHASES) + \
        "; CPU 20 ms / 60 ms"
    assert report._reconcile_phase_rows({"shape": "s", "operator_internals": {}}) == []


def test_thread_cpu_is_the_phases_difference_by_name_most_first() -> None:
    from bench.detection import Phases, _thread_cpu

    phases = Phases(threads={"events": {"reconcile": 1.0, "informer-pods": 2.0},
                             "end": {"reconcile": 4.0, "informer-pods": 3.0, "new": 0.5}})
    got = _thread_cpu(phases)
    assert got == {"reconcile": 3.0, "informer-pods": 1.0, "new": 0.5}
    assert list(got) == ["reconcile", "informer-pods", "new"]


def test_the_api_servers_view_splits_a_requests_time_and_keeps_to_the_resources_asked() -> None:
    from bench.internals import server

    patch = 'verb="PATCH",resource="elastictrainingjobs",subresource="status",scope="resource"'
    lease = 'verb="PUT",resource="leases",subresource="",scope="resource"'
    start = {f"apiserver_request_duration_seconds_count{{{patch}}}": 10.0,
             f"apiserver_request_duration_seconds_sum{{{patch}}}": 5.0,
             f"apiserver_request_sli_duration_seconds_count{{{patch}}}": 10.0,
             f"apiserver_request_sli_duration_seconds_sum{{{patch}}}": 1.0}
    end = {f"apiserver_request_duration_seconds_count{{{patch}}}": 14.0,
           f"apiserver_request_duration_seconds_sum{{{patch}}}": 13.0,
           f"apiserver_request_sli_duration_seconds_count{{{patch}}}": 14.0,
           f"apiserver_request_sli_duration_seconds_sum{{{patch}}}": 2.0,
           f"apiserver_request_duration_seconds_count{{{lease}}}": 2.0,
           f"apiserver_request_duration_seconds_sum{{{lease}}}": 0.2,
           'apiserver_request_duration_seconds_count{verb="GET",resource="nodes",'
           'subresource=""}': 3.0,
           'apiserver_request_duration_seconds_count{verb="WATCH",resource="pods",'
           'subresource=""}': 3.0,
           'apiserver_flowcontrol_request_wait_duration_seconds_count{priority_level='
           '"exempt",execute="true"}': 4.0,
           'apiserver_flowcontrol_request_wait_duration_seconds_sum{priority_level='
           '"exempt",execute="true"}': 0.004}
    got = server(start, end)
    assert set(got["requests"]) == {"PATCH elastictrainingjobs/status", "PUT leases"}
    assert got["requests"]["PATCH elastictrainingjobs/status"]["count"] == 4
    assert got["requests"]["PATCH elastictrainingjobs/status"]["mean"] == pytest.approx(2.0)
    assert got["requests"]["PATCH elastictrainingjobs/status"]["sli_mean"] == pytest.approx(0.25)
    assert got["requests"]["PUT leases"]["sli_mean"] is None  # not scraped: not made up
    assert got["priority_level_wait_mean_seconds"] == {"exempt": pytest.approx(0.001)}
    assert server({}, end) == {}  # a failed scrape: no split, not a wrong one


def test_scale_rows_break_the_requests_down_and_say_the_load() -> None:
    d = {"shape": "1 job x 2 slices", "operator_slice_down_seconds": stats([0.5]),
         "jobset_ready_drop_seconds": stats([5.0]), "ratio_p50_operator_vs_jobset": 0.1,
         "ratio_p99_operator_vs_jobset": 0.1, "failures_detected": 2,
         "operator_cpu_seconds": {"startup": 1.0, "quiet": 1.0, "events": 1.0},
         "operator_requests": {"quiet_window_seconds": 30.0},
         "operator_rss_bytes": {"idle": 2**26, "peak": 2**27},
         "operator_cpu_seconds_per_1000_pods": {"per_slice_event": 0.5},
         "api_requests_per_slice_event": 6.0, "api_requests_per_slice_event_net_of_resync": 5.0,
         "api_requests_per_slice_event_by_kind": {
             "POST events": {"gross": 4.0, "net": 4.0}, "DELETE jobs": {"gross": 1.0, "net": 1.0},
             "PATCH leases": {"gross": 1.0, "net": 0.01}},
         "operator_internals": {
             "reconcile_seconds": {"count": 9, "mean": 0.2, "p50": 0.1, "p99": 0.9},
             "reconcile_busy_ratio": 0.25,
             "queue_wait_seconds": {"count": 9, "mean": 0.1, "p50": 0.1, "p99": 0.4},
             "slice_down_reaction_seconds": {"count": 2, "mean": 0.3, "p50": 0.3, "p99": 0.5},
             "status_writes": {"change": 6.0, "progress": 1.0, "deferred": 3.0},
             "api_request_mean_seconds": {"patch elastictrainingjobs/status": 4.0}},
         "api_server_internals": {"requests": {"PATCH elastictrainingjobs/status": {
             "count": 3, "mean": 0.6, "p99": 1.0, "sli_mean": 0.05}}},
         "load_average": {"events": [9.0, 8.0, 7.0], "end": [10.0, 8.5, 7.1]},
         "load_generator": {"target": 10.0, "load1_mean": 10.4, "load1_min": 9.0,
                            "load1_max": 12.0, "burners_mean": 4.2, "burners_max": 6,
                            "runnable_mean": 9.8, "runnable_max": 14.5}}
    rows = {row[0]: row[1] for row in report.scale_rows({"sizes": [d]}, {})}
    by_kind = next(v for k, v in rows.items() if "by verb and resource" in k)
    assert by_kind == "POST events 4.00, DELETE jobs 1.00"  # leases net to nothing
    share = next(v for k, v in rows.items() if "the operator's share" in k)
    assert share == "300 ms / 500 ms; 200 ms / 900 ms; 400 ms"
    assert next(v for k, v in rows.items() if "status writes" in k) == "3.00; 0.50; 1.50"
    assert next(v for k, v in rows.items() if "load average" in k) == \
        "[9.0, 8.0, 7.0]; [10.0, 8.5, 7.1]"
    assert next(v for k, v in rows.items() if "load generator" in k) == \
        "10.4 (9.0-12.0); 4.2 (6); 9.8 (14.5)"
    # The status PATCH: 4 s as the operator timed it, 0.6 s of it in the API server.
    assert next(v for k, v in rows.items() if "a status write (PATCH)" in k) == \
        "4.00 s; 600 ms; 50 ms"


def _overhead_config() -> dict:
    s = stats([0.005, 0.006])
    return {
        "plain_step_seconds": s, "elastic_step_seconds": s,
        "ratio_mean_step_elastic_vs_plain": 1.02, "ratio_mean_step_per_round": [1.01, 1.03],
        "ratio_median_step_elastic_vs_plain": 1.0, "ratio_median_step_per_round": [1.0, 1.0],
        "ratio_cpu_per_step_elastic_vs_plain": 1.04, "ratio_cpu_per_step_per_round": [1.04],
        "snapshot_period_per_round": [28, 31], "checkpoint_period_per_round": [700, 640],
        "snapshot_overhead_percent_per_round": [1.6, 1.84],
        "checkpoint_overhead_percent_per_round": [1.99, 2.0], "budget_percent": 2.0,
    }


def _defaults() -> dict:
    def side(lost: list[int], sources: dict[str, int]) -> dict:
        return {"steps_lost": stats(lost), "restore_sources": sources,
                "mean_step_before_failure_seconds": stats([0.005]),
                "wall_seconds": stats([3.0])}

    return {"config": "tiny", "slices": 4, "steps": 300, "trials": 20,
            "defaults": side([3, 9, 20], {"snapshot": 20}),
            "snapshots_off": side([40, 150, 260], {"checkpoint": 12, "none": 8}),
            "snapshot_period_at_failure": stats([20, 28, 31]),
            "losses_within_one_snapshot_period": 20,
            "ratio_mean_step_before_failure_defaults_vs_off": 1.01,
            "ratio_wall_defaults_vs_off": 0.8,
            "ratio_steady_step_defaults_vs_off_per_trial": [1.01, 1.03],
            "ratio_steady_step_defaults_vs_off": 1.02,
            "every_step": side([0, 0, 0], {"snapshot": 20}),
            "ratio_steady_step_every_step_vs_off_per_trial": [1.04, 1.06],
            "ratio_steady_step_every_step_vs_off": 1.05, "ratio_wall_every_step_vs_off": 0.7}


def test_overhead_and_defaults_sections(tmp_path: Path) -> None:
    summary = _summary()
    summary["benchmarks"]["overhead"] = {"measured_at": "T3", "machine": {
        "loadavg_1m_5m_15m": [3.0, 4.0, 5.0]}, "result": {"configs": {
            "tiny": _overhead_config()}}}
    summary["benchmarks"]["defaults"] = {"measured_at": "T4", "result": _defaults()}
    text = report.table(summary)
    assert "every default: snapshot every 28, 31, checkpoint every 700, 640 step(s) by " \
        "round, chosen within 2.0 % each" in text
    assert "| 1.02 (rounds: 1.01, 1.03) |" in text
    assert "| 1.6, 1.8 / 2.0, 2.0 | budget 2.0 each | - |" in text
    assert "load average [3.0, 4.0, 5.0]" in text
    assert "| **A job with every default losing a slice** (measured T4) |" in text
    assert "| 9 / 20 (20 snapshot) | 150 / 260 (12 checkpoint, 8 none) | - |" in text
    assert "28 / 31; 20 of 20" in text
    assert "(once both chose their cadences; 2 runs with 30 steps of it before the loss), " \
        "median of per-run ratios |  |  | 1.02 |" in text
    assert "steps lost p50 / max (baseline: snapshots off) | 0 / 0 (20 snapshot) | " \
        "150 / 260 (12 checkpoint, 8 none) | - |" in text
    assert "the per-step copy's overhead; 2 runs), median of per-run ratios |  |  | 1.05 |" \
        in text


def test_an_overhead_result_of_the_fixed_period_benchmark_still_renders() -> None:
    old = {k: v for k, v in _overhead_config().items() if "per_round" not in k
           or k.startswith("ratio")}
    old.update({"checkpoint_period": 20, "snapshot_period": 5})
    rows = report.overhead_rows({"configs": {"small": old}}, {})
    assert "async checkpoint every 20 + snapshot every 5" in rows[0][0]


def test_the_hang_benchmark_reads_its_figures_from_the_runs_summary() -> None:
    from bench import hang

    t0 = 1000.0
    summary = {
        "step_times": [[i, t0 + 0.1 * i] for i in range(1, 53)],
        "elastic_events": [{
            "kind": "slice_down", "error": "SliceHung: slice 2 hung in step 53 (...)",
            "fault_at": t0 + 5.2, "detected_at": t0 + 10.2, "slices_back_at": t0 + 12.2,
            "resumed_at": t0 + 12.6, "restore_source": "snapshot", "steps_lost": 2}],
        "stalls": [{"step": 53}], "exit_code": 0,
    }
    run = hang.reduce(summary, 0.1, 53)
    assert run["median_step_seconds"] == pytest.approx(0.1)
    assert (run["detected_seconds"], run["replaced_seconds"], run["resumed_seconds"]) == (
        pytest.approx(5.0), pytest.approx(7.0), pytest.approx(7.4))
    assert run["detected_steps"] == pytest.approx(50.0)
    result = {"runs": [run], "anchors": {"nvrx_soft_timeout_seconds": 60.0,
                                         "collective_timeout_seconds": 600.0},
              "ratio_detected_vs_nvrx": [5.0 / 60], "ratio_resumed_vs_collective_timeout":
              [7.4 / 600]}
    detected, resumed = report.hang_rows(result, {})
    assert detected[1:] == ("5.00 s (50.0 steps)", "60.00 s", "0.083")
    assert resumed[1].endswith("7.40 s (74.0 steps)") and resumed[2:] == ("600 s", "0.012")
    with pytest.raises(RuntimeError, match="SliceHung"):
        hang.reduce({**summary, "elastic_events": []}, 0.1, 53)


def test_the_slowest_detections_say_the_burners_running_when_the_pod_failed() -> None:
    from bench.detection import Timeline, slowest_detections
    from bench.load import Sample

    tl = Timeline()
    for i, (failed, seen) in enumerate([(100.0, 100.4), (105.0, 107.5), (112.0, 112.1)]):
        event = ("job", i)
        tl.injected[event], tl.pod_failed[event], tl.operator[event] = failed - 1, failed, seen
    tl.injected[("job", 3)] = 120.0  # injected, never seen: not among them
    # A sample records the burners run over the period up to it: 3 over (95, 104].
    samples = [Sample(95.0, 9.0, 8), Sample(104.0, 10.5, 3), Sample(110.0, 11.0, 2)]
    got = slowest_detections(tl, samples, n=2)
    assert got == [{"seconds": 2.5, "after_first_injection_s": 6.0, "burners": 2, "load1": 11.0},
                   {"seconds": 0.4, "after_first_injection_s": 1.0, "burners": 3, "load1": 10.5}]
    # After the generator's last sample nothing is known of the burners.
    assert slowest_detections(tl, [Sample(50.0, 1.0, 1)], n=1)[0]["burners"] is None
    [(label, value, _, _)] = report._slowest_rows({"shape": "s", "slowest_detections": got})
    assert label.startswith("s: the slowest detections")
    assert value == "2.50 s at +6 s, 2 burners; 400 ms at +1 s, 3 burners"
    assert report._slowest_rows({"shape": "s"}) == []


def _worker_job(index: int, ready: int, failed: int = 0) -> dict[str, object]:
    from elastic_api.names import JOB_INDEX_LABEL, JOB_NAME_LABEL, REPLICATED_JOB_LABEL

    return {"metadata": {"labels": {REPLICATED_JOB_LABEL: "worker", JOB_NAME_LABEL: "big",
                                    JOB_INDEX_LABEL: str(index)}},
            "status": {"ready": ready, "failed": failed}}


def _etj(state: str, restarts: int) -> dict[str, object]:
    return {"metadata": {"name": "big"}, "status": {"slicesReady": 1, "slices": [
        {"index": 0, "state": state, "restarts": restarts}]}}


def test_ready_again_is_timed_for_ours_and_for_the_job_controller_alone() -> None:
    """Ours: the slice Ready in the job's status after the operator counted it down. The
    Job controller's: its Job counting every host ready again after the count dropped;
    a Job still at full count after the injection (not yet noticed) is not a recovery."""
    from bench.detection import Shape, Timeline, _handlers, _latencies

    shape = Shape(1, 1, "2x4", "simulated")  # 2 hosts
    tl = Timeline()
    on = _handlers(tl, shape)
    on["batch jobs"](_worker_job(0, ready=2), 1.0)
    on["jobs"](_etj("Ready", 0), 1.0)
    tl.arm(("big", 0), "victim", 1)
    tl.pod_failed[("big", 0)] = 10.0
    on["batch jobs"](_worker_job(0, ready=2), 10.1)  # not noticed yet
    on["jobs"](_etj("Ready", 0), 10.1)  # nor by us
    on["batch jobs"](_worker_job(0, ready=1, failed=1), 10.2)
    on["jobs"](_etj("Down", 1), 10.3)
    on["jobs"](_etj("Restarting", 1), 11.0)
    on["batch jobs"](_worker_job(0, ready=0), 12.0)  # JobSet's new Job, no pod ready yet
    on["batch jobs"](_worker_job(0, ready=2), 40.0)
    on["jobs"](_etj("Ready", 1), 40.5)
    on["batch jobs"](_worker_job(0, ready=1), 50.0)  # later churn is not this event's
    assert (tl.job[("big", 0)], tl.operator[("big", 0)]) == (10.2, 10.3)
    lat = _latencies(tl)
    assert lat["job_ready_again"] == [pytest.approx(30.0)]
    assert lat["ready_again"] == [pytest.approx(30.5)]
    assert lat["ready_again_paired"] == [pytest.approx(0.5)]


def test_the_ready_again_row_puts_ours_beside_the_job_controller() -> None:
    d = {"shape": "s", "slice_ready_again_seconds": stats([30.5, 60.0]),
         "job_ready_again_seconds": stats([30.0, 59.0]),
         "ready_again_minus_job_paired_seconds": stats([0.5, 1.0])}
    [(label, ours, base, rel)] = [r for r in report._scale_detail_rows(d)
                                  if "Ready again" in r[0]]
    assert "n=2" in label and "the Job controller alone" in label
    assert (ours, base) == ("45.25 s / 60.00 s; 750 ms / 1.00 s", "44.50 s / 59.00 s")
    assert rel.startswith("1.0")
    assert report._s(-21.5009) == "-21.50 s" and report._s(-0.2) == "-200 ms"


def test_the_in_place_round_sits_beside_the_recreation_of_the_same_slices() -> None:
    d = {"shape": "s", "slice_ready_again_seconds": stats([200.0, 240.0]),
         "job_ready_again_seconds": stats([190.0]),
         "ready_again_minus_job_paired_seconds": stats([10.0]),
         "api_requests_per_slice_event": 7.0,
         "api_requests_per_slice_event_every_client_until_ready": 9000.0,
         "in_place": {"slice_ready_again_in_place_seconds": stats([1.0, 3.0]),
                      "pods_kept": 2, "slices_restarted_in_place": 2,
                      "operator_requests_per_event": 8.0,
                      "api_requests_per_event_every_client": 30.0}}
    rows = [r for r in report._scale_detail_rows(d) if "in place" in r[0]]
    assert [r[1:] for r in rows] == [
        ("2.00 s / 3.00 s", "220 s / 240 s", "0.009"),
        ("8.0; 30.0", "7.0; 9000.0", "0.003")]
    assert "2 pods kept, 2 RestartInPlace" in rows[0][0]
    d["in_place"] = {"error": "no slice had a Running, Ready host 0 to restart"}
    assert [r[1] for r in report._scale_detail_rows(d) if "in place" in r[0]] == [
        "no slice had a Running, Ready host 0 to restart"]


def test_timeline_puts_a_rounds_records_aside_and_back() -> None:
    from bench.detection import Timeline

    tl = Timeline()
    tl.arm(("big", 0), "victim", 1)
    tl.operator[("big", 0)] = 3.0
    first = tl.forget_events()
    assert tl.injected == {} and tl.operator == {} and tl.victims == {}
    tl.arm(("big", 0), "other", 1)
    tl.restore_events(first)
    assert tl.victims == {("big", 0): "victim"} and tl.operator == {("big", 0): 3.0}


def test_the_job_objects_size_is_its_compact_json_at_running_and_at_most() -> None:
    from bench.detection import Shape, Timeline, _handlers

    tl = Timeline()
    on = _handlers(tl, Shape(1, 1, "2x4", "simulated"))
    starting, running = _etj("Down", 0), _etj("Ready", 0)
    starting["status"]["slicesReady"] = 0  # type: ignore[index]
    starting["status"]["message"] = "x" * 1000  # type: ignore[index]
    on["jobs"](starting, 1.0)
    on["jobs"](running, 2.0)
    compact = len(json.dumps(running, separators=(",", ":")))
    assert tl.job_bytes_running == {"big": compact}
    assert tl.job_bytes_peak["big"] > compact + 1000
    [row] = report._job_size_rows({"shape": "s", "job_object_bytes": {
        "running": 170 * 1024, "peak": 673 * 1024}})
    assert row[1] == "170.0 KiB -> 673.0 KiB; 44%"
    assert report._job_size_rows({"shape": "s"}) == []


def test_the_load_row_says_how_the_operator_was_placed_against_the_burners() -> None:
    node = {"node_cpus": "0", "operator_request_m": 500}
    assert "CPU 0, the operator's request 500m" in report._placement({"node_model": node})
    assert report._placement({"operator_nice": -5}) == ", the operator at nice -5"
    assert report._placement({"operator_nice": 0, "node_model": None}) == ""
    assert report._placement({"node_model": None, "node_model_unavailable": "it needs root"}
                             ) == " (the node not modelled: it needs root)"
