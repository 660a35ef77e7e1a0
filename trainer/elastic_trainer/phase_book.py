"""How long each phase took in this run (status.training.phases): the history each phase's
deadline is learned from (elastic_api.phases.phase_deadline). One book for both who
report a phase: the bundled trainer times its own (own_activity.py, the watchdog's
deadlines), the progress sidecar times those it samples (activity.py). Pure: durations in.
"""
from __future__ import annotations

from elastic_api.models import PhaseRecord
from elastic_api.phases import PHASES, Phase


class PhaseBook:
    """How long each phase took (status.training.phases)."""

    def __init__(self) -> None:
        self._records: dict[Phase, PhaseRecord] = {}

    def add(self, phase: Phase, seconds: float) -> None:
        seconds = round(max(0.0, seconds), 3)
        old = self._records.get(phase)
        self._records[phase] = PhaseRecord(
            phase=phase, count=(old.count if old else 0) + 1, last_seconds=seconds,
            longest_seconds=max(seconds, old.longest_seconds if old else 0.0))

    def longest(self, phase: Phase) -> float | None:
        """The longest `phase` took so far (None: not seen yet)."""
        record = self._records.get(phase)
        return None if record is None else record.longest_seconds

    def records(self) -> list[PhaseRecord] | None:
        found = [self._records[p] for p in PHASES if p in self._records]
        return found or None
