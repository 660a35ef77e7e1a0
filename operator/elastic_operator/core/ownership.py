"""What the operator's objects carry to say they are its own: the controller
ownerReference, and the spec a JobSet was rendered from (to tell a later spec change that
cannot apply in place). Pure."""
from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from elastic_api.models import ElasticTrainingJob
from elastic_api.names import APPLIED_SPEC_ANNOTATION, SUSPENDED_BY_OPERATOR_ANNOTATION
from elastic_api.validation import MUTABLE_SPEC_FIELDS
from elastic_operator.model.objects import ObservedJobSet


def applied_spec(job: ElasticTrainingJob) -> str:
    """The spec a JobSet was rendered from, minus the fields that may change (suspend,
    applied in place; multiCluster, the manager's alone)."""
    spec = job.spec.to_wire()
    for name in MUTABLE_SPEC_FIELDS:
        spec.pop(name, None)
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))


def owner_reference(job: ElasticTrainingJob) -> dict[str, Any]:
    return {
        "apiVersion": job.api_version,
        "kind": job.kind,
        "name": job.metadata.name,
        "uid": job.metadata.uid or "",
        "controller": True,
    }


def owned(job: ElasticTrainingJob, rendered: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rendered objects with the job's namespace and controller ownerReference; the
    JobSet also carries the spec it was rendered from (to detect later spec changes)."""
    out = []
    for obj in rendered:
        obj = json.loads(json.dumps(obj))  # deep copy
        meta = obj.setdefault("metadata", {})
        if job.metadata.namespace:
            meta["namespace"] = job.metadata.namespace
        meta["ownerReferences"] = [owner_reference(job)]
        if obj.get("kind") == "Workload" and job.spec.suspend:
            meta.setdefault("annotations", {})[SUSPENDED_BY_OPERATOR_ANNOTATION] = "true"
        if obj.get("kind") == "JobSet":
            annotations = meta.setdefault("annotations", {})
            annotations[APPLIED_SPEC_ANNOTATION] = applied_spec(job)
            if job.spec.suspend:  # created suspended: the operator's own suspension
                annotations[SUSPENDED_BY_OPERATOR_ANNOTATION] = "true"
        out.append(obj)
    return out


def owned_by_another(job: ElasticTrainingJob, jobset: ObservedJobSet) -> bool:
    """The JobSet of this name belongs to another object (a name conflict)."""
    return bool(job.metadata.uid and jobset.owner_uid and jobset.owner_uid != job.metadata.uid)


def spec_drift(job: ElasticTrainingJob, applied: str | None) -> list[str]:
    """Paths of spec fields that differ from what the JobSet was rendered from."""
    if applied is None:
        return []
    try:
        before = json.loads(applied)
    except ValueError:
        return ["(unreadable applied-spec annotation)"]
    after = json.loads(applied_spec(job))
    return _diff_paths(before, after, "spec")


def _diff_paths(a: Any, b: Any, path: str) -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[str] = []
        for key in sorted(set(a) | set(b)):
            out += _diff_paths(a.get(key), b.get(key), f"{path}.{key}")
        return out
    return [] if a == b else [path]
