"""The rate limit on what the operator does to nodes and their pods (force-deleting a
stuck pod, labelling a node pool quarantined).

A token bucket over all such actions (`per_minute`, `burst`), and a cooldown per node
and kind of action: a node that flaps NotReady/Ready is acted on at most once per
cooldown, whatever the number of reconciles. The state is in memory: a restarted operator
starts with a full bucket, which the per-slice restart budget and the quarantine (a
quarantined pool gets no new pods to act on) still bound.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

from elastic_api.clock import SYSTEM_CLOCK, Clock


@dataclass(frozen=True)
class NodeActionLimits:
    per_minute: float = 30.0
    burst: int = 10
    cooldown_s: float = 60.0


class NodeActionLimiter:
    def __init__(self, limits: NodeActionLimits | None = None,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.limits = limits or NodeActionLimits()
        self._clock = clock
        self._lock = threading.Lock()
        self._tokens = float(self.limits.burst)
        self._filled_at = clock.monotonic()
        self._last: dict[tuple[str, str], float] = {}  # (kind, node) -> when acted
        self._warned: dict[tuple[str, str], float] = {}

    def acquire(self, kind: str, node: str) -> float:
        """0.0 and the action may go ahead (recorded); else the seconds to wait."""
        with self._lock:
            now = self._clock.monotonic()
            self._refill(now)
            key = (kind, node)
            last = self._last.get(key)
            if last is not None and now - last < self.limits.cooldown_s:
                return self.limits.cooldown_s - (now - last)
            if self._tokens < 1.0:
                rate = self.limits.per_minute / 60.0
                return (1.0 - self._tokens) / rate if rate > 0 else float("inf")
            self._tokens -= 1.0
            self._last[key] = now
            return 0.0

    def should_warn(self, kind: str, node: str) -> bool:
        """Whether a throttled action is worth an Event (once per cooldown per node)."""
        with self._lock:
            now = self._clock.monotonic()
            key = (kind, node)
            last = self._warned.get(key)
            if last is not None and now - last < self.limits.cooldown_s:
                return False
            self._warned[key] = now
            return True

    def _refill(self, now: float) -> None:
        rate = self.limits.per_minute / 60.0
        self._tokens = min(float(self.limits.burst),
                           self._tokens + (now - self._filled_at) * rate)
        self._filled_at = now
