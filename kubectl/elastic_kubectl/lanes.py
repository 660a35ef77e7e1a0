"""Pure: each slice's lane as a row of characters, one per column of the window (the
text timeline's rows, and the picture's at many slices), and, for a job of many slices
(groups.py), the slices whose lanes read alike sharing a row: at most `MAX_ROWS` rows,
the last of them every slice left over, each column showing the worst of them."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from elastic_api.indices import ranges
from elastic_kubectl.groups import MAX_ROWS, group_by, grouped
from elastic_kubectl.history import Segment
from elastic_kubectl.text import WIDTH, plural

LANE_CHARS = {"Ready": "=", "Down": "X", "Restarting": "~", "Pending": "."}
_STATE_OF = {c: s for s, c in LANE_CHARS.items()}
# A short outage must stay visible in a column that is mostly Ready.
_PRECEDENCE = ("Down", "Restarting", "Pending", "Ready")
LANE_WIDTH = WIDTH - 12  # "slice 12  |" + lane + "|"


def lane_text(segments: Sequence[Segment], start: datetime, now: datetime,
              width: int = LANE_WIDTH) -> str:
    """One character per column of the window: the state that held it (an outage wins)."""
    span = max((now - start).total_seconds(), 1e-9)
    out = []
    for col in range(width):
        lo = start + timedelta(seconds=span * col / width)
        hi = start + timedelta(seconds=span * (col + 1) / width)
        held = {s.state for s in segments if s.start < hi and (s.end > lo or s.start >= lo)}
        state = next((p for p in _PRECEDENCE if p in held), None)
        out.append(LANE_CHARS.get(state, " ") if state else " ")
    return "".join(out)


@dataclass(frozen=True)
class LaneRow:
    """The slices one row shows, their lane, and the segments to draw it from (the first
    slice's; the columns' for the row of the rest)."""

    slices: tuple[int, ...]
    text: str
    segments: tuple[Segment, ...]
    rest: bool = False  # the slices left over past MAX_ROWS rows: each column their worst

    @property
    def label(self) -> str:
        """`slice 42` or `196 slices` (10 characters at most)."""
        return f"slice {self.slices[0]}" if len(self.slices) == 1 \
            else plural(len(self.slices), "slice")

    @property
    def members(self) -> str:
        """Which slices the row shows: `slices 0-41, 43-120, 122-197`."""
        what = f"slices {ranges(self.slices)}" if len(self.slices) > 1 \
            else f"slice {self.slices[0]}"
        return what + (", each column the worst of them" if self.rest else "")


def lane_rows(slice_lanes: dict[int, list[Segment]], start: datetime, now: datetime,
              width: int = LANE_WIDTH) -> list[LaneRow]:
    """A row per slice, or for a job of many slices, a row per lane that reads alike:
    the largest groups, then the latest outages, keep a row of their own."""
    texts = {i: lane_text(segs, start, now, width) for i, segs in sorted(slice_lanes.items())}
    if not grouped(len(texts)):
        return [LaneRow((i,), t, tuple(slice_lanes[i])) for i, t in texts.items()]
    groups = group_by(texts, texts.__getitem__)
    rest: list[int] = []
    if len(groups) > MAX_ROWS:
        groups.sort(key=lambda g: (-len(g), -_last_outage(texts[g[0]]), g[0]))
        rest = sorted(i for g in groups[MAX_ROWS - 1:] for i in g)
        groups = sorted(groups[:MAX_ROWS - 1], key=lambda g: g[0])
    rows = [LaneRow(tuple(g), texts[g[0]], tuple(slice_lanes[g[0]])) for g in groups]
    if rest:
        merged = _worst([texts[i] for i in rest])
        rows.append(LaneRow(tuple(rest), merged, _segments(merged, start, now), True))
    return rows


def _last_outage(text: str) -> int:
    """The last column a slice was not Ready in (-1: none)."""
    return max(text.rfind(LANE_CHARS[s]) for s in ("Down", "Restarting", "Pending"))


def _worst(texts: Sequence[str]) -> str:
    """Each column's worst state among `texts`."""
    order = [LANE_CHARS[s] for s in _PRECEDENCE] + [" "]
    return "".join(min(column, key=order.index) for column in zip(*texts, strict=True))


def _segments(text: str, start: datetime, now: datetime) -> tuple[Segment, ...]:
    """The segments a lane's columns show."""
    span = (now - start).total_seconds()
    out: list[Segment] = []
    for col, char in enumerate(text):
        state = _STATE_OF.get(char)
        lo = start + timedelta(seconds=span * col / len(text))
        hi = start + timedelta(seconds=span * (col + 1) / len(text))
        if state is None:
            continue
        if out and out[-1].state == state and out[-1].end == lo:
            out[-1] = Segment(out[-1].start, hi, state)
        else:
            out.append(Segment(lo, hi, state))
    return tuple(out)
