"""The plugin's one layer that reads the API: the job, its Events, the nodes, and a watch
of the job, through elastic_api.kube's KubeClient, with only what a user with get, list
and watch on ElasticTrainingJobs, Events, pods and nodes may do. Errors come out as
PluginError, in words a person can act on."""
from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from elastic_api.kube import ApiError, KubeClient, WatchStalled, job_path, resource_path
from elastic_api.names import GROUP, KIND, PLURAL, VERSION

WATCH_ROUND_S = 2  # a watch round: the Events are listed again after each


class PluginError(Exception):
    """What went wrong, for the user (exit status 1)."""


@dataclass
class Access:
    """What the user could not read (a view then says what it shows without it)."""

    events: str | None = None
    nodes: str | None = None


def default_namespace(kubeconfig: str | None, context: str | None) -> str:
    """kubectl's: the context's namespace, else the pod's own, else `default`."""
    from kubernetes import config

    try:
        contexts, active = config.list_kube_config_contexts(
            config_file=kubeconfig or os.environ.get("KUBECONFIG")
            or os.path.expanduser("~/.kube/config"))
        chosen = next((c for c in contexts if c["name"] == context), None) if context else active
        namespace = ((chosen or {}).get("context") or {}).get("namespace")
        if namespace:
            return str(namespace)
    except (config.ConfigException, OSError, TypeError):
        pass
    in_pod = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
    if os.path.exists(in_pod):
        with open(in_pod) as f:
            return f.read().strip() or "default"
    return "default"


def connect(kubeconfig: str | None, context: str | None) -> KubeClient:
    from kubernetes import config

    try:
        return KubeClient.from_environment(kubeconfig=kubeconfig, context=context)
    except (config.ConfigException, OSError) as e:
        raise PluginError(f"cannot load the kubeconfig: {e}") from e


class Reader:
    def __init__(self, client: KubeClient, namespace: str) -> None:
        self.client = client
        self.namespace = namespace
        self.access = Access()

    def job(self, name: str) -> dict[str, Any]:
        try:
            result: dict[str, Any] = self.client.get(job_path(self.namespace, name))
            return result
        except ApiError as e:
            raise self._job_error(e, name) from e
        except OSError as e:
            raise PluginError(f"cannot reach the API server: {e}") from e
        except Exception as e:  # urllib3's MaxRetryError and the like
            if type(e).__module__.startswith("urllib3"):
                raise PluginError(f"cannot reach the API server: {e}") from e
            raise

    def _job_error(self, e: ApiError, name: str) -> PluginError:
        where = f"namespace {self.namespace}"
        if e.is_not_found(GROUP, PLURAL):
            return PluginError(f'no {KIND} "{name}" in {where} (kubectl get etj -n '
                               f"{self.namespace} lists them; -n picks another namespace)")
        if e.status == 404:
            return PluginError(f"the API server has no {PLURAL}.{GROUP}/{VERSION}: the "
                               f"{KIND} CRD is not installed in this cluster (or this context "
                               "is not the operator's cluster)")
        if e.status in (401, 403):
            return PluginError(f"not allowed to read {KIND} {name} in {where}: {e.message} "
                               f"(kubectl etj needs get, list and watch on {PLURAL}.{GROUP}, "
                               "events, pods and nodes; ask your cluster admin for them)")
        return PluginError(f"reading {KIND} {name} in {where} failed: {e}")

    def events(self, job: dict[str, Any]) -> list[dict[str, Any]]:
        """The job's Events ([] with `access.events` set if they may not be read)."""
        name = job["metadata"]["name"]
        selector = f"involvedObject.kind={KIND},involvedObject.name={name}"
        try:
            page = self.client.get(resource_path("v1", "events", self.namespace),
                                   query={"fieldSelector": selector})
        except ApiError as e:
            if e.status in (401, 403):
                self.access.events = f"Events not readable ({e.status_reason or e.status}): " \
                                     "the history shows the status only"
                return []
            raise PluginError(f"listing the job's Events failed: {e}") from e
        items: list[dict[str, Any]] = page.get("items") or []
        return items

    def nodes(self) -> list[dict[str, Any]] | None:
        """The cluster's nodes (None, with `access.nodes` set, if they may not be read)."""
        try:
            page = self.client.get(resource_path("v1", "nodes"))
        except ApiError as e:
            if e.status in (401, 403):
                self.access.nodes = f"nodes not readable ({e.status_reason or e.status}): " \
                                    "node pools as the job's status has them"
                return None
            raise PluginError(f"listing the nodes failed: {e}") from e
        items: list[dict[str, Any]] = page.get("items") or []
        return items

    def watch_job(self, job: dict[str, Any]) -> Iterator[dict[str, Any] | None]:
        """Every new version of the job, and None after each quiet round (so that the
        caller lists the Events again: they are posted after the status write)."""
        name = job["metadata"]["name"]
        version = job["metadata"].get("resourceVersion") or "0"
        path = resource_path(f"{GROUP}/{VERSION}", PLURAL, self.namespace)
        while True:
            try:
                for event in self.client.watch(path, version, WATCH_ROUND_S,
                                               field_selector=f"metadata.name={name}"):
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        version = "0"  # 410 Gone: from the newest again
                        break
                    if event.get("type") == "DELETED":
                        raise PluginError(f"{KIND} {name} was deleted")
                    version = (obj.get("metadata") or {}).get("resourceVersion", version)
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        yield obj
            except WatchStalled:
                pass
            except ApiError as e:
                if e.status in (401, 403):
                    raise PluginError(f"not allowed to watch {PLURAL} in namespace "
                                      f"{self.namespace}: {e.message}") from e
                if e.status != 410:
                    raise PluginError(f"watching {KIND} {name} failed: {e}") from e
                version = "0"
            yield None
