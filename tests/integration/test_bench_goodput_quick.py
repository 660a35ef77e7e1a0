"""`python -m bench --quick --only goodput` still runs end to end: a hard failure and a
crash on ours and on plain JobSet, side by side at real speed, each recovered and cut
into its parts, and the month composed from them for every policy. A module of its own
(test_bench_quick.py runs the others), so the run has pytest's time budget to itself. It
starts its own local control plane, so it is a cluster test. No timing is asserted. Over a
minute: `make test-long`; in `make test` its accounting is guarded by
tests/unit/test_bench_goodput.py."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.long]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def goodput(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out_dir = tmp_path_factory.mktemp("bench-results")
    docs = out_dir / "benchmarks.md"
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--only", "goodput",
         "--results-dir", str(out_dir), "--docs", str(docs)],
        cwd=REPO, capture_output=True, text=True, timeout=580)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert not docs.exists(), "a quick run must not rewrite the docs table"
    entry: dict[str, Any] = json.loads((out_dir / "goodput-quick.json").read_text())
    assert entry["quick"] is True
    result: dict[str, Any] = entry["result"]
    return result


def test_each_fault_was_measured_on_both_sides(goodput: dict[str, Any]) -> None:
    """One hard failure and one crash each: ours recovers the first in its process from
    its snapshot and restarts the JobSet for the second; plain JobSet restarts for both."""
    for name in ("ours", "baseline"):
        side = goodput["costs"][name]
        assert "error" not in side, side
        assert sorted(p["kind"] for p in side["phases"]) == ["crash", "hard"], side
    ours = {p["kind"]: p for p in goodput["costs"]["ours"]["phases"]}
    assert ours["hard"]["source"] == "snapshot" and ours["hard"]["start"] == 0
    assert ours["crash"]["start"] > 0  # a new trainer process
    (job,) = goodput["costs"]["ours"]["jobs"]
    assert job["counters"]["jobSetRestarts"] == 1 and job["processes"] == 2
    assert job["budgets"]["jobSetRestarts"]["derived"]  # the API's defaults
    assert all(p["start"] > 0 for p in goodput["costs"]["baseline"]["phases"])


def test_the_month_is_composed_for_every_policy(goodput: dict[str, Any]) -> None:
    rows = goodput["months"]
    # 1,024 hosts: xpk's defaults are modelled there, the JobSet recreated in the time
    # measured at the record size is not (bench/goodput_model.modelled).
    assert {r["policy"] for r in rows} == {"ours", "ours-finds-slow", "ours-train-on",
                                           "ours-snapshot-kept", "jobset", "xpk"}
    assert {r["unit"] for r in rows} == {"host", "chip"}
    for row in rows:
        assert 0 < row["goodput"]["mean"] < 1, row
        assert row["budgets_spent"] == 0 or row["policy"] != "ours", row
    assert goodput["local"]["start"] > 0
    assert all(p["source"] for p in goodput["hardware"].values())
