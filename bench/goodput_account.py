"""Goodput of one side of the replay (pure): where its wall time went, from the steps its
trainer logged and the recoveries the replay caused, and the same time at trace scale.

The replay compresses the trace `compression` times, but not everything in it can be
compressed: what the control plane and the processes do (detect a failure, recreate
pods, restart a JobSet, start a trainer, restore and compile on CPU) takes the real
seconds it takes here. So each part is counted at its own scale:

    useful            steps of net progress x the median step       x compression
    steps_redone      steps done again after a restore               x compression
    slow_slices       training time lost to slow slices (1 - 1/f)    x compression
    overhead          the rest of the training time: snapshot and checkpoint copies,
                      steps slower than the median                   x compression
    hang_unnoticed    a hang until the trainer's watchdog noticed it (a multiple of
                      the step)                                      x compression
    input:<name>      what only hardware knows (bench/goodput_trace.INPUTS), held in
                      the replay for its value / compression         x compression
    control_plane     the rest of every recovery: detection, pods replaced or the
                      JobSet restarted, a process started, restore and compile on CPU
                                                                     x 1 (measured)
    stalls            gaps of more than GAP_STEPS steps no fault explains: the machine's
                      hiccups (other work on it), a save that blocked x 1 (measured)

`goodput_replay` is useful / wall as the replay ran (every part at the replay's speed:
the control plane's seconds weigh `compression` times what they would); `goodput_trace`
is useful over the sum of the parts, each at its own scale: the estimate for the trace.
"""
from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

GAP_STEPS = 10  # an interval longer than this many median steps is no training
REAL_TIME = ("control_plane", "stalls")  # counted as measured at trace scale too


@dataclass(frozen=True)
class Step:
    """A step the trainer logged as done: when, which, in which of the side's processes."""

    at: float
    step: int
    process: int


@dataclass(frozen=True)
class Recovery:
    """One fault the replay injected and what followed (wall seconds; None: not seen).
    `held`: input name -> seconds the replay held for it. `unnoticed_until`: a hang
    stalled the job until then (the trainer's watchdog), which counts as the job's own
    time, not the control plane's."""

    kind: str
    injected_at: float
    noticed_at: float | None = None
    restored_at: float | None = None
    resumed_at: float | None = None
    held: dict[str, float] = field(default_factory=dict)
    unnoticed_until: float | None = None


@dataclass(frozen=True)
class SlowEpisode:
    start: float
    end: float
    factor: float


@dataclass
class _Walk:
    """The window cut into training intervals and gaps."""

    train: list[tuple[float, float]] = field(default_factory=list)
    gaps: list[tuple[float, float]] = field(default_factory=list)
    redone: int = 0
    useful: int = 0


def median_step(steps: Sequence[Step]) -> float:
    """The median time of a step that followed the one before it in the same process."""
    spans = [b.at - a.at for a, b in pairwise(steps)
             if b.process == a.process and b.step == a.step + 1]
    if not spans:
        raise ValueError("no two consecutive steps logged: nothing to measure a step by")
    return statistics.median(spans)


def walk(steps: Sequence[Step], t0: float, t1: float, step_seconds: float) -> _Walk:
    """Training intervals (consecutive steps of one process, at most GAP_STEPS steps
    apart; the last step's time before a gap) and gaps in [t0, t1]; steps done again;
    net progress."""
    before = [s for s in steps if s.at <= t0]
    inside = [s for s in steps if t0 < s.at <= t1]
    out = _Walk()
    start = before[-1] if before else None
    prev_at, prev = t0, start
    limit = GAP_STEPS * step_seconds
    for s in inside:
        same = prev is not None and prev.process == s.process
        if same and s.at - prev_at <= limit:
            out.train.append((prev_at, s.at))
        else:  # the step that ends a gap took a step's time of it
            cut = max(prev_at, s.at - step_seconds)
            if cut > prev_at:
                out.gaps.append((prev_at, cut))
            out.train.append((cut, s.at))
        if prev is not None and s.step <= prev.step:
            out.redone += prev.step - s.step + 1
        prev_at, prev = s.at, s
    (out.train if t1 - prev_at <= limit else out.gaps).append((prev_at, t1))
    if prev is not None:
        out.useful = prev.step - (start.step if start is not None else 0)
    return out


