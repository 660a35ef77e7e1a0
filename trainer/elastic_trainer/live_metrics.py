"""The trainer's metrics file read as it is written, on a thread of its own: each line with
the time it was read (the sidecar's clock: MaxText's lines carry none).

A thread of its own, woken by the file's writes (file_watch.py), so that no train line
is lost to a cut (MaxText truncates the file at an evaluation's first line) while the
sidecar does something else, such as sampling the trainer's stacks.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime

from elastic_trainer.file_watch import FileWatch
from elastic_trainer.metrics_file import MetricsFollower, Record

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


class LiveMetrics:
    """`drain()`: the lines read since the last drain, with when each was read."""

    def __init__(self, follower: MetricsFollower, idle_seconds: float = 1.0,
                 clock: Clock = utc_now) -> None:
        self.follower, self.idle_seconds, self.clock = follower, idle_seconds, clock
        self.watch = FileWatch(follower.path)
        self._lock = threading.Lock()
        self._pending: list[tuple[datetime, Record]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="metrics-file", daemon=True)

    def start(self) -> LiveMetrics:
        self._thread.start()
        return self

    def _read(self) -> None:
        records = self.follower.poll_all()
        if records:
            at = self.clock()
            with self._lock:
                self._pending += [(at, r) for r in records]

    def _run(self) -> None:
        while not self._stop.is_set():
            self._read()
            self.watch.wait(self.idle_seconds)

    def drain(self) -> list[tuple[datetime, Record]]:
        with self._lock:
            lines, self._pending = self._pending, []
        return lines

    def close(self, timeout: float = 5.0) -> None:
        """Stop the thread after one last read (what is left is in the next drain)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        if not self._thread.is_alive():  # else it still reads: two readers never share it
            self._read()
        self.watch.close()
        self.follower.close()
