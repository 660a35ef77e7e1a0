"""The only module of the operator that talks to the Kubernetes API.

Raw REST on top of the kubernetes client's ApiClient (auth, TLS, kubeconfig): objects
go in and come out as plain dicts, exactly as the API server speaks them, so the pure
core never sees client model classes.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from elastic_api.names import (
    GROUP,
    JOBSET_NAME_LABEL,
    KUEUE_GROUP,
    KUEUE_JOB_UID_LABEL,
    KUEUE_VERSION,
    KUEUE_WORKLOAD_PLURAL,
    PLURAL,
    REPLICATED_JOB_LABEL,
    SUSPENDED_BY_OPERATOR_ANNOTATION,
    VERSION,
    WORKER_REPLICATED_JOB,
)
from elastic_operator.core.events import StatusEvent

JOBSET_PATH = "/apis/jobset.x-k8s.io/v1alpha2"
KUEUE_PATH = f"/apis/{KUEUE_GROUP}/{KUEUE_VERSION}"
LEASE_PATH = "/apis/coordination.k8s.io/v1"
REQUEST_TIMEOUT_S = 15.0
MAX_RETRY_AFTER_RETRIES = 10  # client-go's default
CONNECT_TIMEOUT_S = 10.0
EVENT_SOURCE = "elastic-training-operator"

# kind -> plural for the objects the renderer emits (anything else: lowercase + "s").
_PLURALS = {"JobSet": "jobsets", "ServiceAccount": "serviceaccounts", "Role": "roles",
            "RoleBinding": "rolebindings", "ConfigMap": "configmaps", "Service": "services",
            "Secret": "secrets", "Event": "events"}


class ApiError(Exception):
    """A request the API server answered with an error, with its Status parsed
    (https://kubernetes.io/docs/reference/using-api/api-concepts/#response-status-kind)."""

    def __init__(self, status: int, reason: str, body: str) -> None:
        super().__init__(f"HTTP {status} {reason}: {body[:500]}")
        self.status = status  # the HTTP status code
        self.reason = reason  # the HTTP reason phrase
        self.body = body
        self.api_status = _parse_status(body)  # {} when the body is not a Status

    @property
    def status_reason(self) -> str:
        """The Status's machine-readable reason: NotFound, Forbidden, AlreadyExists..."""
        return _str(self.api_status.get("reason"))

    @property
    def details(self) -> dict[str, Any]:
        details = self.api_status.get("details")
        return details if isinstance(details, dict) else {}

    @property
    def cause_types(self) -> list[str]:
        causes = self.details.get("causes")
        return [_str(c.get("type")) for c in causes if isinstance(c, dict)] \
            if isinstance(causes, list) else []

    @property
    def message(self) -> str:
        """The message of the API server's Status (the body itself if it is not one)."""
        return _str(self.api_status.get("message")) or self.body

    def is_not_found(self, group: str, plural: str) -> bool:
        """404 for an object of this resource (not, say, its namespace)."""
        return self.status == 404 and self.details.get("kind") == plural \
            and self.details.get("group", "") == group

    @property
    def is_conflict(self) -> bool:
        """A conditional write found the object changed since the version it was given."""
        return self.status == 409 and self.status_reason == "Conflict"

    @property
    def namespace_terminating(self) -> bool:
        """Refused because the namespace is being deleted."""
        return self.status == 403 and "NamespaceTerminating" in self.cause_types

    @property
    def denied_by_webhook(self) -> bool:
        """An admission webhook denied the request. The Status carries what the webhook
        answered (any code, usually 403 Forbidden); only its message says whose it is."""
        return self.status >= 400 and self.message.startswith("admission webhook ") \
            and "denied the request" in self.message

    @property
    def refuses_object(self) -> bool:
        """The API server or an admission webhook refused the object for what it is
        (invalid, undecodable, denied): sending the same object again cannot succeed."""
        return self.status in (400, 422) or (self.status == 403 and self.denied_by_webhook)


class WatchStalled(Exception):
    """A watch sent nothing for longer than the API server was asked to keep it open."""


def retry_after_s(status: int, header: str | None) -> float | None:
    """Seconds to wait before sending a refused request again: the Retry-After of a 429
    or a 5xx (client-go's rule; in whole seconds, as the API server writes it), None if
    it is not to be sent again."""
    if (status != 429 and not 500 <= status <= 599) or not header:
        return None
    try:
        seconds = int(header.strip())
    except ValueError:  # an HTTP date: not what the API server sends
        return None
    return float(max(seconds, 0))


def _parse_status(body: str) -> dict[str, Any]:
    try:
        parsed = json.loads(body)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) and parsed.get("kind") == "Status" else {}


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _held_by_operator(patch: dict[str, Any], held: bool) -> dict[str, Any]:
    """The merge patch, with the operator's mark set (held) or removed."""
    return {"metadata": {"annotations": {SUSPENDED_BY_OPERATOR_ANNOTATION:
                                         "true" if held else None}}, **patch}


