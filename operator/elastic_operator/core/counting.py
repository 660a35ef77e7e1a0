"""Exactly once: each slice failure counted from evidence the cluster keeps
(docs/design/exactly-once.md).

A look at the pods sees a failure only while it lasts: a pod that failed and was
replaced between two looks (a leader change, an operator restarted, a watch that
stalled) shows nothing but a newer pod. The slice's worker Job keeps count: the Job
controller counts a pod that failed or was deleted (status.failed, with
uncountedTerminatedPods.failed) before it ever replaces it (its pod backoff, 10 s at the
least), and that count neither goes back nor depends on who watched. `slices[i].counted`
stores which Job and how many of its failed pods the slice's `restarts` account for, so a
restarted operator, reading only the stored status and the cluster, goes on from there.

Per slice and look (`JobCount`, `unseen`, `next_counted`):
- the slice seen going Down is one failure: every failed pod its Job counts so far is it;
- while the slice is Down or Restarting on the Job that failed, that Job's further failed
  pods are the same failure (the Job controller counts a pod after the look that saw it
  fail; the slice's other pods fail with it);
- otherwise a count above the record is a failure no look saw: counted once (HostLost);
  so are container restarts in place above the record's (a pod its kubelet restarted
  between two looks shows nothing but a higher restartCount: ContainerRestarting);
- a Job not recorded (JobSet recreated it) counts from zero: its failed pods are unseen
  failures; a Job being deleted or finished (the operator replaces it, or let it fail)
  is no evidence;
- nothing counts while the slice is Pending (never Ready since its Job or admission
  started: a queue's eviction deletes every pod) or frozen, nor on a status written
  before the record existed: the record starts at the Job's count then.
A pod Kueue failed (its node replacement under Topology-Aware Scheduling) is no failure
(sliceview.host_view): its Job's count is taken without it.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from elastic_api.models import CountedFailures, SliceStatus
from elastic_operator.model.objects import ObservedJob, ObservedPod

_IN_FAILURE = ("Down", "Restarting")


@dataclass(frozen=True)
class JobCount:
    """The slice's live worker Job, its own count of failed pods (Kueue's taken out), and
    the container restarts in place of its pods (their restartCount, summed)."""

    uid: str
    failed: int
    restarts: int = 0

    @classmethod
    def of(cls, job: ObservedJob | None, pods: Iterable[ObservedPod]) -> JobCount | None:
        """None: no live Job (none seen, being deleted, or finished): no evidence."""
        if job is None or not job.uid or job.deleting or job.finished is not None:
            return None
        own = [p for p in pods if p.job_uid == job.uid]
        by_kueue = sum(1 for p in own if p.failed and p.terminated_by_kueue)
        return cls(job.uid, max(0, job.failed_pods - by_kueue),
                   sum(p.restarts for p in own if not p.terminating))


def _base(prev: SliceStatus | None, count: JobCount) -> int | None:
    """The failed pods of this Job the restarts account for (None: no record to go on)."""
    if prev is None or prev.counted is None:
        return None
    return prev.counted.failed_pods if prev.counted.job_uid == count.uid else 0


def in_failure(prev: SliceStatus | None, count: JobCount | None) -> bool:
    """The slice is still in the failure last counted, on the Job that failed."""
    return (prev is not None and count is not None and prev.state in _IN_FAILURE
            and prev.counted is not None and prev.counted.job_uid == count.uid)


def unseen(prev: SliceStatus | None, count: JobCount | None, state: str) -> int:
    """Failed pods of the live Job that no counted failure accounts for and that are no
    part of the one in progress: a failure to count (0: none)."""
    if count is None or prev is None or prev.state == "Pending" or state == "Pending" \
            or in_failure(prev, count):
        return 0
    base = _base(prev, count)
    return 0 if base is None else max(0, count.failed - base)


def unseen_restarts(prev: SliceStatus | None, count: JobCount | None, state: str) -> int:
    """Container restarts in place of the live Job's pods that no counted failure accounts
    for (0: none). A pod restarted by its kubelet between two looks shows only a higher
    restartCount. A record without the restarts (an older operator's) counts none: it is
    taken at the count seen now. A pod deleted since takes its restarts with it: the
    count may fall, and only restarts above the record count."""
    if count is None or prev is None or prev.state == "Pending" or state == "Pending" \
            or in_failure(prev, count) or prev.counted is None \
            or prev.counted.job_uid != count.uid or prev.counted.container_restarts is None:
        return 0
    return max(0, count.restarts - prev.counted.container_restarts)


def next_counted(prev: SliceStatus | None, count: JobCount | None, state: str, *,
                 counted_now: bool, failed_job: str | None) -> CountedFailures | None:
    """The record after this look. `counted_now`: a failure was counted in it (on
    `failed_job`, the Job whose pods failed, when no live Job is seen)."""
    kept = prev.counted if prev is not None else None
    if count is None:
        if counted_now and failed_job is not None:
            return CountedFailures(job_uid=failed_job, failed_pods=0)
        return kept
    base = _base(prev, count) or 0
    if counted_now or in_failure(prev, count):
        return CountedFailures(job_uid=count.uid, failed_pods=max(base, count.failed),
                               container_restarts=count.restarts)
    if kept is not None and kept.job_uid != count.uid and state in _IN_FAILURE:
        # A new Job while the slice is not back: its failed pods are new failures, kept
        # to count (unseen); the record moves to it once the slice is Ready.
        return kept
    return CountedFailures(job_uid=count.uid, failed_pods=count.failed,
                           container_restarts=count.restarts)
