"""One condition of the job's status: find it, and set it with the transition rule.

Convention: lastTransitionTime moves only when the status changes; every condition
carries the generation it was computed for. Every module that decides a condition
imports this one, so it imports nothing of the core.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from elastic_api.models import Condition, ConditionStatus, ElasticTrainingJobStatus


def set_condition(
    previous: Sequence[Condition], type_: str, status: ConditionStatus, reason: str,
    message: str, now: datetime, generation: int | None,
) -> Condition:
    """lastTransitionTime moves only when the status changes."""
    for cond in previous:
        if cond.type == type_ and cond.status == status:
            return Condition(type=type_, status=status, reason=reason, message=message,
                             last_transition_time=cond.last_transition_time,
                             observed_generation=generation)
    return Condition(type=type_, status=status, reason=reason, message=message,
                     last_transition_time=now, observed_generation=generation)


def get_condition(status: ElasticTrainingJobStatus, type_: str) -> Condition | None:
    return next((c for c in status.conditions if c.type == type_), None)


@dataclass(frozen=True)
class ConditionSetter:
    """set_condition bound to one reconcile: the conditions as stored, now, generation."""

    previous: Sequence[Condition]
    now: datetime
    generation: int | None

    def set(self, type_: str, status: ConditionStatus, reason: str,
            message: str = "") -> Condition:
        return set_condition(self.previous, type_, status, reason, message, self.now,
                             self.generation)

    def true(self, type_: str, reason: str, message: str = "") -> Condition:
        return self.set(type_, "True", reason, message)

    def false(self, type_: str, reason: str, message: str = "") -> Condition:
        return self.set(type_, "False", reason, message)

    def unknown(self, type_: str, reason: str, message: str = "") -> Condition:
        return self.set(type_, "Unknown", reason, message)
