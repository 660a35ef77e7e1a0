"""Recovery accounting: the record of the latest recovery (status.lastRecovery), and the
trainer process that reports (status.trainerProcess).

A recovery opens when a slice goes down or the trainer reports a new elastic event, and
closes when the trainer reports that event Resumed (or, without an elastic event, a step
later than the one at detection). For a trainer that reports no elastic events the
operator closes it from what it sees, and the trainer's progress confirms it later
(unreported.py). An elastic event that Kueue's eviction caused (the slices went because
the job was preempted or suspended through its queue: elastic_api.queueing.
caused_by_eviction, the trainer's rule too) opens none: there is no failure to recover
from, and the job is Queued, not Recovering.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from elastic_api.conditions import Reason
from elastic_api.models import (
    CLOSED_BY_TRAINER,
    ElasticEventReport,
    ElasticTrainingJobStatus,
    RecoveryRecord,
    TrainerProcess,
    TrainingReport,
)
from elastic_api.queueing import caused_by_eviction
from elastic_api.restores import steps_lost as lost_steps
from elastic_operator.core.slices import SliceChange
from elastic_operator.core.status_events import StatusEvent
from elastic_operator.core.unreported import (
    TrainerSignals,
    close_by_operator,
    confirm,
    confirmed_message,
    newest_checkpoint_step,
    reopen,
    unconfirmed_message,
    waiting_message,
)
from elastic_operator.core.wording import fmt_slices, iso, plural


@dataclass(frozen=True)
class RecoveryUpdate:
    """status.lastRecovery after one reconcile, the Event if it closed (or was
    confirmed), and, for an open one the operator may close itself, what it waits for."""

    record: RecoveryRecord | None
    events: list[StatusEvent] = field(default_factory=list)
    waiting_for: str | None = None


def track_recovery(
    previous: ElasticTrainingJobStatus,
    report: TrainingReport | None,
    changes: list[SliceChange],
    now: datetime,
    not_ready: frozenset[int] = frozenset(),
    signals: TrainerSignals | None = None,
    evicted_since: datetime | None = None,
) -> RecoveryUpdate:
    """The recovery record after this reconcile, and the Recovered Event if it closed.
    `not_ready`: the slices that are not Ready now; `signals`: what the operator sees of
    the trainer beside its report (the defaults: a trainer that reports its recoveries);
    `evicted_since`: Kueue's latest eviction of the job (core/admission.py)."""
    signals = signals or TrainerSignals()
    record = previous.last_recovery
    ongoing = record is not None and record.open
    record, ongoing = _open_for_down_slices(record, ongoing, report, changes, now, signals)
    event = report.elastic_event if report else None
    if event is not None and report is not None and _lost_to_eviction(report, event,
                                                                      evicted_since):
        event = None
    if event is not None:
        seen = previous.counters.elastic_events
        if record is not None and not ongoing and _late_event_of(record, event, seen):
            record, ongoing = reopen(record), True
        record, ongoing = _link_elastic_event(record, ongoing, event, seen)
    if record is None:
        return RecoveryUpdate(record)
    if not ongoing:
        confirmed = confirm(record, report, signals.checkpoint)
        return RecoveryUpdate(record) if confirmed is None else _recovered(confirmed)
    if signals.reports_recovery:
        return _close_if_resumed(record, report, event, now, not_ready)
    return _close_without_trainer(record, report, signals, now, not_ready)


def _late_event_of(record: RecoveryRecord, event: ElasticEventReport, seen: int) -> bool:
    """A new elastic event the trainer detected before the operator closed this recovery
    on its own: this failure's, reported after all."""
    return (record.closed_by is not None and record.closed_by != CLOSED_BY_TRAINER
            and record.closed_at is not None and event.id > seen
            and event.detected_at <= record.closed_at)


