"""Slice health: the state of each worker slice, from its pods and their nodes.

Slice states (status.slices[]), per worker slice (the pods with one job-index):
- Ready: every host's newest pod is Ready on a Ready node.
- Down: a host's newest pod failed, is terminating (deleted, evicted), or sits on a
  NotReady node; or a slice that was Ready lost a host without us seeing why.
- Restarting: after Down, replacement pods exist but are not all ready yet.
- Pending: never been ready yet (or the JobSet is suspended / not created).
A pod Kueue failed because it could not schedule on the (unhealthy) node Kueue assigned
it is no down host: Kueue is replacing that node (sliceview.host_view).
A slice entering Down increments its `restarts` (and counters.sliceFailures), unless the
operator took it down on purpose (a planned move off a pool under maintenance, whose
record is in `replacement`): that is a move, not a failure; nor when only pods of the Job
whose replacement is under way go down, once that Job is being deleted (the failure was
counted when it happened). A failure the pods no longer show (replaced between two looks)
is counted from the worker Job's own count (core/counting.py).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from elastic_api.conditions import Reason
from elastic_api.models import SliceState, SliceStatus
from elastic_operator.core.counting import JobCount, next_counted, unseen, unseen_restarts
from elastic_operator.core.sliceview import HostView, SliceView, SliceViews
from elastic_operator.core.status_events import StatusEvent
from elastic_operator.core.wording import first_of
from elastic_operator.model.objects import Observed, ObservedJob


@dataclass(frozen=True)
class SliceChange:
    """A slice that went Down or became Ready again in this reconcile."""

    index: int
    went_down: bool
    restored: bool
    failed_at: datetime | None
    message: str
    planned: bool = False  # went down because the operator moves it (not a failure)
    # Counted from restart counts no look saw (its pods restarted in place and are back).
    restarted_unseen: bool = False

    @property
    def failed(self) -> bool:
        return self.went_down and not self.planned


@dataclass(frozen=True)
class _Verdict:
    state: SliceState
    reason: str
    message: str
    failed_at: datetime | None = None  # Down: when its first host failed, if known


# A slice's message names at most this many hosts, then counts the rest: a slice of
# 1,536 hosts that all failed would otherwise write each into its status and Event.
MAX_HOSTS_NAMED = 4


def named(said: list[str], rest: str) -> str:
    """What is said of a slice's hosts, the first MAX_HOSTS_NAMED of it."""
    return first_of(said, MAX_HOSTS_NAMED, rest)


@dataclass(frozen=True)
class HeldDown:
    """A slice held Down whatever its pods show: the trainer blames it (a hung or slow
    slice whose pods stay Ready; core/hung.py decides)."""

    reason: str
    message: str
    failed_at: datetime | None
    new: bool  # a new request's: a failure of its own, whatever record the slice carries


def _since_admission(prev: SliceStatus | None, epoch: datetime | None) -> SliceStatus | None:
    """The slice's previous status, as seen from the current admission: a state reached
    before it (the slice ran, then Kueue evicted and readmitted the job between two looks)
    starts over as Pending, and a replacement recorded before it is void (the eviction
    recreated every pod)."""
    if prev is None or epoch is None:
        return prev
    stale = prev.last_transition_time is not None and prev.last_transition_time < epoch \
        and prev.state != "Pending"
    void = prev.replacement is not None and prev.replacement.requested_at < epoch
    if not stale and not void:
        return prev
    update: dict[str, Any] = {"replacement": None} if void else {}
    if stale:
        update.update(state="Pending", reason=Reason.WAITING_FOR_HOSTS)
    return prev.model_copy(update=update)


@dataclass(frozen=True)
class SliceHealth:
    """The slices' states after one look, and how they changed since the last."""

    slices: list[SliceStatus]
    changes: list[SliceChange]


def compute_slices(
    num_slices: int,
    hosts_per_slice: int,
    observed: Observed,
    views: SliceViews,
    previous: list[SliceStatus],
    now: datetime,
    *,
    frozen_reason: str | None,
    epoch: datetime | None = None,
    held_down: Mapping[int, HeldDown] | None = None,
) -> SliceHealth:
    """Slice states from the worker pods (each slice's view) and, for what they no longer
    show, the worker Jobs' own counts (core/counting.py). With frozen_reason (suspended,
    not created), every slice is Pending for that reason and nothing counts as a failure.
    `epoch`: when a queue (Kueue) last admitted the job; what came before it does not
    count (sliceview.of_this_admission)."""
    prev_by_index = {s.index: s for s in previous}
    slices: list[SliceStatus] = []
    changes: list[SliceChange] = []
    for index in range(num_slices):
        prev = _since_admission(prev_by_index.get(index), epoch)
        held = (held_down or {}).get(index) if frozen_reason is None else None
        seen = _seen(observed, index, views[index], epoch)
        status, change = slice_status(index, seen, prev, hosts_per_slice, now, frozen_reason,
                                      held)
        slices.append(status)
        if change is not None:
            changes.append(change)
    return SliceHealth(slices, changes)


