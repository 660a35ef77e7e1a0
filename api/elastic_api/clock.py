"""The one clock of a process: wall time and monotonic time, read together in one place.

`now()` is timezone-aware UTC wall time, for what is written to the API or compared with
times the API holds; `monotonic()` is for durations and deadlines inside this process
(it never jumps with NTP). The edge makes one `SystemClock` (`build_operator`) and passes
it to every part that reads time, so a test drives them all with one fake; the pure cores
read no clock at all (`now` is passed in)."""
from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime: ...

    def monotonic(self) -> float: ...


class SystemClock:
    """The host's clocks."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()


SYSTEM_CLOCK: Clock = SystemClock()