def collection_path(api_version: str, kind: str, namespace: str | None) -> str:
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    plural = _PLURALS.get(kind, kind.lower() + "s")
    if namespace:
        return f"{base}/namespaces/{quote(namespace)}/{plural}"
    return f"{base}/{plural}"


# A watch asked to end after N seconds that has sent nothing for N + this many is stalled.
WATCH_SILENCE_MARGIN_S = 5


def _pods_path(namespace: str | None) -> str:
    return f"/api/v1/namespaces/{quote(namespace)}/pods" if namespace else "/api/v1/pods"


def _jobsets_path(namespace: str | None) -> str:
    return f"{JOBSET_PATH}/namespaces/{quote(namespace)}/jobsets" if namespace else \
        f"{JOBSET_PATH}/jobsets"


def _lease_path(namespace: str, name: str) -> str:
    return f"{LEASE_PATH}/namespaces/{quote(namespace)}/leases/{quote(name)}"


def job_path(namespace: str, name: str) -> str:
    return f"/apis/{GROUP}/{VERSION}/namespaces/{quote(namespace)}/{PLURAL}/{quote(name)}"


class NotLeading(Exception):
    """A write not sent: this replica stopped leading since its reconcile began (one that
    was frozen past its renew deadline, say). Leader election is not fencing: the check
    before each write is what keeps a deposed leader from writing on."""


