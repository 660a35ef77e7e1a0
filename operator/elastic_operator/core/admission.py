"""Kueue: where a queued job stands with its queue (the `Admitted` condition,
status.admission, counters.preemptions), from the Workload Kueue made for its JobSet.

A job is queued when it names a queue (label kueue.x-k8s.io/queue-name), when Kueue made
a Workload for its JobSet anyway (manageJobsWithoutQueueName), or once its status says
it was. Kueue then owns the JobSet's suspend (core/plan.py suspends and resumes the job
through the Workload's spec.active instead), and while the job is queued (not admitted
yet, preempted, evicted) its slices are frozen as Pending: pods that go because Kueue
suspended the JobSet are no slice failure. Preemptions and Kueue's other evictions
(waitForPodsReady's PodsReadyTimeout, Topology-Aware Scheduling's NodeFailures, ...) are
counted from Kueue's own counts on the Workload (status.schedulingStats), so one that
came and went between two reconciles (Kueue may readmit within a second) is still
counted, exactly once. Pure.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from elastic_api.models import (
    AdmissionStatus,
    Condition,
    ElasticTrainingJob,
    ElasticTrainingJobStatus,
)
from elastic_api.names import KUEUE_QUEUE_NAME_LABEL
from elastic_api.queueing import (
    ADMITTED,
    EVICTED_BY_DEACTIVATION,
    EVICTED_BY_NODE_FAILURES,
    EVICTED_BY_PODS_READY_TIMEOUT,
    EVICTED_BY_PREEMPTION,
    PODS_READY_WAIT_FOR_START,
    REASON_ADMITTED,
    REASON_EVICTED,
    REASON_NO_WORKLOAD,
    REASON_PREEMPTED,
    REASON_SUSPENDED_BY_USER,
    REASON_WAITING_FOR_ADMISSION,
    WORKLOAD_ADMITTED,
    WORKLOAD_EVICTED,
    WORKLOAD_PODS_READY,
    WORKLOAD_PREEMPTED,
    WORKLOAD_QUOTA_RESERVED,
    counts_as_eviction,
)
from elastic_operator.core.setter import ConditionSetter, get_condition
from elastic_operator.core.status_events import StatusEvent
from elastic_operator.core.wording import iso
from elastic_operator.model.objects import ObservedJobSet, ObservedWorkload

# The Admitted reasons of a queued job: Kueue has not admitted it or took it back; no
# pods, phase Queued.
QUEUED_REASONS = (REASON_WAITING_FOR_ADMISSION, REASON_PREEMPTED, REASON_EVICTED)


def names_queue(job: ElasticTrainingJob) -> bool:
    return bool(job.metadata.labels.get(KUEUE_QUEUE_NAME_LABEL))


def wants_workload(job: ElasticTrainingJob, jobset: ObservedJobSet | None,
                   previous: ElasticTrainingJobStatus) -> bool:
    """Whether a reconcile looks for the JobSet's Workload: the job names a queue or was
    queued before, or someone other than the operator suspended its JobSet (Kueue
    may manage JobSets without a queue name). A running job that no queue ever admitted
    costs no request."""
    if jobset is None or jobset.uid is None:
        return False
    return names_queue(job) or previous.admission is not None or (
        jobset.suspended and not jobset.suspended_by_operator)


@dataclass(frozen=True)
class Admission:
    """What a reconcile concludes about the job's admission."""

    condition: Condition | None = None  # Admitted; None: the job is not queued
    status: AdmissionStatus | None = None
    events: list[StatusEvent] = field(default_factory=list)
    preemptions: int = 0  # new in this reconcile
    evictions: int = 0  # other evictions new in this reconcile (counts_as_eviction)
    # The latest eviction known (or the readmission after one: both came after the
    # processes it stopped): a trainer started later replaced one Kueue stopped.
    evicted_since: datetime | None = None

    @property
    def queued(self) -> bool:
        """Kueue has not admitted the job, or took it back."""
        return self.condition is not None and self.condition.status == "False" \
            and self.condition.reason in QUEUED_REASONS

    @property
    def reason(self) -> str:
        return self.condition.reason if self.condition is not None else ""

    @property
    def message(self) -> str:
        return self.condition.message if self.condition is not None else ""


