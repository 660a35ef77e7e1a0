"""What a quick benchmark run must hold (`python -m bench --quick`), one checker per
benchmark: shared by the guard in `make test` (test_bench_guard.py: a few benchmarks) and
the whole quick run in `make test-long` (test_bench_quick.py). No timing is asserted: only
that each result has every key with a sane type and that the counts add up."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

STATS_KEYS = {"n", "p50", "p99", "mean", "min", "max"}
PHASE_KEYS = {"failed_step", "restored_from_step", "restore_source", "steps_lost",
              "detect_seconds", "wait_seconds", "restore_seconds", "compile_seconds",
              "first_step_seconds", "other_seconds", "detect_to_resumed_seconds",
              "compilation_cache_hits"}


def _num(value: Any, *, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    assert isinstance(value, int | float) and not isinstance(value, bool), value
    assert math.isfinite(value), value


def _nonneg(value: Any) -> None:
    _num(value)
    assert value >= 0, value


def _stats(value: Any, n: int | None = None, *, signed: bool = False) -> None:
    """signed: a latency measured between two watches (the anchor is the benchmark's own
    pod watch; the other side's watch may deliver first, by a few ms), so it may be
    negative; a duration measured on one clock may not."""
    assert set(value) == STATS_KEYS, value
    if n is not None:
        assert value["n"] == n, value
    if value["n"]:
        for key in STATS_KEYS - {"n"}:
            (_num if signed else _nonneg)(value[key])
        assert value["min"] <= value["p50"] <= value["p99"] <= value["max"], value


def _phases(e: dict[str, Any]) -> None:
    assert set(e) >= PHASE_KEYS, e
    for key in ("wait_seconds", "restore_seconds", "compile_seconds", "first_step_seconds",
                "other_seconds", "detect_to_resumed_seconds"):
        _nonneg(e[key])
    assert e["restore_source"] in ("snapshot", "checkpoint", "none")
    assert e["steps_lost"] == e["failed_step"] - e["restored_from_step"] >= 0



def run_quick(out_dir: Path, only: tuple[str, ...], timeout: float) -> dict[str, Any]:
    """`python -m bench --quick --only ONLY` into `out_dir`: its summary, checked to hold
    each benchmark's own result file and not to have rewritten the docs table."""
    docs = out_dir / "benchmarks.md"
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--only", ",".join(only),
         "--results-dir", str(out_dir), "--docs", str(docs)],
        cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert not docs.exists(), "a quick run must not rewrite the docs table"
    summary: dict[str, Any] = json.loads((out_dir / "summary-quick.json").read_text())
    assert summary["quick"] is True
    assert set(summary["benchmarks"]) == set(only)
    for name in only:
        entry = summary["benchmarks"][name]
        assert json.loads((out_dir / f"{name}-quick.json").read_text()) == entry
        assert entry["quick"] is True and isinstance(entry["measured_at"], str)
        assert entry["machine"]["cpus"] >= 1
    return summary


def check_hang(results: dict[str, Any]) -> None:
    [run] = results["benchmarks"]["hang"]["result"]["runs"]
    assert run["error"].startswith("SliceHung: slice 2 hung in step 23")
    assert 0 < run["detected_seconds"] <= run["replaced_seconds"] <= run["resumed_seconds"]
    assert run["exit_code"] == 0 and run["detected_steps"] > 0


def check_detection(results: dict[str, Any]) -> None:
    d = results["benchmarks"]["detection"]["result"]
    assert (d["n_jobs"], d["slices_per_job"], d["hosts_per_slice"]) == (2, 4, 4)
    assert d["pods"] == 2 * (4 * 4 + 1)
    assert d["failures_injected"] == d["failures_detected"] == 2, d["errors"]
    _stats(d["operator_slice_down_seconds"], n=2, signed=True)
    _stats(d["jobset_ready_drop_seconds"], n=2, signed=True)
    _stats(d["job_failed_count_seconds"], signed=True)
    paired = d["operator_minus_jobset_paired_seconds"]  # may be negative: a difference
    assert set(paired) == STATS_KEYS and paired["n"] == 2
    for key in STATS_KEYS - {"n"}:
        _num(paired[key])
    for key in ("ratio_p50_operator_vs_jobset", "ratio_p99_operator_vs_jobset"):
        _nonneg(d[key])
    cpu = d["operator_cpu_seconds_per_1000_pods"]
    _nonneg(cpu["startup"])
    _nonneg(cpu["quiet_per_minute"])
    rss = d["operator_rss_bytes"]
    assert 0 < rss["idle"] <= rss["peak"] and rss["steady"] <= rss["peak"]
    _nonneg(d["operator_peak_rss_mib_per_1000_pods"])
    # Every slice event costs the operator at least a status patch.
    events = d["operator_requests"]["events"]
    assert events.get("PATCH elastictrainingjobs/status", 0) >= 2, events
    assert d["api_requests_per_slice_event"] >= 1
    _num(d["api_requests_per_slice_event_net_of_resync"])
    assert isinstance(d["errors"], list)


