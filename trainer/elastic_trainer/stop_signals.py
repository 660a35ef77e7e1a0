"""Waiting for SIGTERM or SIGINT between rounds of periodic work, with no signal handler.

A handler that sets a threading.Event can deadlock the process it should stop: the
handler runs in the main thread between two bytecodes, which may be inside Event.wait
holding the Event's lock, and that lock is not reentrant, so the handler's set() waits
for itself. Under load the slice agent did so (SIGTERM, then nothing: a pod that waits
its whole grace period and is killed with 137 instead of 143). Here the signals are
blocked instead and taken with sigtimedwait: the wait ends the moment one is sent, and a
signal sent while the loop works stays pending until the next wait.
"""
from __future__ import annotations

import signal

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopSignals:
    """Block SIGTERM and SIGINT in the calling thread (create it before any thread: a
    thread started later inherits the block) and wait for one of them."""

    def __init__(self) -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        self.received: int | None = None

    def wait(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for a stop signal; True once one has come."""
        if self.received is None:
            info = signal.sigtimedwait(STOP_SIGNALS, max(0.0, timeout))
            if info is not None:
                self.received = info.si_signo
        return self.received is not None