def decide_admission(
    setter: ConditionSetter, job: ElasticTrainingJob, jobset: ObservedJobSet | None,
    workload: ObservedWorkload | None, previous: ElasticTrainingJobStatus, terminal: bool,
) -> Admission:
    """The Admitted condition (None for a job no queue admits), status.admission, new
    preemptions and their Events. A finished job keeps them as they were."""
    prev_condition = get_condition(previous, ADMITTED)
    through_queue = names_queue(job) or workload is not None or previous.admission is not None \
        or prev_condition is not None
    if not through_queue:
        return Admission()
    if terminal:  # as it last was: Kueue's view of a finished job says nothing new
        return Admission(condition=prev_condition, status=previous.admission)
    status, counted = _admission_status(job, workload, previous.admission)
    condition = _condition(setter, job, jobset, workload, status)
    events = _events(condition, prev_condition, status, counted)
    evicted = workload.condition(WORKLOAD_EVICTED) if workload is not None else None
    since = [t for t in (status.evicted_at, evicted.last_transition_time if evicted else None)
             if t is not None]
    return Admission(condition=condition, status=status, events=events,
                     preemptions=counted.preemptions, evictions=counted.evictions,
                     evicted_since=max(since) if since else None)


@dataclass(frozen=True)
class _NewEvictions:
    """What this look finds that earlier looks did not: preemptions, other evictions."""

    preemptions: int = 0
    evictions: int = 0
    reason: str | None = None  # of the newest eviction seen (or inferred)


def _admission_status(job: ElasticTrainingJob, workload: ObservedWorkload | None,
                      prev: AdmissionStatus | None) -> tuple[AdmissionStatus, _NewEvictions]:
    """status.admission, and the evictions that are new since the last look."""
    prev = prev or AdmissionStatus()
    queue = job.metadata.labels.get(KUEUE_QUEUE_NAME_LABEL) or \
        (workload.queue_name if workload is not None else None) or prev.queue_name
    if workload is None:
        return prev.model_copy(update={"queue_name": queue}), _NewEvictions()
    same = prev.workload == workload.name
    new = _new_evictions(workload, prev, same)
    evicted_at = _evicted_at(workload, prev.evicted_at, new)
    admitted = workload.condition(WORKLOAD_ADMITTED)
    admitted_at = prev.admitted_at
    if admitted is not None and admitted.status == "True" and admitted.last_transition_time:
        admitted_at = admitted.last_transition_time
    return AdmissionStatus(
        workload=workload.name, queue_name=queue,
        cluster_queue=workload.cluster_queue or prev.cluster_queue,
        admitted_at=admitted_at, evicted_at=evicted_at,
        workload_preemptions=max(workload.preemptions,
                                 prev.workload_preemptions if same else 0),
        workload_evictions=max(workload.evictions, prev.workload_evictions if same else 0),
        last_eviction_reason=new.reason or (prev.last_eviction_reason if same else None),
        requeue_at=workload.requeue_at if not workload.is_true(WORKLOAD_ADMITTED) else None,
    ), new


def _evicted_at(workload: ObservedWorkload, known: datetime | None,
                new: _NewEvictions) -> datetime | None:
    """When Kueue last evicted the job: the Evicted condition's time while it is True.
    One missed (readmitted between two looks: Evicted is False again, since the
    readmission) happened at or before that time; after a PodsReadyTimeout, Kueue's
    PodsReady condition turned WaitForStart at the eviction itself and says so until the
    pods are Ready again."""
    evicted = workload.condition(WORKLOAD_EVICTED)
    if evicted is None or evicted.last_transition_time is None:
        return known
    at = evicted.last_transition_time
    if evicted.status != "True":
        if not (new.preemptions or new.evictions):
            return known
        ready = workload.condition(WORKLOAD_PODS_READY)
        if new.reason == EVICTED_BY_PODS_READY_TIMEOUT and ready is not None \
                and ready.reason == PODS_READY_WAIT_FOR_START \
                and ready.last_transition_time is not None:
            at = min(at, ready.last_transition_time)
    return max(known or at, at)


