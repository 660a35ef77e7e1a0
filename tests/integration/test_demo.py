"""The short version of `make demo`: the whole article experiment, end to end.

It starts its own local control plane (in a temp dir, beside the session's), the real
operator and the real trainer, kills a worker pod of slice 2 and checks what the demo
claims: recovered in the same process, no JobSet restart, steps lost accounted for; and
that it ends with `kubectl etj status` and `timeline` of its job.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.cluster
def test_demo_recovers_in_the_same_process(tmp_path: Path) -> None:
    out = tmp_path / "demo-output"
    env = {**os.environ, "ETJ_DEMO_CLUSTER_DIR": str(tmp_path / "cluster")}
    proc = subprocess.run(
        [sys.executable, "-m", "elastic_api.etj_cli", "demo", "--repo", str(REPO),
         "--out", str(out), "--step-seconds", "0.05"],
        env=env, capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    summary = json.loads((out / "summary.json").read_text())
    for key in ("detect_seconds", "resume_seconds", "steps_lost", "restore_source",
                "same_process", "jobset_restarts"):
        assert key in summary, key
    assert summary["same_process"] is True
    assert summary["jobset_restarts"] == 0
    assert summary["steps_lost"] >= 0
    assert summary["restore_source"] in ("snapshot", "checkpoint")
    # The job gives no period: the demo shows the cadences the trainer chose.
    assert summary["snapshot_cadence"].startswith("every ")
    assert summary["checkpoint_cadence"].startswith("every ")
    assert "snapshots: every " in proc.stdout and "checkpoints: every " in proc.stdout
    assert 0 < summary["detect_seconds"] < summary["resume_seconds"]
    assert "Recovered" in summary["condition_reasons"]
    # It ends with what `kubectl etj` shows of the job (the plugin's own output), and the
    # picture its `timeline -w --png` drew while the demo ran.
    tail = proc.stdout[proc.stdout.index("$ kubectl etj status demo"):
                       proc.stdout.index("\nWrote ")]
    slice_2 = next(line for line in tail.splitlines() if line.startswith("2  ")).split()
    assert slice_2[:2] == ["2", "Ready"] and slice_2[2] == summary["moved_to_pool"], tail
    assert "counters:    slice failures 1," in tail
    assert "$ kubectl etj timeline demo" in tail and "SliceReplaced: slice 2" in tail
    assert all(len(line) <= 80 for line in tail.splitlines()[1:]), tail
    assert (out / "timeline.png").stat().st_size > 10_000
    assert "SliceDown" in (out / "events.log").read_text()
    # Nothing left running: the demo's cluster is down.
    status = subprocess.run(
        [sys.executable, "-m", "elastic_api.etj_cli", "cluster", "status",
         "--dir", str(tmp_path / "cluster")], capture_output=True, text=True, check=False)
    assert status.returncode == 3, status.stdout + status.stderr
