"""The pure core of the operator: parse a job, plan a reconcile, compute its status.

Nothing here does I/O or reads a clock: `now` is passed in. The handlers feed these
functions what kube.py observed and write back what they return.

Slice states (status.slices[]), per worker slice (the pods with one job-index):
- Ready: every host's newest pod is Ready on a Ready node.
- Down: a host's newest pod failed, is terminating (deleted, evicted), or sits on a
  NotReady node; or a slice that was Ready lost a host without us seeing why.
- Restarting: after Down, replacement pods exist but are not all ready yet.
- Pending: never been ready yet (or the JobSet is suspended / not created).
A slice entering Down increments its `restarts` and counters.sliceFailures.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from elastic_api.models import (
    CheckpointStatus,
    Condition,
    ConditionStatus,
    Counters,
    ElasticTrainingJob,
    ElasticTrainingJobStatus,
    RecoveryRecord,
    SliceStatus,
    TrainerProcess,
    TrainingReport,
)
from elastic_api.names import (
    APPLIED_SPEC_ANNOTATION,
    HEAD_REPLICATED_JOB,
    WORKER_REPLICATED_JOB,
)
from elastic_operator.observed import Observed, ObservedPod

# Condition types.
READY = "Ready"
SLICE_DOWN = "SliceDown"
RECOVERING = "Recovering"
DEGRADED = "Degraded"
SUSPENDED = "Suspended"
SUCCEEDED = "Succeeded"
FAILED = "Failed"
SPEC_APPLIED = "SpecApplied"
TRAINING_REPORT_VALID = "TrainingReportValid"
CONDITION_ORDER = (READY, SLICE_DOWN, RECOVERING, DEGRADED, SUSPENDED, SUCCEEDED, FAILED,
                   SPEC_APPLIED, TRAINING_REPORT_VALID)

# The trainer's Failed reasons that become the job's Failed reason (and an Event). With
# MaxRestartsExceeded (the JobSet's budget) these are the "budget exhausted" Events.
TRAINER_FAILURE_REASONS = ("ElasticRetriesExhausted", "ElasticTimeout")

EventType = Literal["Normal", "Warning"]


@dataclass(frozen=True)
class StatusEvent:
    """A Kubernetes Event to post on the job, with what the metrics need."""

    reason: str
    message: str
    type: EventType = "Normal"
    slice_index: int | None = None
    failed_at: datetime | None = None  # SliceDown: when the host failed (detection latency)
    downtime_seconds: float | None = None  # Recovered
    steps_lost: int | None = None  # Recovered


# --- parsing (lenient) --------------------------------------------------------------------


@dataclass(frozen=True)
class ParsedJob:
    job: ElasticTrainingJob  # status left out; see previous
    previous: ElasticTrainingJobStatus  # the status as stored, training parsed leniently
    report_problem: str | None  # why (part of) status.training was ignored


class InvalidJobSpec(ValueError):
    pass


def parse_job(body: dict[str, Any]) -> ParsedJob:
    """Parse a raw ElasticTrainingJob. The spec must be valid (InvalidJobSpec names the
    fields); the status never makes this fail: bad parts are dropped and reported."""
    raw = {k: v for k, v in body.items() if k != "status"}
    try:
        job = ElasticTrainingJob.model_validate(raw)
    except ValidationError as e:
        raise InvalidJobSpec(_describe_errors(e)) from e
    raw_status = body.get("status")
    previous, problem = parse_status(raw_status if isinstance(raw_status, dict) else {})
    return ParsedJob(job=job, previous=previous, report_problem=problem)


def parse_status(raw: dict[str, Any]) -> tuple[ElasticTrainingJobStatus, str | None]:
    operator_part = {k: v for k, v in raw.items() if k != "training"}
    status = _salvage(ElasticTrainingJobStatus, operator_part)[0] or ElasticTrainingJobStatus()
    status = _aware(status)
    report, problem = parse_training_report(raw.get("training"))
    return status.model_copy(update={"training": report}), problem


def parse_training_report(raw: Any) -> tuple[TrainingReport | None, str | None]:
    """The trainer's report, leniently: invalid fields are dropped and named."""
    if raw is None:
        return None, None
    if not isinstance(raw, dict):
        return None, f"status.training is a {type(raw).__name__}, not an object; ignored"
    report, dropped = _salvage(TrainingReport, raw)
    if report is not None:
        report = _aware(report)
    if report is None:
        return None, f"status.training ignored: {'; '.join(dropped)}"
    if dropped:
        return report, f"status.training fields ignored: {'; '.join(dropped)}"
    return report, None


