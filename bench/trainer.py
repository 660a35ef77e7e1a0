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


def run_worker(spec: dict[str, Any], timeout: float = 900,
               env_extra: dict[str, str] | None = None) -> dict[str, Any]:
    """Run one worker spec in a fresh process; its JSON result."""
    with tempfile.TemporaryDirectory(prefix="etj-bench-") as tmp:
        out = Path(tmp) / "result.json"
        spec = {"workdir": str(Path(tmp) / "work"), **spec}
        env = {**os.environ, **(env_extra or {}), "PYTHONPATH": os.pathsep.join(
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

# Steps per loop and rounds: enough that the chosen checkpoint period (hundreds of tiny
# steps, tens of small ones) comes round a few times in the window.
OVERHEAD_RUNS = {"tiny": {"steps": 2000, "warmup": 30, "rounds": 7},
                 "small": {"steps": 160, "warmup": 12, "rounds": 5}}
OVERHEAD_QUICK = {"steps": 40, "warmup": 10, "rounds": 1}


def _ratios(rounds: list[dict[str, Any]], of: Any) -> list[float]:
    return [of(r["elastic"]) / of(r["plain"]) for r in rounds]


def _median_or_none(values: list[float | None]) -> float | None:
    known = [x for x in values if x is not None]
    return median(known) if known else None


def _overhead_config(raw: dict[str, Any]) -> dict[str, Any]:
    rounds = raw["rounds"]
    mean_ratios, median_ratios = _ratios(rounds, mean), _ratios(rounds, median)
    cpu_ratios = [ratio(r["elastic_cpu_per_step"], r["plain_cpu_per_step"]) for r in rounds]
    snap = [r["snapshot_cadence"] for r in rounds]
    ckpt = [r["checkpoint_cadence"] for r in rounds]
    return {
        "steps": raw["steps"], "warmup_steps_dropped": raw["warmup_steps"],
        "rounds": len(rounds),
        "window_first_step_per_round": [r["window_first_step"] for r in rounds],
        "copies_in_window_per_round": [r["copies_in_window"] for r in rounds],
        "plain_step_seconds": stats([d for r in rounds for d in r["plain"]]),
        "elastic_step_seconds": stats([d for r in rounds for d in r["elastic"]]),
        # Per round ratios, then their median: each round runs both loops back to back
        # (which one first alternates).
        "ratio_mean_step_per_round": mean_ratios,
        "ratio_mean_step_elastic_vs_plain": median(mean_ratios),
        "ratio_median_step_per_round": median_ratios,
        "ratio_median_step_elastic_vs_plain": median(median_ratios),
        # CPU seconds of the whole process per step (every thread), which the load of
        # other processes moves much less than wall time.
        "ratio_cpu_per_step_per_round": cpu_ratios,
        # None (not NaN, which is no JSON) when no round's window held a CPU sample.
        "ratio_cpu_per_step_elastic_vs_plain": _median_or_none(cpu_ratios),
        "load_average_per_round": [r["load_average"] for r in rounds],
        "snapshot_period_per_round": [c.get("periodSteps") for c in snap],
        "snapshot_overhead_percent_per_round": [c.get("overheadPercent") for c in snap],
        "checkpoint_period_per_round": [c.get("periodSteps") for c in ckpt],
        "checkpoint_overhead_percent_per_round": [c.get("overheadPercent") for c in ckpt],
        "budget_percent": (snap[0] or {}).get("budgetPercent") if snap else None,
        "cadences_last_round": {"snapshot": snap[-1], "checkpoint": ckpt[-1]},
        "profile": raw["profile"],
    }


def overhead(quick: bool) -> dict[str, Any]:
    """The elastic loop with every default against the plain jit loop (docs/benchmarks.md)."""
    configs = ["tiny"] if quick else ["tiny", "small"]
    out: dict[str, Any] = {"configs": {}}
    for config in configs:
        runs = OVERHEAD_QUICK if quick else OVERHEAD_RUNS[config]
        _log(f"overhead {config}: elastic loop with every default vs plain jit loop")
        raw = run_worker({"kind": "overhead", "config": config, **runs}, timeout=5400)
        out["configs"][config] = _overhead_config(raw)
    return out


# ------------------------------------------------------------------------------- defaults

def _side(trials: list[dict[str, Any]], name: str) -> dict[str, Any]:
    runs = [t[name] for t in trials]
    lost = [r["steps_lost"] for r in runs]
    return {
        "steps_lost": stats(lost),
        "restore_sources": {s: sum(1 for r in runs if r["restore_source"] == s)
                            for s in sorted({r["restore_source"] for r in runs})},
        "mean_step_before_failure_seconds": stats(
            [r["mean_step_before_failure"] for r in runs
             if r["mean_step_before_failure"] is not None]),
        "wall_seconds": stats([r["wall_seconds"] for r in runs]),
    }


STEADY_MIN_STEPS = 30  # a trial's steady window before the loss, at least this long


def _steady_ratio(trial: dict[str, Any], warmup: int, side: str = "defaults"
                  ) -> float | None:
    """Mean step of the `side` run over that of the snapshots-off run, over the same
    steps: after both chose their cadences (their probes and orbax's first save are
    start-up, at different steps in the two) up to the loss. None: too short a window."""
    on, off = trial[side], trial["snapshots_off"]
    start = max(warmup, on["cadences_chosen_at_step"] or 0, off["cadences_chosen_at_step"] or 0)
    windows = [[d for s, d in run["step_durations_before_failure"] if s > start]
               for run in (on, off)]
    if min(len(w) for w in windows) < STEADY_MIN_STEPS:
        return None
    return mean(windows[0]) / mean(windows[1])


def defaults(quick: bool) -> dict[str, Any]:
    """A job with every default losing one slice at a random step, against snapshots off
    (and a snapshot every step beside them)."""
    warmup = 10
    spec = {"kind": "defaults", "config": "tiny", "slices": 4, "steps": 60 if quick else 300,
            "trials": 2 if quick else 20, "warmup": warmup, "fault_duration": 0.5,
            "seed": 25}
    _log(f"defaults: {spec['trials']} runs losing a slice at a random step, snapshots at "
         "their default cadence, every step and off")
    raw = run_worker(spec, timeout=5400)
    trials = raw["trials"]
    on, off = _side(trials, "defaults"), _side(trials, "snapshots_off")
    # What the headline promises: a single-slice loss costs at most one snapshot period.
    within = [t["defaults"]["steps_lost"] <= max(1, t["defaults"]["snapshot_period"] or 0)
              for t in trials]
    pairs = [(t["defaults"], t["snapshots_off"]) for t in trials]
    steady = [x for t in trials if (x := _steady_ratio(t, warmup)) is not None]
    out = {
        "config": raw["config"], "steps": raw["steps"], "slices": raw["slices"],
        "trials": len(trials), "seed": raw["seed"],
        "fault_duration_seconds": raw["fault_duration_seconds"],
        "defaults": on, "snapshots_off": off,
        "snapshot_period_at_failure": stats([t["defaults"]["snapshot_period"] for t in trials]),
        "losses_within_one_snapshot_period": sum(within),
        "ratio_mean_step_before_failure_defaults_vs_off": median(
            [x for a, b in pairs if (x := ratio(a["mean_step_before_failure"],
                                                b["mean_step_before_failure"])) is not None]
            or [float("nan")]),
        # The steady state: what the copies cost once start-up is over (trials whose loss
        # leaves a window of STEADY_MIN_STEPS after both chose their cadences).
        "ratio_steady_step_defaults_vs_off_per_trial": steady,
        "ratio_steady_step_defaults_vs_off": median(steady) if steady else None,
        "ratio_wall_defaults_vs_off": median(
            [a["wall_seconds"] / b["wall_seconds"] for a, b in pairs]),
        "runs": trials,
    }
    out.update(_every_step(trials, warmup))
    return out


def _every_step(trials: list[dict[str, Any]], warmup: int) -> dict[str, Any]:
    """The side with a snapshot every step (issue 80): what it loses, and what the copy
    costs against snapshots off, as the defaults' ratios are."""
    if not all("every_step" in t for t in trials):
        return {}
    steady = [x for t in trials if (x := _steady_ratio(t, warmup, "every_step")) is not None]
    return {
        "every_step": _side(trials, "every_step"),
        "ratio_steady_step_every_step_vs_off_per_trial": steady,
        "ratio_steady_step_every_step_vs_off": median(steady) if steady else None,
        "ratio_wall_every_step_vs_off": median(
            [t["every_step"]["wall_seconds"] / t["snapshots_off"]["wall_seconds"]
             for t in trials]),
    }


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
    out["by_size"] = restore_by_size(quick)
    return out


def _sized(raw: dict[str, Any]) -> list[dict[str, Any]]:
    points = []
    for p in raw["points"]:
        secs = median(p["restore_seconds"])
        gib = p["bytes"] / 2**30 if p["bytes"] is not None else None
        points.append({**p, "gib": gib, "restore_seconds_median": secs,
                       "gib_per_second": gib / secs if gib is not None and secs else None})
    return points


def restore_by_size(quick: bool) -> dict[str, Any]:
    """Restore seconds and GiB/s against checkpoint size, from local files and from gs://
    (fake-gcs-server), and where the default pathways-proxy limit is crossed for a restore
    through the controller (elastic_api/restore_risk.py)."""
    from elastic_api.restore_risk import (
        BYTES_PER_PARAMETER_WITH_ADAM,
        DEFAULT_PROXY_MEMORY,
        MAXTEXT_PARAMETERS,
        SAFE_SHARE,
        quantity_bytes,
    )
    from elastic_devtools.localcluster.gcs import create_bucket, start_fake_gcs

    sizes = [16, 32, 64] if quick else [128, 512, 2048]
    _log(f"restore by size: {sizes} MiB, local and fake-gcs")
    local = run_worker({"kind": "restore_sizes", "sizes_mb": sizes, "repeats": 2},
                       timeout=1800)
    with start_fake_gcs() as gcs:
        create_bucket(gcs.endpoint, "etj-bench-restore")
        remote = run_worker({"kind": "restore_sizes", "sizes_mb": sizes, "repeats": 2,
                             "root": "gs://etj-bench-restore/run"}, timeout=1800,
                            env_extra=gcs.env)
    limit = quantity_bytes(DEFAULT_PROXY_MEMORY)
    safe = limit * SAFE_SHARE
    largest = [n for n, p in MAXTEXT_PARAMETERS.items()
               if p * BYTES_PER_PARAMETER_WITH_ADAM <= safe]
    out: dict[str, Any] = {"local": _sized(local), "gcs": _sized(remote),
                           "proxy_memory": DEFAULT_PROXY_MEMORY, "safe_share": SAFE_SHARE,
                           "at_risk_above_gib": safe / 2**30, "proxy_limit_gib": limit / 2**30,
                           "largest_catalog_model_within": max(
                               largest, key=lambda n: MAXTEXT_PARAMETERS[n]),
                           }
    for where in ("local", "gcs"):
        speed = out[where][-1]["gib_per_second"]
        out[f"{where}_seconds_at_risk_size"] = (out["at_risk_above_gib"] / speed
                                                if speed else None)
    return out
