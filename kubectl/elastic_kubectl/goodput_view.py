"""Pure: `kubectl etj goodput JOB`: status.goodput, by cause, in the field's vocabulary
(docs/metrics.md "Goodput"; each cause with ml-goodput-measurement's BadputType)."""
from __future__ import annotations

from datetime import datetime
from typing import Any

from elastic_api.badput import BADPUT_MEANINGS, BADPUT_TYPES
from elastic_kubectl.job import Job, missing_note
from elastic_kubectl.text import age, duration, stamp, table, wrap


def goodput_json(job: Job, now: datetime) -> dict[str, Any]:
    g = job.status.goodput
    note = missing_note(job, "goodput", "no goodput figures")
    if g is None:
        return {"name": job.name, "namespace": job.namespace, "goodput": None,
                "notes": [*job.notes, *([note] if note else [])]}
    causes = g.badput_seconds.model_dump(by_alias=True) if g.badput_seconds else None
    return {
        "name": job.name, "namespace": job.namespace,
        "since": stamp(g.since), "observedAt": stamp(g.observed_at),
        "wallSeconds": g.wall_seconds, "productiveSeconds": g.productive_seconds,
        "ratio": g.ratio, "sliceDownSeconds": g.slice_down_seconds,
        "sliceDownSince": stamp(g.slice_down_since),
        "badput": None if causes is None else [
            {"cause": c, "seconds": s, "share": round(s / g.wall_seconds, 4)
             if g.wall_seconds else None, "badputType": BADPUT_TYPES.get(c)}
            for c, s in causes.items()],
        "notes": job.notes,
    }


def render_goodput(job: Job, now: datetime) -> list[str]:
    g = job.status.goodput
    if g is None:
        note = missing_note(job, "goodput", "no goodput figures")
        return wrap(f"{job.name}: no goodput yet: " + (note or "the operator writes it at "
                                                       "its first reconcile")) + \
            [line for n in job.notes for line in wrap(n, "      ", "note: ")]
    ratio = "-" if g.ratio is None else f"{100 * g.ratio:.1f} %"
    lines = wrap(f"{job.name} ({job.namespace}): goodput {ratio} of {duration(g.wall_seconds)} "
                 f"of wall time since {g.since:%Y-%m-%d %H:%M} UTC (figures as of "
                 f"{age(g.observed_at, now)} ago)")
    rows = [["productive", _secs(g.productive_seconds), _share(g.productive_seconds, g),
             "step time of the steps kept"]]
    if g.badput_seconds is not None:
        for cause, secs in g.badput_seconds.model_dump(by_alias=True).items():
            rows.append([cause, _secs(secs), _share(secs, g), BADPUT_MEANINGS.get(cause, "")])
    lines += table(["CAUSE", "SECONDS", "SHARE", "WHAT"], rows, flexible=3)
    if g.badput_seconds is None:
        lines += wrap("the trainer reports no goodput counters (status.training.goodput): "
                      "only the wall time and the operator's slice downtime are known")
    down = f"slice downtime (the operator's timeline): {duration(g.slice_down_seconds)}"
    if g.slice_down_since is not None:
        down += f", and a slice down since {age(g.slice_down_since, now)} ago"
    lines += wrap(down)
    lines += [line for n in job.notes for line in wrap(n, "      ", "note: ")]
    return lines


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _share(value: float | None, g: Any) -> str:
    if value is None or not g.wall_seconds:
        return "-"
    return f"{100 * value / g.wall_seconds:.1f} %"
