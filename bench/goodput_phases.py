"""What one fault cost a side of the goodput runs, part by part (pure), read from its
trainer's log (bench/goodput_logs.py) and when its trainer processes started:

    detect   the fault until the trainer said it noticed (an elastic event, its watchdog,
             a checkpoint request) or its process was killed (a JobSet restart)
    back     noticed until the trainer began to restore: the slice back in the same
             process, or a new process started (the JobSet's pods recreated)
    start    a new process: started until it began to restore (imports, the backend)
    restore  the restore itself (the attempt's own figure)
    compile  the first step after the restore, less a steady step
    redone   steps done again: the last step before the fault less the step restored
    total    the fault until that first step
    up       training on the slices left: noticed until the lost slice was back (else
             as `back`)
    regrow   the scale-up after it: its restore and its first step, less a steady step
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median

from bench.goodput_logs import Record

PARTS = ("detect", "back", "start", "restore", "compile")


@dataclass(frozen=True)
class Phases:
    kind: str
    detect: float
    back: float
    start: float
    restore: float
    compile: float
    redone: int
    total: float
    source: str  # what was restored: snapshot, checkpoint, none
    up: float = 0.0
    regrow: float = 0.0


def _first(records: Sequence[Record], what: str, after: float) -> Record | None:
    return next((r for r in records if r.what == what and r.at > after), None)


def phases(kind: str, at: float, records: Sequence[Record], started: Sequence[float],
           killed: Sequence[float], step: float) -> Phases | None:
    """The parts of the fault injected at `at` (records in time order; `started` and
    `killed`: each trainer process's start and end, unix seconds); None: it did not
    resume."""
    attempt = _first(records, "attempt", at)
    resumed = _first(records, "step", attempt.at) if attempt is not None else None
    if attempt is None or resumed is None:
        return None
    before = [r for r in records if r.what == "step" and r.at <= at]
    said = _first(records, "noticed", at)
    kill = min((k for k in killed if k >= at), default=None)
    noticed = min((t for t in (said.at if said else None, kill) if t is not None),
                  default=attempt.at)
    restoring = attempt.at - attempt.seconds
    new = started[attempt.process] if attempt.process < len(started) else at
    fresh = new > at
    start = max(0.0, restoring - new) if fresh else 0.0
    back = max(0.0, (new if fresh else restoring) - noticed)
    last = before[-1].value if before else attempt.value
    up, regrow = _regrow(records, attempt, back, noticed, step)
    return Phases(kind, round(noticed - at, 3), round(back, 3), round(start, 3),
                  attempt.seconds, round(max(0.0, resumed.at - attempt.at - step), 3),
                  max(0, last - attempt.value), round(resumed.at - at, 3), attempt.source,
                  up, regrow)


def _regrow(records: Sequence[Record], attempt: Record, back: float, noticed: float,
            step: float) -> tuple[float, float]:
    """(up, regrow): a slice back after the attempt on the others, and the scale-up's
    restore and first step; (back, 0) without one (paused until every slice was back)."""
    returned = _first(records, "back", attempt.at)
    nxt = _first(records, "attempt", returned.at) if returned is not None else None
    if returned is None or nxt is None or returned.process != attempt.process:
        return back, 0.0
    first = _first(records, "step", nxt.at)
    if first is None:
        return back, 0.0
    regrow = max(0.0, first.at - returned.at - step)
    return round(returned.at - noticed, 3), round(regrow, 3)


def medians(all_phases: Sequence[Phases]) -> dict[str, dict[str, float]]:
    """Each kind's median of each part (and of the steps redone), over its faults."""
    out: dict[str, dict[str, float]] = {}
    for kind in sorted({p.kind for p in all_phases}):
        mine = [p for p in all_phases if p.kind == kind]
        out[kind] = {part: round(median(getattr(p, part) for p in mine), 3)
                     for part in (*PARTS, "redone", "total", "up", "regrow")}
        out[kind]["count"] = len(mine)
    return out
