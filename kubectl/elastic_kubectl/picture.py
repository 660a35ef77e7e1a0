"""The timeline as a picture (matplotlib, Agg): the trainer's steps against wall-clock
time on top, each slice's states below, the job's moments marked across both. The one
drawing of `kubectl etj timeline --png` and of `make demo`.

Moments that happen within a second of each other (the node dies, the operator reports
the slice down, the trainer catches DATA_LOSS) would print their labels on top of each
other: each line carries only a number, staggered in height when lines are close, and the
legend spells the moments out with their times.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from elastic_api.indices import ranges
from elastic_kubectl.history import (
    CHECKPOINT,
    EVICTION,
    FAILURE,
    OTHER,
    RECOVERY,
    REPLACEMENT,
    STALL,
    Moment,
    lanes,
    moments,
)
from elastic_kubectl.job import Job
from elastic_kubectl.lanes import LaneRow, lane_rows
from elastic_kubectl.text import clock

COLORS = {FAILURE: "#c0392b", REPLACEMENT: "#2471a3", RECOVERY: "#27ae60",
          EVICTION: "#8e44ad", STALL: "#e67e22", CHECKPOINT: "#7f8c8d", OTHER: "#555555"}
STATE_COLORS = {"Ready": "#82e0aa", "Down": "#e74c3c", "Restarting": "#f5b041",
                "Pending": "#d5d8dc"}
MAX_MARKS = 12
MAX_LABEL = 28  # a lane's label beside the picture, in characters
# Moments worth a line on the picture (the text timeline lists every one).
_UNMARKED = {"Created", "CheckpointSeen", "WaitingForAdmission"}


@dataclass(frozen=True)
class Mark:
    at: float  # unix time
    label: str
    color: str


def label_levels(xs: Sequence[float], span: float, min_gap: float = 0.04) -> list[int]:
    """A height level per x (in order), so that numbers of lines closer than `min_gap`
    of the axis `span` never share a level."""
    levels: list[int] = []
    placed: list[tuple[float, int]] = []
    for x in xs:
        near = {level for other, level in placed if abs(other - x) < min_gap * max(span, 1e-9)}
        level = next(i for i in range(len(placed) + 1) if i not in near)
        levels.append(level)
        placed.append((x, level))
    return levels


def step_points(job: Job) -> list[tuple[float, float]]:
    """(step, unix time) the status itself tells: the trainer's elastic event and its
    last report."""
    report = job.status.training
    points: list[tuple[float, float]] = []
    if report is None:
        return points
    event = report.elastic_event
    if event is not None and event.failed_step is not None:
        points.append((event.failed_step, event.detected_at.timestamp()))
    if event is not None and event.resumed_at is not None and event.resumed_step is not None:
        points.append((event.resumed_step, event.resumed_at.timestamp()))
    points.append((report.step, report.observed_at.timestamp()))
    return points


def marks_of(found: Sequence[Moment]) -> list[Mark]:
    """The moments worth a line: failures first when there are too many."""
    chosen = [m for m in found if m.reason not in _UNMARKED]
    if len(chosen) > MAX_MARKS:
        rank = {FAILURE: 0, RECOVERY: 1, STALL: 2, EVICTION: 3, REPLACEMENT: 4}
        chosen = sorted(sorted(chosen, key=lambda m: rank.get(m.kind, 5))[:MAX_MARKS],
                        key=lambda m: m.at)
    out = []
    for m in chosen:
        where = f" (slice {m.slice})" if m.slice is not None else ""
        who = "" if m.source == "Event" else f"{m.source}: "
        out.append(Mark(m.at.timestamp(), f"{who}{m.reason}{where}", COLORS.get(m.kind,
                                                                               "#555555")))
    return out


def draw_job(job: Job, events: Sequence[dict[str, Any]], now: datetime, path: str,
             start: datetime, samples: Sequence[tuple[float, float]] = ()) -> None:
    """The picture of `kubectl etj timeline --png`: `samples` are (step, unix time) a
    watch recorded; the status adds the few it tells."""
    found = moments(job, events)
    shown = [m for m in found if m.at >= start]
    steps = sorted({*samples, *step_points(job)}, key=lambda p: p[1])
    steps = [p for p in steps if p[1] >= start.timestamp()]
    draw_timeline(steps, marks_of(shown), path,
                  lane_rows(lanes(job, found, start, now), start, now),
                  start.timestamp(), now.timestamp(),
                  title=f"{job.name} ({job.namespace}): {clock(start)} to {clock(now)} UTC")


def draw_timeline(
    step_times: Sequence[Sequence[float]],
    marks: Sequence[Mark],
    path: str,
    slice_rows: Sequence[LaneRow] | None = None,
    start: float | None = None,
    end: float | None = None,
    title: str = "Training steps around a failure",
) -> None:
    """Write a PNG: completed step against seconds since `start` (default: the first
    step), each slice's states below when `slice_rows` are given (lanes.py: at many
    slices a row per group of slices alike, so the height is bounded), moments marked.

    A rewind shows as the step line dropping back (steps redone after the restore)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    times = [t for _, t in step_times] + [m.at for m in marks]
    if start is None:
        if not times:
            raise ValueError("nothing to draw: no steps and no moments")
        start = min(t for _, t in step_times) if step_times else min(times)
    t0 = start
    rows = len(slice_rows or ())
    fig, axes = plt.subplots(2 if rows else 1, 1, sharex=True, squeeze=False,
                             figsize=(13, 4.8 + (0.25 * rows + 0.6 if rows else 0)), dpi=110,
                             gridspec_kw={"height_ratios": [4, 0.35 * rows + 0.6]} if rows
                             else None)
    ax = axes[0][0]
    xs = [t - t0 for _, t in step_times]
    # A line through the points: a watch sees a step per trainer report (every few
    # seconds), a rewind shows as the line dropping back.
    ax.plot(xs, [s for s, _ in step_times], ".-", markersize=4 if len(xs) < 200 else 2.5,
            linewidth=0.8, color="#1f5fa8", label="completed step")
    if not step_times:
        ax.text(0.5, 0.5, "no step history: `kubectl etj timeline -w --png` records it",
                transform=ax.transAxes, ha="center", va="center", color="#777777")
    ordered = sorted(marks, key=lambda m: m.at)
    mark_xs = [m.at - t0 for m in ordered]
    extent = [*xs, *mark_xs, 0.0] + ([end - t0] if end is not None else [])
    span = max(extent) - min(extent)
    levels = label_levels(mark_xs, span)
    for number, (mark, x, level) in enumerate(zip(ordered, mark_xs, levels, strict=True),
                                              start=1):
        ax.axvline(x, color=mark.color, linestyle="--", linewidth=1.2,
                   label=f"{number}. {mark.label} (t={x:.1f} s)")
        ax.annotate(str(number), xy=(x, 1.0), xycoords=("data", "axes fraction"),
                    xytext=(0, 2 + 10 * level), textcoords="offset points", ha="center",
                    va="bottom", fontsize=8, fontweight="bold", color=mark.color)
        if rows:
            axes[1][0].axvline(x, color=mark.color, linestyle="--", linewidth=1.0)
    ax.set_ylabel("step")
    ax.set_title(title, pad=14 + 10 * max(levels, default=0))
    ax.grid(alpha=0.3)
    # Beside the plot, not on it: the steps rise to the right, where the legend would sit.
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    if rows and slice_rows is not None:
        _draw_lanes(axes[1][0], slice_rows, t0)
    axes[-1][0].set_xlabel(f"seconds since {datetime.fromtimestamp(t0, UTC):%H:%M:%S} UTC")
    if end is not None:
        axes[-1][0].set_xlim(0 - 0.01 * span, end - t0 + 0.01 * span)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _draw_lanes(ax: Any, slice_rows: Sequence[LaneRow], t0: float) -> None:
    """One row per slice (or group of slices), coloured by state."""
    from matplotlib.patches import Patch

    for row, lane in enumerate(slice_rows):
        bars = [(s.start.timestamp() - t0, (s.end - s.start).total_seconds())
                for s in lane.segments]
        ax.broken_barh(bars, (row - 0.4, 0.8),
                       facecolors=[STATE_COLORS.get(s.state, "#ffffff") for s in lane.segments])
    ax.set_yticks(range(len(slice_rows)), [row_label(lane) for lane in slice_rows])
    ax.set_ylim(-0.6, len(slice_rows) - 0.4)
    ax.invert_yaxis()
    ax.legend(handles=[Patch(color=c, label=s) for s, c in STATE_COLORS.items()],
              loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False)


def row_label(lane: LaneRow) -> str:
    """`slice 42`, `slices 0-41, 43-120 (195)`, cut to MAX_LABEL characters; the row of
    the slices left over says so."""
    if len(lane.slices) == 1 and not lane.rest:
        return f"slice {lane.slices[0]}"
    count = f" ({len(lane.slices)}{', worst' if lane.rest else ''})"
    text = f"slices {ranges(lane.slices)}"
    room = MAX_LABEL - len(count)
    return (text if len(text) <= room else text[:room - 1] + "…") + count