@dataclass(frozen=True)
class SliceSeen:
    """What one look saw of a slice: its hosts, its worker Job (None: not seen), and
    the live Job's own count of failed pods, read from every pod of the slice (older
    ones too), Kueue's taken out (None: no live Job)."""

    hosts: Sequence[HostView]
    job: ObservedJob | None = None
    count: JobCount | None = None


def _seen(observed: Observed, index: int, view: SliceView, epoch: datetime | None
          ) -> SliceSeen:
    """The slice's hosts of this admission (kept in the memo with the epoch, while the
    slice's pods and nodes are the same), and its Job's count."""
    hosts = view.hosts if epoch is None else observed.per_slice(
        "hosts", index, lambda: view.hosts_since(epoch), epoch)
    job = observed.jobs.get(index)
    count = observed.per_slice("count", index, lambda: JobCount.of(job, view.pods), job)
    return SliceSeen(hosts, job, count)


def slice_status(
    index: int, seen: SliceSeen, prev: SliceStatus | None, hosts_per_slice: int,
    now: datetime, frozen_reason: str | None, held: HeldDown | None = None,
) -> tuple[SliceStatus, SliceChange | None]:
    """One slice's new status, and how it changed since `prev` (`held`: Down for the
    trainer's blame, whatever the pods show)."""
    hosts = seen.hosts
    prev_state = prev.state if prev else None
    restarts = prev.restarts if prev else 0
    verdict = _during_teardown(_judge(hosts, prev, hosts_per_slice, frozen_reason), hosts,
                               prev, hosts_per_slice)
    if held is not None:
        verdict = _Verdict("Down", held.reason, held.message, held.failed_at)
    planned = prev is not None and prev.replacement is not None \
        and prev.replacement.action == "Move"
    count = seen.count if frozen_reason is None else None
    change = None
    if verdict.state == "Down" and prev_state != "Down" and not (held and held.new) \
            and _failed_job_torn_down(hosts, prev, seen.job):
        pass  # the failure is counted already: its Job's pods go because it is replaced
    elif verdict.state == "Down" and prev_state != "Down":
        restarts += 0 if planned else 1
        change = SliceChange(index, True, False, verdict.failed_at, verdict.message,
                             planned=planned)
    elif verdict.state == "Ready" and prev_state in ("Down", "Restarting"):
        change = SliceChange(index, False, True, None, "")
    looked = change is None or not change.went_down
    missed = unseen(prev, count, verdict.state) if looked else 0
    restarted = unseen_restarts(prev, count, verdict.state) if looked and not missed else 0
    if (missed or restarted) and count is not None:  # a failure no look saw: counted
        reason = Reason.HOST_LOST if missed else Reason.CONTAINER_RESTARTING
        message = _missed_message(seen, count, missed) if missed \
            else _restarted_message(seen, count, restarted)
        verdict = _Verdict("Down", reason, message,
                           verdict.failed_at if verdict.state == "Down" else None)
        restarts += 1
        change = SliceChange(index, True, False, verdict.failed_at, verdict.message,
                             restarted_unseen=not missed)
        missed = missed or restarted
    counted = next_counted(prev, count, verdict.state,
                           counted_now=change is not None and change.failed,
                           failed_job=_down_job(hosts))
    transition = now if (prev is None or prev_state != verdict.state or missed) \
        else prev.last_transition_time
    status = SliceStatus(
        index=index, state=verdict.state, ready_hosts=sum(1 for h in hosts if h.ready),
        hosts=hosts_per_slice, restarts=restarts, reason=verdict.reason,
        message=verdict.message or None, last_transition_time=transition,
        # The operator's records (core/replacement.py updates them).
        moves=prev.moves if prev else 0,
        replacement=prev.replacement if prev else None,
        last_replacement=prev.last_replacement if prev else None,
        maintenance=prev.maintenance if prev else None,
        pool=prev.pool if prev else None,
        domain=prev.domain if prev else None,
        counted=counted,
        recent_failures=prev.recent_failures if prev else [],  # charged by replacement
    )
    return status, change


