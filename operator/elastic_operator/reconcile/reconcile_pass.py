"""One pass of a reconcile: its phases timed, and at the end of each one before its status
write, whether to start over from its reads because the job was requeued at once while
it ran (core/startover.py has the rule), where finishing could only delay the change
that requeued it. Whether it was is what the reconcile's caller tells it (`Requeued`);
the pass asks the work queue nothing and changes nothing in it. The reconcile
(reconciler.py) starts over at most once.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from elastic_api.models import ElasticTrainingJobStatus
from elastic_operator.core.startover import Change, pass_change, start_over
from elastic_operator.core.status_events import StatusEvent
from elastic_operator.metrics.metrics import PhaseTimer
from elastic_operator.model.result import FollowUp

# Whether the job was requeued while its reconcile runs, as the reconcile's caller tells
# it: (named at once since the run started, the run started for progress only). The work
# queue's `WorkQueue.running`, for the job (app.py).
Requeued = Callable[[], tuple[bool, bool]]


class StartOver:
    """What a pass returns when it stops to start over."""


START_OVER: Final = StartOver()


@dataclass
class Run:
    """One reconcile, across a pass that starts over: when it started (`started`: the
    clock's monotonic seconds; `cpu`: this thread's CPU seconds), its tries, and what
    its passes handed over for after their status write (`later`: its Result's
    follow-ups, in order, whatever the verdict)."""

    started: float
    cpu: float = field(default_factory=time.thread_time)
    attempt: int = 1
    later: list[FollowUp] = field(default_factory=list)

    def cpu_used(self) -> float:
        """This thread's CPU seconds since the reconcile started."""
        return time.thread_time() - self.cpu


class Pass:
    """One pass of a reconcile of a job: times its phases and, at the end of each one
    before its status write, says whether to start over: the job requeued at once
    (core/startover.py; `requeued` None: never)."""

    def __init__(self, timer: PhaseTimer, requeued: Requeued | None) -> None:
        self.timer, self.requeued = timer, requeued

    def mark(self, phase: str) -> None:
        self.timer.mark(phase)

    def done(self, phase: str, change: Callable[[], Change] | None = None) -> bool:
        """End `phase`; whether the pass starts over (`change`: what it would write,
        asked only when requeued)."""
        self.timer.mark(phase)
        if self.requeued is None:
            return False
        requeued, run_paced = self.requeued()
        return requeued and start_over(requeued=requeued, run_paced=run_paced,
                                       change=None if change is None else change())

    def computed(self, phase: str, previous: ElasticTrainingJobStatus,
                 new: ElasticTrainingJobStatus, events: list[StatusEvent]) -> bool:
        """End `phase`, the status computed (`new`, with `events`, from `previous`);
        whether the pass starts over rather than write it."""
        return self.done(phase, lambda: pass_change(previous, new, events))
