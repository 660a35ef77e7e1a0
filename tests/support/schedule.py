"""The order `make test`'s parallel workers take test modules in: the longest first.

`make test` runs pytest-xdist with `--dist loadfile --no-loadscope-reorder`: a module goes
whole to one worker (its module-scoped fixtures, an operator or Kueue, start once), and
modules are handed out in collection order as workers free up. Handed out longest first
(the "longest processing time" rule), the last module to start is a short one, so no
worker idles while another runs a long module it got last.

How long a module takes is read from tests/module-seconds.json, written from a run's
JUnit report by `hack/module-seconds` (`make test` leaves the report in
.test-results.xml). A module the file does not know yet is placed by a guess: one that
needs the local control plane as a typical cluster module, the others as quick ones. The
file only orders the work; a stale file makes a run slower, never wrong.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from hack.module_seconds import SECONDS_FILE

# Guesses for a module the file does not list: the median cluster module of the last
# measured run is about this long, a unit module far less.
GUESS_CLUSTER_SECONDS = 30.0
GUESS_OTHER_SECONDS = 1.0


class Item(Protocol):
    nodeid: str


def module_of(nodeid: str) -> str:
    """tests/integration/test_x.py::test_y[z] -> tests/integration/test_x.py"""
    return nodeid.split("::", 1)[0]


def load_seconds(path: Path = SECONDS_FILE) -> dict[str, float]:
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    return {str(k): float(v) for k, v in data["modules"].items()}


def longest_first(items: Sequence[Item], seconds: dict[str, float],
                  is_cluster: Callable[[Item], bool]) -> list[Item]:
    """The items, modules ordered by their expected seconds (descending), each module's
    items in their own order. Ties keep collection order, so every worker (each collects
    on its own) computes the same list, as xdist requires."""
    modules: dict[str, list[Item]] = {}
    for item in items:
        modules.setdefault(module_of(item.nodeid), []).append(item)

    def expected(name: str) -> float:
        if name in seconds:
            return seconds[name]
        cluster = any(is_cluster(i) for i in modules[name])
        return GUESS_CLUSTER_SECONDS if cluster else GUESS_OTHER_SECONDS

    order = sorted(modules, key=lambda name: -expected(name))  # sorted() is stable
    return [item for name in order for item in modules[name]]