def _salvage(model: Any, raw: dict[str, Any]) -> tuple[Any, list[str]]:
    """Validate, dropping each offending field until it validates (or cannot)."""
    data: dict[str, Any] = dict(raw)
    dropped: list[str] = []
    for _ in range(len(raw) + 8):
        try:
            return model.model_validate(data), dropped
        except ValidationError as e:
            removed = False
            for err in e.errors():
                loc = err.get("loc", ())
                if not loc:
                    continue
                key = loc[0]
                if isinstance(key, str) and key in data:
                    if key == "elasticEvent" and isinstance(data[key], dict) and len(loc) > 1:
                        sub, sub_dropped = _salvage(_elastic_event_model(), data[key])
                        if sub is not None:
                            data[key] = sub.model_dump(by_alias=True, mode="json")
                            dropped += [f"elasticEvent.{d}" for d in sub_dropped]
                            removed = True
                            break
                    dropped.append(f"{key}: {err.get('msg', 'invalid')}")
                    del data[key]
                    removed = True
                    break
                if isinstance(key, str):  # a required field is missing
                    dropped.append(f"{key}: {err.get('msg', 'missing')}")
                    return None, dropped
            if not removed:
                return None, dropped or ["invalid"]
    return None, dropped


def _aware(model: Any) -> Any:
    """The same model with naive datetimes read as UTC (so comparisons cannot raise)."""
    updates: dict[str, Any] = {}
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, datetime) and value.tzinfo is None:
            updates[name] = value.replace(tzinfo=UTC)
        elif isinstance(value, BaseModel):
            updates[name] = _aware(value)
        elif isinstance(value, list) and value and isinstance(value[0], BaseModel):
            updates[name] = [_aware(v) for v in value]
    return model.model_copy(update=updates) if updates else model


def _elastic_event_model() -> Any:
    from elastic_api.models import ElasticEventReport

    return ElasticEventReport


def _describe_errors(e: ValidationError) -> str:
    parts = []
    for err in e.errors()[:5]:
        path = ".".join(str(p) for p in err.get("loc", ()))
        parts.append(f"{path}: {err.get('msg', 'invalid')}")
    return "; ".join(parts)


# --- reconcile plan -------------------------------------------------------------------------


@dataclass
class Plan:
    """What one reconcile should change in the cluster."""

    create: list[dict[str, Any]] = field(default_factory=list)
    patch_jobset_suspend: bool | None = None
    why_not: str | None = None  # creation refused (terminal / lost JobSet), for logs


def applied_spec(job: ElasticTrainingJob) -> str:
    """The spec a JobSet was rendered from, minus the one field applied in place."""
    spec = job.spec.to_wire()
    spec.pop("suspend", None)
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))


def owner_reference(job: ElasticTrainingJob) -> dict[str, Any]:
    return {
        "apiVersion": job.api_version,
        "kind": job.kind,
        "name": job.metadata.name,
        "uid": job.metadata.uid or "",
        "controller": True,
    }


