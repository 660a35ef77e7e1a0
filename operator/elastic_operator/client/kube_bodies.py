"""What the operator's writes carry (kube.py sends them): the Event it posts, its merge
and JSON patches (a JSON patch's `test` ops are its preconditions) and its label
selectors. Pure: dicts out, no request.
"""
from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from elastic_api.names import (
    DISPATCHED_TO_ANNOTATION,
    KUEUE_JOB_UID_LABEL,
    REPLICATED_JOB_LABEL,
    SUSPENDED_AFTER_WORKER_LOST_ANNOTATION,
    SUSPENDED_BY_OPERATOR_ANNOTATION,
    WORKER_REPLICATED_JOB,
)
from elastic_operator.core.status_events import StatusEvent

EVENT_SOURCE = "elastic-training-operator"


def event(job: dict[str, Any], status_event: StatusEvent, now: datetime,
          name: str | None = None) -> dict[str, Any]:
    """The Event on `job` (named `name`, else a name the API server generates)."""
    meta = job.get("metadata", {})
    namespace = meta.get("namespace") or "default"
    stamp = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    naming = {"name": name} if name else {"generateName": f"{meta.get('name', 'job')}."}
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {**naming, "namespace": namespace},
        "involvedObject": {
            "apiVersion": job.get("apiVersion"), "kind": job.get("kind"),
            "name": meta.get("name"), "namespace": namespace, "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        },
        "reason": status_event.reason,
        "message": status_event.message[:1024],
        "type": status_event.type,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
        "source": {"component": EVENT_SOURCE},
    }


def with_operator_mark(patch: dict[str, Any], suspended: bool) -> dict[str, Any]:
    """The merge patch, with the operator's mark set (suspended) or removed."""
    return {"metadata": {"annotations": {SUSPENDED_BY_OPERATOR_ANNOTATION:
                                         "true" if suspended else None}}, **patch}


def jobset_suspend(suspend: bool) -> dict[str, Any]:
    """Set a JobSet's spec.suspend, marked as the operator's suspension (the mark goes on
    resume)."""
    return with_operator_mark({"spec": {"suspend": suspend}}, suspend)


def workload_active(active: bool, suspended_after_worker_lost: str | None) -> dict[str, Any]:
    """Set a Workload's spec.active, a deactivation marked as the operator's (and as
    suspended after that worker cluster was lost); a reactivation lifts both marks."""
    patch = with_operator_mark({"spec": {"active": active}}, not active)
    patch["metadata"]["annotations"][SUSPENDED_AFTER_WORKER_LOST_ANNOTATION] = \
        suspended_after_worker_lost if not active else None
    return patch


def workload_condition(api_version: str, namespace: str, name: str,
                       condition: dict[str, Any]) -> dict[str, Any]:
    """A Workload's status with one condition, for a server-side apply."""
    return {"apiVersion": api_version, "kind": "Workload",
            "metadata": {"name": name, "namespace": namespace},
            "status": {"conditions": [condition]}}


def dispatched_to(cluster: str | None) -> dict[str, Any]:
    """Set (None: remove) a MultiKueue job's DISPATCHED_TO_ANNOTATION."""
    return {"metadata": {"annotations": {DISPATCHED_TO_ANNOTATION: cluster}}}


def lease_spec(spec: dict[str, Any], resource_version: str) -> dict[str, Any]:
    """A Lease's spec, written only if the Lease is still at `resource_version`."""
    return {"metadata": {"resourceVersion": resource_version}, "spec": spec}


def if_at_version(patch: dict[str, Any], resource_version: str | None) -> dict[str, Any]:
    """The merge patch, applied only if the object is still at `resource_version` (else
    409 Conflict); None: unconditionally."""
    if resource_version:
        return {**patch, "metadata": {"resourceVersion": resource_version}}
    return patch


def backoff_limit_zero(uid: str) -> list[dict[str, Any]]:
    """JSON patch: a Job's spec.backoffLimit to 0, if it still has this uid."""
    return [{"op": "test", "path": "/metadata/uid", "value": uid},
            {"op": "replace", "path": "/spec/backoffLimit", "value": 0}]


def job_ended_now(uid: str) -> list[dict[str, Any]]:
    """JSON patch: a Job's spec.backoffLimit and spec.activeDeadlineSeconds to 0, if it
    still has this uid (the Job controller then fails it: DeadlineExceeded)."""
    return [{"op": "test", "path": "/metadata/uid", "value": uid},
            {"op": "replace", "path": "/spec/backoffLimit", "value": 0},
            {"op": "add", "path": "/spec/activeDeadlineSeconds", "value": 0}]


def backoff_limit_raised(uid: str, limit: int, failed: int) -> list[dict[str, Any]]:
    """JSON patch: a Job's spec.backoffLimit from `limit` to `failed` + 1, if it is still
    the same Job with the same limit."""
    return [{"op": "test", "path": "/metadata/uid", "value": uid},
            {"op": "test", "path": "/spec/backoffLimit", "value": limit},
            {"op": "replace", "path": "/spec/backoffLimit", "value": failed + 1}]


def by_name(name: str) -> str:
    """The field selector of one object by name (what RBAC's resourceNames match a list
    or watch against)."""
    return f"metadata.name={name}"


def worker_jobs(label_selector: str) -> str:
    """The selector of the worker Jobs (one per slice) JobSet made of our JobSets."""
    return f"{label_selector},{REPLICATED_JOB_LABEL}={WORKER_REPLICATED_JOB}"


def workloads_of(jobset_uid: str) -> str:
    """The selector of the Kueue Workloads of the JobSet with this uid."""
    return f"{KUEUE_JOB_UID_LABEL}={jobset_uid}"


def token_review(token: str) -> dict[str, Any]:
    """A TokenReview of a bearer token sent to /metrics (for the API server's audience)."""
    return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
            "spec": {"token": token}}


def metrics_access_review(user: dict[str, Any], path: str) -> dict[str, Any]:
    """A SubjectAccessReview: may `user` (a TokenReview's status.user) GET the non-resource
    URL `path`, as RBAC's `nonResourceURLs: [/metrics], verbs: [get]` grants it."""
    spec: dict[str, Any] = {"user": user.get("username", ""),
                            "nonResourceAttributes": {"path": path, "verb": "get"}}
    for field in ("groups", "uid", "extra"):
        if user.get(field):
            spec[field] = user[field]
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": spec}
