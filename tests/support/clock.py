"""A Clock (elastic_api.clock) that moves only when a test says so."""
from __future__ import annotations

from datetime import datetime, timedelta

from tests.builders import T0


class FakeClock:
    """`now()` is `wall`, `monotonic()` is `ticks`; `advance` moves both together, as
    real time would. Either can be set alone where a test needs the two apart."""

    def __init__(self, wall: datetime = T0, ticks: float = 1000.0) -> None:
        self.wall = wall
        self.ticks = ticks  # a monotonic clock starts anywhere

    def now(self) -> datetime:
        return self.wall

    def monotonic(self) -> float:
        return self.ticks

    def advance(self, seconds: float) -> None:
        self.wall += timedelta(seconds=seconds)
        self.ticks += seconds