def owned(job: ElasticTrainingJob, rendered: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rendered objects with the job's namespace and controller ownerReference; the
    JobSet also carries the spec it was rendered from (to detect later spec changes)."""
    out = []
    for obj in rendered:
        obj = json.loads(json.dumps(obj))  # deep copy
        meta = obj.setdefault("metadata", {})
        if job.metadata.namespace:
            meta["namespace"] = job.metadata.namespace
        meta["ownerReferences"] = [owner_reference(job)]
        if obj.get("kind") == "JobSet":
            meta.setdefault("annotations", {})[APPLIED_SPEC_ANNOTATION] = applied_spec(job)
        out.append(obj)
    return out


def is_terminal(status: ElasticTrainingJobStatus) -> bool:
    return any(c.type in (SUCCEEDED, FAILED) and c.status == "True" for c in status.conditions)


def plan_reconcile(
    job: ElasticTrainingJob,
    rendered: list[dict[str, Any]],
    observed: Observed,
    previous: ElasticTrainingJobStatus,
) -> Plan:
    """Create what is missing, apply suspend; never recreate a JobSet that existed."""
    jobset = observed.jobset
    if jobset is None:
        if is_terminal(previous):
            return Plan(why_not="the job is finished; its JobSet is not recreated")
        if previous.job_set_name:
            return Plan(why_not=f"JobSet {previous.job_set_name} existed and is gone; "
                        "not recreated (that would reset its restart budget)")
        return Plan(create=owned(job, rendered))
    if job.metadata.uid and jobset.owner_uid and jobset.owner_uid != job.metadata.uid:
        return Plan(why_not=f"JobSet {jobset.name} is owned by another object")
    if jobset.terminal_state is not None or is_terminal(previous):
        return Plan(why_not="the JobSet is finished")
    if jobset.suspended != job.spec.suspend:
        return Plan(patch_jobset_suspend=job.spec.suspend)
    return Plan()


def spec_drift(job: ElasticTrainingJob, applied: str | None) -> list[str]:
    """Paths of spec fields that differ from what the JobSet was rendered from."""
    if applied is None:
        return []
    try:
        before = json.loads(applied)
    except ValueError:
        return ["(unreadable applied-spec annotation)"]
    after = json.loads(applied_spec(job))
    return _diff_paths(before, after, "spec")


def _diff_paths(a: Any, b: Any, path: str) -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[str] = []
        for key in sorted(set(a) | set(b)):
            out += _diff_paths(a.get(key), b.get(key), f"{path}.{key}")
        return out
    return [] if a == b else [path]


# --- slices -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _HostView:
    host: int | None
    pod: ObservedPod
    down_reason: str | None
    down_message: str | None
    failed_at: datetime | None
    ready: bool


def _newest(pods: list[ObservedPod]) -> ObservedPod:
    floor = datetime.min.replace(tzinfo=UTC)
    # Newest first; at equal creation times a live pod supersedes a dead one.
    return max(pods, key=lambda p: (p.created_at or floor, not (p.failed or p.terminating),
                                    p.name))


def _host_view(pod: ObservedPod, observed: Observed) -> _HostView:
    label = f"host {pod.host_index} (pod {pod.name})"
    node = observed.nodes.get(pod.node_name or "")
    if pod.terminating:
        reason = "PodEvicted" if pod.status_reason == "Evicted" else "PodDeleted"
        return _HostView(pod.host_index, pod, reason, f"{label} is terminating",
                         pod.failure_started_at, False)
    if pod.failed:
        if pod.status_reason == "Evicted":
            why = f"evicted: {pod.status_message or ''}".rstrip(": ")
            return _HostView(pod.host_index, pod, "PodEvicted", f"{label} {why}",
                             pod.failure_started_at, False)
        detail = pod.terminated_reason or pod.status_reason or "Failed"
        if pod.terminated_exit_code is not None:
            detail += f", exit code {pod.terminated_exit_code}"
        return _HostView(pod.host_index, pod, "PodFailed", f"{label} failed ({detail})",
                         pod.failure_started_at, False)
    if node is not None and not node.ready:
        failed_at = node.ready_transition_time
        # kwok (and a node that was NotReady before the pod ran) can report an old
        # transition; the host cannot have failed before its pod became ready.
        if pod.ready_transition_time is not None and (
            failed_at is None or failed_at < pod.ready_transition_time
        ):
            failed_at = pod.ready_transition_time
        return _HostView(pod.host_index, pod, "NodeNotReady",
                         f"{label}: node {node.name} is NotReady", failed_at, False)
    return _HostView(pod.host_index, pod, None, None, None, pod.ready)


@dataclass(frozen=True)
class SliceChange:
    index: int
    went_down: bool
    restored: bool
    failed_at: datetime | None
    message: str


def compute_slices(
    num_slices: int,
    hosts_per_slice: int,
    observed: Observed,
    previous: list[SliceStatus],
    now: datetime,
    *,
    frozen_reason: str | None,
) -> tuple[list[SliceStatus], list[SliceChange]]:
    """Slice states from the worker pods. With frozen_reason (suspended, not created),
    every slice is Pending for that reason and nothing counts as a failure."""
    prev_by_index = {s.index: s for s in previous}
    by_slice: dict[int, dict[Any, list[ObservedPod]]] = {}
    for pod in observed.pods:
        if pod.replicated_job != WORKER_REPLICATED_JOB or pod.slice_index is None:
            continue
        host_key: Any = pod.host_index if pod.host_index is not None else pod.name
        by_slice.setdefault(pod.slice_index, {}).setdefault(host_key, []).append(pod)

    slices: list[SliceStatus] = []
    changes: list[SliceChange] = []
    for index in range(num_slices):
        prev = prev_by_index.get(index)
        prev_state = prev.state if prev else None
        restarts = prev.restarts if prev else 0
        hosts = [_host_view(_newest(pods), observed) for pods in by_slice.get(index, {}).values()]
        hosts.sort(key=lambda h: (h.host is None, h.host or 0, h.pod.name))
        ready_hosts = sum(1 for h in hosts if h.ready)
        down = [h for h in hosts if h.down_reason is not None]

        reason: str
        message: str
        lost_time: datetime | None = None
        if frozen_reason is not None:
            state, reason, message = "Pending", frozen_reason, ""
        elif down:
            state = "Down"
            reasons = sorted({h.down_reason for h in down if h.down_reason})
            reason = reasons[0] if len(reasons) == 1 else "MultipleCauses"
            message = "; ".join(h.down_message or "" for h in down)
        elif ready_hosts >= hosts_per_slice and len(hosts) >= hosts_per_slice:
            state, reason, message = "Ready", "AllHostsReady", ""
            # A host replaced and ready again between two looks (kwok, or a fast node) left
            # no failed pod to see: a pod newer than the slice's Ready transition says so.
            since = prev.last_transition_time if prev is not None else None
            unseen = [h for h in hosts if prev_state == "Ready" and since is not None
                      and h.pod.created_at is not None and h.pod.created_at > since]
            if unseen:
                state, reason = "Down", "HostLost"
                message = "; ".join(f"host {h.host} (pod {h.pod.name}) was replaced"
                                    for h in unseen)
                lost_time = min(h.pod.created_at for h in unseen if h.pod.created_at)
        elif prev_state == "Ready":
            # A ready slice lost a host between two looks: a pod replaced before we saw it
            # fail (HostLost), or a pod that stopped being ready (HostNotReady).
            not_ready = [h for h in hosts if not h.ready]
            replaced = [h for h in not_ready if prev is not None and h.pod.created_at
                        and prev.last_transition_time and
                        h.pod.created_at > prev.last_transition_time]
            state = "Down"
            reason = "HostLost" if replaced or len(hosts) < hosts_per_slice else "HostNotReady"
            message = "; ".join(
                f"host {h.host} (pod {h.pod.name}) "
                + ("is a replacement, not ready yet" if h in replaced else "is not ready")
                for h in not_ready) or f"{len(hosts)}/{hosts_per_slice} hosts have pods"
            lost_at = [h.pod.created_at if h in replaced else h.pod.ready_transition_time
                       for h in not_ready]
            down_times = [t for t in lost_at if t is not None]
            if down_times:
                lost_time = min(down_times)
        elif prev_state in ("Down", "Restarting"):
            state, reason = "Restarting", "ReplacementPodsNotReady"
            message = f"{ready_hosts}/{hosts_per_slice} hosts ready"
        else:
            state, reason = "Pending", "WaitingForHosts"
            message = f"{ready_hosts}/{hosts_per_slice} hosts ready"

        went_down = state == "Down" and prev_state != "Down"
        restored = state == "Ready" and prev_state in ("Down", "Restarting")
        if went_down:
            restarts += 1
            failed_times = [h.failed_at for h in down if h.failed_at is not None]
            if lost_time is not None:
                failed_times.append(lost_time)
            changes.append(SliceChange(index, True, False,
                                       min(failed_times) if failed_times else None, message))
        elif restored:
            changes.append(SliceChange(index, False, True, None, ""))
        transition = now if (prev is None or prev_state != state) else prev.last_transition_time
        slices.append(SliceStatus(
            index=index, state=state, ready_hosts=ready_hosts, hosts=hosts_per_slice,
            restarts=restarts, reason=reason, message=message or None,
            last_transition_time=transition,
        ))
    return slices, changes


# --- conditions -------------------------------------------------------------------------------


def set_condition(
    previous: list[Condition], type_: str, status: ConditionStatus, reason: str, message: str,
    now: datetime, generation: int | None,
) -> Condition:
    """lastTransitionTime moves only when the status changes."""
    for cond in previous:
        if cond.type == type_ and cond.status == status:
            return Condition(type=type_, status=status, reason=reason, message=message,
                             last_transition_time=cond.last_transition_time,
                             observed_generation=generation)
    return Condition(type=type_, status=status, reason=reason, message=message,
                     last_transition_time=now, observed_generation=generation)


def get_condition(status: ElasticTrainingJobStatus, type_: str) -> Condition | None:
    return next((c for c in status.conditions if c.type == type_), None)


def _is_true(status: ElasticTrainingJobStatus, type_: str) -> bool:
    cond = get_condition(status, type_)
    return cond is not None and cond.status == "True"


def _fmt_slices(indices: Iterable[int]) -> str:
    items = sorted(indices)
    noun = "slice" if len(items) == 1 else "slices"
    return f"{noun} {', '.join(str(i) for i in items)}"


# --- recovery ---------------------------------------------------------------------------------


def _recovery(
    previous: ElasticTrainingJobStatus,
    report: TrainingReport | None,
    changes: list[SliceChange],
    now: datetime,
) -> tuple[RecoveryRecord | None, list[StatusEvent]]:
    record = previous.last_recovery
    events: list[StatusEvent] = []
    ongoing = record is not None and record.resumed_at is None
    down = [c for c in changes if c.went_down]
    if down:
        failed_times = [c.failed_at for c in down if c.failed_at is not None]
        detected = min(failed_times) if failed_times else now
        indices = [c.index for c in down]
        if record is None or not ongoing:
            record = RecoveryRecord(
                detected_at=detected, slices=sorted(indices),
                step_at_detection=report.step if report else None,
            )
        else:
            record = record.model_copy(update={
                "detected_at": min(record.detected_at, detected),
                "slices": sorted(set(record.slices) | set(indices)),
            })
        ongoing = True

    event = report.elastic_event if report else None
    seen_events = previous.counters.elastic_events
    if event is not None and report is not None:
        is_new = event.id > seen_events or (
            record is not None and ongoing and record.elastic_event_id is not None
            and event.id > record.elastic_event_id
        )
        linked = record is not None and record.elastic_event_id == event.id
        # An event that had already resumed before this recovery's failure is an older
        # one reported late: it cannot be this recovery's (it only counts).
        predates = (record is not None and ongoing and event.resumed_at is not None
                    and event.resumed_at <= record.detected_at)
        if is_new and not linked and not predates:
            if record is not None and ongoing:
                record = record.model_copy(update={
                    "elastic_event_id": event.id,
                    "detected_at": min(record.detected_at, event.detected_at),
                    "slices": sorted(set(record.slices) | set(event.slices_down)),
                })
            else:
                record = RecoveryRecord(
                    detected_at=event.detected_at, slices=sorted(set(event.slices_down)),
                    elastic_event_id=event.id, step_at_detection=event.failed_step,
                )
                ongoing = True

    if record is not None and ongoing:
        resumed_at: datetime | None = None
        if event is not None and record.elastic_event_id == event.id and event.phase == "Resumed":
            resumed_at = event.resumed_at or (report.observed_at if report else now)
        elif (
            record.elastic_event_id is None and report is not None
            and report.state == "Training" and record.step_at_detection is not None
            and report.step > record.step_at_detection
            and report.observed_at > record.detected_at
        ):
            resumed_at = report.observed_at
        if resumed_at is not None:
            linked_event = event if (event is not None and
                                     record.elastic_event_id == event.id) else None
            downtime = max(0.0, (resumed_at - record.detected_at).total_seconds())
            steps_lost = None
            restored_from = None
            source = None
            if linked_event is not None:
                restored_from = linked_event.restored_from_step
                source = linked_event.restore_source
                if linked_event.failed_step is not None and restored_from is not None:
                    steps_lost = max(0, linked_event.failed_step - restored_from)
            record = record.model_copy(update={
                "resumed_at": resumed_at, "downtime_seconds": round(downtime, 3),
                "steps_lost": steps_lost, "restored_from_step": restored_from,
                "restore_source": source,
            })
            events.append(StatusEvent(
                reason="Recovered", message=_recovered_message(record), type="Normal",
                downtime_seconds=record.downtime_seconds, steps_lost=steps_lost,
            ))
    return record, events


def _recovered_message(record: RecoveryRecord) -> str:
    parts = [f"resumed after {record.downtime_seconds:.1f} s of downtime"]
    if record.slices:
        parts.append(f"({_fmt_slices(record.slices)} went down)")
    if record.steps_lost is not None:
        parts.append(f"; {record.steps_lost} steps lost")
    if record.restored_from_step is not None:
        parts.append(f"; restored from step {record.restored_from_step}"
                     + (f" ({record.restore_source})" if record.restore_source else ""))
    return " ".join(parts).replace(" ;", ";")


# --- the status -------------------------------------------------------------------------------


def compute_status(
    job: ElasticTrainingJob,
    observed: Observed,
    previous: ElasticTrainingJobStatus | None,
    now: datetime,
    *,
    report_problem: str | None = None,
) -> tuple[ElasticTrainingJobStatus, list[StatusEvent]]:
    """The operator's part of the status (status.training is carried over untouched)."""
    prev = previous or ElasticTrainingJobStatus()
    spec = job.spec
    gen = job.metadata.generation
    report = prev.training
    jobset = observed.jobset
    events: list[StatusEvent] = []
    conds: list[Condition] = []

    def cond(type_: str, status: ConditionStatus, reason: str, message: str = "") -> None:
        conds.append(set_condition(prev.conditions, type_, status, reason, message, now, gen))

    # Terminal states first: they freeze slice tracking.
    succeeded = _is_true(prev, SUCCEEDED) or (jobset is not None
                                             and jobset.terminal_state == "Completed")
    failed_reason, failed_message = None, ""
    if _is_true(prev, FAILED):
        prev_failed = get_condition(prev, FAILED)
        assert prev_failed is not None
        failed_reason, failed_message = prev_failed.reason, prev_failed.message
    elif not succeeded:
        if report is not None and report.state == "Failed" and report.reason in \
                TRAINER_FAILURE_REASONS:
            failed_reason = report.reason
            failed_message = report.message or f"the trainer reported {report.reason}"
        elif jobset is not None and jobset.terminal_state == "Failed":
            head = next((r for r in jobset.replicated_jobs if r.name == HEAD_REPLICATED_JOB),
                        None)
            head_pod_failed = any(p.replicated_job == HEAD_REPLICATED_JOB and p.failed
                                  for p in observed.pods)
            if head_pod_failed or (head is not None and head.failed > 0):
                failed_reason = "HeadFailed"
            elif jobset.restarts >= spec.max_restarts:
                failed_reason = "MaxRestartsExceeded"
            else:
                failed_reason = "JobSetFailed"
            failed_message = (f"JobSet {jobset.name} failed after {jobset.restarts} restarts "
                              f"(maxRestarts {spec.max_restarts})")
            if jobset.failed_message:
                failed_message += f": {jobset.failed_message}"
        elif jobset is None and prev.job_set_name:
            failed_reason = "JobSetLost"
            failed_message = (f"JobSet {prev.job_set_name} was deleted outside the operator; it "
                              "is not recreated. Delete and re-create the ElasticTrainingJob "
                              "to start over.")
        if failed_reason is not None:
            events.append(StatusEvent(reason=failed_reason, message=failed_message,
                                      type="Warning"))
    terminal = succeeded or failed_reason is not None
    suspended = spec.suspend

    hosts_per_slice = (jobset.worker_hosts_per_slice if jobset and jobset.worker_hosts_per_slice
                       else _catalog_hosts(job))
    frozen = None
    if jobset is None:
        frozen = "JobSetNotCreated"
    elif suspended or jobset.suspended:
        frozen = "Suspended"
    if terminal:
        slices = list(prev.slices)
        changes: list[SliceChange] = []
    else:
        slices, changes = compute_slices(spec.tpu.num_slices, hosts_per_slice, observed,
                                         prev.slices, now, frozen_reason=frozen)
    for change in changes:
        if change.went_down:
            events.append(StatusEvent(
                reason="SliceDown", type="Warning", slice_index=change.index,
                failed_at=change.failed_at,
                message=f"slice {change.index} is down: {change.message}",
            ))
        elif change.restored:
            events.append(StatusEvent(
                reason="SliceRestored", type="Normal", slice_index=change.index,
                message=f"slice {change.index} is Ready again",
            ))

    record, recovery_events = _recovery(prev, report, changes, now)
    events += recovery_events
    recovering = record is not None and record.resumed_at is None and not terminal

    process, replaced = _trainer_process(prev.trainer_process, report)
    if replaced is not None and process is not None:
        events.append(StatusEvent(
            reason="TrainerRestarted", type="Warning",
            message=f"a new trainer process (pid {process.process_id} on {process.host_name}, "
                    f"started {_iso(process.started_at) if process.started_at else '?'}) "
                    f"replaced pid {replaced.process_id} on {replaced.host_name}; it "
                    "resumes from the newest committed checkpoint and counts on from "
                    f"{prev.counters.elastic_events} elastic event(s)",
        ))

    # Counters never go backwards (max with what the cluster and the trainer show).
    went_down = sum(1 for c in changes if c.went_down)
    counters = Counters(
        slice_failures=prev.counters.slice_failures + went_down,
        elastic_events=max(
            prev.counters.elastic_events,
            report.elastic_events_total if report else 0,
            report.elastic_event.id if report and report.elastic_event else 0,
        ),
        job_set_restarts=max(prev.counters.job_set_restarts, jobset.restarts if jobset else 0),
        trainer_restarts=prev.counters.trainer_restarts + (replaced is not None),
    )

    down_slices = [s for s in slices if s.state == "Down"]
    ready_slices = sum(1 for s in slices if s.state == "Ready")
    num_slices = spec.tpu.num_slices

    # SliceDown
    if down_slices and not terminal:
        reasons = sorted({s.reason or "SliceDown" for s in down_slices})
        cond(SLICE_DOWN, "True", reasons[0] if len(reasons) == 1 else "MultipleCauses",
             "; ".join(f"slice {s.index}: {s.message or s.reason}" for s in down_slices))
    else:
        cond(SLICE_DOWN, "False", "NoSliceDown")

    # Recovering
    if recovering and record is not None:
        source = "ElasticEvent" if record.elastic_event_id is not None else "SliceDown"
        msg = f"since {_iso(record.detected_at)}"
        if record.slices:
            msg = f"{_fmt_slices(record.slices)} went down; " + msg
        if report is not None and report.elastic_event is not None and \
                report.elastic_event.id == record.elastic_event_id:
            msg += f"; trainer phase {report.elastic_event.phase}"
        else:
            msg += "; waiting for the trainer to report a step after the failure"
        cond(RECOVERING, "True", source, msg)
    elif record is not None and record.resumed_at is not None:
        cond(RECOVERING, "False", "Recovered", _recovered_message(record))
    elif record is not None and terminal:
        cond(RECOVERING, "False", "RecoveryFailed", failed_message or "the job finished")
    else:
        cond(RECOVERING, "False", "NoFailure")

    # Degraded
    active = report.active_slices if report is not None else None
    if (active is not None and active < num_slices and not terminal and report is not None
            and report.state in ("Training", "Recovering")):
        cond(DEGRADED, "True", "FewerSlices",
             f"training on {active} of {num_slices} slices")
    else:
        cond(DEGRADED, "False", "AllSlicesActive" if active is not None else "NoReport")

    degraded = any(c.type == DEGRADED and c.status == "True" for c in conds)

    # Suspended
    if suspended:
        done = jobset is None or jobset.suspended
        cond(SUSPENDED, "True", "Suspended" if done else "Suspending",
             "spec.suspend is true" + ("" if done else "; suspending the JobSet"))
    else:
        cond(SUSPENDED, "False", "NotSuspended")

    # Succeeded / Failed
    if succeeded:
        prev_succ = get_condition(prev, SUCCEEDED)
        if prev_succ is not None and prev_succ.status == "True":
            conds.append(prev_succ)
        else:
            cond(SUCCEEDED, "True", "JobSetCompleted",
                 f"JobSet {jobset.name if jobset else prev.job_set_name} completed")
    else:
        cond(SUCCEEDED, "False", "NotFinished")
    if failed_reason is not None:
        cond(FAILED, "True", failed_reason, failed_message)
    else:
        cond(FAILED, "False", "NotFailed")

    # SpecApplied
    drift = spec_drift(job, jobset.applied_spec) if jobset is not None else []
    if jobset is not None and job.metadata.uid and jobset.owner_uid and \
            jobset.owner_uid != job.metadata.uid:
        cond(SPEC_APPLIED, "False", "JobSetNameConflict",
             f"JobSet {jobset.name} exists and is owned by another object; "
             "delete it or rename this job")
    elif drift:
        cond(SPEC_APPLIED, "False", "ImmutableSpecChanged",
             f"{', '.join(drift[:6])} changed after the JobSet was created and cannot be "
             "applied in place (only spec.suspend can); the running JobSet keeps the old "
             "spec. Delete and re-create the ElasticTrainingJob to apply it.")
    elif jobset is None and not terminal and not prev.job_set_name:
        cond(SPEC_APPLIED, "Unknown", "JobSetNotCreated")
    else:
        cond(SPEC_APPLIED, "True", "Applied")

    # TrainingReportValid
    if report_problem:
        cond(TRAINING_REPORT_VALID, "False", "InvalidReport", report_problem)
    elif report is None:
        cond(TRAINING_REPORT_VALID, "Unknown", "NoReport", "the trainer has not reported yet")
    else:
        cond(TRAINING_REPORT_VALID, "True", "Valid")

    # Ready (summary) and phase
    if failed_reason is not None:
        ready = ("False", "Failed", failed_message)
        phase = "Failed"
    elif succeeded:
        ready = ("False", "Succeeded", "the job has finished")
        phase = "Succeeded"
    elif suspended:
        ready = ("False", "Suspended", "spec.suspend is true")
        phase = "Suspended"
    elif jobset is None:
        ready = ("False", "JobSetNotCreated", "the JobSet does not exist yet")
        phase = "Pending"
    elif down_slices:
        ready = ("False", "SliceDown", f"{_fmt_slices(s.index for s in down_slices)} down")
        phase = "SliceDown"
    elif recovering:
        ready = ("False", "Recovering", "waiting for training to resume")
        phase = "Recovering"
    elif ready_slices < num_slices:
        ready = ("False", "SlicesNotReady", f"{ready_slices}/{num_slices} slices ready")
        if degraded:
            phase = "Degraded"
        elif any(s.state == "Restarting" for s in slices):
            phase = "Recovering"
        else:
            phase = "Pending"
    elif degraded:
        ready = ("True", "Degraded", f"training on {active} of {num_slices} slices")
        phase = "Degraded"
    else:
        ready = ("True", "AllSlicesReady", f"{ready_slices}/{num_slices} slices ready")
        phase = "Running"
    conds.insert(0, set_condition(prev.conditions, READY, ready[0],  # type: ignore[arg-type]
                                  ready[1], ready[2], now, gen))

    new_status = ElasticTrainingJobStatus(
        observed_generation=gen,
        phase=phase,
        job_set_name=jobset.name if jobset is not None else prev.job_set_name,
        slices_desired=num_slices,
        slices_ready=ready_slices,
        slices=slices,
        conditions=conds,
        counters=counters,
        last_recovery=record,
        checkpoint=_checkpoint(prev.checkpoint, observed.checkpoint),
        trainer_process=process,
        training=prev.training,
    )
    return new_status, events


def _checkpoint(known: CheckpointStatus | None,
                scanned: CheckpointStatus | None) -> CheckpointStatus | None:
    """A scan that found what the status already says changes nothing, its time
    included: a status write per job per scan would only load the API server (and wake
    every watcher of the job)."""
    if scanned is None or same_checkpoint_result(known, scanned):
        return known
    return scanned


def same_checkpoint_result(a: CheckpointStatus | None, b: CheckpointStatus | None) -> bool:
    """Two scans found the same thing (whenever they ran)."""
    return a is not None and b is not None and \
        a.model_copy(update={"observed_at": b.observed_at}) == b


def _trainer_process(
    known: TrainerProcess | None, report: TrainingReport | None,
) -> tuple[TrainerProcess | None, TrainerProcess | None]:
    """(the process now reporting, the one it replaced or None). A process counts as a
    replacement only when it started later than the known one: a late report of the old
    process, or the same process reporting again, changes nothing."""
    if report is None or report.process_started_at is None or report.process_id is None:
        return known, None
    seen = TrainerProcess(process_id=report.process_id, host_name=report.host_name,
                          started_at=report.process_started_at)
    if known is None or known.started_at is None:
        return seen, None
    if seen == known or seen.started_at is None or seen.started_at <= known.started_at:
        return known, None
    return seen, known


def _catalog_hosts(job: ElasticTrainingJob) -> int:
    from elastic_api.catalog import slice_shape

    try:
        return slice_shape(job.spec.tpu.type, job.spec.tpu.topology).vms
    except ValueError:
        return 1


def _iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")


def invalid_spec_status(
    previous: ElasticTrainingJobStatus, message: str, now: datetime, generation: int | None,
) -> ElasticTrainingJobStatus:
    """The status of a job whose spec cannot be rendered (admission should prevent it)."""
    kept = [c for c in previous.conditions if c.type not in (READY, SPEC_APPLIED)]
    conds = [
        set_condition(previous.conditions, READY, "False", "InvalidSpec", message, now,
                      generation),
        *kept,
        set_condition(previous.conditions, SPEC_APPLIED, "False", "InvalidSpec",
                      f"{message}. Fix the spec (kubectl edit) or re-create the job.", now,
                      generation),
    ]
    return previous.model_copy(update={"conditions": conds, "observed_generation": generation,
                                       "phase": previous.phase or "Pending"})


# --- the write -----------------------------------------------------------------------------


def operator_wire(status: ElasticTrainingJobStatus) -> dict[str, Any]:
    """The operator-owned part of a status, as it goes on the wire (no `training`)."""
    wire = status.model_copy(update={"training": None}).to_wire()
    wire.pop("training", None)
    return wire


def status_patch(
    previous: ElasticTrainingJobStatus, new: ElasticTrainingJobStatus,
) -> dict[str, Any] | None:
    """A JSON merge patch for the status subresource, or None when nothing changed.

    It never mentions `training` (the trainer's). Fields that disappeared are set to null.
    """
    before = operator_wire(previous)
    after = operator_wire(new)
    if before == after:
        return None
    return {"status": merge_patch(before, after)}


def merge_patch(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """A JSON merge patch (RFC 7386) turning `before` into `after`. A merge patch merges
    nested objects key by key, so a key gone from a nested object (a new lastRecovery
    has no resumedAt yet) must be sent as null at its own level, or the old value stays."""
    body: dict[str, Any] = {}
    for key, value in after.items():
        old = before.get(key)
        body[key] = merge_patch(old, value) if isinstance(old, dict) and isinstance(
            value, dict) else value
    for key in before:
        if key not in after:
            body[key] = None
    return body
