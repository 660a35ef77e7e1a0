"""Pure: a job's history from its Events and its status: the moments (failures,
replacements, recoveries, evictions, stalls, checkpoints) and each slice's states over
time (lanes), for the text timeline and the picture alike.

The Events are the operator's (and Kueue's story as the operator tells it on the job);
the status adds what has no Event: the trainer's own view of an elastic event, a stall its
watchdog reports, the checkpoint the operator's scan saw committed. Events have one-second
timestamps; the status's times are exact."""
from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from elastic_api.conditions import Reason
from elastic_api.queueing import (
    EVICTION_PENDING,
    REASON_ADMITTED,
    REASON_EVICTED,
    REASON_PREEMPTED,
    REASON_WAITING_FOR_ADMISSION,
)
from elastic_kubectl.job import Job
from elastic_kubectl.text import field_of, parse_time

FAILURE, REPLACEMENT, RECOVERY, EVICTION, STALL, CHECKPOINT, OTHER = (
    "failure", "replacement", "recovery", "eviction", "stall", "checkpoint", "other")
KINDS = {
    FAILURE: (Reason.SLICE_DOWN, Reason.HEAD_FAILED, Reason.MAX_RESTARTS_EXCEEDED,
              Reason.JOBSET_FAILED, Reason.JOBSET_LOST, Reason.ELASTIC_RETRIES_EXHAUSTED,
              Reason.ELASTIC_TIMEOUT, Reason.SLICE_RESTARTS_EXHAUSTED,
              Reason.WORKER_CLUSTER_LOST, Reason.TRAINER_RESTARTED, Reason.RECOVERY_FAILED),
    REPLACEMENT: (Reason.SLICE_REPLACING, Reason.SLICE_REPLACED, Reason.SLICE_MOVING,
                  Reason.SLICE_RESTARTING_IN_PLACE, Reason.SLICE_RESTARTED_IN_PLACE,
                  Reason.IN_PLACE_RESTART_TIMED_OUT,
                  Reason.STUCK_POD_FORCE_DELETED, Reason.POOL_QUARANTINED,
                  Reason.POOL_RELEASED, Reason.NODE_ACTION_THROTTLED),
    RECOVERY: (Reason.RECOVERED, Reason.RECOVERED_UNCONFIRMED, Reason.SLICE_RESTORED),
    EVICTION: (REASON_WAITING_FOR_ADMISSION, REASON_ADMITTED, REASON_PREEMPTED, REASON_EVICTED,
               EVICTION_PENDING, Reason.REDISPATCH_NOT_ALLOWED),
    STALL: (Reason.SLICE_HUNG, Reason.SLICE_SLOW),
    CHECKPOINT: (Reason.CHECKPOINT_REQUESTED, Reason.CHECKPOINT_ACKNOWLEDGED,
                 Reason.CHECKPOINT_REQUEST_TIMED_OUT, Reason.MAINTENANCE_SCHEDULED),
}
_ORDER = (OTHER, FAILURE, STALL, EVICTION, REPLACEMENT, CHECKPOINT, RECOVERY)
_KIND_OF = {reason: kind for kind, reasons in KINDS.items() for reason in reasons}
# The operator's Event messages about one slice begin with it ("slice 2 is down: ...").
_SLICE = re.compile(r"^slice (\d+)\b")
# What each Event does to its slice's lane.
_LANE_STATE = {Reason.SLICE_DOWN: "Down", Reason.SLICE_REPLACING: "Restarting",
               Reason.SLICE_MOVING: "Restarting", Reason.SLICE_REPLACED: "Ready",
               Reason.SLICE_RESTARTING_IN_PLACE: "Restarting",
               Reason.SLICE_RESTARTED_IN_PLACE: "Ready", Reason.SLICE_RESTORED: "Ready"}


@dataclass(frozen=True)
class Moment:
    at: datetime
    kind: str  # FAILURE, REPLACEMENT, ...
    reason: str
    message: str
    type: str = "Normal"  # the Event's type; Warning for a failure
    slice: int | None = None
    source: str = "Event"  # Event, trainer (status.training), operator (the status)

    def to_json(self) -> dict[str, Any]:
        return {"at": self.at.isoformat().replace("+00:00", "Z"), "kind": self.kind,
                "reason": self.reason, "type": self.type, "slice": self.slice,
                "source": self.source, "message": self.message}


@dataclass(frozen=True)
class Segment:
    start: datetime
    end: datetime
    state: str  # Pending, Ready, Down, Restarting


def event_time(event: dict[str, Any]) -> datetime | None:
    """When an Event happened (the newest of a series)."""
    series = field_of(event, "series")
    meta = field_of(event, "metadata")
    for value in (series.get("lastObservedTime"), event.get("lastTimestamp"),
                  event.get("eventTime"), event.get("firstTimestamp"),
                  meta.get("creationTimestamp")):
        if (at := parse_time(value)) is not None:
            return at
    return None


