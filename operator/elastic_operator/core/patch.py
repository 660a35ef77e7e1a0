"""The one status write of a reconcile: an RFC 7386 JSON merge patch of the operator's
part of the status (never `training`, which is the trainer's)."""
from __future__ import annotations

from typing import Any

from elastic_api.models import ElasticTrainingJobStatus

# The status field the trainer writes; the operator's writes never mention it.
TRAINERS = "training"


def operator_wire(status: ElasticTrainingJobStatus) -> dict[str, Any]:
    """The operator-owned part of a status, as it goes on the wire (no `training`)."""
    wire = status.model_copy(update={TRAINERS: None}).to_wire()
    wire.pop(TRAINERS, None)
    return wire


def status_patch(
    previous: ElasticTrainingJobStatus, new: ElasticTrainingJobStatus,
) -> dict[str, Any] | None:
    """A JSON merge patch for the status subresource, or None when nothing changed.

    It never mentions `training` (the trainer's). Fields that disappeared are set to null.
    """
    before = operator_wire(previous)
    after = operator_wire(new)
    if before == after:
        return None
    return {"status": merge_patch(before, after)}


def merge_patch(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """A JSON merge patch (RFC 7386) turning `before` into `after`. A merge patch merges
    nested objects key by key, so a key gone from a nested object (a new lastRecovery
    has no resumedAt yet) must be sent as null at its own level, or the old value stays."""
    body: dict[str, Any] = {}
    for key, value in after.items():
        old = before.get(key)
        body[key] = merge_patch(old, value) if isinstance(old, dict) and isinstance(
            value, dict) else value
    for key in before:
        if key not in after:
            body[key] = None
    return body