def _new_evictions(workload: ObservedWorkload, prev: AdmissionStatus,
                   same: bool) -> _NewEvictions:
    """Kueue's counts on the Workload (schedulingStats) against those taken into account,
    and a fresh Evicted condition for a Kueue that keeps no count."""
    preemptions = max(0, workload.preemptions - (prev.workload_preemptions if same else 0))
    evictions = max(0, workload.evictions - (prev.workload_evictions if same else 0))
    evicted = workload.condition(WORKLOAD_EVICTED)
    reason = None
    if evicted is not None and evicted.status == "True" and evicted.last_transition_time:
        reason = evicted.reason
        fresh = prev.evicted_at is None or evicted.last_transition_time > prev.evicted_at
        if fresh and evicted.reason == EVICTED_BY_PREEMPTION:
            preemptions = max(preemptions, 1)
        elif fresh and counts_as_eviction(evicted.reason):
            evictions = max(evictions, 1)
    elif evictions or preemptions:  # readmitted since: which kind grew
        reason = EVICTED_BY_PREEMPTION if preemptions and not evictions else \
            workload.last_counted_eviction
    return _NewEvictions(preemptions, evictions, reason)


def _condition(setter: ConditionSetter, job: ElasticTrainingJob,
               jobset: ObservedJobSet | None, workload: ObservedWorkload | None,
               status: AdmissionStatus) -> Condition:
    queue = f"queue {status.queue_name}" if status.queue_name else "its queue"
    if job.spec.suspend:
        how = "its Workload is deactivated" if workload is not None else \
            "no JobSet is created until it is resumed" if jobset is None else \
            "its JobSet is suspended"
        return setter.false(ADMITTED, REASON_SUSPENDED_BY_USER,
                            f"spec.suspend is true: {how}, and it holds no quota of {queue}")
    if workload is None:
        return _without_workload(setter, jobset, queue)
    taken_back = _taken_back(setter, workload, queue)
    if taken_back is not None:
        return taken_back
    admitted = workload.condition(WORKLOAD_ADMITTED)
    if admitted is not None and admitted.status == "True":
        cond = setter.true(ADMITTED, REASON_ADMITTED,
                           f"admitted by ClusterQueue {status.cluster_queue or '?'} "
                           f"({queue}); Workload {workload.name}")
        # When Kueue admitted it, not when we noticed.
        return cond.model_copy(update={"last_transition_time": admitted.last_transition_time
                                       or cond.last_transition_time})
    reserved = workload.condition(WORKLOAD_QUOTA_RESERVED)
    if reserved is not None and reserved.status == "True":
        why = f"quota reserved in ClusterQueue {status.cluster_queue or '?'}; waiting " \
              "for its admission checks"
    elif workload.is_true(WORKLOAD_EVICTED):  # reactivated: still marked until readmitted
        why = "reactivated, requeued"
    elif reserved is not None and reserved.message:
        why = f"Kueue: {reserved.message}"
    else:
        why = "Kueue has not considered it yet"
    return setter.false(ADMITTED, REASON_WAITING_FOR_ADMISSION,
                        f"waiting in {queue} (Workload {workload.name}): {why}")


def _without_workload(setter: ConditionSetter, jobset: ObservedJobSet | None,
                      queue: str) -> Condition:
    if jobset is None:
        return setter.false(ADMITTED, REASON_WAITING_FOR_ADMISSION,
                            f"creating the JobSet, which {queue} admits")
    if jobset.suspended:
        return setter.false(
            ADMITTED, REASON_WAITING_FOR_ADMISSION,
            f"waiting for Kueue to make a Workload for JobSet {jobset.name} ({queue}); if "
            f"this lasts, `kubectl describe jobset {jobset.name}` says why (a "
            "WorkloadPriorityClass that does not exist, say)")
    return setter.unknown(
        ADMITTED, REASON_NO_WORKLOAD,
        f"JobSet {jobset.name} runs without a Kueue Workload: no queue admits it (is Kueue "
        "installed, with its JobSet integration, for this namespace?)")


