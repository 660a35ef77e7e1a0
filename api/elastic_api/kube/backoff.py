"""The one capped exponential backoff: of a watch that keeps failing (informer.py), of a
reconcile that keeps failing (the operator's work queue), of the trainer's pod watch."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    """base_s, 2 base_s, 4 base_s, ... at most cap_s, by consecutive failures."""

    base_s: float
    cap_s: float

    def __post_init__(self) -> None:
        if not 0 < self.base_s <= self.cap_s:
            raise ValueError(f"a backoff needs 0 < base <= cap; got {self.base_s}, {self.cap_s}")

    def delay(self, failures: int) -> float:
        exponent = min(max(failures - 1, 0), 62)  # 2**62 s: already far beyond any cap
        return float(min(self.cap_s, self.base_s * 2 ** exponent))
