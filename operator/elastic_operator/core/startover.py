"""When a reconcile in progress starts over instead of finishing. Pure.

A reconcile reads the job, its pods and the rest, then computes and writes the status. A
change that wakes the job at once while a reconcile of it runs (a pod failing, above all)
waits for that reconcile to end, then runs its own: on a large job on a loaded node that
wait was most of the detection's tail (docs/benchmarks.md), and a recovery keeps the job
reconciled for its hosts' progress for minutes. So the reconcile in progress is told at
each phase by its caller (the work queue, work_queue.py `running`) whether the job was
requeued at once since it started (`requeued`), and starts over from its reads, which
then see the change, when finishing would only delay that change:

- before its status is computed, when it was started only for progress (`run_paced`: a
  worker pod coming nearer to serving, a progress write that had to wait; core/wakes.py,
  core/pacing.py), whose write may wait a pass anyway. A run started for anything else
  (a change woken at once, a grace period or deadline ending, a retry) may be carrying a
  failure: it is not cut short before it knows;
- once its status is computed, when that status equals the stored one or differs from it
  only in progress (`Change`): its write may wait.

A pass that carries a change (a slice down, a condition, an Event) finishes and writes it:
a failure found is never held back for the next one. A reconcile starts over at most once
(the reconciler's rule), so a stream of changes cannot keep a job from being written.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from elastic_api.models import ElasticTrainingJobStatus
from elastic_operator.core.pacing import progress_only
from elastic_operator.core.patch import operator_wire

# What the pass's status would write: nothing, progress only (core/pacing.py), or a change.
Change = Literal["none", "progress", "change"]


def start_over(*, requeued: bool, run_paced: bool, change: Change | None) -> bool:
    """Whether the pass starts over: `requeued`, the job named at once since it started;
    `run_paced`, it was started only for progress; `change`, what its status would write
    (None: not computed yet)."""
    if not requeued:
        return False
    if change is None:
        return run_paced
    return change != "change"


def pass_change(previous: ElasticTrainingJobStatus, new: ElasticTrainingJobStatus,
                events: Sequence[object]) -> Change:
    """What writing `new` over `previous` would be: a change when it carries Events."""
    if events:
        return "change"
    if progress_only(previous, new):
        return "progress"
    return "none" if operator_wire(previous) == operator_wire(new) else "change"
