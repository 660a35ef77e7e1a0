"""The recovery of a trainer that reports no elastic events (MaxText, any program in
`spec.trainer.command`): closed by the operator from what it sees itself, and confirmed
later by the trainer's progress. docs/design/recovery.md has the rule.

- Whether the trainer reports its recoveries (`reports_recovery`): the bundled trainer
  (`etj train`: no `spec.trainer.command`) always does, so the operator waits for it;
  another program only once it has reported an elastic event in this job. The progress
  sidecar reports steps, never elastic events.
- For one that does not, a recovery closes (`closedBy: Operator`) once every slice is
  Ready again and the head's `main` container has been running since before the failure
  (the process that lived through it: not restarted, not terminated), or, when `main`
  started after it (restarted in its pod, or in a new head pod), once that process shows
  progress since the failure (then confirmed at once). Nothing says when training
  resumed or what it lost: resumedAt, downtimeSeconds, stepsLost, restoredFromStep and
  restoreSource stay unset.
- Confirmed (`confirmedBy`) by what comes after the closure: a status.training report
  made after it with another step than the one reported at the closure
  (`TrainingReport`), or a listing made after it whose newest committed checkpoint is
  newer than any step known at the failure (`Checkpoint`).
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from elastic_api.models import (
    CLOSED_BY_OPERATOR,
    CONFIRMED_BY_CHECKPOINT,
    CONFIRMED_BY_REPORT,
    CheckpointStatus,
    ElasticTrainingJobSpec,
    ElasticTrainingJobStatus,
    RecoveryRecord,
    TrainingReport,
)
from elastic_api.names import HEAD_REPLICATED_JOB
from elastic_operator.core.wording import fmt_slices, iso
from elastic_operator.model.objects import ObservedContainer, ObservedPod


@dataclass(frozen=True)
class TrainerSignals:
    """What the operator sees of the trainer beside its report: whether it reports its
    recoveries, the head's `main` container now (None: no running head pod), and
    status.checkpoint as this reconcile writes it."""

    reports_recovery: bool = True
    main: ObservedContainer | None = None
    checkpoint: CheckpointStatus | None = None


def reports_recovery(spec: ElasticTrainingJobSpec, previous: ElasticTrainingJobStatus) -> bool:
    """The bundled trainer reports its elastic events; another program once it has."""
    if not spec.trainer.command:
        return True
    report = previous.training
    return previous.counters.elastic_events > 0 or (
        report is not None and (report.elastic_event is not None
                                or report.elastic_events_total > 0))


def newest_head(pods: Iterable[ObservedPod]) -> ObservedPod | None:
    """The newest head pod, if it runs and is not going."""
    heads = [p for p in pods if p.replicated_job == HEAD_REPLICATED_JOB]
    if not heads:
        return None
    newest = max(heads, key=lambda p: (p.created_at is not None, p.created_at or 0, p.name))
    return None if newest.terminating or newest.phase != "Running" else newest


def head_main(pods: Iterable[ObservedPod]) -> ObservedContainer | None:
    """The `main` container of the newest head pod, if that pod runs and is not going."""
    head = newest_head(pods)
    return head.main if head is not None else None


def main_ran_through(main: ObservedContainer | None, detected_at: datetime) -> bool:
    """`main` runs and started before the failure: the process that lived through it
    (a restart, in its pod where the cluster has container restart rules, else in a new
    head pod, starts it later)."""
    return main is not None and main.state == "running" and main.started_at is not None \
        and main.started_at <= detected_at


def newest_checkpoint_step(checkpoint: CheckpointStatus | None) -> int | None:
    """The newest step of a listing, committed or in flight (a save in flight at the
    failure that commits after it proves nothing about what came after)."""
    if checkpoint is None:
        return None
    steps = [*checkpoint.incomplete_steps, *(
        [checkpoint.latest_committed_step] if checkpoint.latest_committed_step is not None
        else [])]
    return max(steps) if steps else None


def evidence(record: RecoveryRecord, report: TrainingReport | None,
             checkpoint: CheckpointStatus | None, since: datetime,
             step_before: int | None) -> dict[str, object] | None:
    """What shows training going on after `since`, as the record's confirmedBy, At and
    Step: a Training report made after it with another step than `step_before` (None: any
    step), else a listing made after it whose newest committed step is newer than any
    step known at the failure (listed then, committed or in flight, or reported by the
    trainer: a save of such a step began before the failure). None: nothing yet."""
    if report is not None and report.state == "Training" and report.observed_at > since \
            and (step_before is None or report.step != step_before):
        return {"confirmed_by": CONFIRMED_BY_REPORT, "confirmed_at": report.observed_at,
                "confirmed_step": report.step}
    if checkpoint is None or checkpoint.error or checkpoint.latest_committed_step is None \
            or checkpoint.observed_at is None or checkpoint.observed_at <= since:
        return None
    known = [s for s in (record.checkpoint_step_at_detection, record.step_at_detection)
             if s is not None]
    step = checkpoint.latest_committed_step
    if known and step <= max(known):
        return None
    return {"confirmed_by": CONFIRMED_BY_CHECKPOINT, "confirmed_at": checkpoint.observed_at,
            "confirmed_step": step}


def close_by_operator(record: RecoveryRecord, report: TrainingReport | None,
                      signals: TrainerSignals, now: datetime) -> RecoveryRecord | None:
    """The record closed by the operator (every slice is Ready: the caller checked), or
    None while the head's `main` gives no reason to: the `main` that lived through the
    failure still runs (unconfirmed); or a new one runs and has shown progress since the
    failure (confirmed at once)."""
    closed: dict[str, object] = {"closed_at": now, "closed_by": CLOSED_BY_OPERATOR,
                                 "step_at_closure": report.step if report else None}
    if main_ran_through(signals.main, record.detected_at):
        return record.model_copy(update=closed)
    if signals.main is None or signals.main.state != "running":
        return None  # no main running: a head that died closes nothing
    shown = evidence(record, report, signals.checkpoint, record.detected_at,
                     record.step_at_detection)
    return None if shown is None else record.model_copy(update={**closed, **shown})


def confirm(record: RecoveryRecord, report: TrainingReport | None,
            checkpoint: CheckpointStatus | None) -> RecoveryRecord | None:
    """The operator-closed record confirmed by what came after its closure, or None."""
    if record.closed_by != CLOSED_BY_OPERATOR or record.confirmed_by is not None \
            or record.closed_at is None:
        return None
    shown = evidence(record, report, checkpoint, record.closed_at, record.step_at_closure)
    return None if shown is None else record.model_copy(update=shown)


def reopen(record: RecoveryRecord) -> RecoveryRecord:
    """An operator-closed record opened again (the trainer's own elastic event for this
    failure came after all): the trainer's report closes it."""
    return record.model_copy(update={
        "closed_at": None, "closed_by": None, "confirmed_by": None, "confirmed_at": None,
        "confirmed_step": None, "step_at_closure": None})


