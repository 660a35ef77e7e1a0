"""Whether the CRD the API server serves is the schema this operator was built with, and
what follows for the jobs.

The CRD says its schema's revision (elastic_api/schema_revisions.py; none: revision 0).
The verdict compares it with the operator's own and, structurally, the status fields
each schema has:

- current: the operator's own revision;
- newer: a later revision (the operator was downgraded): it writes what it knows;
- older: an earlier one that still stores every status field the operator writes:
  served, and said (naming what of the trainer's part, status.training, it would drop:
  refusing would not keep that, and would leave failed slices down);
- outdated: an earlier one that lacks some (`missing`, e.g. status.slices[].counted): the
  API server would drop them from every status write, silently losing what they record
  (the evidence that counts a failure exactly once across an operator restart). The
  operator refuses: it writes no status of the job but the SchemaCurrent condition;
- unknown: the CRD cannot be read (its RBAC); served as before, and said.

A job carries SchemaCurrent once its served CRD was not the operator's own: False with
CRDOutdated or CRDOlder, True with CRDNewer, and True with CRDCurrent once it is again.
"""
from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any, Final

from elastic_api.conditions import ConditionType, Reason
from elastic_api.crd import build_crd
from elastic_api.models import Condition, ConditionStatus
from elastic_api.names import SCHEMA_HASH_ANNOTATION, SCHEMA_REVISION_ANNOTATION, VERSION
from elastic_operator.core.patch import TRAINERS
from elastic_operator.core.setter import set_condition
from elastic_operator.core.status_events import StatusEvent

CURRENT: Final = "current"
NEWER: Final = "newer"
OLDER: Final = "older"
OUTDATED: Final = "outdated"
UNKNOWN: Final = "unknown"
STATES: Final = (CURRENT, NEWER, OLDER, OUTDATED, UNKNOWN)
# What upgrades the CRD: the chart (its CRD is a template) or the release's file.
FIX: Final = ("helm upgrade <release> <this operator's chart>, or kubectl apply "
              "--server-side -f crds/elastictrainingjobs.yaml of this operator's release")
# SchemaCurrent's status and reason in each state it is set in.
_CONDITION: Final[dict[str, tuple[ConditionStatus, str]]] = {
    CURRENT: ("True", Reason.CRD_CURRENT), NEWER: ("True", Reason.CRD_NEWER),
    OLDER: ("False", Reason.CRD_OLDER), OUTDATED: ("False", Reason.CRD_OUTDATED)}
# Fields named in a message; the rest are counted.
NAMED: Final = 12


@dataclass(frozen=True)
class Schema:
    """What the verdict reads of a CRD: its revision, hash and status fields."""

    revision: int
    hash: str | None
    status_fields: frozenset[str]

    @classmethod
    def of(cls, crd: dict[str, Any]) -> Schema:
        annotations = (crd.get("metadata") or {}).get("annotations") or {}
        try:
            revision = max(0, int(annotations.get(SCHEMA_REVISION_ANNOTATION, 0)))
        except (TypeError, ValueError):  # not ours to trust: as if it said nothing
            revision = 0
        return cls(revision, annotations.get(SCHEMA_HASH_ANNOTATION),
                   frozenset(_fields(_status_schema(crd), "status")))


@cache
def own_schema() -> Schema:
    """The schema this operator was built with (`etj crd`)."""
    return Schema.of(build_crd())


@dataclass(frozen=True)
class SchemaVerdict:
    state: str  # one of STATES
    own_revision: int
    served_revision: int | None = None  # None: not known
    # Status fields (their top-most path) the served schema lacks / the own one lacks.
    missing: tuple[str, ...] = ()
    unknown_to_us: tuple[str, ...] = ()

    @property
    def refuses(self) -> bool:
        """The operator writes no status but SchemaCurrent (its fields would be pruned)."""
        return self.state == OUTDATED

    @property
    def message(self) -> str:
        served = "revision 0 (from before schema revisions)" if self.served_revision == 0 \
            else f"revision {self.served_revision}"
        own = f"this operator's revision {self.own_revision}"
        if self.state == CURRENT:
            return f"the served CRD is {own}"
        if self.state == UNKNOWN:
            return ("the operator cannot read the CRD (none served yet, or its RBAC lacks "
                    "list and watch of customresourcedefinitions by name); it serves jobs "
                    "as if it were its own revision")
        if self.state == NEWER:
            return (f"the served CRD is schema {served}, newer than {own} (a downgrade): "
                    f"the operator writes the status fields it knows"
                    + (f"; it does not know {_named(self.unknown_to_us)}"
                       if self.unknown_to_us else ""))
        if self.state == OLDER:
            return (f"the served CRD is schema {served}, older than {own}; it stores every "
                    "status field the operator writes, so jobs are served"
                    + (f", but it lacks {_named(self.missing)} of the trainer's reports, "
                       "which the API server drops" if self.missing else "")
                    + f". Upgrade it: {FIX}")
        return (f"the served CRD is schema {served}, older than {own}: it lacks "
                f"{_named(self.missing)}, which the API server would drop from every status "
                "write. Until the CRD is upgraded the operator creates, deletes and replaces "
                "nothing for this job and writes nothing of its status but this condition "
                f"(a running JobSet and its trainer run on untouched). Upgrade it: {FIX}")


