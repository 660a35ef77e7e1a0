"""One pass of a reconcile: its phases timed, and at the end of each one before its status
write, whether to start over from its reads for news of the job (core/startover.py has
the rule): a job named at once while its reconcile runs, where finishing could only delay
the news. The news is what the reconcile's caller tells it (`News`); the pass asks the
work queue nothing and changes nothing in it. The reconcile (reconciler.py) starts over
at most once.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Final

from elastic_operator.core.startover import Change, start_over
from elastic_operator.metrics import PhaseTimer

# The job's news while its reconcile runs, as the reconcile's caller tells it: (named at
# once since the run started, the run started for progress only). The work queue's
# `Scheduler.running`, for the job (app.py).
News = Callable[[], tuple[bool, bool]]


class StartOver:
    """What a pass returns when it stops to start over."""


START_OVER: Final = StartOver()


class Pass:
    """One pass of a reconcile of a job: times its phases and, at the end of each one
    before its status write, says whether to start over for the job's news
    (core/startover.py; `news` None: never)."""

    def __init__(self, timer: PhaseTimer, news: News | None) -> None:
        self.timer, self.news = timer, news

    def mark(self, phase: str) -> None:
        self.timer.mark(phase)

    def done(self, phase: str, change: Callable[[], Change] | None = None) -> bool:
        """End `phase`; whether the pass starts over (`change`: what it would write,
        asked only on news)."""
        self.timer.mark(phase)
        if self.news is None:
            return False
        news, run_paced = self.news()
        return news and start_over(news=news, run_paced=run_paced,
                                   change=None if change is None else change())