def _taken_back(setter: ConditionSetter, workload: ObservedWorkload,
          queue: str) -> Condition | None:
    """Preempted, deactivated or otherwise evicted: Kueue took the job back (None: not)."""
    evicted = workload.condition(WORKLOAD_EVICTED)
    evicted_now = evicted is not None and evicted.status == "True"
    if evicted is not None and evicted_now and evicted.reason == EVICTED_BY_PREEMPTION:
        preempted = workload.condition(WORKLOAD_PREEMPTED)
        why = preempted.message if preempted is not None and preempted.message \
            else evicted.message
        return setter.false(
            ADMITTED, REASON_PREEMPTED,
            f"preempted by Kueue ({why.rstrip('.')}); requeued in {queue}: it resumes "
            "from its newest checkpoint when admitted again")
    deactivation = evicted is not None and evicted_now and \
        evicted.reason.startswith(EVICTED_BY_DEACTIVATION)
    if not workload.active:
        if workload.suspended_by_operator:  # spec.suspend is false again
            return setter.false(ADMITTED, REASON_WAITING_FOR_ADMISSION,
                                f"resumed: reactivating Workload {workload.name} in {queue}")
        return setter.false(
            ADMITTED, REASON_EVICTED,
            f"Workload {workload.name} is deactivated (spec.active: false) by someone "
            "other than this operator; it queues again once reactivated (kueuectl "
            "resume workload)")
    if evicted is not None and evicted_now and not deactivation:
        return setter.false(ADMITTED, REASON_EVICTED,
                            f"evicted by Kueue ({evicted.reason}: "
                            f"{evicted.message.rstrip('.')}{_why(evicted.reason)}); "
                            f"requeued in {queue}{_not_before(workload)}: it resumes from "
                            "its newest committed checkpoint when admitted again")
    return None  # reactivated (still marked Evicted until admitted again): waiting


def _why(reason: str) -> str:
    """What an eviction reason means for this job, in a few words."""
    if reason == EVICTED_BY_PODS_READY_TIMEOUT:
        return "; waitForPodsReady: a slice was not Ready again within Kueue's " \
            "recoveryTimeout, or not all were within its timeout after admission"
    if reason == EVICTED_BY_NODE_FAILURES:
        return "; Topology-Aware Scheduling found no replacement node in the slice's domain"
    return ""


def _not_before(workload: ObservedWorkload) -> str:
    return f", not readmitted before {iso(workload.requeue_at)} (Kueue's requeuing " \
        "backoff)" if workload.requeue_at is not None else ""


def _events(condition: Condition, prev: Condition | None, status: AdmissionStatus,
            new: _NewEvictions) -> list[StatusEvent]:
    events = []
    changed = prev is None or (prev.status, prev.reason) != (condition.status,
                                                              condition.reason)
    if new.preemptions:
        what = condition.message if condition.reason == REASON_PREEMPTED else \
            "preempted by Kueue between two looks of the operator"
        events.append(StatusEvent(
            reason=REASON_PREEMPTED, type="Warning",
            message=f"{what} (preemption {status.workload_preemptions or new.preemptions} of "
                    f"Workload {status.workload})"))
    if new.evictions:
        what = condition.message if condition.reason == REASON_EVICTED else \
            f"evicted by Kueue ({new.reason or 'reason not kept'}) and readmitted between " \
            "two looks of the operator: it resumes from its newest committed checkpoint"
        events.append(StatusEvent(
            reason=REASON_EVICTED, type="Warning",
            message=f"{what} (eviction {status.workload_evictions or new.evictions} of "
                    f"Workload {status.workload}; not a slice failure)"))
    if not changed:
        return events
    if condition.status == "True":
        waited = ""
        if prev is not None and prev.status == "False" and status.admitted_at is not None:
            seconds = (status.admitted_at - prev.last_transition_time).total_seconds()
            waited = f" after {max(0.0, seconds):.0f} s out of quota"
        events.append(StatusEvent(reason=REASON_ADMITTED, type="Normal",
                                  message=f"{condition.message}, at "
                                  f"{iso(condition.last_transition_time)}{waited}"))
    elif condition.reason == REASON_WAITING_FOR_ADMISSION:
        events.append(StatusEvent(reason=REASON_WAITING_FOR_ADMISSION, type="Normal",
                                  message=condition.message))
    elif condition.reason == REASON_EVICTED and not new.evictions:  # a deactivation
        events.append(StatusEvent(reason=REASON_EVICTED, type="Warning",
                                  message=condition.message))
    return events
