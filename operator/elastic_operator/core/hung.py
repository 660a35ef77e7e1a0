"""The trainer's slice replacement requests (status.training.sliceReplacement): a hung or
slow slice, whose pods stay Ready, blamed by the trainer's watchdog. Pure.

A request is handled once per (processId, processStartedAt, id): each slice it names
that is Ready goes Down with the request's reason (SliceHung, SliceSlow), which is a
slice failure like any other (counted in restarts and sliceFailures, the restart budget
applies, SliceDown and SliceReplacing Events, a Recovering recovery), recorded in
slices[].replacement and replaced by core/replacement.py, its pool quarantined when a
spare exists (the trainer's evidence is a report against the pool, blame Reported).
The request handled is kept in status.handledSliceReplacement, so that a restarted
operator acts on none twice.

The slice stays Down while its newest pods are still those of the Job the record names
(the operator deletes that Job; until its pods go they look Ready): level-based, from the
record. A slow slice (SliceSlow) is replaced only with spec.elastic.onSlowSlice Replace
(its default where slices are replaced), only when the request blames one slice and a
healthy spare pool exists to move it to;
otherwise it is reported (Degraded, SlowSteps).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from elastic_api.conditions import Reason
from elastic_api.models import (
    ElasticTrainingJobSpec,
    ElasticTrainingJobStatus,
    HandledSliceReplacement,
    SliceReplacementRequest,
    SliceStatus,
    TrainingReport,
)
from elastic_operator.core.blame import Evidence
from elastic_operator.core.slices import HeldDown
from elastic_operator.core.sliceview import SliceView, SliceViews
from elastic_operator.core.status_events import StatusEvent
from elastic_operator.core.wording import fmt_slices

# The slice reasons of a trainer's request (any other reason a newer trainer gives is
# taken as a hang).
REQUESTED_REASONS = frozenset({Reason.SLICE_HUNG, Reason.SLICE_SLOW})


@dataclass(frozen=True)
class Requested:
    """The slices held Down for the trainer's requests, and the request handled."""

    down: dict[int, HeldDown] = field(default_factory=dict)
    handled: HandledSliceReplacement | None = None
    events: list[StatusEvent] = field(default_factory=list)


def reported_evidence(reason: str, detail: str) -> Evidence:
    """The trainer's blame of a slice, as evidence against its pool (blame Reported: its
    pool is quarantined when a spare exists, unless the fault follows the job)."""
    return Evidence("Reported", Reason.HARDWARE_FAILURE, f"{reason}: {detail}"[:300])


def still_on_blamed_job(s: SliceStatus, view: SliceView) -> bool:
    """The slice's record is a trainer's request and its newest pods are still the Job
    it names (being deleted, or about to be)."""
    record = s.replacement
    return record is not None and record.reason in REQUESTED_REASONS \
        and record.job_uid is not None and view.job_uid == record.job_uid


def _is_new(request: SliceReplacementRequest, report: TrainingReport,
            handled: HandledSliceReplacement | None) -> bool:
    return handled is None or (handled.process_id, handled.process_started_at, handled.id) \
        != (report.process_id, report.process_started_at, request.id)


def requested_down(spec: ElasticTrainingJobSpec, report: TrainingReport | None,
                   previous: ElasticTrainingJobStatus, views: SliceViews, *,
                   frozen: str | None, spare_free: bool, now: datetime) -> Requested:
    """The slices held Down now (a new request's, and those whose record's Job still
    runs them: `views`, each slice's), and the request handled."""
    down = {s.index: HeldDown(s.replacement.reason, s.message or s.replacement.reason,
                              None, new=False)
            for s in previous.slices
            if s.replacement is not None and frozen is None
            and still_on_blamed_job(s, views[s.index])}
    handled = previous.handled_slice_replacement
    request = report.slice_replacement if report is not None else None
    if report is None or request is None or not _is_new(request, report, handled):
        return Requested(down, handled)
    replaced, refused = _decide(spec, report, request, previous.slices, frozen, spare_free)
    reason = Reason.SLICE_SLOW if request.reason == Reason.SLICE_SLOW else Reason.SLICE_HUNG
    what = "slow" if reason == Reason.SLICE_SLOW else "hung"
    said = f": {request.message}" if request.message else ""
    for index in replaced:
        down[index] = HeldDown(reason, f"the trainer reports slice {index} {what} (request "
                               f"{request.id}){said}"[:512], request.requested_at, new=True)
    message = "; ".join([*([f"replacing {fmt_slices(replaced)}"] if replaced else []),
                         *refused]) or None
    handled = HandledSliceReplacement(
        process_id=report.process_id, process_started_at=report.process_started_at,
        id=request.id, handled_at=now, replaced=replaced, message=message)
    events = [] if not refused else [StatusEvent(
        reason=Reason.SLICE_REPLACEMENT_DECLINED, type="Normal",
        message=f"the trainer's request {request.id} ({request.reason}, "
                f"{fmt_slices(request.slices)}): " + "; ".join(refused))]
    return Requested(down, handled, events)


def _decide(spec: ElasticTrainingJobSpec, report: TrainingReport,
            request: SliceReplacementRequest, slices: list[SliceStatus],
            frozen: str | None, spare_free: bool) -> tuple[list[int], list[str]]:
    """The slices to replace, and why each other one is not."""
    named = sorted(set(request.slices))
    if frozen is not None:
        return [], [f"not acted on: the job is {frozen}"]
    started = report.process_started_at
    if started is not None and request.requested_at < started:
        return [], ["not acted on: made by an earlier trainer process"]
    if not spec.recovery.replace_slices:
        return [], ["not acted on: spec.recovery.replaceSlices is false"]
    if request.reason == Reason.SLICE_SLOW:
        why = _slow_refusal(spec, named, spare_free)
        if why is not None:
            return [], [why]
    by_index: Mapping[int, SliceStatus] = {s.index: s for s in slices}
    replaced, refused = [], []
    for index in named:
        s = by_index.get(index)
        if s is None:
            refused.append(f"slice {index}: no such slice")
        elif s.state != "Ready":
            refused.append(f"slice {index} is {s.state} already: its recovery is under way")
        else:
            replaced.append(index)
    return replaced, refused


def _slow_refusal(spec: ElasticTrainingJobSpec, named: list[int],
                  spare_free: bool) -> str | None:
    if spec.on_slow_slice != "Replace":
        return "reported only: spec.elastic.onSlowSlice is Report"
    if len(named) != 1:
        return "reported only: a slow slice is moved only when one slice is blamed"
    if not spare_free:
        return "reported only: no healthy spare node pool to move the slow slice to"
    return None
