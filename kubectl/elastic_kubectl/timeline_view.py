"""Pure: `kubectl etj timeline JOB`: the job's history in 80 columns: a lane per slice
(its states over the window), then each moment, oldest first."""
from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from elastic_kubectl.history import Moment, Segment, lanes, moments
from elastic_kubectl.job import Job
from elastic_kubectl.text import WIDTH, clock, duration, stamp, wrap

LANE_CHARS = {"Ready": "=", "Down": "X", "Restarting": "~", "Pending": "."}
# A short outage must stay visible in a column that is mostly Ready.
_PRECEDENCE = ("Down", "Restarting", "Pending", "Ready")
LANE_WIDTH = WIDTH - 12  # "slice 12  |" + lane + "|"


def window(job: Job, now: datetime, since: timedelta | None) -> datetime:
    """The timeline's start: `since` ago, not before the job's creation."""
    start = now - since if since is not None else (job.created or now - timedelta(hours=1))
    return max(start, job.created) if job.created is not None else start


def timeline_json(job: Job, events: Sequence[dict[str, Any]], now: datetime,
                  since: timedelta | None = None) -> dict[str, Any]:
    start = window(job, now, since)
    found = moments(job, events)
    return {
        "name": job.name, "namespace": job.namespace, "from": stamp(start), "to": stamp(now),
        "moments": [m.to_json() for m in found if m.at >= start],
        "slices": {str(i): [{"state": s.state, "from": stamp(s.start), "to": stamp(s.end)}
                            for s in segs]
                   for i, segs in lanes(job, found, start, now).items()},
        "notes": job.notes,
    }


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


def render_timeline(job: Job, events: Sequence[dict[str, Any]], now: datetime,
                    since: timedelta | None = None) -> list[str]:
    start = window(job, now, since)
    found = moments(job, events)
    shown = [m for m in found if m.at >= start]
    lines = wrap(f"{job.name} ({job.namespace}): {clock(start)} to {clock(now)} UTC "
                 f"({duration((now - start).total_seconds())}), {len(shown)} moments")
    for index, segments in lanes(job, found, start, now).items():
        lines.append(f"slice {index:<3} |{lane_text(segments, start, now)}|")
    left, right = clock(start), clock(now)
    lines.append(" " * 11 + left + right.rjust(LANE_WIDTH + 1 - len(left)))
    lines.append("           " + "  ".join(f"{c} {s}" for s, c in LANE_CHARS.items()))
    lines.append("")
    lines += moment_lines(shown, start)
    lines += [line for note in job.notes for line in wrap(note, "      ", "note: ")]
    return lines


def moment_lines(shown: Sequence[Moment], start: datetime) -> list[str]:
    """`14:05:31 +194s failure  SliceDown: slice 2 is down: ...`, wrapped under itself."""
    if not shown:
        return ["no moments in this window"]
    lines = []
    for m in shown:
        offset = f"+{int((m.at - start).total_seconds())}s"
        head = f"{clock(m.at)} {offset:>7} {m.kind:<11} "
        who = "" if m.source == "Event" else f"[{m.source}] "
        lines += wrap(f"{who}{m.reason}: {m.message}", indent=" " * len(head), first=head)
    return lines
