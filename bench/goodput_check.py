"""The month model checked against a replay at real speed (issue 67 item 4): one small job
per side (ours with the API's defaults, plain JobSet) on the local control plane for more
than an hour, faults at a far higher rate than the published ones (as many as ours'
default budgets allow an 8-host job in an hour: three slices lost, three JobSet restarts),
then the goodput each side measured against what the model (bench/goodput_model.py,
goodput_timeline.py) predicts for the same faults at the same times.

The model is given (`predicted`): the per-kind costs the goodput benchmark measured (a run
of its own: bench/results/goodput.json) or (`predicted_own`) this run's own faults' parts;
the local run's step and copy periods (what the trainers chose), and each side's steady
efficiency (its training time between faults, away from them: what the machine's load and
the copies cost it). The check is of the rest: what each fault costs and how the timeline
composes them (`predicted_own`: only how it composes them).
"""
from __future__ import annotations

import contextlib
import json
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from statistics import median
from typing import Any

from bench.common import RESULTS_DIR
from bench.goodput_account import account, until_moved
from bench.goodput_cluster import LoadSampler, local_cluster
from bench.goodput_costs import local_params
from bench.goodput_faults import Action, Side
from bench.goodput_model import Hardware, Job, Local, with_values
from bench.goodput_phases import Phases, medians
from bench.goodput_side import BATCH
from bench.goodput_timeline import Event, month
from elastic_api.stragglers import SLOW_SLICE_SECONDS, SLOW_SLICE_STEPS

CHECKPOINT_STEPS = 300  # 30 s at 0.1 s a step
WARM_STEPS = 100


@dataclass(frozen=True)
class Planned:
    """A fault of the check at `at` seconds into it (`seconds`: a slow episode's)."""

    at: float
    kind: str
    slice: int
    seconds: float = 0.0


# Within ours' default budgets at 8 hosts (3 an hour each): slices lost at 200, 1300,
# 2400 s (a hard failure, a hang, a maintenance move) and ~3,900 s (the slow slice found
# and moved: more than an hour after the first); JobSet restarts at 800 and 3000; a slow
# episode too short to be worth a move at 1900.
PLAN = (Planned(200, "hard", 1), Planned(800, "crash", 0), Planned(1300, "hang", 3),
        Planned(1900, "slow", 2, 40), Planned(2400, "maintenance", 2),
        Planned(3000, "crash", 0), Planned(3850, "slow", 1, 400))
DURATION = 4500.0
QUICK_PLAN = (Planned(30, "hard", 1), Planned(80, "crash", 0), Planned(130, "slow", 2, 20))
QUICK_DURATION = 200.0


def _log(msg: str) -> None:
    print(f"[goodput] {msg}", file=sys.stderr, flush=True)


def actions(plan: Sequence[Planned]) -> list[tuple[float, Action]]:
    """Each fault's actions at their times (a maintenance: its notice, then its start a
    minute on, its end two; a slow slice: on, then off)."""
    out: list[tuple[float, Action]] = []
    for n, p in enumerate(plan):
        if p.kind == "maintenance":
            out += [(p.at, Action("notice", p.slice, n)),
                    (p.at + 60, Action("maintenance", p.slice, n)),
                    (p.at + 120, Action("maintenance_end", p.slice, n))]
        elif p.kind == "slow":
            out += [(p.at, Action("slow", p.slice, n, 1.34)),
                    (p.at + p.seconds, Action("slow_off", p.slice, n))]
        else:
            out.append((p.at, Action(p.kind, p.slice, n)))
    return sorted(out, key=lambda a: a[0])


def play(side: Side, timed: Sequence[tuple[float, Action]], t0: float,
         duration: float) -> None:
    """Each action at its time from `t0` (after the recovery before, if that ran late;
    a recovery is waited for until the next action's time at most)."""
    for n, (at, action) in enumerate(timed):
        time.sleep(max(0.0, t0 + at - time.time()))
        side.wait_until = t0 + (timed[n + 1][0] if n + 1 < len(timed) else duration)
        try:
            side.act(action)
        except Exception as err:
            _log(f"{side.spec.job}: {action.what} failed: {type(err).__name__}: {err}")
    time.sleep(max(0.0, t0 + duration - time.time()))


def run(quick: bool = False, costs_path: Path = RESULTS_DIR / "goodput.json") -> dict[str, Any]:
    plan, duration = (QUICK_PLAN, QUICK_DURATION) if quick else (PLAN, DURATION)
    return _with_predictions({"quick": quick, **replay(plan, duration)}, costs_path)


def remodel(saved: dict[str, Any], costs_path: Path = RESULTS_DIR / "goodput.json"
            ) -> dict[str, Any]:
    """A saved check's predictions made again (`--reuse-costs`): for a change to the model,
    not to what the control plane does; says when the replay ran."""
    check = _with_predictions(dict(saved["result"]), costs_path)
    check["replayed_at"] = check.get("replayed_at", saved["measured_at"])
    return check


