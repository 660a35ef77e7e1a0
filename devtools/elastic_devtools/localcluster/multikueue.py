"""MultiKueue on local clusters, for tests and demos: a manager cluster (Kueue started
with `multikueue_origin`, `etj cluster up --name manager --multikueue`) dispatching to
worker clusters (`etj cluster up --name worker-1 --kueue`), each a control plane of its
own on this machine.

On the manager: one Secret per worker with its kubeconfig (credentials embedded, as
MultiKueue requires), a MultiKueueCluster per worker, a MultiKueueConfig listing them,
the AdmissionCheck of MultiKueue's controller, and queues whose ClusterQueue carries
that check. On each worker: queues of the same names (MultiKueue creates its copy of a
Workload in the same namespace and LocalQueue), with the worker's own quota. What a
user applies on GKE is the same (docs/operations.md, "Many clusters").

Builders are pure; `dispatching` talks to the API servers (kubernetes ApiClients).
"""
from __future__ import annotations

import base64
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

from elastic_api.names import KUEUE_GROUP, KUEUE_VERSION, MULTIKUEUE_CONTROLLER
from elastic_devtools.localcluster.kueue import NAMESPACE as KUEUE_NAMESPACE
from elastic_devtools.localcluster.kueue_queues import API_VERSION, Queues, _delete, queues

# The key of a MultiKueueCluster's Secret that holds the worker's kubeconfig.
KUBECONFIG_KEY = "kubeconfig"


def kubeconfig_secret(name: str, kubeconfig: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": KUEUE_NAMESPACE},
            "data": {KUBECONFIG_KEY: base64.b64encode(kubeconfig.encode()).decode()}}


def multikueue_cluster(name: str, secret: str) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "MultiKueueCluster", "metadata": {"name": name},
            "spec": {"clusterSource": {"kubeConfig": {"locationType": "Secret",
                                                      "location": secret}}}}


def multikueue_config(name: str, clusters: list[str]) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "MultiKueueConfig", "metadata": {"name": name},
            "spec": {"clusters": clusters}}


def admission_check(name: str, config: str) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "AdmissionCheck", "metadata": {"name": name},
            "spec": {"controllerName": MULTIKUEUE_CONTROLLER,
                     "parameters": {"apiGroup": KUEUE_GROUP, "kind": "MultiKueueConfig",
                                    "name": config}}}


@dataclass(frozen=True)
class Worker:
    """A worker cluster: its API client, its kubeconfig (text) and its quota."""

    api: Any
    kubeconfig: str
    quota: Mapping[str, str]


@contextmanager
def dispatching(manager: Any, workers: Mapping[str, Worker], namespace: str, *,
                manager_quota: Mapping[str, str], prefix: str) -> Iterator[Queues]:
    """MultiKueue from `manager` to `workers` (name -> Worker) for jobs in `namespace`
    (which must exist in every cluster), the LocalQueue `prefix`-lq everywhere; all of it
    deleted afterwards."""
    from kubernetes import client

    core: Any = client.CoreV1Api(manager)  # dicts in: the generated types add nothing
    custom = client.CustomObjectsApi(manager)
    check, config = f"{prefix}-mk", f"{prefix}-mk-config"
    with ExitStack() as stack:
        for name, worker in workers.items():
            stack.enter_context(queues(worker.api, namespace, worker.quota, prefix=prefix))
            secret = f"{prefix}-{name}"
            core.create_namespaced_secret(KUEUE_NAMESPACE,
                                          kubeconfig_secret(secret, worker.kubeconfig))
            stack.callback(_delete, lambda s=secret: core.delete_namespaced_secret(
                s, KUEUE_NAMESPACE))
            _cluster_scoped(stack, custom, "multikueueclusters",
                            multikueue_cluster(name, secret))
        _cluster_scoped(stack, custom, "multikueueconfigs",
                        multikueue_config(config, list(workers)))
        _cluster_scoped(stack, custom, "admissionchecks", admission_check(check, config))
        yield stack.enter_context(queues(manager, namespace, manager_quota, prefix=prefix,
                                         admission_checks=(check,)))


def _cluster_scoped(stack: ExitStack, custom: Any, plural: str, obj: dict[str, Any]) -> None:
    name = obj["metadata"]["name"]
    custom.create_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, plural, obj)
    stack.callback(_delete, lambda: custom.delete_cluster_custom_object(
        KUEUE_GROUP, KUEUE_VERSION, plural, name))