def check_scale(results: dict[str, Any]) -> None:
    """One job of 3 slices x 2 hosts, packed: every slice failed once, in turn."""
    (d,) = results["benchmarks"]["scale"]["result"]["sizes"]
    assert "error" not in d, d
    assert (d["n_jobs"], d["slices_per_job"], d["hosts_per_slice"]) == (1, 3, 2)
    assert d["backend"] == "simulated" and d["pods"] == 7 and d["tpu_node_pools"] == 0
    assert d["failures_injected"] == d["failures_detected"] == 3, d["errors"]
    _stats(d["operator_slice_down_seconds"], n=3, signed=True)
    _stats(d["jobset_ready_drop_seconds"], n=3, signed=True)  # the Job's failed count, at least
    # Each slice back to Ready, ours and the Job controller's own count (JobSet's new Job
    # starts from none ready), and ours minus it (the Job's count is batched: either first).
    _stats(d["slice_ready_again_seconds"], n=3, signed=True)
    _stats(d["job_ready_again_seconds"], n=3, signed=True)
    _stats(d["ready_again_minus_job_paired_seconds"], n=3, signed=True)
    size = d["job_object_bytes"]
    assert 0 < size["running"] <= size["peak"] < 1.5 * 2**20, size
    events = d["operator_requests"]["events"]
    # Served from the cache: a slice event lists no pods.
    assert "LIST pods" not in events and events.get("PATCH elastictrainingjobs/status", 0) >= 3
    _nonneg(d["api_requests_per_slice_event"])


def check_recovery(results: dict[str, Any]) -> None:
    r = results["benchmarks"]["recovery"]["result"]
    assert set(r["configs"]) == {"tiny"}
    c = r["configs"]["tiny"]
    for key in ("from_snapshot", "from_checkpoint", "resize_without_compilation_cache",
                "resize_with_warm_compilation_cache"):
        _phases(c[key])
    assert c["from_snapshot"]["restore_source"] == "snapshot"
    assert c["from_checkpoint"]["restore_source"] == "checkpoint"
    assert c["from_snapshot"]["steps_lost"] <= c["from_checkpoint"]["steps_lost"]
    # The warm run found its programs in the persistent cache; the other compiled them.
    assert c["resize_with_warm_compilation_cache"]["compilation_cache_hits"] >= 1
    assert c["resize_without_compilation_cache"]["compilation_cache_hits"] == 0
    for key in ("ratio_restore_seconds_snapshot_vs_checkpoint",
                "ratio_detect_to_resumed_snapshot_vs_checkpoint",
                "ratio_detect_to_resumed_cache_vs_none"):
        _nonneg(c[key])
    _num(c["ratio_compile_seconds_cache_vs_none"], allow_none=True)
    sweep = r["steps_lost_vs_snapshot_period"]
    assert [p["snapshot_period"] for p in sweep] == [1, 4]
    assert sweep[0]["steps_lost"] == 0 and sweep[0]["restore_source"] == "snapshot"
    assert all(isinstance(p["steps_lost"], int) and p["steps_lost"] >= 0 for p in sweep)


