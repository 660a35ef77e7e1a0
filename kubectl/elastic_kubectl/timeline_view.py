"""Pure: `kubectl etj timeline JOB`: the job's history in 80 columns: a lane per slice
(its states over the window), then each moment, oldest first. A job of many slices
(groups.py) has a lane per group of slices that read alike (lanes.py), and the Events
of one second about many slices (a whole JobSet going down) on one line."""
from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from itertools import groupby
from typing import Any

from elastic_api.indices import ranges
from elastic_kubectl.groups import grouped
from elastic_kubectl.history import Moment, lanes, moments
from elastic_kubectl.job import Job
from elastic_kubectl.lanes import LANE_CHARS, LANE_WIDTH, lane_rows, lane_text
from elastic_kubectl.text import clock, duration, plural, stamp, wrap

__all__ = ["LANE_CHARS", "LANE_WIDTH", "lane_text", "render_timeline", "timeline_json"]
# Events of one second about this many slices or more share a line (a job of many slices).
SAME_SECOND = 3


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


def render_timeline(job: Job, events: Sequence[dict[str, Any]], now: datetime,
                    since: timedelta | None = None) -> list[str]:
    start = window(job, now, since)
    found = moments(job, events)
    shown = [m for m in found if m.at >= start]
    lines = wrap(f"{job.name} ({job.namespace}): {clock(start)} to {clock(now)} UTC "
                 f"({duration((now - start).total_seconds())}), {len(shown)} moments")
    for row in lane_rows(lanes(job, found, start, now), start, now):
        if len(row.slices) == 1 and not row.rest:
            lines.append(f"slice {row.slices[0]:<3} |{row.text}|")
        else:
            lines.append(f"{row.label:<10}|{row.text}|")
            lines += wrap(row.members, indent=" " * 11)
    left, right = clock(start), clock(now)
    lines.append(" " * 11 + left + right.rjust(LANE_WIDTH + 1 - len(left)))
    lines.append("           " + "  ".join(f"{c} {s}" for s, c in LANE_CHARS.items()))
    lines.append("")
    lines += moment_lines(shown, start, together=grouped(job.num_slices))
    lines += [line for note in job.notes for line in wrap(note, "      ", "note: ")]
    return lines


def moment_lines(shown: Sequence[Moment], start: datetime, together: bool = False
                 ) -> list[str]:
    """`14:05:31 +194s failure  SliceDown: slice 2 is down: ...`, wrapped under itself;
    `together`: `SAME_SECOND` or more Events of one second and reason about slices on one
    line (`SliceDown for slices 0-198 (199): slice 0 is down: ...`)."""
    if not shown:
        return ["no moments in this window"]
    lines = []
    runs = [list(run) for _, run in groupby(
        shown, lambda m: (m.at.replace(microsecond=0), m.reason, m.source, m.slice is None))] \
        if together else [[m] for m in shown]
    for run in runs:
        m = run[0]
        offset = f"+{int((m.at - start).total_seconds())}s"
        head = f"{clock(m.at)} {offset:>7} {m.kind:<11} "
        who = "" if m.source == "Event" else f"[{m.source}] "
        if len(run) >= SAME_SECOND and m.slice is not None:
            slices = ranges(r.slice for r in run if r.slice is not None)
            what = f"{m.reason} for slices {slices} ({plural(len(run), 'Event')}), the first: "
        else:
            what = ""
        for one in run if not what else [m]:
            text = what + one.message if what else f"{one.reason}: {one.message}"
            lines += wrap(f"{who}{text}", indent=" " * len(head), first=head)
    return lines
