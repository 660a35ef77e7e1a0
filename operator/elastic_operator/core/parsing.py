"""The job and its stored status, read leniently.

The spec must be valid (InvalidJobSpec names the fields). The status never makes parsing
fail: it is read by elastic_api.status_parsing, the one lenient reader the trainer uses
too (invalid parts are dropped, and what was dropped of the trainer's report named).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from elastic_api.models import ElasticTrainingJob, ElasticTrainingJobStatus
from elastic_api.status_parsing import parse_status, parse_training_report
from elastic_api.validation import describe_validation_error

__all__ = ["InvalidJobSpec", "ParsedJob", "parse_job", "parse_status", "parse_training_report"]

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
