"""Which pod changes wake a job at once, and which may wait for the job's progress
interval (the one core/pacing.py paces status writes by). Pure.

A worker pod coming nearer to serving (created, scheduled, started, turned Ready) moves
what pacing calls progress: its slice's readyHosts and message. At 64 slices x 64 hosts
a recovery is thousands of such changes, and each one woke the job at once: the job was
reconciled back to back (97 % of the failure phase at load 11, docs/benchmarks.md), and
a failure waited for the reconcile in progress. Waking for these at most once per
interval leaves the queue free for the changes that matter. The cost: a slice whose
last host turns Ready is written Ready up to one interval later.

So is a worker Job's teardown: once the Job is being deleted (the replacement's
Foreground DELETE, or JobSet's), its pods going one by one, failing as their containers
are killed, and gone, are the end of a failure already known. At 64 hosts that is well
over a hundred pod changes per slice event. The slice's Down -> Restarting (none of the
old pods left) is written up to one interval later.

Everything else wakes at once: a pod failing, going, losing Ready, disrupted or evicted,
a container that ended, a pod moved to another job, and any change of the head pod
(the trainer's container) or of a pod that is not a worker's.
"""
from __future__ import annotations

from elastic_api.names import WORKER_REPLICATED_JOB
from elastic_operator.observed import ObservedPod

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
            and new.terminated_at == old.terminated_at)


def _healthy(pod: ObservedPod) -> bool:
    """Pending or Running, not being deleted, nothing ended it or marked it to go."""
    return (pod.phase in _SERVING_ORDER and not pod.terminating
            and pod.disruption is None and pod.status_reason is None
            and not pod.terminated_by_kueue)
