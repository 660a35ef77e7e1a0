"""elastic_devtools.background: the loop the samplers and watchers share."""
from __future__ import annotations

import threading

from elastic_devtools.background import BackgroundLoop


class _Counter(BackgroundLoop):
    THREAD_NAME = "counter"

    def __init__(self) -> None:
        self.rounds = 0
        self.ran = threading.Event()

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            self.rounds += 1
            self.ran.set()


def test_runs_on_its_own_named_daemon_thread_until_stopped() -> None:
    with _Counter() as loop:
        assert loop.ran.wait(10)
        assert loop._thread.name == "counter" and loop._thread.daemon
    assert loop._stop.is_set() and not loop._thread.is_alive()  # joined: no more rounds


def test_stop_before_start_does_nothing() -> None:
    _Counter().stop()