def until_moved(episodes: Sequence[SlowEpisode], moves: Sequence[float]) -> list[SlowEpisode]:
    """Each slow episode as the job lived it: over at the first move of a slice within it
    (the replay's plan has one slow slice at a time; the slice moved runs at speed on its
    new hosts). Without this, ours' slow slice moved 62 s into a 400 s episode was
    charged all 400 s, and the rest of its badput went negative to make up for it."""
    out = []
    for e in episodes:
        end = min((at for at in moves if e.start <= at <= e.end), default=e.end)
        out.append(SlowEpisode(e.start, end, e.factor))
    return out


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> float:
    return max(0.0, min(a[1], b[1]) - max(a[0], b[0]))


def _slow_seconds(train: Iterable[tuple[float, float]],
                  episodes: Sequence[SlowEpisode]) -> float:
    """Training time lost to slow slices: while one runs `f` times slower, a fraction
    1 - 1/f of the training time is lost."""
    return sum(_overlap(span, (e.start, e.end)) * (1 - 1 / e.factor)
               for span in train for e in episodes if e.factor > 1)


def _recovery_parts(gaps: Sequence[tuple[float, float]], recoveries: Sequence[Recovery],
                    t1: float) -> tuple[dict[str, float], float, float, float]:
    """(held by input, unnoticed hang time, control plane, gaps with no recovery)."""
    held: dict[str, float] = {}
    unnoticed = control = stalls = 0.0
    claimed: set[int] = set()
    for r in recoveries:
        until = r.resumed_at if r.resumed_at is not None else t1
        mine = [i for i, g in enumerate(gaps)
                if i not in claimed and _overlap(g, (r.injected_at, until)) > 0]
        claimed.update(mine)
        length = sum(gaps[i][1] - gaps[i][0] for i in mine)
        wanted = sum(r.held.values())
        scale = min(1.0, length / wanted) if wanted else 0.0
        for name, seconds in r.held.items():
            held[name] = held.get(name, 0.0) + seconds * scale
        left = length - wanted * scale
        hang = 0.0
        if r.unnoticed_until is not None:
            hang = min(left, max(0.0, r.unnoticed_until - r.injected_at))
        unnoticed += hang
        control += left - hang
    stalls = sum(g[1] - g[0] for i, g in enumerate(gaps) if i not in claimed)
    return held, unnoticed, control, stalls


def account(steps: Sequence[Step], recoveries: Sequence[Recovery],
            episodes: Sequence[SlowEpisode], t0: float, t1: float,
            compression: float) -> dict[str, Any]:
    """The side's goodput over [t0, t1], as replayed and at trace scale."""
    step_seconds = median_step([s for s in steps if t0 - 60 <= s.at <= t1])
    w = walk(steps, t0, t1, step_seconds)
    held, unnoticed, control, stalls = _recovery_parts(w.gaps, recoveries, t1)
    train = sum(b - a for a, b in w.train)
    useful, redone = w.useful * step_seconds, w.redone * step_seconds
    slow = _slow_seconds(w.train, episodes)
    wall = {"steps_redone": redone, "slow_slices": slow,
            "overhead": train - useful - redone - slow, "hang_unnoticed": unnoticed,
            **{f"input:{name}": s for name, s in sorted(held.items())},
            "control_plane": control, "stalls": stalls}
    trace = {k: v * (1.0 if k in REAL_TIME else compression) for k, v in wall.items()}
    total_trace = useful * compression + sum(trace.values())
    return {
        "window": [t0, t1], "wall_seconds": t1 - t0, "median_step_seconds": step_seconds,
        "training_seconds": train, "stall_seconds": stalls,
        "useful_steps": w.useful, "redone_steps": w.redone,
        "goodput_replay": useful / (t1 - t0),
        "goodput_trace": useful * compression / total_trace,
        "trace_seconds": total_trace,
        "useful_trace_seconds": useful * compression,
        "badput_replay_seconds": wall,
        "badput_trace_seconds": trace,
        "recoveries": recovery_rows(recoveries, t0),
    }


def _since(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(b - a, 3)


def recovery_rows(recoveries: Sequence[Recovery], t0: float) -> list[dict[str, Any]]:
    """Each recovery's phases in wall seconds: injected (`at`, from the window's start)
    -> noticed -> restored (the slice or the job back, the state restored) -> resumed
    (the first step after)."""
    return [{"kind": r.kind, "at": round(r.injected_at - t0, 3),
             "held_seconds": round(sum(r.held.values()), 4),
             "noticed_seconds": _since(r.injected_at, r.noticed_at),
             "restored_seconds": _since(r.injected_at, r.restored_at),
             "resumed_seconds": _since(r.injected_at, r.resumed_at)}
            for r in recoveries]