class Kube:
    def __init__(self, api_client: Any) -> None:
        self.api = api_client
        # Asked before every write but the Lease's (app.py: "this replica leads").
        self.may_write: Callable[[], bool] = lambda: True

    @classmethod
    def from_environment(cls) -> Kube:
        """In-cluster config when running in a pod, else KUBECONFIG / ~/.kube/config.
        (The kubernetes client is imported only here: a second of import time that only
        the operator process needs, not every importer of this module.)"""
        from kubernetes import client, config

        try:
            config.load_incluster_config()
        except config.ConfigException:
            config.load_kube_config()
        return cls(client.ApiClient())

    # --- transport ---

    def request(
        self, method: str, path: str, *, body: Any = None,
        query: dict[str, str] | None = None, content_type: str | None = None,
        timeout_s: float = REQUEST_TIMEOUT_S, fenced: bool = True,
    ) -> Any:
        """One request; a 429 (or a 5xx) that says Retry-After is sent again after that
        wait, as client-go does, while the wait fits in `timeout_s` (the server did not
        act on it: API Priority and Fairness rejected it, or storage was not ready). A
        write (`fenced`: all but the Lease's) raises NotLeading, unsent, unless
        `may_write()`, asked before each try."""
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        request = self.api.param_serialize(
            method, path, query_params=list((query or {}).items()), header_params=headers,
            body=body, auth_settings=["BearerToken"],
        )
        deadline = time.monotonic() + timeout_s
        for attempt in range(MAX_RETRY_AFTER_RETRIES + 1):
            if fenced and method != "GET" and not self.may_write():
                raise NotLeading(f"{method} {path}: not sent, this replica no longer leads")
            left = deadline - time.monotonic()
            response = self.api.call_api(*request, _request_timeout=max(left, 1.0))
            response.read()
            data = response.data.decode("utf-8") if response.data else ""
            if 200 <= response.status <= 299:
                return json.loads(data) if data else None
            wait = retry_after_s(response.status, response.getheader("Retry-After"))
            if wait is None or attempt == MAX_RETRY_AFTER_RETRIES \
                    or time.monotonic() + wait >= deadline:
                break
            time.sleep(wait)
        raise ApiError(response.status, str(response.reason or ""), data)

    def _get_or_none(self, path: str, timeout_s: float = REQUEST_TIMEOUT_S
                     ) -> dict[str, Any] | None:
        try:
            result: dict[str, Any] = self.request("GET", path, timeout_s=timeout_s)
            return result
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    # --- reads ---

    def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get_or_none(job_path(namespace, name))

    def list_jobs(self, namespace: str | None) -> list[dict[str, Any]]:
        path = (f"/apis/{GROUP}/{VERSION}/namespaces/{quote(namespace)}/{PLURAL}"
                if namespace else f"/apis/{GROUP}/{VERSION}/{PLURAL}")
        items: list[dict[str, Any]] = self.request("GET", path).get("items", [])
        return items

    def get_jobset(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get_or_none(f"{JOBSET_PATH}/namespaces/{quote(namespace)}/jobsets/"
                                 f"{quote(name)}")

    def list_pods(self, namespace: str | None, label_selector: str, *, limit: int,
                  continue_token: str | None = None) -> dict[str, Any]:
        """One page of a pod list (a PodList: items, metadata.resourceVersion and
        metadata.continue), in `namespace` or every namespace."""
        return self._list_page(_pods_path(namespace), limit, continue_token,
                               label_selector=label_selector)

    def watch_pods(self, namespace: str | None, label_selector: str, resource_version: str,
                   timeout_s: int) -> Iterator[dict[str, Any]]:
        """Watch events on pods from `resource_version` (see `_watch`)."""
        return self._watch(_pods_path(namespace), resource_version, timeout_s,
                           label_selector=label_selector)

    def list_jobsets(self, namespace: str | None, label_selector: str, *, limit: int,
                     continue_token: str | None = None) -> dict[str, Any]:
        return self._list_page(_jobsets_path(namespace), limit, continue_token,
                               label_selector=label_selector)

    def watch_jobsets(self, namespace: str | None, label_selector: str, resource_version: str,
                      timeout_s: int) -> Iterator[dict[str, Any]]:
        return self._watch(_jobsets_path(namespace), resource_version, timeout_s,
                           label_selector=label_selector)

    def list_nodes(self, *, limit: int, continue_token: str | None = None) -> dict[str, Any]:
        return self._list_page("/api/v1/nodes", limit, continue_token)

    def watch_nodes(self, resource_version: str, timeout_s: int) -> Iterator[dict[str, Any]]:
        return self._watch("/api/v1/nodes", resource_version, timeout_s)

    def _list_page(self, path: str, limit: int, continue_token: str | None,
                   label_selector: str | None = None) -> dict[str, Any]:
        query = {"limit": str(limit)}
        if label_selector:
            query["labelSelector"] = label_selector
        if continue_token:
            query["continue"] = continue_token
        page: dict[str, Any] = self.request("GET", path, query=query)
        return page

    def _watch(self, path: str, resource_version: str, timeout_s: int,
               label_selector: str | None = None) -> Iterator[dict[str, Any]]:
        """A watch from `resource_version`, with bookmarks: yields the events ({"type":
        ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": ...}) as they arrive. The API
        server ends it after `timeout_s`; a connection that stays silent longer than that
        (plus a margin) is dead, and reading it raises (urllib3's ReadTimeoutError)."""
        from urllib3.exceptions import ReadTimeoutError

        query = {"watch": "true", "allowWatchBookmarks": "true",
                 "resourceVersion": resource_version, "timeoutSeconds": str(timeout_s)}
        if label_selector:
            query["labelSelector"] = label_selector
        request = self.api.param_serialize(
            "GET", path, query_params=list(query.items()),
            header_params={"Accept": "application/json"}, auth_settings=["BearerToken"])
        silence_s = timeout_s + WATCH_SILENCE_MARGIN_S
        try:
            response = self.api.call_api(*request,
                                         _request_timeout=(CONNECT_TIMEOUT_S, silence_s))
        except ReadTimeoutError as e:
            raise WatchStalled(f"no response in {silence_s} s") from e
        raw = response.response  # the urllib3 response, not read yet
        try:
            if not 200 <= response.status <= 299:
                response.read()
                data = response.data.decode("utf-8") if response.data else ""
                raise ApiError(response.status, str(response.reason or ""), data)
            pending = b""
            for chunk in raw.stream(None, decode_content=False):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield json.loads(line)
        except ReadTimeoutError as e:
            raise WatchStalled(f"nothing received for {silence_s} s") from e
        finally:
            # Closed, not returned to the pool: a watch left half-read is not reusable.
            raw.close()
            raw.release_conn()

    # Lease requests take a short timeout: a renewal must fail in time to be retried
    # before the renew deadline, not hang past it.

    def get_lease(self, namespace: str, name: str, *, timeout_s: float = REQUEST_TIMEOUT_S
                  ) -> dict[str, Any] | None:
        return self._get_or_none(_lease_path(namespace, name), timeout_s)

    def create_lease(self, namespace: str, lease: dict[str, Any], *,
                     timeout_s: float = REQUEST_TIMEOUT_S) -> dict[str, Any]:
        """Create the Lease; ApiError 409 if another replica created it first."""
        created: dict[str, Any] = self.request(
            "POST", f"{LEASE_PATH}/namespaces/{quote(namespace)}/leases", body=lease,
            timeout_s=timeout_s, fenced=False)
        return created

    def patch_lease(self, namespace: str, name: str, spec: dict[str, Any],
                    resource_version: str, *, timeout_s: float = REQUEST_TIMEOUT_S
                    ) -> dict[str, Any]:
        """Write the Lease's spec, only if the Lease is still at `resource_version`
        (else ApiError 409 Conflict: another replica wrote it since we read it)."""
        patched: dict[str, Any] = self.request(
            "PATCH", _lease_path(namespace, name),
            body={"metadata": {"resourceVersion": resource_version}, "spec": spec},
            content_type="application/merge-patch+json", timeout_s=timeout_s, fenced=False)
        return patched

    def list_worker_jobs(self, namespace: str, jobset: str) -> list[dict[str, Any]]:
        """The worker Jobs of a JobSet (one per slice)."""
        result = self.request(
            "GET", f"/apis/batch/v1/namespaces/{quote(namespace)}/jobs",
            query={"labelSelector": f"{JOBSET_NAME_LABEL}={jobset},"
                                    f"{REPLICATED_JOB_LABEL}={WORKER_REPLICATED_JOB}"},
        )
        items: list[dict[str, Any]] = result.get("items", [])
        return items

    def list_workloads(self, namespace: str, jobset_uid: str) -> list[dict[str, Any]]:
        """The Kueue Workloads of the JobSet with this uid; none where Kueue's API is not
        served."""
        try:
            result = self.request(
                "GET", f"{KUEUE_PATH}/namespaces/{quote(namespace)}/{KUEUE_WORKLOAD_PLURAL}",
                query={"labelSelector": f"{KUEUE_JOB_UID_LABEL}={jobset_uid}"})
        except ApiError as e:
            if e.status == 404:
                return []
            raise
        items: list[dict[str, Any]] = result.get("items", [])
        return items

    def api_groups(self) -> dict[str, Any]:
        """Discovery: the APIGroupList of every group the server serves and its versions
        (GET /apis, which every authenticated client may read)."""
        found: dict[str, Any] = self.request("GET", "/apis")
        return found

    def serves(self, group_version: str, plural: str) -> bool:
        """Whether the API server serves this resource (discovery, which every
        authenticated client may read)."""
        found = self._get_or_none(f"/apis/{group_version}")
        return found is not None and any(
            isinstance(r, dict) and r.get("name") == plural for r in found.get("resources", []))

    # --- writes ---

    def create(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        """Create obj and return it as stored; None if it already exists (creation is
        idempotent)."""
        meta = obj.get("metadata", {})
        path = collection_path(obj["apiVersion"], obj["kind"], meta.get("namespace"))
        try:
            created: dict[str, Any] = self.request("POST", path, body=obj)
            return created
        except ApiError as e:
            if e.status == 409 and e.status_reason in ("AlreadyExists", ""):
                return None
            raise

    def patch_jobset_suspend(self, namespace: str, name: str, suspend: bool) -> dict[str, Any]:
        """Set the JobSet's spec.suspend, marked as the operator's hold (the mark goes on
        resume); the JobSet as patched."""
        patched: dict[str, Any] = self.request(
            "PATCH", f"{JOBSET_PATH}/namespaces/{quote(namespace)}/jobsets/{quote(name)}",
            body=_held_by_operator({"spec": {"suspend": suspend}}, suspend),
            content_type="application/merge-patch+json",
        )
        return patched

    def patch_workload_active(self, namespace: str, name: str, active: bool) -> dict[str, Any]:
        """Set a Kueue Workload's spec.active (what `kueuectl stop|resume workload` does),
        a deactivation marked as the operator's; the Workload as patched."""
        patched: dict[str, Any] = self.request(
            "PATCH", f"{KUEUE_PATH}/namespaces/{quote(namespace)}/{KUEUE_WORKLOAD_PLURAL}/"
            f"{quote(name)}",
            body=_held_by_operator({"spec": {"active": active}}, not active),
            content_type="application/merge-patch+json",
        )
        return patched

    def delete_job(self, namespace: str, name: str, uid: str) -> bool:
        """Delete a Job and (Foreground) its pods first, only if it still has this uid;
        False if it is already gone or replaced (404 / 409 precondition failed)."""
        return self._delete(f"/apis/batch/v1/namespaces/{quote(namespace)}/jobs/{quote(name)}",
                            {"propagationPolicy": "Foreground", "preconditions": {"uid": uid}})

    def delete_pod_now(self, namespace: str, name: str, uid: str) -> bool:
        """Delete a pod with grace period 0 (its kubelet is gone), only if it still has
        this uid; False if it is already gone."""
        return self._delete(f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}",
                            {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}})

    def _delete(self, path: str, options: dict[str, Any]) -> bool:
        body = {"apiVersion": "v1", "kind": "DeleteOptions", **options}
        try:
            self.request("DELETE", path, body=body)
            return True
        except ApiError as e:
            if e.status in (404, 409):
                return False
            raise

    def lower_job_backoff_limit(self, namespace: str, name: str, uid: str) -> bool:
        """Set the Job's spec.backoffLimit to 0 if it still has this uid (a JSON patch
        whose `test` is the precondition); False if it is gone or replaced."""
        patch = [{"op": "test", "path": "/metadata/uid", "value": uid},
                 {"op": "replace", "path": "/spec/backoffLimit", "value": 0}]
        try:
            self.request("PATCH", f"/apis/batch/v1/namespaces/{quote(namespace)}/jobs/"
                         f"{quote(name)}", body=patch, content_type="application/json-patch+json")
            return True
        except ApiError as e:
            if e.status in (404, 409, 422):  # 422: the test op failed (another Job)
                return False
            raise

    def label_node(self, name: str, labels: dict[str, str | None],
                   annotations: dict[str, str | None]) -> None:
        """Merge labels and annotations into a node (None removes one)."""
        self.request("PATCH", f"/api/v1/nodes/{quote(name)}",
                     body={"metadata": {"labels": labels, "annotations": annotations}},
                     content_type="application/merge-patch+json")

    def patch_job_status(self, namespace: str, name: str, patch: dict[str, Any],
                         resource_version: str | None = None) -> str | None:
        """Merge-patch the status; the job's new resourceVersion. With `resource_version`,
        only if the job is still at that version (else ApiError 409 Conflict): no two
        writers both apply a change computed from the same old status."""
        if resource_version:
            patch = {**patch, "metadata": {"resourceVersion": resource_version}}
        patched = self.request("PATCH", job_path(namespace, name) + "/status", body=patch,
                               content_type="application/merge-patch+json")
        version = ((patched or {}).get("metadata") or {}).get("resourceVersion")
        return version if isinstance(version, str) else None

    def post_event(self, job: dict[str, Any], event: StatusEvent, now: datetime,
                   name: str | None = None) -> bool:
        """Post an Event on the job; False if one of this `name` exists already (the same
        status change, posted before by this or another replica)."""
        meta = job.get("metadata", {})
        namespace = meta.get("namespace") or "default"
        stamp = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        naming = {"name": name} if name else {"generateName": f"{meta.get('name', 'job')}."}
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {**naming, "namespace": namespace},
            "involvedObject": {
                "apiVersion": job.get("apiVersion"), "kind": job.get("kind"),
                "name": meta.get("name"), "namespace": namespace, "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "reason": event.reason,
            "message": event.message[:1024],
            "type": event.type,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
            "source": {"component": EVENT_SOURCE},
        }
        try:
            self.request("POST", f"/api/v1/namespaces/{quote(namespace)}/events", body=body)
        except ApiError as e:
            if name and e.status == 409 and e.status_reason == "AlreadyExists":
                return False
            raise
        return True