def check_overhead(results: dict[str, Any]) -> None:
    o = results["benchmarks"]["overhead"]["result"]
    c = o["configs"]["tiny"]
    # The window starts once both cadences are chosen, the same step for both loops.
    firsts = c["window_first_step_per_round"]
    assert len(firsts) == c["rounds"] and all(f > c["warmup_steps_dropped"] for f in firsts)
    steady = sum(c["steps"] - first + 1 for first in firsts)
    _stats(c["plain_step_seconds"], n=steady)
    _stats(c["elastic_step_seconds"], n=steady)
    for key in ("ratio_mean_step_elastic_vs_plain", "ratio_median_step_elastic_vs_plain",
                "budget_percent"):
        _nonneg(c[key])
    # CPU is sampled every 0.1 s: a quick round's window may hold no sample (None), and
    # the rounds that do hold one give a ratio.
    cpu = c["ratio_cpu_per_step_elastic_vs_plain"]
    assert (cpu is None) == all(r is None for r in c["ratio_cpu_per_step_per_round"]), c
    _num(cpu, allow_none=True)
    for period in c["snapshot_period_per_round"] + c["checkpoint_period_per_round"]:
        assert isinstance(period, int) and period >= 1, c
    for copies in c["copies_in_window_per_round"]:
        assert set(copies) == {"snapshots", "checkpoints"}
    profile = c["profile"]
    assert set(profile) == {"plain (loss read one step behind)",
                            "plain (loss read after each step: a device sync per step)",
                            "elastic (defaults)"}
    for run in profile.values():
        _nonneg(run["mean_step_ms"])
        # Sampled every 0.1 s: a quick run's window may hold too few samples for any.
        for cpu in run["cpu_ms_per_step_by_thread"].values():
            _nonneg(cpu)
        for part in run["training_thread_ms_per_step"].values():
            _nonneg(part["wall_ms"])
            _nonneg(part["cpu_ms"])


def check_defaults(results: dict[str, Any]) -> None:
    d = results["benchmarks"]["defaults"]["result"]
    assert d["trials"] == len(d["runs"]) >= 1
    for side in ("defaults", "snapshots_off"):
        _stats(d[side]["steps_lost"], n=d["trials"])
        assert sum(d[side]["restore_sources"].values()) == d["trials"]
        assert set(d[side]["restore_sources"]) <= {"snapshot", "checkpoint", "none"}
    assert "snapshot" not in d["snapshots_off"]["restore_sources"]
    assert 0 <= d["losses_within_one_snapshot_period"] <= d["trials"]
    _stats(d["snapshot_period_at_failure"], n=d["trials"])
    _nonneg(d["ratio_wall_defaults_vs_off"])
    for run in d["runs"]:
        assert run["defaults"]["failed_step"] == run["snapshots_off"]["failed_step"]
    if "every_step" in d:  # a snapshot every step: only the step in flight is redone
        _stats(d["every_step"]["steps_lost"], n=d["trials"])
        # (none: a loss during step 1, before any copy)
        assert set(d["every_step"]["restore_sources"]) <= {"snapshot", "none"}
        assert d["every_step"]["steps_lost"]["max"] == 0
        _nonneg(d["ratio_wall_every_step_vs_off"])


def check_restore(results: dict[str, Any]) -> None:
    r = results["benchmarks"]["restore"]["result"]
    assert r["checkpoint_bytes"] > 0 and r["files"] >= 1
    # Random values do not compress: the checkpoint is about the size of the state.
    assert r["checkpoint_bytes"] >= 0.9 * r["state_bytes"]
    for mode in ("cold", "warm"):
        m = r[mode]
        for key in ("plain_read_mib_per_s", "orbax_restore_mib_per_s",
                    "ratio_orbax_vs_plain_read_throughput"):
            _nonneg(m[key])
        assert len(m["plain_read_seconds"]) == len(m["orbax_restore_seconds"]) >= 1
        assert isinstance(m["page_cache_evicted"], bool)


def check_replacement(results: dict[str, Any]) -> None:
    r = results["benchmarks"]["replacement"]["result"]
    assert r["consecutive_failures"] == 2
    for side in ("ours", "baseline"):
        seconds = r["consecutive_seconds"][side]
        assert isinstance(seconds, list) and 1 <= len(seconds) <= 2, seconds
        for value in seconds:
            _nonneg(value)
        node = r["dead_node"][side]
        assert isinstance(node["node"], str)
        _num(node["seconds"], allow_none=True)
    # Ours came back both times, and from the dead node, within the quick timeouts.
    assert len(r["consecutive_seconds"]["ours"]) == 2
    _nonneg(r["last_failure_seconds"]["ours"])
    _nonneg(r["dead_node"]["ours"]["seconds"])
    _num(r["ratio_last_failure_ours_vs_baseline"], allow_none=True)
    _nonneg(r["ratio_dead_node_ours_vs_baseline_at_most"])
    _nonneg(r["dead_node_timeout_seconds"])


CHECKS: dict[str, Callable[[dict[str, Any]], None]] = {
    "detection": check_detection, "scale": check_scale, "recovery": check_recovery,
    "overhead": check_overhead, "defaults": check_defaults, "restore": check_restore,
    "replacement": check_replacement, "hang": check_hang}
