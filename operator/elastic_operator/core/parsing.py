"""The job and its stored status, read leniently.

The spec must be valid (InvalidJobSpec names the fields). The status never makes parsing
fail: the trainer writes status.training (a buggy or compromised trainer controls it) and
an older operator or a hand edit may have left anything in the rest, so invalid parts
are dropped and reported instead.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ValidationError

from elastic_api.models import (
    ElasticEventReport,
    ElasticTrainingJob,
    ElasticTrainingJobStatus,
    TrainingReport,
)
from elastic_api.validation import describe_validation_error

# How many spec problems an InvalidSpec message names (the condition stays readable).
MAX_SPEC_PROBLEMS = 5
MAX_SPEC_MESSAGE = 1024


@dataclass(frozen=True)
class ParsedJob:
    job: ElasticTrainingJob  # status left out; see previous
    previous: ElasticTrainingJobStatus  # the status as stored, training parsed leniently
    report_problem: str | None  # why (part of) status.training was ignored


class InvalidJobSpec(ValueError):
    pass


def parse_job(body: dict[str, Any]) -> ParsedJob:
    """Parse a raw ElasticTrainingJob. The spec must be valid (InvalidJobSpec names the
    fields); the status never makes this fail: bad parts are dropped and reported."""
    raw = {k: v for k, v in body.items() if k != "status"}
    try:
        job = ElasticTrainingJob.model_validate(raw)
    except ValidationError as e:
        message = "; ".join(describe_validation_error(e)[:MAX_SPEC_PROBLEMS])
        raise InvalidJobSpec(message[:MAX_SPEC_MESSAGE]) from e
    raw_status = body.get("status")
    previous, problem = parse_status(raw_status if isinstance(raw_status, dict) else {})
    return ParsedJob(job=job, previous=previous, report_problem=problem)


def parse_status(raw: dict[str, Any]) -> tuple[ElasticTrainingJobStatus, str | None]:
    """The stored status; invalid operator fields are dropped (silently: the operator
    rewrites them), the trainer's report leniently with the problem named."""
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


def _salvage(model: Any, raw: dict[str, Any]) -> tuple[Any, list[str]]:
    """Validate, dropping each offending field until it validates (or cannot)."""
    data: dict[str, Any] = dict(raw)
    dropped: list[str] = []
    for _ in range(len(raw) + 8):
        try:
            return model.model_validate(data), dropped
        except ValidationError as e:
            outcome = _drop_first_offender(e, data, dropped)
            if outcome == "stuck":
                return None, dropped or ["invalid"]
            if outcome == "missing":
                return None, dropped
    return None, dropped


def _drop_first_offender(e: ValidationError, data: dict[str, Any], dropped: list[str]) -> str:
    """Remove (or repair) the first top-level field an error names: "dropped"; a required
    field is missing: "missing"; no error names a field: "stuck"."""
    for err in e.errors():
        loc = err.get("loc", ())
        if not loc:
            continue
        key = loc[0]
        if isinstance(key, str) and key in data:
            if key == "elasticEvent" and isinstance(data[key], dict) and len(loc) > 1:
                event, event_dropped = _salvage(ElasticEventReport, data[key])
                if event is not None:
                    data[key] = event.model_dump(by_alias=True, mode="json")
                    dropped += [f"elasticEvent.{d}" for d in event_dropped]
                    return "dropped"
            dropped.append(f"{key}: {err.get('msg', 'invalid')}")
            del data[key]
            return "dropped"
        if isinstance(key, str):
            dropped.append(f"{key}: {err.get('msg', 'missing')}")
            return "missing"
    return "stuck"


def _aware(model: Any) -> Any:
    """The same model with naive datetimes read as UTC (so comparisons cannot raise)."""
    updates: dict[str, Any] = {}
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, datetime) and value.tzinfo is None:
            updates[name] = value.replace(tzinfo=UTC)
        elif isinstance(value, BaseModel):
            updates[name] = _aware(value)
        elif isinstance(value, list) and value and isinstance(value[0], BaseModel):
            updates[name] = [_aware(v) for v in value]
    return model.model_copy(update=updates) if updates else model
