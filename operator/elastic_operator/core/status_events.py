"""The Kubernetes Events a status change implies (posted by the I/O layer, counted by
metrics.py), and the outbox that carries them in the status write (status.pendingEvents).

A change's Events are posted after the status write that carries the change, so nobody
sees an Event before its status. The write also carries them (`outbox`): an operator
that dies between the write and the posts leaves them there, and the next reconcile, its
own or a new leader's, posts them (`from_outbox`). Each has a name derived from the
change (`event_name`), so a copy posted twice is refused (409): exactly once."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from elastic_api.conditions import ConditionType, Reason
from elastic_api.models import (
    CLOSED_BY_OPERATOR,
    MAX_EVENT_MESSAGE,
    ElasticTrainingJobStatus,
    PendingEvent,
)

EventType = Literal["Normal", "Warning"]
_PROGRESS_EVENTS = frozenset({Reason.PROGRESS_DEADLINE_EXCEEDED, Reason.TRAINER_RESTARTING,
                              Reason.SLOW_STEPS, Reason.STALL_RESTARTS_EXHAUSTED})


@dataclass(frozen=True)
class StatusEvent:
    """A Kubernetes Event to post on the job, with what the metrics need."""

    reason: str  # elastic_api.conditions.Reason
    message: str
    type: EventType = "Normal"
    slice_index: int | None = None
    failed_at: datetime | None = None  # SliceDown: when the host failed (detection latency)
    downtime_seconds: float | None = None  # Recovered
    steps_lost: int | None = None  # Recovered


def event_name(job_name: str, job_uid: str, event: StatusEvent,
               status: ElasticTrainingJobStatus) -> str:
    """The Event's name: the same whenever the same status change is computed again (a
    retried write, or a new leader continuing after the old one died between posting and
    writing), so the API server refuses the second copy (409 AlreadyExists) and every
    change is posted exactly once. It differs between jobs of one name (the uid)."""
    occurrence = "\0".join((job_uid, event.reason, _occurrence(event, status)))
    digest = hashlib.sha256(occurrence.encode()).hexdigest()[:16]
    return f"{job_name[:200]}.{digest}"


def _occurrence(event: StatusEvent, status: ElasticTrainingJobStatus) -> str:
    """What makes this change unique in the life of the job."""
    if event.slice_index is not None:
        # SliceDown, SliceRestored, SliceReplacing, SliceReplaced: once per slice restart;
        # a maintenance move (SliceMoving, its SliceReplaced) counts in moves, not restarts.
        current = next((s for s in status.slices if s.index == event.slice_index), None)
        restarts, moves = (current.restarts, current.moves) if current else (0, 0)
        occurrence = f"slice {event.slice_index} restart {restarts} move {moves}"
        if event.reason == Reason.MAINTENANCE_SCHEDULED:  # each notice (pool, time) once
            occurrence += f" message {event.message}"
        return occurrence
    record = status.last_recovery
    if event.reason in (Reason.RECOVERED, Reason.RECOVERED_UNCONFIRMED) and record is not None:
        occurrence = f"recovery detected at {record.detected_at}"
        if event.reason == Reason.RECOVERED_UNCONFIRMED:
            return occurrence + " closed by the operator"
        # Confirmed after the operator closed it (a trainer's own close stays as it was).
        return occurrence + (" confirmed" if record.closed_by == CLOSED_BY_OPERATOR else "")
    if event.reason == Reason.RESTORE_AT_RISK:  # once each time the condition turns True
        risk = next((c for c in status.conditions
                     if c.type == ConditionType.RESTORE_AT_RISK), None)
        return f"at risk since {risk.last_transition_time if risk else None}"
    if event.reason == Reason.TRAINER_RESTARTED:
        return f"trainer restart {status.counters.trainer_restarts}"
    progress = status.progress
    if progress is not None and event.reason in _PROGRESS_EVENTS:
        # Once per stall (the step and when it was first seen), per restart, per episode.
        restart = progress.restart.pod_uid if progress.restart is not None else ""
        stall = f"stall of step {progress.step} seen at {progress.since}"
        return {Reason.PROGRESS_DEADLINE_EXCEEDED: stall,
                Reason.STALL_RESTARTS_EXHAUSTED: f"{stall}, restarts spent",
                Reason.TRAINER_RESTARTING: f"restart of {restart}",
                Reason.SLOW_STEPS: f"slow since {progress.slow_since}"}[event.reason]
    failed = next((c for c in status.conditions if c.type == ConditionType.FAILED), None)
    if failed is not None and failed.status == "True" and failed.reason == event.reason:
        return "failed"  # terminal, sticky: once per job
    return f"message {event.message}"  # anything else: each distinct message once


def outbox(job_name: str, job_uid: str, events: list[StatusEvent],
           status: ElasticTrainingJobStatus) -> list[PendingEvent]:
    """The Events of a change as status.pendingEvents keeps them (status: the new one)."""
    return [PendingEvent(name=event_name(job_name, job_uid, e, status), reason=e.reason,
                         type=e.type, message=e.message[:MAX_EVENT_MESSAGE])
            for e in events]


def from_outbox(entry: PendingEvent) -> StatusEvent:
    """The Event to post for an outbox entry (what the API server needs of it)."""
    return StatusEvent(reason=entry.reason, message=entry.message, type=entry.type)
