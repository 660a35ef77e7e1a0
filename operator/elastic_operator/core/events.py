"""The Kubernetes Events a status change implies (posted by the I/O layer, counted by
metrics.py)."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

EventType = Literal["Normal", "Warning"]


@dataclass(frozen=True)
class StatusEvent:
    """A Kubernetes Event to post on the job, with what the metrics need."""

    reason: str  # elastic_api.conditions.Reason
    message: str
    type: EventType = "Normal"
    slice_index: int | None = None
    failed_at: datetime | None = None  # SliceDown: when the host failed (detection latency)
    downtime_seconds: float | None = None  # Recovered
    steps_lost: int | None = None  # Recovered
