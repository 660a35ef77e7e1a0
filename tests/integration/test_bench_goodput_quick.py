"""`python -m bench --quick --only goodput` still runs end to end: one fault of each kind
on ours and on the baseline, side by side, each recovered, and every part of each side's
time accounted for. A module of its own (test_bench_quick.py runs the others), so the
replay has pytest's time budget to itself. It starts its own local control plane, so it
is a cluster test. No timing is asserted. Over a minute: `make test-long`; in `make
test` its accounting is guarded by tests/unit/test_bench_goodput.py."""
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


def test_each_fault_was_recovered_on_both_sides(goodput: dict[str, Any]) -> None:
    assert goodput["counts"] == {"hard": 1, "crash": 1, "hang": 1, "maintenance": 1,
                                 "slow": 1}
    for name, side in goodput["sides"].items():
        kinds = sorted(x["kind"] for x in side["recoveries"])
        # Ours moves the slice at the notice: the maintenance then takes nothing.
        assert kinds == ["crash", "hang", "hard", "maintenance"], (name, side["recoveries"])
        assert all(x["resumed_seconds"] is not None for x in side["recoveries"]), side
    # Every fault restarts the baseline's JobSet; only the program's crash restarts ours.
    assert goodput["sides"]["baseline"]["status_counters"]["jobset_restarts"] == 4
    assert goodput["sides"]["ours"]["status_counters"]["jobset_restarts"] == 1


def test_every_part_of_each_sides_time_is_accounted_for(goodput: dict[str, Any]) -> None:
    for side in goodput["sides"].values():
        useful = side["useful_steps"] * side["median_step_seconds"]
        assert useful + sum(side["badput_replay_seconds"].values()) == pytest.approx(
            side["wall_seconds"])
        assert side["useful_trace_seconds"] + sum(side["badput_trace_seconds"].values()) \
            == pytest.approx(side["trace_seconds"])
        # The control plane's seconds weigh less at trace scale than as replayed.
        assert 0 < side["goodput_replay"] <= side["goodput_trace"] < 1
    assert goodput["ratio_goodput_trace_ours_vs_baseline"] > 0
