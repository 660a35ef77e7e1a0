"""The only module of the operator that talks to the Kubernetes API.

Raw REST on top of the kubernetes client's ApiClient (auth, TLS, kubeconfig): objects
go in and come out as plain dicts, exactly as the API server speaks them, so the pure
core never sees client model classes.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from elastic_api.names import GROUP, PLURAL, VERSION, job_pods_selector
from elastic_operator.status import StatusEvent

JOBSET_PATH = "/apis/jobset.x-k8s.io/v1alpha2"
REQUEST_TIMEOUT_S = 15.0
EVENT_SOURCE = "elastic-training-operator"

# kind -> plural for the objects the renderer emits (anything else: lowercase + "s").
_PLURALS = {"JobSet": "jobsets", "ServiceAccount": "serviceaccounts", "Role": "roles",
            "RoleBinding": "rolebindings", "ConfigMap": "configmaps", "Service": "services",
            "Secret": "secrets", "Event": "events"}


class ApiError(Exception):
    def __init__(self, status: int, reason: str, body: str) -> None:
        super().__init__(f"HTTP {status} {reason}: {body[:500]}")
        self.status = status
        self.reason = reason
        self.body = body

    @property
    def message(self) -> str:
        """The message of the API server's Status (the body itself if it is not one)."""
        try:
            status = json.loads(self.body)
        except ValueError:
            return self.body
        message = status.get("message") if isinstance(status, dict) else None
        return message if isinstance(message, str) and message else self.body

    @property
    def refuses_object(self) -> bool:
        """The API server or an admission webhook refused the object for what it is
        (invalid, undecodable, denied): sending the same object again cannot succeed."""
        denied = self.status == 403 and "admission webhook" in self.body \
            and "denied the request" in self.body
        return self.status in (400, 422) or denied


def collection_path(api_version: str, kind: str, namespace: str | None) -> str:
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    plural = _PLURALS.get(kind, kind.lower() + "s")
    if namespace:
        return f"{base}/namespaces/{quote(namespace)}/{plural}"
    return f"{base}/{plural}"


def job_path(namespace: str, name: str) -> str:
    return f"/apis/{GROUP}/{VERSION}/namespaces/{quote(namespace)}/{PLURAL}/{quote(name)}"


class Kube:
    def __init__(self, api_client: Any) -> None:
        self.api = api_client

    @classmethod
    def from_environment(cls) -> Kube:
        """In-cluster config when running in a pod, else KUBECONFIG / ~/.kube/config."""
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
    ) -> Any:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        request = self.api.param_serialize(
            method, path, query_params=list((query or {}).items()), header_params=headers,
            body=body, auth_settings=["BearerToken"],
        )
        response = self.api.call_api(*request, _request_timeout=REQUEST_TIMEOUT_S)
        response.read()
        data = response.data.decode("utf-8") if response.data else ""
        if not 200 <= response.status <= 299:
            raise ApiError(response.status, str(response.reason or ""), data)
        return json.loads(data) if data else None

    def _get_or_none(self, path: str) -> dict[str, Any] | None:
        try:
            result: dict[str, Any] = self.request("GET", path)
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

    def list_job_pods(self, namespace: str, job_name: str) -> list[dict[str, Any]]:
        result = self.request(
            "GET", f"/api/v1/namespaces/{quote(namespace)}/pods",
            query={"labelSelector": job_pods_selector(job_name)},
        )
        items: list[dict[str, Any]] = result.get("items", [])
        return items

    def get_nodes(self, names: Iterable[str]) -> list[dict[str, Any]]:
        nodes = []
        for name in sorted(set(names)):
            node = self._get_or_none(f"/api/v1/nodes/{quote(name)}")
            if node is not None:
                nodes.append(node)
        return nodes

    # --- writes ---

    def create(self, obj: dict[str, Any]) -> bool:
        """Create obj; False if it already exists (creation is idempotent)."""
        meta = obj.get("metadata", {})
        path = collection_path(obj["apiVersion"], obj["kind"], meta.get("namespace"))
        try:
            self.request("POST", path, body=obj)
            return True
        except ApiError as e:
            if e.status == 409:
                return False
            raise

    def patch_jobset_suspend(self, namespace: str, name: str, suspend: bool) -> None:
        self.request(
            "PATCH", f"{JOBSET_PATH}/namespaces/{quote(namespace)}/jobsets/{quote(name)}",
            body={"spec": {"suspend": suspend}}, content_type="application/merge-patch+json",
        )

    def patch_job_status(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self.request("PATCH", job_path(namespace, name) + "/status", body=patch,
                     content_type="application/merge-patch+json")

    def post_event(self, job: dict[str, Any], event: StatusEvent, now: datetime) -> None:
        meta = job.get("metadata", {})
        namespace = meta.get("namespace") or "default"
        stamp = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta.get('name', 'job')}.", "namespace": namespace},
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
        self.request("POST", f"/api/v1/namespaces/{quote(namespace)}/events", body=body)