def waiting_message(record: RecoveryRecord, signals: TrainerSignals,
                    not_ready: frozenset[int]) -> str:
    """What an open recovery of a trainer that reports no elastic events waits for."""
    if not_ready:
        return (f"waiting for {fmt_slices(sorted(not_ready))} to be Ready again (the "
                "trainer reports no elastic events: the operator closes the recovery when "
                "every slice is back and the head's main still runs)")
    if signals.main is None or signals.main.state != "running":
        return "every slice is Ready; the head's main is not running"
    return ("every slice is Ready; the head's main started after the failure: waiting for "
            "a report of a step after the failure or a checkpoint newer than it")


def unconfirmed_message(record: RecoveryRecord) -> str:
    """Closed by the operator: what it saw, and what it does not know."""
    seconds = (record.closed_at - record.detected_at).total_seconds() \
        if record.closed_at is not None else 0.0
    went = f" ({fmt_slices(record.slices)} went down)" if record.slices else ""
    return (f"every slice Ready again {max(0.0, seconds):.1f} s after the failure{went} and "
            "the head's main still running; the trainer reports no elastic events, so "
            "progress is not confirmed (a new step in status.training or a checkpoint newer "
            "than the failure confirms it); downtime and steps lost unknown")


def confirmed_message(record: RecoveryRecord) -> str:
    """Closed by the operator, then confirmed."""
    seconds = (record.closed_at - record.detected_at).total_seconds() \
        if record.closed_at is not None else 0.0
    went = f" ({fmt_slices(record.slices)} went down)" if record.slices else ""
    what = (f"step {record.confirmed_step} reported" if record.confirmed_by == CONFIRMED_BY_REPORT
            else f"checkpoint {record.confirmed_step} committed")
    at = f" at {iso(record.confirmed_at)}" if record.confirmed_at is not None else ""
    return (f"every slice Ready again {max(0.0, seconds):.1f} s after the failure{went}; "
            f"training confirmed by {what}{at}; downtime and steps lost not reported by the "
            "trainer")
