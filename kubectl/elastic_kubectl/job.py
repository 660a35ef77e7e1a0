"""Pure: a job as the plugin reads it, its status through the lenient reader (the one the
operator and the trainer use, elastic_api.status_parsing), with what an older operator
does not write named rather than guessed."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from elastic_api.models import Condition, ElasticTrainingJobStatus
from elastic_api.status_parsing import parse_status
from elastic_kubectl.text import field_of, parse_time

# The status fields each view reads, and what their absence means.
OPERATOR_FIELDS = ("phase", "slices", "counters", "conditions")


@dataclass(frozen=True)
class Job:
    name: str
    namespace: str
    uid: str | None
    created: datetime | None
    spec: dict[str, Any]
    raw_status: dict[str, Any]
    status: ElasticTrainingJobStatus
    report_problem: str | None = None  # what the lenient reader dropped of status.training
    notes: list[str] = field(default_factory=list)

    @property
    def num_slices(self) -> int:
        tpu = field_of(self.spec, "tpu")
        value = tpu.get("numSlices", 1)
        return value if isinstance(value, int) and not isinstance(value, bool) else 1

    def condition(self, type_: str) -> Condition | None:
        return next((c for c in self.status.conditions if c.type == type_), None)

    def has(self, key: str) -> bool:
        """Whether the stored status holds this top-level field at all."""
        return key in self.raw_status


def read_job(obj: dict[str, Any]) -> Job:
    """The job from its object as the API server returns it."""
    meta = field_of(obj, "metadata")
    raw = field_of(obj, "status")
    status, problem = parse_status(raw)
    notes = []
    if not raw:
        notes.append("the job has no status yet: no operator has reconciled it (is one "
                     "running for this namespace?)")
    else:
        missing = [f"status.{k}" for k in OPERATOR_FIELDS if k not in raw]
        if missing:
            notes.append(f"{', '.join(missing)} not written: the operator is older than "
                         "this plugin (or not done with the job); shown as unknown")
    if problem:
        notes.append(problem)
    spec = field_of(obj, "spec")
    return Job(name=str(meta.get("name", "")), namespace=str(meta.get("namespace", "")),
               uid=meta.get("uid"), created=parse_time(meta.get("creationTimestamp")),
               spec=spec, raw_status=raw, status=status, report_problem=problem, notes=notes)


def missing_note(job: Job, key: str, what: str) -> str | None:
    """A note for a status field this view needs and the operator did not write."""
    if not job.raw_status or job.has(key):
        return None
    return f"status.{key} not written ({what}): is the operator older than this plugin?"