def judge(served: dict[str, Any] | None, own: Schema | None = None) -> SchemaVerdict:
    """The verdict on the served CRD (None: it cannot be read)."""
    own = own or own_schema()
    if served is None:
        return SchemaVerdict(UNKNOWN, own.revision)
    theirs = Schema.of(served)
    missing = _topmost(own.status_fields - theirs.status_fields)
    unknown_to_us = _topmost(theirs.status_fields - own.status_fields)
    if theirs.revision > own.revision:
        state = NEWER
    elif theirs.revision == own.revision and theirs.hash == own.hash:
        state = CURRENT
    else:  # older, or hand-edited under our revision: the fields the operator writes decide
        state = OUTDATED if any(not _trainers(f) for f in missing) else OLDER
    return SchemaVerdict(state, own.revision, theirs.revision, missing, unknown_to_us)


def with_schema_condition(conditions: Sequence[Condition], previous: Sequence[Condition],
                          verdict: SchemaVerdict, now: datetime,
                          generation: int | None) -> list[Condition]:
    """`conditions` (a status about to be written) with SchemaCurrent as the verdict says
    (`previous`: the stored ones, for its transition time); none on a job whose CRD was
    always the operator's own, and unchanged while the CRD cannot be read."""
    kept = [c for c in conditions if c.type != ConditionType.SCHEMA_CURRENT]
    before = next((c for c in previous if c.type == ConditionType.SCHEMA_CURRENT), None)
    if verdict.state == UNKNOWN or (verdict.state == CURRENT and before is None):
        return kept + ([before] if before is not None else [])
    status, reason = _CONDITION[verdict.state]
    return [*kept, set_condition(previous, ConditionType.SCHEMA_CURRENT, status, reason,
                                 verdict.message, now, generation)]


def refusal_event(job_name: str, job_uid: str, verdict: SchemaVerdict
                  ) -> tuple[str, StatusEvent]:
    """The Warning Event of a refusal and its name: once per job and pair of revisions
    (a second copy is refused, 409)."""
    occurrence = "\0".join((job_uid, Reason.CRD_OUTDATED, str(verdict.served_revision),
                            str(verdict.own_revision)))
    name = f"{job_name[:200]}.{hashlib.sha256(occurrence.encode()).hexdigest()[:16]}"
    return name, StatusEvent(reason=Reason.CRD_OUTDATED, type="Warning",
                             message=verdict.message)


def _status_schema(crd: dict[str, Any]) -> dict[str, Any]:
    """The status schema of the version we speak (else the storage version)."""
    versions = (crd.get("spec") or {}).get("versions") or []
    version = next((v for v in versions if v.get("name") == VERSION), None) or next(
        (v for v in versions if v.get("storage")), None) or {}
    root = ((version.get("schema") or {}).get("openAPIV3Schema")) or {}
    status: dict[str, Any] = (root.get("properties") or {}).get("status") or {}
    return status


def _fields(node: dict[str, Any], path: str) -> list[str]:
    """Every field path under a structural schema node (status.slices[].counted)."""
    out = []
    items = node.get("items")
    if isinstance(items, dict):
        return _fields(items, path + "[]")
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        out += _fields(extra, path + ".*")
    for name, sub in (node.get("properties") or {}).items():
        if isinstance(sub, dict):
            out += [f"{path}.{name}", *_fields(sub, f"{path}.{name}")]
    return out


def _trainers(path: str) -> bool:
    """A field of the trainer's part of the status, which the operator never writes."""
    return path == f"status.{TRAINERS}" or path.startswith(f"status.{TRAINERS}.")


def _topmost(paths: frozenset[str]) -> tuple[str, ...]:
    """The paths none of whose parents is among them, sorted."""
    return tuple(sorted(p for p in paths if not any(
        p.startswith(q + ".") or p.startswith(q + "[]") for q in paths if q != p)))


def _named(fields: tuple[str, ...]) -> str:
    named = ", ".join(fields[:NAMED])
    more = len(fields) - NAMED
    return (f"{len(fields)} status field{'s' if len(fields) != 1 else ''} ({named}"
            + (f" and {more} more" if more > 0 else "") + ")")