def _during_teardown(verdict: _Verdict, hosts: Sequence[HostView], prev: SliceStatus | None,
                     hosts_per_slice: int) -> _Verdict:
    """A Down slice stays Down, with the reason it went down for, while the Job its
    replacement record names is torn down: that Job's pods going one after another
    (PodFailed, then PodDeleted once the failed pod is gone; a look between two of them
    that sees no pod down, only hosts without a pod or already on the new Job) is the
    replacement at work, not a new cause nor a slice coming back, and each state or
    reason change is a status write of its own (core/pacing.py writes them at once).
    Restarting starts once no host's newest pod is that Job's, or every host has one of
    it (the Job controller replaced the failed pod in that Job). A host of another Job
    going down says its own reason."""
    record = prev.replacement if prev is not None else None
    if prev is None or prev.state != "Down" or record is None or record.job_uid is None \
            or not prev.reason:
        return verdict
    if verdict.state == "Restarting" and record.action in ("Replace", "Move"):
        old = sum(1 for h in hosts if h.pod.job_uid == record.job_uid)
        if old and (len(hosts) < hosts_per_slice or old < len(hosts)):
            return _Verdict("Down", prev.reason, verdict.message)
        return verdict
    if verdict.state == "Restarting" and record.action == "GiveUp" \
            and all(h.pod.job_uid == record.job_uid for h in hosts):
        # Nothing replaces a Job given up on: its pods going is its failure, not a restart.
        return _Verdict("Down", prev.reason, prev.message or verdict.message)
    down = [h for h in hosts if h.down_reason is not None]
    if verdict.state != "Down" or not down \
            or any(h.pod.job_uid != record.job_uid for h in down):
        return verdict
    return _Verdict("Down", prev.reason, verdict.message, verdict.failed_at)


def _missed_message(seen: SliceSeen, count: JobCount, missed: int) -> str:
    name = seen.job.name if seen.job is not None else count.uid
    return (f"worker Job {name} counts {missed} failed "
            f"{'pod' if missed == 1 else 'pods'} no look saw (replaced before seen)")


def _restarted_message(seen: SliceSeen, count: JobCount, restarted: int) -> str:
    name = seen.job.name if seen.job is not None else count.uid
    return (f"pods of worker Job {name} restarted {restarted} "
            f"{'container' if restarted == 1 else 'containers'} in place that no look saw "
            "(back before seen)")


def _down_job(hosts: Sequence[HostView]) -> str | None:
    """The Job of the slice's down hosts' pods, if any says."""
    return next((h.pod.job_uid for h in hosts if h.down_reason and h.pod.job_uid), None)


def _failed_job_torn_down(hosts: Sequence[HostView], prev: SliceStatus | None,
                          job: ObservedJob | None) -> bool:
    """Down again while the replacement of a failed Job is under way, and every host down
    is a pod of that Job (the operator deleted it; its pods go one by one, and a look
    between two of them can see the slice Restarting), or none is: its pods gone, or
    already replaced by the new Job's, between two looks: the same failure, not a new
    one. Only once that Job is being deleted or gone: until then nobody tears it down,
    and its pod failing is a new failure (the Job controller replaced the failed pod
    before the operator's DELETE went out). So is a pod of it that failed or was deleted
    after the replacement was recorded and before the Job's own deletion (the garbage
    collector deletes its pods only after it), and a pod of another Job going down. A
    GiveUp's Job fails as the operator made it (backoffLimit 0)."""
    record = prev.replacement if prev is not None else None
    if record is None or record.action in ("Move", "RestartInPlace") or record.job_uid is None:
        return False  # nothing tears a restarting Job down
    own = job if job is not None and job.uid == record.job_uid else None
    if record.action == "Replace" and own is not None and not own.deleting:
        return False
    deleted_at = own.deleted_at if own is not None else None
    return all(h.pod.job_uid == record.job_uid
               and not _failed_between(h, record.requested_at, deleted_at)
               for h in hosts if h.down_reason is not None)


def _failed_between(host: HostView, since: datetime, until: datetime | None) -> bool:
    """The host's pod failed or was deleted after `since` (the record) and before `until`
    (its Job's deletion; None: not known, so nothing is before it). Pod and Job times are
    whole seconds: one of the same second is taken as the teardown (no second count)."""
    at = host.pod.failure_started_at
    return until is not None and at is not None and since < at < until


