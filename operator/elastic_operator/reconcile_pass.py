"""One pass of a reconcile: its phases timed, and at the end of each one before its status
write, whether to start over from its reads for news of the job (core/startover.py has
the rule): a job named at once while its reconcile runs, where finishing could only delay
the news. The reconcile (reconciler.py) starts over at most once.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from elastic_operator.core.startover import Change, start_over
from elastic_operator.job_memory import JobKey
from elastic_operator.metrics import PhaseTimer


class News(Protocol):
    """The work queue (scheduler.py), as a running reconcile asks it for news."""

    def running(self, namespace: str, name: str) -> tuple[bool, bool]:
        """(named at once since the run started, the run started for progress only)"""
        ...

    def cover(self, namespace: str, name: str) -> None:
        """The run starts over from its reads: every naming so far is seen by it."""
        ...


class Pass:
    """One pass of a reconcile of a job: times its phases and, at the end of each one
    before its status write, says whether to start over for the job's news
    (core/startover.py; `news` None: never)."""

    def __init__(self, timer: PhaseTimer, key: JobKey, news: News | None) -> None:
        self.timer, self.key, self.news = timer, key, news

    def mark(self, phase: str) -> None:
        self.timer.mark(phase)

    def done(self, phase: str, change: Callable[[], Change] | None = None) -> bool:
        """End `phase`; whether the pass starts over (`change`: what it would write,
        asked only on news)."""
        self.timer.mark(phase)
        if self.news is None:
            return False
        news, run_paced = self.news.running(*self.key)
        if news and start_over(news=news, run_paced=run_paced,
                               change=None if change is None else change()):
            self.news.cover(*self.key)
            return True
        return False
