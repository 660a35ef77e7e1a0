"""Trainer benchmarks on CPU (simulated slices): recovery, overhead, restore throughput.

Each measurement runs `python -m bench.trainer_worker` in a fresh process; this module
builds the specs and reduces the raw results to the figures in the table.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import mean, median
from typing import Any

from bench.common import REPO, ratio, stats


def _log(msg: str) -> None:
    print(f"[trainer] {msg}", file=sys.stderr, flush=True)


def run_worker(spec: dict[str, Any], timeout: float = 900) -> dict[str, Any]:
    """Run one worker spec in a fresh process; its JSON result."""
    with tempfile.TemporaryDirectory(prefix="etj-bench-") as tmp:
        out = Path(tmp) / "result.json"
        spec = {"workdir": str(Path(tmp) / "work"), **spec}
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "bench.trainer_worker", json.dumps(spec),
                               str(out)], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"bench worker {spec['kind']} ({spec.get('config')}) failed "
                               f"with {proc.returncode}:\n{proc.stderr[-3000:]}")
        result: dict[str, Any] = json.loads(out.read_text())
        result["process_seconds"] = round(time.monotonic() - t0, 2)
        return result


# ------------------------------------------------------------------------------- recovery

def _only_event(run: dict[str, Any]) -> dict[str, Any]:
    events = run["events"]
    if not events:
        raise RuntimeError(f"no resumed slice-down event in the run: {run}")
    first: dict[str, Any] = events[0]
    return first


def _resize_event(run: dict[str, Any]) -> dict[str, Any]:
    event = _only_event(run)
    if event["active_slices_after"] != 1:
        raise RuntimeError(f"the resize run did not shrink the mesh to one slice: {event}")
    return event


def recovery(quick: bool) -> dict[str, Any]:
    configs = ["tiny"] if quick else ["tiny", "small"]
    steps = 16 if quick else 50
    fail = "13:1" if quick else "37:1"
    # Replica resize: slice 1 stays down until the loop reaches a later step, so the mesh
    # shrinks to one slice however long a step or the compile takes. (A time-based fault
    # could end before the slower `small` run even looked, and then no resize happened.)
    resize_fail = "13-15:1" if quick else "37-45:1"
    ckpt_period = 5 if quick else 20
    snap_period = 2 if quick else 5
    base = {"kind": "recovery", "steps": steps, "checkpoint_period": ckpt_period,
            "fail_at": [fail], "fault_duration": 1.0}
    out: dict[str, Any] = {"fail_at": fail, "resize_fail_at": resize_fail,
                           "checkpoint_period": ckpt_period,
                           "snapshot_period": snap_period, "fault_duration_seconds": 1.0,
                           "configs": {}}
    for config in configs:
        _log(f"recovery {config}: restore from snapshot vs from checkpoint")
        snap = run_worker({**base, "config": config, "snapshot_period": snap_period,
                           "cache_dir": None})
        ckpt = run_worker({**base, "config": config, "snapshot_period": 0, "cache_dir": None})
        # Replica resize: the mesh shrinks to 1 slice, so the step is compiled during the
        # recovery. Without the persistent cache, then with a cache a previous run filled.
        _log(f"recovery {config}: replica resize with and without the compilation cache")
        resize = {**base, "config": config, "snapshot_period": snap_period, "min_slices": 1,
                  "fail_at": [resize_fail]}
        no_cache = run_worker({**resize, "cache_dir": None})
        cache_dir = tempfile.mkdtemp(prefix="etj-bench-jaxcache-")
        try:
            run_worker({**resize, "cache_dir": cache_dir})  # fills the cache
            warm = run_worker({**resize, "cache_dir": cache_dir})
        finally:
            shutil.rmtree(cache_dir, ignore_errors=True)
        e_snap, e_ckpt = _only_event(snap), _only_event(ckpt)
        e_cold, e_warm = _resize_event(no_cache), _resize_event(warm)
        out["configs"][config] = {
            "steady_step_seconds": snap["steady_step_seconds"],
            "from_snapshot": e_snap,
            "from_checkpoint": e_ckpt,
            "ratio_restore_seconds_snapshot_vs_checkpoint":
                ratio(e_snap["restore_seconds"], e_ckpt["restore_seconds"]),
            "ratio_detect_to_resumed_snapshot_vs_checkpoint":
                ratio(e_snap["detect_to_resumed_seconds"], e_ckpt["detect_to_resumed_seconds"]),
            "resize_without_compilation_cache": e_cold,
            "resize_with_warm_compilation_cache": e_warm,
            "ratio_compile_seconds_cache_vs_none":
                ratio(e_warm["compile_seconds"], e_cold["compile_seconds"]),
            "ratio_detect_to_resumed_cache_vs_none":
                ratio(e_warm["detect_to_resumed_seconds"], e_cold["detect_to_resumed_seconds"]),
        }
    _log("recovery: steps lost against the snapshot period")
    periods = [1, 4] if quick else [1, 2, 5, 10, 0]
    sweep = run_worker({"kind": "steps_lost_sweep", "config": "tiny",
                        "steps": 20 if quick else 45, "checkpoint_period": 10 if quick else 20,
                        "fail_at": ["15:1" if quick else "38:1"], "fault_duration": 0.5,
                        "snapshot_periods": periods})
    out["steps_lost_vs_snapshot_period"] = [
        {"snapshot_period": p["snapshot_period"], "steps_lost": p["steps_lost"],
         "restore_source": p["restore_source"], "restore_seconds": p["restore_seconds"],
         "detect_to_resumed_seconds": p["detect_to_resumed_seconds"]}
        for p in sweep["points"]
    ]
    out["steps_lost_sweep_checkpoint_period"] = sweep["checkpoint_period"]
    out["steps_lost_sweep_fail_at"] = sweep["fail_at"][0]
    return out


# ------------------------------------------------------------------------------- overhead

def overhead(quick: bool) -> dict[str, Any]:
    configs = ["tiny"] if quick else ["tiny", "small"]
    out: dict[str, Any] = {"configs": {}}
    for config in configs:
        _log(f"overhead {config}: elastic loop vs plain jit loop")
        raw = run_worker({"kind": "overhead", "config": config,
                          # Steady state: the steps through the first save are dropped
                          # (the first Orbax save sets up its threads and directories).
                          "steps": 25 if quick else 102, "warmup": 12 if quick else 22,
                          "checkpoint_period": 10 if quick else 20,
                          "snapshot_period": 5, "rounds": 1 if quick else 7},
                         timeout=5400)
        plain_means = [mean(r["plain"]) for r in raw["rounds"]]
        elastic_means = [mean(r["elastic"]) for r in raw["rounds"]]
        plain_medians = [median(r["plain"]) for r in raw["rounds"]]
        elastic_medians = [median(r["elastic"]) for r in raw["rounds"]]
        out["configs"][config] = {
            "steps": raw["steps"], "warmup_steps_dropped": raw["warmup_steps_dropped"],
            "checkpoint_period": raw["checkpoint_period"],
            "snapshot_period": raw["snapshot_period"], "rounds": len(raw["rounds"]),
            "plain_step_seconds": stats([d for r in raw["rounds"] for d in r["plain"]]),
            "elastic_step_seconds": stats([d for r in raw["rounds"] for d in r["elastic"]]),
            # Per round ratios, then their median: each round runs both loops back to back.
            "ratio_mean_step_per_round": [
                e / p for e, p in zip(elastic_means, plain_means, strict=True)],
            "ratio_mean_step_elastic_vs_plain": median(
                [e / p for e, p in zip(elastic_means, plain_means, strict=True)]),
            "ratio_median_step_elastic_vs_plain": median(
                [e / p for e, p in zip(elastic_medians, plain_medians, strict=True)]),
            "ratio_median_step_per_round": [
                e / p for e, p in zip(elastic_medians, plain_medians, strict=True)],
            # CPU seconds of the whole process per step (every thread), which the load of
            # other processes moves much less than wall time.
            "ratio_cpu_per_step_per_round": [
                ratio(r["elastic_cpu_per_step"], r["plain_cpu_per_step"])
                for r in raw["rounds"]],
            "ratio_cpu_per_step_elastic_vs_plain": median(
                [x for r in raw["rounds"]
                 if (x := ratio(r["elastic_cpu_per_step"], r["plain_cpu_per_step"]))
                 is not None] or [float("nan")]),
            "load_average_per_round": [r["load_average"] for r in raw["rounds"]],
        }
    return out


# ------------------------------------------------------------------------ restore throughput

def restore(quick: bool) -> dict[str, Any]:
    size_mb = 16 if quick else 384
    _log(f"restore throughput: {size_mb} MiB checkpoint, orbax vs plain reads")
    raw = run_worker({"kind": "restore_throughput", "size_mb": size_mb,
                      "repeats": 2 if quick else 3})
    out: dict[str, Any] = {k: raw[k] for k in ("checkpoint_bytes", "state_bytes", "files",
                                                "devices")}
    mib = raw["checkpoint_bytes"] / 2**20
    for mode in ("cold", "warm"):
        m = raw[mode]
        plain_s, orbax_s = median(m["plain_read_seconds"]), median(m["orbax_restore_seconds"])
        out[mode] = {
            "plain_read_mib_per_s": mib / plain_s if plain_s else None,
            "orbax_restore_mib_per_s": mib / orbax_s if orbax_s else None,
            "plain_read_seconds": m["plain_read_seconds"],
            "orbax_restore_seconds": m["orbax_restore_seconds"],
            "ratio_orbax_vs_plain_read_throughput": ratio(plain_s, orbax_s),
            "page_cache_evicted": m["page_cache_evicted"],
        }
    return out
