"""Pure-ish: draw steps against wall-clock time around a failure (matplotlib, Agg).

Events that happen within a second of each other (the node dies, the operator reports
the slice down, the trainer catches DATA_LOSS) would print their labels on top of each
other: each event line carries only a number, staggered in height when lines are close,
and the legend spells the events out with their times.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


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


def draw_timeline(
    step_times: Sequence[Sequence[float]],
    marks: Sequence[Mark],
    path: str,
    title: str = "Training steps around a failure",
) -> None:
    """Write a PNG: completed step against seconds since the first step, events marked.

    A rewind shows as the step line dropping back (steps redone after the restore).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not step_times:
        raise ValueError("no completed steps to draw")
    t0 = step_times[0][1]
    xs = [t - t0 for _, t in step_times]
    ys = [s for s, _ in step_times]
    ordered = sorted(marks, key=lambda m: m.at)
    mark_xs = [m.at - t0 for m in ordered]
    span = max([*xs, *mark_xs]) - min([*xs, *mark_xs])
    fig, ax = plt.subplots(figsize=(10, 4.8), dpi=110)
    ax.plot(xs, ys, ".", markersize=2.5, color="#1f5fa8", label="completed step")
    for number, (mark, x, level) in enumerate(
            zip(ordered, mark_xs, label_levels(mark_xs, span), strict=True), start=1):
        ax.axvline(x, color=mark.color, linestyle="--", linewidth=1.2,
                   label=f"{number}. {mark.label} (t={x:.1f} s)")
        ax.annotate(str(number), xy=(x, 1.0), xycoords=("data", "axes fraction"),
                    xytext=(0, 2 + 10 * level), textcoords="offset points", ha="center",
                    va="bottom", fontsize=8, fontweight="bold", color=mark.color)
    ax.set_xlabel("seconds since the first step")
    ax.set_ylabel("step")
    ax.set_title(title, pad=14 + 10 * max(label_levels(mark_xs, span), default=0))
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8, framealpha=0.9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