def _judge(hosts: Sequence[HostView], prev: SliceStatus | None, hosts_per_slice: int,
           frozen_reason: str | None) -> _Verdict:
    if frozen_reason is not None:
        return _Verdict("Pending", frozen_reason, "")
    down = [h for h in hosts if h.down_reason is not None]
    if down:
        reasons = sorted({h.down_reason for h in down if h.down_reason})
        if len(reasons) > 1:
            # A slice with a failed host has its other pods deleted next (the slice is
            # torn down and replaced as one): those deletions follow the failure, they
            # are not a second cause.
            reasons = [r for r in reasons if r != Reason.POD_DELETED]
        failed = [h.failed_at for h in down if h.failed_at is not None]
        return _Verdict("Down", reasons[0] if len(reasons) == 1 else Reason.MULTIPLE_CAUSES,
                        named([h.down_message or "" for h in down], "hosts down"),
                        min(failed) if failed else None)
    ready_hosts = sum(1 for h in hosts if h.ready)
    prev_state = prev.state if prev else None
    if ready_hosts >= hosts_per_slice and len(hosts) >= hosts_per_slice:
        return _all_ready(hosts, prev)
    if prev_state == "Ready":
        return _lost_host(hosts, prev, hosts_per_slice)
    notes = [h.note for h in hosts if h.note]
    message = "; ".join([f"{ready_hosts}/{hosts_per_slice} hosts ready",
                         *([named(notes, "hosts failed by Kueue")] if notes else [])])
    if prev_state in ("Down", "Restarting"):
        return _Verdict("Restarting", Reason.REPLACEMENT_PODS_NOT_READY, message)
    return _Verdict("Pending", Reason.WAITING_FOR_HOSTS, message)


def _all_ready(hosts: Sequence[HostView], prev: SliceStatus | None) -> _Verdict:
    """Every host ready. Yet a host replaced and ready again between two looks (kwok, or
    a fast node) left no failed pod to see: a pod newer than the slice's Ready
    transition says so."""
    since = prev.last_transition_time if prev is not None and prev.state == "Ready" else None
    unseen = [h for h in hosts if since is not None and h.pod.created_at is not None
              and h.pod.created_at > since]
    if not unseen:
        return _Verdict("Ready", Reason.ALL_HOSTS_READY, "")
    return _Verdict("Down", Reason.HOST_LOST,
                    named([f"host {h.host} (pod {h.pod.name}) was replaced" for h in unseen],
                          "hosts replaced"),
                    min(h.pod.created_at for h in unseen if h.pod.created_at))


def _lost_host(hosts: Sequence[HostView], prev: SliceStatus | None,
               hosts_per_slice: int) -> _Verdict:
    """A ready slice lost a host between two looks: a pod replaced before we saw it fail
    (HostLost), or a pod that stopped being ready (HostNotReady)."""
    since = prev.last_transition_time if prev is not None else None
    not_ready = [h for h in hosts if not h.ready]
    replaced = [h for h in not_ready if h.pod.created_at and since and h.pod.created_at > since]
    reason = Reason.HOST_LOST if replaced or len(hosts) < hosts_per_slice \
        else Reason.HOST_NOT_READY
    message = named([f"host {h.host} (pod {h.pod.name}) "
                     + ("is a replacement, not ready yet" if h in replaced else "is not ready")
                     for h in not_ready], "hosts not ready") \
        or f"{len(hosts)}/{hosts_per_slice} hosts have pods"
    lost_at = [h.pod.created_at if h in replaced else h.pod.ready_transition_time
               for h in not_ready]
    known = [t for t in lost_at if t is not None]
    return _Verdict("Down", reason, message, min(known) if known else None)


def slice_events(changes: list[SliceChange]) -> list[StatusEvent]:
    """SliceDown (with when its host failed, for the detection latency) and
    SliceRestored."""
    events = []
    for change in changes:
        if change.went_down and change.planned:
            events.append(StatusEvent(
                reason=Reason.SLICE_DOWN, type="Normal", slice_index=change.index,
                message=f"slice {change.index} is down for a planned move: {change.message}",
            ))
        elif change.went_down:
            events.append(StatusEvent(
                reason=Reason.SLICE_DOWN, type="Warning", slice_index=change.index,
                failed_at=change.failed_at,
                message=f"slice {change.index} is down: {change.message}",
            ))
        elif change.restored:
            events.append(StatusEvent(
                reason=Reason.SLICE_RESTORED, type="Normal", slice_index=change.index,
                message=f"slice {change.index} is Ready again",
            ))
    return events