def of_job(job: Job, events: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Events on this job (not on an earlier job of the same name)."""
    out = []
    for e in events:
        involved = field_of(e, "involvedObject")
        if involved.get("name") != job.name:
            continue
        if job.uid and involved.get("uid") and involved.get("uid") != job.uid:
            continue
        out.append(e)
    return out


def moments(job: Job, events: Iterable[dict[str, Any]], since: datetime | None = None
            ) -> list[Moment]:
    """Every moment of the job's history (oldest first), from `since` on."""
    found = [m for e in of_job(job, events) if (m := _from_event(e)) is not None]
    found += _from_status(job)
    # Events have one-second times: within one second, the failure before what it caused.
    found.sort(key=lambda m: (m.at, _ORDER.index(m.kind), m.source != "Event"))
    return [m for m in found if since is None or m.at >= since]


def _from_event(event: dict[str, Any]) -> Moment | None:
    at = event_time(event)
    reason = event.get("reason")
    if at is None or not isinstance(reason, str):
        return None
    message = str(event.get("message") or "")
    match = _SLICE.match(message)
    return Moment(at=at, kind=_KIND_OF.get(reason, OTHER), reason=reason, message=message,
                  type=str(event.get("type") or "Normal"),
                  slice=int(match.group(1)) if match else None)


def _from_status(job: Job) -> list[Moment]:
    """What the status tells that no Event does."""
    st = job.status
    out = []
    if job.created is not None:
        out.append(Moment(job.created, OTHER, "Created", "job created", source="operator"))
    report = st.training
    event = report.elastic_event if report is not None else None
    if event is not None:
        out.append(Moment(event.detected_at, FAILURE, "ElasticEvent",
                          f"elastic event {event.id} caught ({event.error or '?'}) "
                          f"after step {event.failed_step}", "Warning", source="trainer"))
        if event.resumed_at is not None:
            restored = "" if event.restored_from_step is None else \
                f" from step {event.restored_from_step} ({event.restore_source})"
            out.append(Moment(event.resumed_at, RECOVERY, "TrainingResumed",
                              f"training resumed{restored}", source="trainer"))
    stall = report.stall if report is not None else None
    if stall is not None:
        suspects = f"; suspects: slices {', '.join(map(str, stall.suspect_slices))}" \
            if stall.suspect_slices else ""
        out.append(Moment(stall.detected_at, STALL, "Stalled",
                          f"step {stall.step} ({stall.phase}) ran past its "
                          f"{stall.deadline_seconds:.0f} s deadline{suspects}"
                          + (f": {stall.evidence}" if stall.evidence else ""), "Warning",
                          source="trainer"))
    ack = report.checkpoint_ack if report is not None else None
    if ack is not None:
        out.append(Moment(ack.committed_at, CHECKPOINT, "CheckpointCommitted",
                          f"checkpoint of step {ack.step} committed for request "
                          f"{ack.id}", source="trainer"))
    checkpoint = st.checkpoint
    if checkpoint is not None and checkpoint.observed_at is not None \
            and checkpoint.latest_committed_step is not None:
        out.append(Moment(checkpoint.observed_at, CHECKPOINT, "CheckpointSeen",
                          f"latest committed checkpoint: step {checkpoint.latest_committed_step}"
                          " (the operator's scan)", source="operator"))
    return out


def lanes(job: Job, found: Sequence[Moment], start: datetime, now: datetime
          ) -> dict[int, list[Segment]]:
    """Each slice's states from `start` to `now`: the Events' transitions, then the
    status's present state. A slice whose first transition is a failure was Ready before
    it, from when the job's other slices became Ready (no Event says when it did)."""
    count = max([job.num_slices, *(s.index + 1 for s in job.status.slices)])
    current = {s.index: s for s in job.status.slices}
    changes = {i: [(m.at, _LANE_STATE[m.reason]) for m in found
                   if m.slice == i and m.reason in _LANE_STATE and m.source == "Event"]
               for i in range(count)}
    became_ready = [s.last_transition_time for s in job.status.slices
                    if s.state == "Ready" and s.last_transition_time and not changes[s.index]]
    out: dict[int, list[Segment]] = {}
    for index in range(count):
        mine = changes[index]
        now_state = current[index].state if index in current else "Pending"
        since = current[index].last_transition_time if index in current else None
        if since is not None and (not mine or since > mine[-1][0]):
            mine.append((since, now_state))
        if mine and mine[0][1] != "Ready" and became_ready and min(became_ready) < mine[0][0]:
            mine.insert(0, (min(became_ready), "Ready"))
        out[index] = _segments("Pending" if mine else now_state, mine, start, now)
    return out


def _segments(first: str, changes: list[tuple[datetime, str]], start: datetime,
              now: datetime) -> list[Segment]:
    segments: list[Segment] = []
    state, at = first, start
    for when, new in sorted(changes, key=lambda c: c[0]):
        when = min(max(when, start), now)
        if new == state:
            continue
        if when > at or state == "Down":  # an outage shorter than an Event's second shows
            segments.append(Segment(at, when, state))
        state, at = new, when
    if now > at:
        segments.append(Segment(at, now, state))
    return segments
