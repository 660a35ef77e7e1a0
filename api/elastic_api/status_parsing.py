"""One lenient reader of a job's stored status, for the operator and the trainer.

The status is untrusted input: the trainer writes status.training (a buggy or compromised
trainer controls it), and an older operator or a hand edit may have left anything in the
rest. The operator reads it to carry its state on (core/parsing.py); a trainer process
that replaces an earlier one reads it to count elastic events, retries, goodput and its
checkpoint answer on (elastic_trainer/report.py). Both read through here, so they never
disagree on what a status says. The rules:

- Types are JSON's, strictly: a bool is no integer, "5" no number, 2.5 no count; a
  non-finite number (which JSON cannot carry) and an integer beyond int64 (which
  Kubernetes cannot hold) are invalid. Bounds are the models' (counts are >= 0).
- An invalid field is dropped, and the rest kept. The fields of `elasticEvent`,
  `counters` and `admission` are independent facts, so one bad field there drops only
  itself; any other object is all or nothing (a recovery record without its `resumedAt`
  would read as still open).
- Timestamps without a zone are read as UTC (so comparisons cannot raise).
- Reading never fails: an operator-owned field that does not parse is dropped silently
  (the operator rewrites it); what was dropped of the trainer's report is named.
"""
from __future__ import annotations

import json
import math
import types
import typing
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ValidationError

from elastic_api.models import ElasticTrainingJobStatus, TrainingReport

# Objects read field by field (their fields are independent facts).
SALVAGED_FIELD_BY_FIELD = frozenset({"elasticEvent", "counters", "admission"})
_INT64 = 2**63 - 1


def parse_status(raw: Any) -> tuple[ElasticTrainingJobStatus, str | None]:
    """The stored status (any JSON value; a non-object reads as empty): invalid operator
    fields are dropped silently, the trainer's report leniently with the problem named."""
    raw = raw if isinstance(raw, dict) else {}
    operator_part = {k: v for k, v in raw.items() if k != "training"}
    status = _salvage(ElasticTrainingJobStatus, operator_part)[0] or ElasticTrainingJobStatus()
    status = _aware(status)
    report, problem = parse_training_report(raw.get("training"))
    return status.model_copy(update={"training": report}), problem


def parse_training_report(raw: Any) -> tuple[TrainingReport | None, str | None]:
    """The trainer's report, leniently: invalid fields are dropped and named."""
    if raw is None:
        return None, None
    if not isinstance(raw, dict):
        return None, f"status.training is a {type(raw).__name__}, not an object; ignored"
    report, dropped = _salvage(TrainingReport, raw)
    if report is None:
        return None, f"status.training ignored: {'; '.join(dropped)}"
    report = _aware(report)
    if dropped:
        return report, f"status.training fields ignored: {'; '.join(dropped)}"
    return report, None


def _validate(model: Any, data: dict[str, Any]) -> Any:
    """Validate as the JSON the API server holds, with JSON's types (strict)."""
    return model.model_validate_json(json.dumps(_as_json(data)), strict=True)


def _as_json(value: Any) -> Any:
    """`value` as plain JSON, with what JSON (or Kubernetes) cannot hold turned into a
    string, which no number field accepts: non-finite floats, integers beyond int64."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return value if abs(value) <= _INT64 else str(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, dict):
        return {str(k): _as_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_as_json(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    return repr(value)


def _salvage(model: Any, raw: dict[str, Any]) -> tuple[Any, list[str]]:
    """Validate, dropping each offending field until it validates (or cannot)."""
    data: dict[str, Any] = dict(raw)
    dropped: list[str] = []
    for _ in range(len(raw) + 8):
        try:
            return _validate(model, data), dropped
        except ValidationError as e:
            outcome = _drop_first_offender(model, e, data, dropped)
            if outcome == "stuck":
                return None, dropped or ["invalid"]
            if outcome == "missing":
                return None, dropped
    return None, dropped


def _drop_first_offender(model: Any, e: ValidationError, data: dict[str, Any],
                         dropped: list[str]) -> str:
    """Remove (or repair) the first top-level field an error names: "dropped"; a required
    field is missing: "missing"; no error names a field: "stuck"."""
    for err in e.errors():
        loc = err.get("loc", ())
        if not loc:
            continue
        key = loc[0]
        if isinstance(key, str) and key in data:
            nested = _nested_model(model, key) if len(loc) > 1 else None
            if nested is not None and isinstance(data[key], dict):
                part, part_dropped = _salvage(nested, data[key])
                if part is not None and part_dropped:  # else dropping nothing would loop
                    data[key] = part.model_dump(by_alias=True, mode="json")
                    dropped += [f"{key}.{d}" for d in part_dropped]
                    return "dropped"
            dropped.append(f"{key}: {err.get('msg', 'invalid')}")
            del data[key]
            return "dropped"
        if isinstance(key, str):
            dropped.append(f"{key}: {err.get('msg', 'missing')}")
            return "missing"
    return "stuck"


def _nested_model(model: Any, alias: str) -> type[BaseModel] | None:
    """The model of field `alias` when it is read field by field (SALVAGED_FIELD_BY_FIELD)."""
    if alias not in SALVAGED_FIELD_BY_FIELD:
        return None
    for name, info in model.model_fields.items():
        if (info.alias or name) != alias:
            continue
        annotation = info.annotation
        union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
        options = typing.get_args(annotation) if union else (annotation,)
        for option in options:
            if isinstance(option, type) and issubclass(option, BaseModel):
                return option
    return None


def _aware(model: Any) -> Any:
    """The same model with naive datetimes read as UTC (so comparisons cannot raise): the
    very object where none is naive, and a copy only of the parts that had one: copying
    every part made parsing, done at each reconcile, markedly slower (docs/benchmarks.md)
    for times the API server always stores with their zone."""
    updates: dict[str, Any] = {}
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, datetime) and value.tzinfo is None:
            updates[name] = value.replace(tzinfo=UTC)
        elif isinstance(value, BaseModel):
            part = _aware(value)
            if part is not value:
                updates[name] = part
        elif isinstance(value, list) and value and isinstance(value[0], BaseModel):
            parts = [_aware(v) for v in value]
            if any(p is not v for p, v in zip(parts, value, strict=True)):
                updates[name] = parts
    return model.model_copy(update=updates) if updates else model
