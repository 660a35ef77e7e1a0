"""Which pod changes wake a job at once, and which may wait for the job's progress
interval (the one core/pacing.py paces status writes by). Pure.

A worker pod coming nearer to serving (created, scheduled, started, turned Ready) moves
what pacing calls progress: its slice's readyHosts and message. At 64 slices x 64 hosts
a recovery is thousands of such changes, and each one woke the job at once: the job was
reconciled back to back (docs/benchmarks.md), and a failure waited for the reconcile in
progress. Waking for these at most once per
interval leaves the queue free for the changes that matter. The cost: a slice whose
last host turns Ready is written Ready up to one interval later.

So is a worker Job's teardown: once the Job is being deleted (the replacement's
Foreground DELETE, or JobSet's), its pods going one by one, failing as their containers
are killed, and gone, are the end of a failure already known. At 64 hosts that is well
over a hundred pod changes per slice event. The slice's Down -> Restarting (none of the
old pods left) is written up to one interval later.

Everything else wakes at once: a pod failing, going, losing Ready, disrupted or evicted,
a container that ended or restarted in its pod (restartCount), a pod moved to another
job, and any change of the head pod (the trainer's container) or of a pod that is not a
worker's.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from elastic_api.models import SliceStatus
from elastic_api.names import WORKER_REPLICATED_JOB
from elastic_operator.model.objects import ObservedJob, ObservedPod

# A worker's phases on its way to serving, in order.
_SERVING_ORDER = {"Pending": 0, "Running": 1}


def may_wait(old: ObservedPod | None, new: ObservedPod | None, *,
             torn_down: bool = False) -> bool:
    """True when `old` -> `new` (None: absent) only brings a worker pod nearer to
    serving, or is the teardown of its worker Job (`torn_down`: the Job is being
    deleted); False when the change may be a failure, or is not a worker's."""
    pod = new or old
    if pod is None or pod.replicated_job != WORKER_REPLICATED_JOB:
        return False
    if torn_down:
        return True
    if new is None or not _healthy(new):
        return False
    if old is None:
        return new.terminated_at is None  # created: nothing ended yet
    if old.uid != new.uid or not _healthy(old):
        return False
    return (_SERVING_ORDER[new.phase] >= _SERVING_ORDER[old.phase]
            and (new.ready or not old.ready)
            and new.terminated_at == old.terminated_at
            and new.restarts == old.restarts and not new.restarting)


def _healthy(pod: ObservedPod) -> bool:
    """Pending or Running, not being deleted, nothing ended it or marked it to go."""
    return (pod.phase in _SERVING_ORDER and not pod.terminating
            and pod.disruption is None and pod.status_reason is None
            and not pod.terminated_by_kueue)


# --- a paced change that may still move a slice's state ---------------------------------
#
# Waking for paced changes once per progress interval (1 s) still cost a reconcile of
# the whole job each second of a recovery, and most of them computed progress only and
# wrote nothing (docs/benchmarks.md): the writes of
# progress back off (core/pacing.py), the wakes did not. A paced change that cannot move
# any slice's state may wait for the job's next progress write instead; one that may
# still wakes at the interval, as before. Which is which is read from the slice's hosts
# as the pod cache holds them (slice_index.py) against the slice as the job's last
# reconcile computed it (ComputedSlice): a superset of core/slices.py's transitions, checked
# against compute_status by a property test (tests/unit/test_slice_index.py).


@dataclass(frozen=True)
class ComputedSlice:
    """A slice as the job's last reconcile computed it."""

    state: str
    hosts: int  # hosts per slice
    since: datetime | None  # last transition
    record_job: str | None = None  # the Job its replacement record tears down (Replace, Move)
    pool: str | None = None

    @classmethod
    def of(cls, status: SliceStatus) -> ComputedSlice:
        record = status.replacement
        torn = record.job_uid if record is not None and record.action in ("Replace", "Move") \
            else None
        return cls(status.state, status.hosts, status.last_transition_time, torn, status.pool)


@dataclass(frozen=True)
class SliceTally:
    """A slice's hosts as the pod cache holds them, each by its newest pod (core/sliceview.py
    `newest`), nodes left out: `ready` healthy and Ready, `down` failed or terminating;
    `down_jobs` the Jobs of the down hosts' pods; `latest_created` the newest of them;
    `pool` the one most of its live pods run on (core/pools.py slice_pool; None: none);
    `jobs` how many hosts' newest pod each Job made."""

    hosts: int = 0
    ready: int = 0
    down: int = 0
    down_jobs: frozenset[str | None] = frozenset()
    latest_created: datetime | None = None
    pool: str | None = None
    jobs: Mapping[str | None, int] = field(default_factory=dict)


def host_down(pod: ObservedPod) -> bool:
    """A host whose newest pod is this is down (core/sliceview.py host_view, nodes aside:
    a node going NotReady wakes its jobs at once, and a pod scheduled onto one too)."""
    return pod.terminating or (pod.failed and not pod.terminated_by_kueue)


def host_ready(pod: ObservedPod) -> bool:
    return pod.ready and not host_down(pod)


def may_move(last: ComputedSlice | None, tally: SliceTally) -> bool:
    """Whether a reconcile may find the slice in another state, or for another reason,
    than `last`, its hosts being `tally`. False only where core/slices.py cannot: a
    Pending or Restarting slice with no host down and not all of them Ready; a Ready one
    with every host Ready, none down and none newer than its transition; a Down one whose
    replacement's Job still holds it Down (`_leaves_down`); and none of them while its
    pool moves."""
    if last is None or (tally.pool is not None and tally.pool != last.pool):
        return True  # (a slice's pool is no progress either: core/pacing.py)
    if last.state in ("Pending", "Restarting"):
        return tally.down > 0 or (tally.ready >= last.hosts and tally.hosts >= last.hosts)
    if last.state == "Ready":
        return (tally.down > 0 or tally.ready < last.hosts or tally.hosts < last.hosts
                or (last.since is not None and tally.latest_created is not None
                    and tally.latest_created > last.since))
    if last.state == "Down":
        return _leaves_down(last, tally)
    return True


def _leaves_down(last: ComputedSlice, tally: SliceTally) -> bool:
    """A Down slice whose replacement tears down Job `last.record_job` stays Down, for the
    same reason, while every down host is a pod of that Job; with none down, while some
    host's newest pod is still that Job's and not every host has one (core/slices.py
    `_during_teardown`), unless all are Ready."""
    if last.record_job is None:
        return True
    if tally.down:
        return tally.down_jobs != {last.record_job}
    old = tally.jobs.get(last.record_job, 0)
    all_ready = tally.ready >= last.hosts and tally.hosts >= last.hosts
    return all_ready or not old or (tally.hosts >= last.hosts and old >= tally.hosts)


def job_may_wait(old: ObservedJob | None, new: ObservedJob | None,
                 record_job: str | None) -> bool:
    """Whether a worker Job's change is its slice's replacement, already recorded (the
    Job `record_job` it tears down), running its course: that Job being deleted or gone,
    or its successor created with nothing failed or finished in it. Nothing a reconcile
    computes moves with these (a Job being deleted, or gone, counts no failure; a new Job
    takes over the count once its slice is Ready, core/counting.py), so they wait for the
    job's next progress write like the pods' own teardown and creation."""
    if record_job is None:
        return False
    if old is not None and old.uid == record_job:
        return new is None or (new.uid == old.uid and new.deleting)
    return old is None and new is not None and new.uid != record_job and not new.deleting \
        and new.finished is None and new.failed_pods == 0
