"""Batches made ahead on a background thread.

The host work of a batch (the data source, the reshape into micro-batches, the put onto
the mesh) runs while the previous steps train, `depth` batches ahead. Batches are a pure
function of the step, so making them early changes nothing but when the work happens. An
error in the background thread is raised by `get` of the step it belongs to.
"""
from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any


class BatchPrefetcher:
    def __init__(self, make: Callable[[int], Any], first_step: int, last_step: int,
                 depth: int = 2) -> None:
        """Batches `make(step)` for first_step..last_step, in order; `depth` 0 makes each
        one when it is asked for, on the caller's thread."""
        self._make = make
        self._queue: queue.Queue[tuple[int, Any, BaseException | None]] = queue.Queue(
            maxsize=max(1, depth))
        self._next = first_step
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if depth > 0:
            self._thread = threading.Thread(target=self._run, args=(first_step, last_step),
                                            name="batch-prefetch", daemon=True)
            self._thread.start()

    def _run(self, first: int, last: int) -> None:
        for step in range(first, last + 1):
            try:
                item: tuple[int, Any, BaseException | None] = (step, self._make(step), None)
            except BaseException as err:  # handed to the training thread by get()
                item = (step, None, err)
            while not self._stop.is_set():
                try:
                    self._queue.put(item, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if self._stop.is_set() or item[2] is not None:
                return

    def ready(self) -> bool:
        """`get` returns without waiting: a batch is made ahead, or made on the caller's
        thread (depth 0: the step's own work, not a wait)."""
        return self._thread is None or not self._queue.empty()

    def get(self, step: int) -> Any:
        """The batch of `step` (steps are asked for in order, from first_step)."""
        if step != self._next:
            raise ValueError(f"batch of step {step} asked for, the next one is {self._next}")
        if self._thread is None:
            self._next = step + 1
            return self._make(step)
        got, batch, error = self._queue.get()
        self._next = step + 1
        if error is not None:
            raise error
        assert got == step, (got, step)
        return batch

    def close(self, timeout: float = 10.0) -> None:
        self._stop.set()
        while True:  # unblock a put in progress
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        if self._thread is not None:
            self._thread.join(timeout)
