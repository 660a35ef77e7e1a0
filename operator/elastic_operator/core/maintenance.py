"""Maintenance ahead of time, decided purely (docs/operations.md, "Maintenance").

GKE announces TPU host maintenance on the nodes (names.py: the scheduled-maintenance-time
label, the active-node-maintenance label, the impending-node-termination taint). A slice
whose nodes carry a signal (a scheduled time within spec.maintenance.leadSeconds, or an
active one) gets `slices[i].maintenance`; then, through `status.checkpointRequest`:

    Requested     the operator asks the trainer for a checkpoint now (pause: no steps after
                  it, when a spare pool exists to move to)
    Acknowledged  status.training.checkpointAck has the request's id: the state of step
                  `ack.step` is committed
    Moving        the slice is being moved to a spare (a `Move` replacement: counted in
                  slices[i].moves, not restarts)
    Released      the moved slices are Ready again (or there was no spare: the trainer
                  goes on, and the maintenance will take the slice as a failure)
    Expired       no acknowledgement by `deadline`: moved anyway (when a spare exists)

Steps after the acknowledged save are never lost: the trainer pauses until Released.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from elastic_api.conditions import ConditionType, Reason
from elastic_api.models import (
    CheckpointRequest,
    Condition,
    ElasticTrainingJobSpec,
    SliceMaintenance,
    SliceReplacement,
    SliceStatus,
    TrainingReport,
)
from elastic_operator.core.pools import pools_in_use, spare_pools
from elastic_operator.core.setter import ConditionSetter
from elastic_operator.core.sliceview import SliceViews
from elastic_operator.core.status_events import StatusEvent
from elastic_operator.core.wording import fmt_slices, iso
from elastic_operator.model.objects import Observed, ObservedNode

OPEN_PHASES = ("Requested", "Acknowledged", "Moving")


@dataclass(frozen=True)
class SliceNotices:
    """The slices with slices[].maintenance set, and an Event for each new notice."""

    slices: list[SliceStatus]
    events: list[StatusEvent] = field(default_factory=list)


@dataclass(frozen=True)
class RequestUpdate:
    """status.checkpointRequest after one reconcile, the slices (with their Move
    records), and the Events."""

    request: CheckpointRequest | None
    slices: list[SliceStatus]
    events: list[StatusEvent] = field(default_factory=list)


def slice_maintenance(
    spec: ElasticTrainingJobSpec, slices: list[SliceStatus], views: SliceViews,
    now: datetime,
) -> SliceNotices:
    """slices[].maintenance from the signals on the nodes the slice's live pods run on
    (its view's `signalled_nodes`)."""
    out, events = [], []
    for s in slices:
        nodes = views[s.index].signalled_nodes
        notice = _notice(nodes, spec.maintenance.lead_seconds, now) \
            if spec.maintenance.enabled else None
        prev = s.maintenance
        if notice is not None and prev is not None and prev.pool == notice.pool:
            notice = notice.model_copy(update={"noticed_at": prev.noticed_at,
                                               "request_id": prev.request_id})
        elif notice is not None:
            when = f" at {iso(notice.scheduled_at)}" if notice.scheduled_at else ""
            events.append(StatusEvent(
                reason=Reason.MAINTENANCE_SCHEDULED, type="Warning", slice_index=s.index,
                message=f"slice {s.index}: GKE announced maintenance on node pool "
                        f"{notice.pool} ({notice.signal}){when}"))
        out.append(s.model_copy(update={"maintenance": notice}))
    return SliceNotices(out, events)


def _notice(nodes: Sequence[ObservedNode], lead_s: int, now: datetime) -> SliceMaintenance | None:
    horizon = now + timedelta(seconds=lead_s)
    for node in nodes:
        signal = node.maintenance_signal
        if signal is None:
            continue
        if signal == Reason.SCHEDULED_MAINTENANCE and node.scheduled_maintenance is not None \
                and node.scheduled_maintenance > horizon:
            continue  # announced, not yet within the lead time
        return SliceMaintenance(pool=node.pool or node.name, signal=signal,
                                scheduled_at=node.scheduled_maintenance, noticed_at=now)
    return None


def next_notice_in(spec: ElasticTrainingJobSpec, observed: Observed, now: datetime) -> float | None:
    """Seconds until a scheduled maintenance on the job's nodes enters the lead time."""
    if not spec.maintenance.enabled:
        return None
    lead = timedelta(seconds=spec.maintenance.lead_seconds)
    times = [(n.scheduled_maintenance - lead - now).total_seconds()
             for n in observed.nodes.values()
             if n.scheduled_maintenance is not None and n.scheduled_maintenance - lead > now]
    return min(times) if times else None


def checkpoint_request(
    spec: ElasticTrainingJobSpec, slices: list[SliceStatus], previous: CheckpointRequest | None,
    report: TrainingReport | None, observed: Observed, views: SliceViews, now: datetime,
) -> RequestUpdate:
    """status.checkpointRequest after this reconcile, and the slices (Move records)."""
    spares = spare_pools(observed.pools, pools_in_use(slices))
    request = previous
    events: list[StatusEvent] = []
    if request is None or request.phase not in OPEN_PHASES:
        pending = [s.index for s in slices if s.maintenance is not None
                   and s.maintenance.request_id is None and s.state == "Ready"]
        if not pending:
            return RequestUpdate(request, slices)
        request = _new_request(spec, pending, previous, bool(spares), now)
        slices = [s.model_copy(update={"maintenance": s.maintenance.model_copy(
            update={"request_id": request.id})}) if s.index in pending and s.maintenance
            else s for s in slices]
        events.append(StatusEvent(
            reason=Reason.CHECKPOINT_REQUESTED, type="Normal",
            message=f"checkpoint request {request.id}: {fmt_slices(pending)} "
                    f"{'has' if len(pending) == 1 else 'have'} maintenance announced; the "
                    "trainer is asked to save now"
                    + (" and hold until the move" if request.pause else "")))
        return RequestUpdate(request, slices, events)
    if request.phase == "Requested":
        return _answer(request, slices, report, spares, views, now)
    if request.phase == "Moving" and all(
            s.state == "Ready" and s.replacement is None
            for s in slices if s.index in request.slices):
        request = request.model_copy(update={"phase": "Released"})
    return RequestUpdate(request, slices)


def _unmoved(request: CheckpointRequest, slices: list[SliceStatus], spares: list[str],
             moving: list[int]) -> str:
    """What the acknowledgement adds when a slice of the request will not move: the
    trainer goes on, and the maintenance will take the slice as a failure."""
    stay = [s for s in slices if s.index in request.slices
            and (not spares or s.index not in moving)]
    if not stay:
        return ""
    why = "no healthy spare node pool" if not spares else "; ".join(
        f"slice {s.index} is {s.state}" + (" with a replacement under way"
                                           if s.replacement is not None else "")
        for s in stay)
    return (f"; {fmt_slices([s.index for s in stay])} will not move ({why}): the trainer "
            "goes on, and the maintenance will take it as a failure")


def _new_request(spec: ElasticTrainingJobSpec, pending: list[int],
                 previous: CheckpointRequest | None, pause: bool,
                 now: datetime) -> CheckpointRequest:
    return CheckpointRequest(
        id=(previous.id if previous else 0) + 1, reason="Maintenance", slices=pending,
        requested_at=now,
        deadline=now + timedelta(seconds=spec.maintenance.checkpoint_timeout_seconds),
        pause=pause, pause_seconds=spec.maintenance.pause_timeout_seconds if pause else 0,
        phase="Requested")


def _answer(
    request: CheckpointRequest, slices: list[SliceStatus], report: TrainingReport | None,
    spares: list[str], views: SliceViews, now: datetime,
) -> RequestUpdate:
    """The trainer acknowledged (or the deadline passed): move the slices, if a spare
    pool exists to move them to."""
    ack = report.checkpoint_ack if report is not None else None
    events: list[StatusEvent] = []
    moving = [s.index for s in slices if s.index in request.slices and s.state == "Ready"
              and s.maintenance is not None and s.replacement is None]
    if ack is not None and ack.id == request.id:
        events.append(StatusEvent(
            reason=Reason.CHECKPOINT_ACKNOWLEDGED, type="Normal",
            message=f"checkpoint request {request.id}: the trainer saved step {ack.step}"
                    + (" and holds" if ack.paused and spares and moving else "")
                    + _unmoved(request, slices, spares, moving)))
        phase = "Acknowledged"
    elif now >= request.deadline:
        events.append(StatusEvent(
            reason=Reason.CHECKPOINT_REQUEST_TIMED_OUT, type="Warning",
            message=f"checkpoint request {request.id}: no answer from the trainer by "
                    f"{iso(request.deadline)}; "
                    + ("moving anyway" if spares else "nothing to move to")))
        phase = "Expired"
    else:
        return RequestUpdate(request, slices)
    if not spares or not moving:
        return RequestUpdate(request.model_copy(update={
            "phase": "Released" if phase == "Acknowledged" else phase}), slices, events)
    out = []
    for s in slices:
        if s.index in moving[:len(spares)]:
            s = s.model_copy(update={"moves": s.moves + 1, "replacement": SliceReplacement(
                action="Move", reason=Reason.MAINTENANCE,
                job_uid=views[s.index].job_uid,
                from_pool=s.pool, requested_at=now)})
            events.append(StatusEvent(
                reason=Reason.SLICE_MOVING, type="Normal", slice_index=s.index,
                message=f"slice {s.index}: moving off node pool {s.pool} before its "
                        "maintenance"))
        out.append(s)
    return RequestUpdate(request.model_copy(update={
        "phase": "Moving" if phase == "Acknowledged" else "Expired"}), out, events)


def maintenance_condition(setter: ConditionSetter, slices: list[SliceStatus],
                          terminal: bool) -> Condition:
    noticed = [s for s in slices if s.maintenance is not None]
    if not noticed or terminal:
        return setter.false(ConditionType.MAINTENANCE_PENDING, Reason.NO_MAINTENANCE)
    signals = sorted({s.maintenance.signal for s in noticed if s.maintenance})
    return setter.true(
        ConditionType.MAINTENANCE_PENDING,
        signals[0] if len(signals) == 1 else Reason.MAINTENANCE,
        "; ".join(f"slice {s.index}: node pool {s.maintenance.pool} ({s.maintenance.signal})"
                  for s in noticed if s.maintenance))
