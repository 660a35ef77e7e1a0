"""One pass of a reconcile: its phases timed, and at the end of each one before its status
write, whether to start over from its reads because the job was requeued at once while
it ran (core/startover.py has the rule), where finishing could only delay the change
that requeued it. Whether it was is what the reconcile's caller tells it (`Requeued`);
the pass asks the work queue nothing and changes nothing in it. The reconcile
(reconciler.py) starts over at most once.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Final

from elastic_operator.core.startover import Change, start_over
from elastic_operator.metrics.metrics import PhaseTimer

# Whether the job was requeued while its reconcile runs, as the reconcile's caller tells
# it: (named at once since the run started, the run started for progress only). The work
# queue's `WorkQueue.running`, for the job (app.py).
Requeued = Callable[[], tuple[bool, bool]]


class StartOver:
    """What a pass returns when it stops to start over."""


START_OVER: Final = StartOver()


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
