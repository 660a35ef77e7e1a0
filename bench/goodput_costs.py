"""What each kind of fault costs, measured at real speed on the local control plane
(issue 67 item 4; docs/benchmarks.md, "Goodput over a month"): each kind ROUNDS times on
this operator (the API's defaults) and on plain JobSet (a whole-JobSet restart), in one
run, side by side, each fault's parts read from the trainer's log (bench/goodput_phases.py):
detection, the slice back or the JobSet restarted, a new process's start, the restore,
the recompile, the steps redone.

Ours runs with the API's defaults, so its restart budgets are those an 8-host job gets
(3 restarts an hour of each kind, elastic_api.budgets): FAULTS_PER_JOB faults to a job,
then a new job, as a fault at this rate on one job would be a crash loop to them. The
baseline is one job (plain JobSet restarts without end).
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from statistics import median
from typing import Any

from bench.goodput_faults import Action, Side
from bench.goodput_model import Local
from bench.goodput_phases import Phases, medians
from bench.goodput_side import SideSpec

KINDS = ("hard", "hang", "maintenance", "crash")
ROUNDS = 5
FAULTS_PER_JOB = 3  # ours: its budgets allow 3 of each an hour at 8 hosts
GAP_SECONDS = 15.0  # training between a recovery and the next fault
WARM_STEPS = 120  # steps before a job's first fault: its cadences chosen, a checkpoint saved


def _log(msg: str) -> None:
    import sys

    print(f"[goodput] {msg}", file=sys.stderr, flush=True)


def schedule(rounds: int, kinds: Sequence[str], slices: int) -> list[list[Action]]:
    """The faults, each a list of actions done in a row: kinds round after round, each
    on the next slice in turn (so no slice takes more than its share)."""
    out: list[list[Action]] = []
    for n in range(rounds * len(kinds)):
        kind, where = kinds[n % len(kinds)], n % slices
        if kind == "maintenance":
            out.append([Action("notice", where, n), Action("maintenance", where, n),
                        Action("maintenance_end", where, n)])
        else:
            out.append([Action(kind, where, n)])
    return out


def run_side(make: Callable[[int], Side], faults: Sequence[list[Action]],
             per_job: int, step: float) -> dict[str, Any]:
    """The faults on one side, `per_job` to a job; what each cost and each job's end."""
    all_phases: list[Phases] = []
    ends: list[dict[str, Any]] = []
    began = time.monotonic()
    for first in range(0, len(faults), per_job):
        side = make(first // per_job + 1)
        side.create()
        try:
            side.start(WARM_STEPS)
            for n, actions in enumerate(faults[first:first + per_job], first + 1):
                for action in actions:
                    _act(side, action)
                side.wait_whole()
                # Progress: the costs take half an hour, and say nothing until the end.
                _log(f"{side.spec.job}: fault {n} of {len(faults)} ({actions[0].what} of "
                     f"slice {actions[0].slice}) over; {time.monotonic() - began:.0f} s in")
                time.sleep(GAP_SECONDS)
            all_phases += side.phases(step)
            ends.append({"job": side.spec.job, **side.counters(),
                         "processes": len(side.head.processes)})
        finally:
            side.delete()
    return {"phases": [p.__dict__ for p in all_phases], "medians": medians(all_phases),
            "jobs": ends}


def _act(side: Side, action: Action) -> None:
    try:
        side.act(action)
    except Exception as err:  # recorded; the run goes on with the next fault
        _log(f"{side.spec.job}: {action.what} failed: {type(err).__name__}: {err}")


def measure(specs: dict[str, SideSpec], make: Callable[[SideSpec], Side],
            faults: Sequence[list[Action]], step: float) -> dict[str, Any]:
    """Both sides at once, each in a thread of its own."""
    results: dict[str, Any] = {}

    def one(name: str) -> None:
        spec = specs[name]
        per_job = FAULTS_PER_JOB if spec.ours else len(faults)

        def new_side(generation: int) -> Side:
            return make(SideSpec(**{**spec.__dict__, "generation": generation}))

        try:
            results[name] = run_side(new_side, faults, per_job, step)
        except Exception as err:
            results[name] = {"error": f"{type(err).__name__}: {err}"}
            _log(f"{name}: {results[name]['error']}")

    threads = [threading.Thread(target=one, args=(n,), name=f"goodput-{n}", daemon=True)
               for n in specs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def local_params(results: dict[str, Any]) -> Local:
    """What the control plane and the processes added, per side and kind (medians), as
    the model reads them: `start` is a new trainer process's, where one started."""
    detect, back, starts = {}, {}, []
    for side in ("ours", "baseline"):
        for kind, parts in (results.get(side) or {}).get("medians", {}).items():
            detect[(side, kind)] = parts["detect"]
            back[(side, kind)] = parts["back"]
        starts += [p["start"] for p in (results.get(side) or {}).get("phases", [])
                   if p["start"] > 0]
    return Local(detect, back, median(starts) if starts else 0.0)


def workdir_of(base: Path, name: str) -> Path:
    return base / name
