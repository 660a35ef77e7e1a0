"""What the training thread is doing, as the trainer reports it itself (source Trainer; the
progress sidecar infers the same for any trainer: activity.py): its phase
(elastic_api.phases) since when, its last sign of life, the frame it is blocked in
(status.training.activity), and how long each phase took (status.training.phases, a
phase_book.PhaseBook: the history each phase's deadline is learned from, which the
watchdog reads for its own deadlines, so both sides learn from one record). The
watchdog (watchdog.py) moves the phase as the training thread arms what it waits for,
and names the frame on a stall.

Times come in from the watchdog's clock: nothing here reads one.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import UTC, datetime

from elastic_api.models import PhaseRecord, TrainerActivity
from elastic_api.phases import Phase
from elastic_trainer.phase_book import PhaseBook


@dataclass(frozen=True)
class _Now:
    phase: Phase
    since: float  # unix time
    last_activity_at: float
    frame: str | None = None


class Activity:
    """The training thread's phase, written by the training thread (and, on a stall, by
    the watchdog's), read when a report is built."""

    def __init__(self) -> None:
        self.history = PhaseBook()
        self._now: _Now | None = None
        self._lock = threading.Lock()
        self.changes = 0  # phase changes so far: a report built since is not stale

    @property
    def phase(self) -> Phase | None:
        now = self._now
        return None if now is None else now.phase

    def enter(self, phase: Phase | None, at: float) -> None:
        """The training thread is in `phase` from `at` (None: in none the trainer reports,
        e.g. waiting for slices). Staying in a phase is a heartbeat."""
        with self._lock:
            now = self._now
            if now is not None and now.phase == phase and now.frame is None:
                self._now = _Now(now.phase, now.since, at)
                return
            self._now = None if phase is None else _Now(phase, at, at)
            self.changes += 1

    def beat(self, at: float) -> None:
        """A sign of life inside the phase (an evaluation step, a train step)."""
        with self._lock:
            now = self._now
            if now is not None and now.frame is None:
                self._now = _Now(now.phase, now.since, at)

    def ended(self, phase: Phase, seconds: float) -> None:
        """`phase` ended after `seconds`: learned from (the history)."""
        with self._lock:
            self.history.add(phase, seconds)

    def blocked(self, frame: str, since: float, device_call: bool) -> None:
        """The watchdog found the training thread past its deadline in `frame`: blocked
        in a device call since `since` (DeviceWait), else still in its phase."""
        with self._lock:
            now = self._now
            if device_call:
                last = since if now is None else now.last_activity_at
                self._now = _Now("DeviceWait", since, last, frame)
            elif now is not None:
                self._now = _Now(now.phase, now.since, now.last_activity_at,
                                 frame)
            self.changes += 1

    def longest(self, phase: Phase) -> float | None:
        with self._lock:
            return self.history.longest(phase)

    def report(self) -> TrainerActivity | None:
        now = self._now
        if now is None:
            return None
        return TrainerActivity(phase=now.phase, since=datetime.fromtimestamp(now.since, UTC),
                               last_activity_at=datetime.fromtimestamp(now.last_activity_at,
                                                                       UTC),
                               frame=now.frame, source="Trainer")

    def records(self) -> list[PhaseRecord] | None:
        with self._lock:
            return self.history.records()