def _with_predictions(check: dict[str, Any], costs_path: Path) -> dict[str, Any]:
    """The check with what the model predicts: from the goodput benchmark's costs (when
    there are any) and from its own faults' parts."""
    costs = load_costs(costs_path)
    check["costs_from"] = str(costs_path) if costs is not None else None
    check["predicted"] = predicted(check, costs) if costs is not None else None
    check["predicted_own"] = predicted(check, own_costs(check))
    return check


def replay(plan: Sequence[Planned], duration: float,
           load: Callable[[], AbstractContextManager[Any]] | None = None) -> dict[str, Any]:
    """Both sides on one local cluster through `plan` for `duration` s of real time, each
    measured. `load`: what runs beside them from their warm-up on (bench/healthy.py's
    CPU burners), its summary kept under "load"."""
    workdir = Path(tempfile.mkdtemp(prefix="etj-bench-goodput-check-"))
    sampler = LoadSampler()
    with local_cluster(workdir, CHECKPOINT_STEPS) as cluster, \
            (load or contextlib.nullcontext)() as beside:
        sides = {n: Side(s, cluster.api, cluster.env) for n, s in cluster.specs.items()}
        for side in sides.values():
            side.create()
        for side in sides.values():
            side.start(WARM_STEPS)
        sampler.start()
        t0 = time.time()
        threads = [threading.Thread(target=play, args=(s, actions(plan), t0, duration),
                                    daemon=True) for s in sides.values()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        sampler.stop()
        result = {n: measured(s, t0, t0 + duration, plan) for n, s in sides.items()}
        for side in sides.values():
            side.head.stop()
        beside_summary = beside.summary(t0, t0 + duration) if beside is not None else None
    return {"duration_seconds": duration, "plan": [p.__dict__ for p in plan],
            "sides": result, "load_average_1m": sampler.summary(), "load": beside_summary,
            "workdir": str(workdir)}


def measured(side: Side, t0: float, t1: float, plan: Sequence[Planned]) -> dict[str, Any]:
    """The side's goodput as measured, its steady efficiency, and what it chose."""
    recoveries = side.recoveries()  # reads the logs to their end
    moves = [r for r in side.logs.records if r.what == "move"]
    result = account(side.logs.steps(), recoveries,
                     until_moved(side.episodes, [r.at for r in moves]), t0, t1, 1.0)
    status = side.status()
    cadence = ((status.get("training") or {}).get("snapshotCadence") or {})
    at_start = side.logs.last("step", t0)
    since = (at_start.value % CHECKPOINT_STEPS) * result["median_step_seconds"] \
        if at_start is not None else 0.0
    return {"goodput": result["goodput_replay"], "account": result,
            "slow_moves": [{"at": round(r.at - t0, 1), "slice": r.value} for r in moves],
            "false_moves": sum(1 for r in moves if not any(
                e.start <= r.at <= e.end + 5 for e in side.episodes)),
            "since_checkpoint": since,
            "efficiency": steady_efficiency(result, side, t0, t1),
            "reduced_speed": reduced_speed(side),
            "snapshot_period_steps": cadence.get("periodSteps"),
            "budgets": status.get("budgets"), "counters": status.get("counters"),
            "phases": [p.__dict__ for p in side.phases(result["median_step_seconds"])]}


def reduced_speed(side: Side, steady: int = 5) -> float | None:
    """The job's speed on the slices left against every slice's: the median step with
    one slice fewer over the median step with all, each a step that followed one on the
    same slices in the same process (not a first step, which compiles). None: fewer
    than `steady` such steps on fewer slices."""
    by: dict[str, list[float]] = {}
    steps = [r for r in side.logs.records if r.what == "step" and r.seconds > 0]
    for before, r in pairwise(steps):
        if before.process == r.process and before.source == r.source \
                and r.value == before.value + 1:
            by.setdefault(r.source, []).append(r.seconds)
    full, fewer = by.get(str(side.spec.slices)), by.get(str(side.spec.slices - 1))
    if not full or not fewer or len(fewer) < steady:
        return None
    return median(full) / median(fewer)


def steady_efficiency(result: dict[str, Any], side: Side, t0: float, t1: float,
                      margin: float = 30.0) -> float:
    """Net progress per second of wall time in the stretches away from every fault (from
    `margin` s after a recovery or a slow episode to the next): what the copies and the
    machine's load cost the side when nothing fails."""
    quiet: list[tuple[float, float]] = []
    start = t0
    busy = sorted([(f.at, f.resumed or f.at) for f in side.injected]
                  + [(e.start, e.end) for e in side.episodes])
    for began, ended in busy:
        if began - start > 2 * margin:
            quiet.append((start, began))
        start = max(start, ended + margin)
    if t1 - start > 2 * margin:
        quiet.append((start, t1))
    step = result["median_step_seconds"]
    steps = side.logs.steps()
    done = wall = 0.0
    for a, b in quiet:
        inside = [s for s in steps if a <= s.at <= b]
        if len(inside) > 1:
            done += (inside[-1].step - inside[0].step) * step
            wall += inside[-1].at - inside[0].at
    return done / wall if wall else 1.0


def predicted(check: dict[str, Any], costs: dict[str, Any]) -> dict[str, float]:
    """What the model says each side's goodput was, for the check's own faults."""
    local = local_from(costs)
    out = {}
    for name, side in check["sides"].items():
        ours = name == "ours"
        # The baseline ignores a maintenance's notice: its pod is taken at the start.
        events = [Event(p["at"] + (0 if ours or p["kind"] != "maintenance" else 60),
                        p["kind"], p["slice"], p["seconds"]) for p in check["plan"]]
        hw = local_hardware(side, costs, name)
        job = Job(4, 2, batch=BATCH, devices_per_slice=2,
                  reduced_speed=side.get("reduced_speed") or 1.0, backend="simulated")
        out[name] = month("ours" if ours else "jobset", job, events, hw, local,
                          days=check["duration_seconds"] / 86400,
                          since_checkpoint=side.get("since_checkpoint") or 0.0).goodput
    return out


def own_costs(check: dict[str, Any]) -> dict[str, Any]:
    """The check's own faults' parts (its phases, medians by kind) in the shape of the
    goodput benchmark's costs: the model then given what this run's recoveries cost, so
    that what is left to check is how the timeline composes them."""
    results = {}
    for name, side in check["sides"].items():
        mine = [Phases(**p) for p in side["phases"]]
        results[name] = {"phases": side["phases"], "medians": medians(mine)}
    local = local_params(results)
    return {"costs": results,
            "local": {"detect": {f"{s}/{k}": v for (s, k), v in local.detect.items()},
                      "back": {f"{s}/{k}": v for (s, k), v in local.back.items()},
                      "start": local.start}}


def local_from(costs: dict[str, Any], with_own: bool = True) -> Local:
    """The local costs the goodput benchmark measured; `with_own`: its restores and
    compiles too (the model of a local run)."""
    local = costs["local"]

    def table(key: str) -> dict[tuple[str, str], float]:
        return {(k.split("/", 1)[0], k.split("/", 1)[1]): v for k, v in local[key].items()}

    own: dict[str, dict[tuple[str, str], float]] = {"restore": {}, "compile": {}}
    for side in ("ours", "baseline") if with_own else ():
        for kind, parts in (costs["costs"].get(side) or {}).get("medians", {}).items():
            own["restore"][(side, kind)] = parts["restore"]
            own["compile"][(side, kind)] = parts["compile"]
    return Local(table("detect"), table("back"), local["start"], own["restore"],
                 own["compile"])


def local_hardware(side: dict[str, Any], costs: dict[str, Any], name: str) -> Hardware:
    """The model's parameters for the local run: nothing the hardware adds (the local
    measurement has it all), the restore and compile as measured, the periods chosen."""
    step = side["account"]["median_step_seconds"]
    medians = costs["costs"][name]["medians"]
    restore = _median_of(medians, "restore")
    compile_ = _median_of(medians, "compile")  # the kinds measured: their own (Local)
    regrow = medians.get("hard", {}).get("regrow", 0.0)
    hang = costs["local"]["detect"].get("ours/hang", 0.0)
    snapshot = (side.get("snapshot_period_steps") or 1) * step
    return with_values(
        Hardware(), detect=0.0, slice_up=0.0, jobset_up=0.0, in_place=0.0, restore=restore,
        compile=compile_, compile_back=max(0.0, regrow - restore), step=step,
        collective_timeout=0.0, watchdog=hang,
        slow_found=SLOW_SLICE_SECONDS + SLOW_SLICE_STEPS * step,
        # The local saves (a tiny model's, on local disk) commit within a step or so:
        # not timed, taken as at once.
        checkpoint_wall=0.0,
        snapshot_period=snapshot, checkpoint_period=CHECKPOINT_STEPS * step,
        snapshot_overhead=0.0, checkpoint_overhead=1 - side["efficiency"], resubmit=0.0)


def _median_of(medians: dict[str, dict[str, float]], part: str) -> float:
    values = sorted(m[part] for m in medians.values())
    return values[len(values) // 2] if values else 0.0


def load_costs(path: Path = RESULTS_DIR / "goodput.json") -> dict[str, Any] | None:
    """The goodput benchmark's newest full run, if there is one."""
    if not path.exists():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data.get("result", data)
