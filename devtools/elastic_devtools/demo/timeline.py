"""Pure-ish: draw steps against wall-clock time around a failure (matplotlib, Agg)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Mark:
    at: float  # unix time
    label: str
    color: str


def draw_timeline(
    step_times: Sequence[Sequence[float]],
    marks: Sequence[Mark],
    path: str,
    title: str = "Training steps around a killed worker",
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
    fig, ax = plt.subplots(figsize=(10, 4.5), dpi=110)
    ax.plot(xs, ys, ".", markersize=2.5, color="#1f5fa8", label="completed step")
    for mark in marks:
        x = mark.at - t0
        ax.axvline(x, color=mark.color, linestyle="--", linewidth=1.2)
        ax.annotate(mark.label, xy=(x, max(ys)), xytext=(4, -4), textcoords="offset points",
                    rotation=90, va="top", fontsize=8, color=mark.color)
    ax.set_xlabel("seconds since the first step")
    ax.set_ylabel("step")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
