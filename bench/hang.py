"""A hung slice: hang -> detected -> slice replaced -> training resumed (issue 32).

`etj train` on 4 simulated slices, paced at the article's step times (0.1 and 0.2 s),
with `--fail-at STEP:2:hang`: slice 2's part of STEP never finishes and its health stays
good (a hung TPU host whose pods stay Ready). Each run is one process with the trainer's
defaults (the watchdog's floor and factor untouched); the simulation plays the operator
(the replacement's delay as bench/replacement.py measures it on the local control
plane). From the run's own summary:

  hang       when the hung step began (the step before it completed): the anchor
  detected   the watchdog's deadline expired (status.training.stall, the request)
  replaced   the replaced slice is healthy again and in the mesh
  resumed    the first step after the restore completed

each in seconds from the hang and in multiples of the run's median step (steps 10 to
STEP - 1). Beside them, the anchors' defaults: NVRx's in-process restart soft timeout
(60 s, then its hard timeout, 90 s) and a 10 min collective timeout (NCCL's and
torch.distributed's default), which is what turns a hang into an error without a
watchdog.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from statistics import median
from typing import Any

from bench.common import REPO, ratio

NVRX_SOFT_TIMEOUT_SECONDS = 60.0
COLLECTIVE_TIMEOUT_SECONDS = 600.0
STEP_SECONDS = (0.1, 0.2)


def _log(msg: str) -> None:
    print(f"[hang] {msg}", file=sys.stderr, flush=True)


def one_run(step_seconds: float, steps: int, hang_at: int, workdir: Path) -> dict[str, Any]:
    summary = workdir / "summary.json"
    cmd = [sys.executable, "-m", "elastic_api.etj_cli", "train", "--config", "tiny",
           "--steps", str(steps), "--simulate-slices", "4", "--snapshot-period", "5",
           "--min-step-seconds", str(step_seconds), "--fail-at", f"{hang_at}:2:hang",
           "--checkpoint-dir", str(workdir / "ckpt"), "--summary", str(summary)]
    env = {k: v for k, v in os.environ.items()
           if k not in ("ETJ_JOB_NAMESPACE", "ETJ_JOB_NAME", "XLA_FLAGS")}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=900, check=False)
    if proc.returncode != 0 or not summary.exists():
        raise RuntimeError(f"etj train ended {proc.returncode}:\n{proc.stderr[-3000:]}")
    return reduce(json.loads(summary.read_text()), step_seconds, hang_at)


def reduce(s: dict[str, Any], step_seconds: float, hang_at: int) -> dict[str, Any]:
    """The figures of one run from its summary."""
    events = [e for e in s["elastic_events"] if e["kind"] == "slice_down"]
    if len(events) != 1 or not events[0]["error"].startswith("SliceHung"):
        raise RuntimeError(f"expected one SliceHung event, got {events}")
    e = events[0]
    times = dict((step, t) for step, t in s["step_times"])
    normal = [times[i] - times[i - 1] for i in range(11, hang_at) if i in times]
    step = median(normal)
    hang = e["fault_at"]

    def since(at: float | None) -> float | None:
        return None if at is None else round(at - hang, 3)

    out = {"step_seconds_paced": step_seconds, "median_step_seconds": round(step, 4),
           "hang_at_step": hang_at, "error": e["error"],
           "detected_seconds": since(e["detected_at"]),
           "replaced_seconds": since(e["slices_back_at"]),
           "resumed_seconds": since(e["resumed_at"]),
           "restore_source": e["restore_source"], "steps_lost": e["steps_lost"],
           "stall": (s.get("stalls") or [None])[0], "exit_code": s.get("exit_code")}
    for key in ("detected", "replaced", "resumed"):
        seconds = out[f"{key}_seconds"]
        out[f"{key}_steps"] = None if seconds is None else round(seconds / step, 1)
    return out


def run(quick: bool) -> dict[str, Any]:
    steps, hang_at = (40, 23) if quick else (120, 53)
    runs = []
    for step_seconds in STEP_SECONDS[:1] if quick else STEP_SECONDS:
        with tempfile.TemporaryDirectory(prefix="etj-bench-hang-") as tmp:
            result = one_run(step_seconds, steps, hang_at, Path(tmp))
        _log(f"{step_seconds} s steps: detected {result['detected_seconds']} s, replaced "
             f"{result['replaced_seconds']} s, resumed {result['resumed_seconds']} s")
        runs.append(result)
    return {"runs": runs, "anchors": {"nvrx_soft_timeout_seconds": NVRX_SOFT_TIMEOUT_SECONDS,
                                      "collective_timeout_seconds": COLLECTIVE_TIMEOUT_SECONDS},
            "ratio_detected_vs_nvrx": [ratio(r["detected_seconds"], NVRX_SOFT_TIMEOUT_SECONDS)
                                       for r in runs],
            "ratio_resumed_vs_collective_timeout": [
                ratio(r["resumed_seconds"], COLLECTIVE_TIMEOUT_SECONDS) for r in runs]}
