"""Executors for unit tests of code that runs work off the caller's thread, and runners of
a reconcile's follow-ups (model/result.py `FollowUp`) for the reconciler's tests, which
run no work queue."""
from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, Protocol

from elastic_operator.model.result import FollowUp, Result, Wake, run_follow_ups


class Synchronous(Executor):
    """Runs each scan at once, in the caller's thread: its future is done before submit
    returns."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        future.set_result(fn(*args, **kwargs))
        return future


class FollowUpRunner(Protocol):
    def submit(self, job: tuple[str, str], work: FollowUp) -> None:
        """Run `work` after every piece submitted before for the same job."""
        ...


class Inline:
    """Runs each piece at once, in the caller's thread, as the work queue's worker does
    after the reconcile (`requeue`: told the look again each piece asks; None: nobody);
    `outcomes`: each piece's, in order."""

    def __init__(self, requeue: Wake | None = None) -> None:
        self.requeue = requeue
        self.outcomes: list[Result] = []

    def submit(self, job: tuple[str, str], work: FollowUp) -> None:
        outcome = run_follow_ups([work])
        self.outcomes.append(outcome)
        if self.requeue is not None and outcome.requeue_after is not None:
            self.requeue(job[0], job[1], outcome.requeue_after)


class Deferred:
    """A follow-up runner that keeps each piece of work until `run` says: what a
    reconcile left for after its status write, held back."""

    def __init__(self) -> None:
        self.work: list[tuple[tuple[str, str], Callable[[], Result]]] = []

    def submit(self, job: tuple[str, str], work: FollowUp) -> None:
        self.work.append((job, work))

    def run(self) -> int:
        """Run what waits, in order (and what that submits); how many pieces ran."""
        ran = 0
        while self.work:
            _, work = self.work.pop(0)
            work()
            ran += 1
        return ran