def _close_without_trainer(record: RecoveryRecord, report: TrainingReport | None,
                           signals: TrainerSignals, now: datetime,
                           not_ready: frozenset[int]) -> RecoveryUpdate:
    closed = None if not_ready else close_by_operator(record, report, signals, now)
    if closed is None:
        return RecoveryUpdate(record, waiting_for=waiting_message(record, signals, not_ready))
    if closed.confirmed_by is not None:
        return _recovered(closed)
    return RecoveryUpdate(closed, [StatusEvent(
        reason=Reason.RECOVERED_UNCONFIRMED, message=unconfirmed_message(closed),
        type="Normal")])


def _recovered(record: RecoveryRecord) -> RecoveryUpdate:
    """A recovery the operator closed, confirmed: Recovered, with no downtime or steps
    lost for the metrics (nobody measured them)."""
    return RecoveryUpdate(record, [StatusEvent(
        reason=Reason.RECOVERED, message=confirmed_message(record), type="Normal")])


def _lost_to_eviction(report: TrainingReport, event: ElasticEventReport,
                      evicted_since: datetime | None) -> bool:
    return bool(event.slices_down) and caused_by_eviction(
        evicted_since, running_since=report.process_started_at, lost_at=event.detected_at)


def _open_for_down_slices(
    record: RecoveryRecord | None, ongoing: bool, report: TrainingReport | None,
    changes: list[SliceChange], now: datetime, signals: TrainerSignals,
) -> tuple[RecoveryRecord | None, bool]:
    """Slices that went down open a recovery, or join the one in progress."""
    down = [c for c in changes if c.went_down]
    if not down:
        return record, ongoing
    failed_times = [c.failed_at for c in down if c.failed_at is not None]
    detected = min(failed_times) if failed_times else now
    indices = [c.index for c in down]
    if record is None or not ongoing:
        at_detection = None if signals.reports_recovery else newest_checkpoint_step(
            signals.checkpoint)
        return RecoveryRecord(detected_at=detected, slices=sorted(indices),
                              step_at_detection=report.step if report else None,
                              checkpoint_step_at_detection=at_detection), True
    return record.model_copy(update={
        "detected_at": min(record.detected_at, detected),
        "slices": sorted(set(record.slices) | set(indices)),
    }), True


def _link_elastic_event(
    record: RecoveryRecord | None, ongoing: bool, event: ElasticEventReport, seen_events: int,
) -> tuple[RecoveryRecord | None, bool]:
    """A new elastic event of the trainer opens a recovery, or joins the one in
    progress (whose detection time it may move earlier)."""
    is_new = event.id > seen_events or (
        record is not None and ongoing and record.elastic_event_id is not None
        and event.id > record.elastic_event_id
    )
    linked = record is not None and record.elastic_event_id == event.id
    # An event that had already resumed before this recovery's failure is an older
    # one reported late: it cannot be this recovery's (it only counts).
    predates = (record is not None and ongoing and event.resumed_at is not None
                and event.resumed_at <= record.detected_at)
    if not is_new or linked or predates:
        return record, ongoing
    if record is not None and ongoing:
        return record.model_copy(update={
            "elastic_event_id": event.id,
            "detected_at": min(record.detected_at, event.detected_at),
            "slices": sorted(set(record.slices) | set(event.slices_down)),
        }), True
    return RecoveryRecord(
        detected_at=event.detected_at, slices=sorted(set(event.slices_down)),
        elastic_event_id=event.id, step_at_detection=event.failed_step,
    ), True


def _resumed_at(record: RecoveryRecord, report: TrainingReport | None,
                event: ElasticEventReport | None, now: datetime,
                not_ready: frozenset[int]) -> datetime | None:
    """When training resumed after this recovery's failure, if it has. Without an
    elastic event, a later step counts only once the slices that went down are Ready
    again: before that, the trainer has not noticed the failure yet (a dead host's
    Pathways worker is found out in seconds, not at once)."""
    if event is not None and record.elastic_event_id == event.id and event.phase == "Resumed":
        return event.resumed_at or (report.observed_at if report else now)
    if _taken_over(record, report, event, not_ready):
        return report.observed_at if report is not None else now
    if (
        record.elastic_event_id is None and report is not None
        and not set(record.slices) & not_ready
        and report.state == "Training" and record.step_at_detection is not None
        and report.step > record.step_at_detection
        and report.observed_at > record.detected_at
    ):
        return report.observed_at
    return None


