"""Figures that only go forward (issue 68): the rule the progress sidecar applies before
it writes status.training, and the operator applies as it reads it, so that whatever
restarts or misleads the source, no reader sees training go back.

A trainer's report (status.training) comes from a source that can restart or mislead: a
restarted progress sidecar read MaxText's metrics file, which MaxText had cut at an
evaluation's first line, found no train step and reported step 0 for the six minutes
the evaluation lasted; a restarted trainer, a truncated or rotated metrics file, a pod
whose clock disagrees with the last one's do the same in other ways. So each figure below
goes back only through a restore or a reset the report itself names:

    step (with its loss, step time)  back only as far as a restore the report names that
        the reader has not seen (a lastRestore other than the one seen: its step), or
        for a new trainer process that trains and has not moved its step yet (a run
        started over: its processStartedAt, the operator's TrainerRestarted; once its
        step moved, it is held like any other); a new process still starting keeps the
        last step shown until it shows where it resumed. (An elastic event that restarts
        from the initial state restores nothing: the step shown waits until training
        passes it again.)
    state                            a process seen Training does not go back to
                                     Initializing
    elasticEventsTotal               never back (the job's count, continued by each process)
    goodput                          a cause's seconds never back; productive seconds back
                                     only with a named restore (steps redone move to
                                     recomputedSteps); else the whole account is kept
    lastRestore                      never lost (the one seen while the report names none);
                                     the one a report names is the newest, whatever the
                                     clocks say
    lastCommittedCheckpointStep      never back
    lastSnapshotStep                 back only with a named restore or a new process
    phases                           within one process, counts and longest never back
    observedAt                       never before the last one seen (another pod's clock)

A process is known by its processStartedAt (the sidecar keeps its pod's in a state file, so
a restarted sidecar is the same process). Where either side does not say it, it is taken to
be the same process: holding a figure is the safe mistake.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime

from elastic_api.models import (
    GoodputCounters,
    PhaseRecord,
    RestoreReport,
    TrainerGoodput,
    TrainingReport,
)


@dataclass(frozen=True)
class Seen:
    """What a reader last accepted of a trainer's figures (the sidecar: its last report;
    the operator: what its own status recorded of them)."""

    step: int | None = None
    loss: float | None = None
    step_seconds: float | None = None
    state: str | None = None
    process_started_at: datetime | None = None
    last_restore: RestoreReport | None = None
    goodput: TrainerGoodput | None = None
    elastic_events_total: int = 0
    last_committed_checkpoint_step: int | None = None
    last_snapshot_step: int | None = None
    phases: tuple[PhaseRecord, ...] = ()
    observed_at: datetime | None = None
    # The process seen has moved its step since it was first seen (the operator's
    # status.progress.advanced): until then it may still start over lower.
    stepped: bool = True

    @classmethod
    def after(cls, previous: Seen | None, result: Forwarded) -> Seen:
        """What a reader has seen once it accepted `result` (the sidecar's chain)."""
        seen = cls.of(result.report)
        if previous is None:  # a first report: its process has not moved its step yet
            return replace(seen, stepped=False)
        stepped = previous.stepped or result.report.step != previous.step \
            if same_process(previous, result.report) else False
        return replace(seen, stepped=stepped)

    @classmethod
    def of(cls, report: TrainingReport) -> Seen:
        return cls(step=report.step, loss=report.loss, step_seconds=report.step_seconds,
                   state=report.state, process_started_at=report.process_started_at,
                   last_restore=report.last_restore, goodput=report.goodput,
                   elastic_events_total=report.elastic_events_total,
                   last_committed_checkpoint_step=report.last_committed_checkpoint_step,
                   last_snapshot_step=report.last_snapshot_step,
                   phases=tuple(report.phases or ()), observed_at=report.observed_at)


@dataclass(frozen=True)
class Forwarded:
    """The report to act on (or send), and which figures were held at what was seen."""

    report: TrainingReport
    held: tuple[str, ...] = field(default=())


def same_process(seen: Seen, report: TrainingReport) -> bool:
    return seen.process_started_at is None or report.process_started_at is None \
        or seen.process_started_at == report.process_started_at


def restore_floor(seen: Seen, report: TrainingReport) -> int | None:
    """The step a restore the report names, and the reader has not seen, went back to
    (None: it names none)."""
    restore = report.last_restore
    return restore.step if restore is not None and restore != seen.last_restore else None


def newest_restore(seen: Seen, report: TrainingReport) -> RestoreReport | None:
    """The restore to show: the one the report names, else the one seen (a new process
    that has not restored yet, a restarted sidecar, names none). Never chosen by its
    time: one process's clock is not the last one's."""
    return report.last_restore if report.last_restore is not None else seen.last_restore


def forward(seen: Seen | None, report: TrainingReport) -> Forwarded:
    """`report` with every figure that went back without a named restore or reset held at
    what was seen (module docstring); `seen` None: nothing seen yet, the report as is."""
    if seen is None:
        return Forwarded(report)
    update: dict[str, object] = {}
    held: list[str] = []
    same, floor = same_process(seen, report), restore_floor(seen, report)
    restored = floor is not None
    started_over = report.state != "Initializing" and (not same or not seen.stepped)
    if seen.step is not None and report.step < seen.step and not started_over \
            and (floor is None or report.step < floor):
        update.update(step=seen.step, loss=seen.loss, step_seconds=seen.step_seconds)
        held.append("step")
    if same and seen.state not in (None, "Initializing") and report.state == "Initializing":
        update["state"] = seen.state
        held.append("state")
    if report.elastic_events_total < seen.elastic_events_total:
        update["elastic_events_total"] = seen.elastic_events_total
        held.append("elasticEventsTotal")
    goodput = _goodput(seen.goodput, report.goodput, restored)
    if goodput is not report.goodput:
        update["goodput"] = goodput
        held.append("goodput")
    restore = newest_restore(seen, report)
    if restore is not report.last_restore:
        update["last_restore"] = restore
        held.append("lastRestore")
    _checkpoint_steps(seen, report, restored or not same, update, held)
    if same and seen.phases:
        phases = merge_phases(seen.phases, report.phases or [])
        if phases != (report.phases or []):
            update["phases"] = phases
            held.append("phases")
    if seen.observed_at is not None and report.observed_at < seen.observed_at:
        update["observed_at"] = seen.observed_at
        held.append("observedAt")
    return Forwarded(report.model_copy(update=update) if update else report, tuple(held))


def _goodput(seen: TrainerGoodput | None, reported: TrainerGoodput | None,
             restored: bool) -> TrainerGoodput | None:
    """The reported account, unless a cause went back, or productive seconds did without
    a named restore (then the one seen, whole: its figures add up only together)."""
    if seen is None:
        return reported
    if reported is None:
        return seen
    old, new = seen.badput_seconds, reported.badput_seconds
    if any(getattr(new, cause) < getattr(old, cause) for cause in GoodputCounters.model_fields):
        return seen
    if reported.productive_seconds < seen.productive_seconds and not restored:
        return seen
    return reported


def _checkpoint_steps(seen: Seen, report: TrainingReport, may_go_back: bool,
                      update: dict[str, object], held: list[str]) -> None:
    committed = report.last_committed_checkpoint_step
    if seen.last_committed_checkpoint_step is not None and (
            committed is None or committed < seen.last_committed_checkpoint_step):
        update["last_committed_checkpoint_step"] = seen.last_committed_checkpoint_step
        held.append("lastCommittedCheckpointStep")
    snapshot = report.last_snapshot_step
    if seen.last_snapshot_step is not None and not may_go_back and (
            snapshot is None or snapshot < seen.last_snapshot_step):
        update["last_snapshot_step"] = seen.last_snapshot_step
        held.append("lastSnapshotStep")


def merge_phases(seen: tuple[PhaseRecord, ...] | list[PhaseRecord],
                 reported: list[PhaseRecord]) -> list[PhaseRecord]:
    """One process's phase history from what was seen and what is reported: per phase the
    higher count (its last time with it) and the longest time."""
    merged = {p.phase: p for p in seen}
    for phase in reported:
        kept = merged.get(phase.phase)
        if kept is None or phase.count >= kept.count:
            longest = max(phase.longest_seconds, kept.longest_seconds if kept else 0.0)
            merged[phase.phase] = phase.model_copy(update={"longest_seconds": longest}) \
                if longest != phase.longest_seconds else phase
        else:
            longest = max(phase.longest_seconds, kept.longest_seconds)
            if longest != kept.longest_seconds:
                merged[phase.phase] = kept.model_copy(update={"longest_seconds": longest})
    order = [p.phase for p in reported] + [p for p in merged if p not in
                                           {r.phase for r in reported}]
    return [merged[p] for p in order]
