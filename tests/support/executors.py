"""An executor for unit tests of code that runs work off the caller's thread."""
from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any


class Synchronous(Executor):
    """Runs each scan at once, in the caller's thread: its future is done before submit
    returns."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        future.set_result(fn(*args, **kwargs))
        return future


class Deferred:
    """A follow-up runner (elastic_operator.writes.followups) that keeps each piece of work
    until `run` says: what a reconcile left for after its status write, held back."""

    def __init__(self) -> None:
        self.work: list[tuple[tuple[str, str], Callable[[], None]]] = []

    def submit(self, job: tuple[str, str], work: Callable[[], None]) -> None:
        self.work.append((job, work))

    def run(self) -> int:
        """Run what waits, in order (and what that submits); how many pieces ran."""
        ran = 0
        while self.work:
            _, work = self.work.pop(0)
            work()
            ran += 1
        return ran
