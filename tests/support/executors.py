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
