"""An hour with nothing wrong, at load 10 (issue 67 item 2): does the slow-slice rule move a
healthy slice? A move costs a slice's replacement and the steps since the last copy, so a
false one is a failure the detector made.

The same two jobs and local cluster as the goodput check (bench/goodput_check.py: ours with
the API's defaults, `onSlowSlice: Move` among them, and plain JobSet), no fault planned,
while bench/load.py's burners keep the machine's 1-minute load average at the target. Load
slows every slice's part of a step alike and unevenly from one step to the next: the rule
must tell that noise from a slice that is slower than the others step after step.
"""
from __future__ import annotations

from typing import Any

from bench.goodput_check import replay
from bench.load import LoadGenerator

DURATION = 3600.0
QUICK_DURATION = 120.0
DEFAULT_LOAD = 10.0


def run(quick: bool = False, load: float = DEFAULT_LOAD) -> dict[str, Any]:
    """Both sides for an hour (2 min quick) with no fault, at `load`: every move false."""
    result = replay((), QUICK_DURATION if quick else DURATION, lambda: LoadGenerator(load))
    sides = result["sides"]
    return {"quick": quick, "load_target": load, **result,
            "moves": {name: len(side["slow_moves"]) for name, side in sides.items()},
            "false_moves": {name: side["false_moves"] for name, side in sides.items()}}
