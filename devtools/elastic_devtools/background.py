"""A loop on a daemon thread until stopped: what the samplers and watchers of the tests,
the benchmarks and the dev tools share (start, stop, a context manager).

A subclass writes `_run`, which returns once `self._stop` is set (it waits on that Event
between rounds, so `stop` is prompt); stop joins the thread for `join_seconds()` at most
and then lets it go (a daemon: a watch stuck in a read does not hold the process).
"""
from __future__ import annotations

import threading
from typing import ClassVar, Self


class BackgroundLoop:
    THREAD_NAME: ClassVar[str] = "background-loop"
    JOIN_SECONDS: ClassVar[float] = 10.0
    _stop: threading.Event
    _thread: threading.Thread

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def start(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=self.THREAD_NAME, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ask the loop to end and wait for it; nothing to do if it never started."""
        if not hasattr(self, "_thread"):
            return
        self._stop.set()
        self._thread.join(timeout=self.join_seconds())

    def join_seconds(self) -> float:
        return self.JOIN_SECONDS

    def _run(self) -> None:
        raise NotImplementedError