def _taken_over(record: RecoveryRecord, report: TrainingReport | None,
                event: ElasticEventReport | None, not_ready: frozenset[int]) -> bool:
    """The elastic event of this recovery was a trainer process's that is gone (Kueue
    evicted the job, or the head container restarted) and a process started after the
    failure trains, on Ready slices: it resumed (from the newest committed checkpoint),
    and the old event will never be reported Resumed."""
    return (record.elastic_event_id is not None and report is not None
            and (event is None or event.id != record.elastic_event_id)
            and report.process_started_at is not None
            and report.process_started_at > record.detected_at
            and report.state == "Training" and report.observed_at > record.detected_at
            and not set(record.slices) & not_ready)


def _close_if_resumed(
    record: RecoveryRecord, report: TrainingReport | None,
    event: ElasticEventReport | None, now: datetime, not_ready: frozenset[int],
) -> RecoveryUpdate:
    resumed_at = _resumed_at(record, report, event, now, not_ready)
    if resumed_at is None:
        return RecoveryUpdate(record)
    linked = event if event is not None and record.elastic_event_id == event.id else None
    downtime = max(0.0, (resumed_at - record.detected_at).total_seconds())
    steps_lost = None if linked is None else \
        lost_steps(linked.failed_step, linked.restored_from_step)
    record = record.model_copy(update={
        "resumed_at": resumed_at, "downtime_seconds": round(downtime, 3),
        "closed_at": resumed_at, "closed_by": CLOSED_BY_TRAINER,
        "steps_lost": steps_lost,
        "restored_from_step": linked.restored_from_step if linked else None,
        "restore_source": linked.restore_source if linked else None,
    })
    return RecoveryUpdate(record, [StatusEvent(
        reason=Reason.RECOVERED, message=recovered_message(record), type="Normal",
        downtime_seconds=record.downtime_seconds, steps_lost=steps_lost,
    )])


def recovered_message(record: RecoveryRecord) -> str:
    parts = [f"resumed after {record.downtime_seconds:.1f} s of downtime"]
    if record.slices:
        parts.append(f"({fmt_slices(record.slices)} went down)")
    if record.steps_lost is not None:
        parts.append(f"; {plural(record.steps_lost, 'step')} lost")
    if record.restored_from_step is not None:
        parts.append(f"; restored from step {record.restored_from_step}"
                     + (f" ({record.restore_source})" if record.restore_source else ""))
    return " ".join(parts).replace(" ;", ";")


@dataclass(frozen=True)
class ProcessUpdate:
    """The trainer process now reporting, and the one it replaced (None: no new one)."""

    process: TrainerProcess | None
    replaced: TrainerProcess | None = None


def trainer_process(known: TrainerProcess | None,
                    report: TrainingReport | None) -> ProcessUpdate:
    """A process counts as a replacement only when it started later than the known one:
    a late report of the old process, or the same process reporting again, changes
    nothing."""
    if report is None or report.process_started_at is None or report.process_id is None:
        return ProcessUpdate(known)
    seen = TrainerProcess(process_id=report.process_id, host_name=report.host_name,
                          started_at=report.process_started_at)
    if known is None or known.started_at is None:
        return ProcessUpdate(seen)
    if seen == known or seen.started_at is None or seen.started_at <= known.started_at:
        return ProcessUpdate(known)
    return ProcessUpdate(seen, replaced=known)


def trainer_restarted_event(process: TrainerProcess, replaced: TrainerProcess,
                            elastic_events: int) -> StatusEvent:
    started = iso(process.started_at) if process.started_at else "?"
    return StatusEvent(
        reason=Reason.TRAINER_RESTARTED, type="Warning",
        message=f"a new trainer process (pid {process.process_id} on {process.host_name}, "
                f"started {started}) replaced pid {replaced.process_id} on "
                f"{replaced.host_name}; it resumes from the newest committed checkpoint and "
                f"counts on from {elastic_events} elastic event(s)",
    )
