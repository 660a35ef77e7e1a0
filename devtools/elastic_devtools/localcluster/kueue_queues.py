"""Kueue objects for tests and demos on the local cluster: a ResourceFlavor, a
ClusterQueue sized in whole jobs, a LocalQueue, WorkloadPriorityClasses, a Topology and
a Topology-Aware flavor; and reading the Workload Kueue makes for a JobSet (the facts
the Kueue tests check).

Builders are pure; the helpers that talk to the API take a kubernetes ApiClient.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from elastic_api.names import (
    KUEUE_GROUP,
    KUEUE_JOB_UID_LABEL,
    KUEUE_VERSION,
    KUEUE_WORKLOAD_PLURAL,
)

API_VERSION = f"{KUEUE_GROUP}/{KUEUE_VERSION}"


def resource_flavor(name: str) -> dict[str, Any]:
    """A flavor without node labels: admission adds no nodeSelector (the head and the TPU
    workers already select their own node pools)."""
    return {"apiVersion": API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": name}}


def cluster_queue(name: str, flavor: str, quota: Mapping[str, str], *,
                  preempt_lower_priority: bool = True,
                  admission_checks: Sequence[str] = ()) -> dict[str, Any]:
    """A ClusterQueue serving every namespace, with nominal `quota` (resource -> quantity)
    of one flavor; it preempts lower-priority workloads to admit a higher one. Its
    `admission_checks` (e.g. MultiKueue's) must all pass before a Workload is admitted."""
    queue: dict[str, Any] = {
        "apiVersion": API_VERSION, "kind": "ClusterQueue", "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},
            "queueingStrategy": "BestEffortFIFO",
            "preemption": {"withinClusterQueue":
                           "LowerPriority" if preempt_lower_priority else "Never"},
            "resourceGroups": [{
                "coveredResources": sorted(quota),
                "flavors": [{"name": flavor, "resources": [
                    {"name": r, "nominalQuota": q} for r, q in sorted(quota.items())]}],
            }],
        },
    }
    if admission_checks:
        queue["spec"]["admissionChecksStrategy"] = {
            "admissionChecks": [{"name": check} for check in admission_checks]}
    return queue


def topology(name: str, levels: list[str]) -> dict[str, Any]:
    """A Kueue Topology: node labels from the widest level to the narrowest (Topology-
    Aware Scheduling needs kubernetes.io/hostname last to replace a failed node)."""
    return {"apiVersion": API_VERSION, "kind": "Topology", "metadata": {"name": name},
            "spec": {"levels": [{"nodeLabel": level} for level in levels]}}


def tas_flavor(name: str, topology_name: str, node_labels: Mapping[str, str]) -> dict[str, Any]:
    """A ResourceFlavor that Kueue places by topology, over the nodes with `node_labels`."""
    return {"apiVersion": API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": name},
            "spec": {"nodeLabels": dict(node_labels), "topologyName": topology_name}}


def split_cluster_queue(name: str, groups: list[tuple[str, Mapping[str, str]]]
                        ) -> dict[str, Any]:
    """A ClusterQueue serving every namespace with one resource group per (flavor, quota)
    pair: e.g. cpu and memory in a plain flavor (the head), google.com/tpu in a
    Topology-Aware one (the workers)."""
    return {
        "apiVersion": API_VERSION, "kind": "ClusterQueue", "metadata": {"name": name},
        "spec": {"namespaceSelector": {}, "queueingStrategy": "BestEffortFIFO",
                 "resourceGroups": [{
                     "coveredResources": sorted(quota),
                     "flavors": [{"name": flavor, "resources": [
                         {"name": r, "nominalQuota": q} for r, q in sorted(quota.items())]}],
                 } for flavor, quota in groups]},
    }


def local_queue(namespace: str, name: str, cluster_queue_name: str) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterQueue": cluster_queue_name}}


def workload_priority_class(name: str, value: int) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "WorkloadPriorityClass",
            "metadata": {"name": name}, "value": value}


def pod_requests(pod_spec: Mapping[str, Any]) -> dict[str, float]:
    """What Kueue counts for one pod: each container's requests (its limits where it gives
    none), sidecars (initContainers that always restart) added; other initContainers are
    not counted (our pods have none). Plain numbers (cpu in cores, memory in bytes)."""
    def requests(container: Mapping[str, Any]) -> dict[str, float]:
        resources = container.get("resources") or {}
        merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        return {k: parse_quantity(str(v)) for k, v in merged.items()}

    total: dict[str, float] = {}
    for container in [*(c for c in pod_spec.get("initContainers") or []
                        if c.get("restartPolicy") == "Always"), *pod_spec["containers"]]:
        for k, v in requests(container).items():
            total[k] = total.get(k, 0.0) + v
    return total


_SUFFIXES = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
             "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50,
             "Ei": 2.0**60}


def parse_quantity(text: str) -> float:
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * _SUFFIXES[suffix]
    return float(text)


def jobset_requests(jobset: Mapping[str, Any]) -> dict[str, float]:
    """What one JobSet asks Kueue for: every replicatedJob's pods, times parallelism and
    replicas."""
    total: dict[str, float] = {}
    for rjob in jobset["spec"]["replicatedJobs"]:
        job_spec = rjob["template"]["spec"]
        pods = rjob.get("replicas", 1) * job_spec.get("parallelism", 1)
        for k, v in pod_requests(job_spec["template"]["spec"]).items():
            total[k] = total.get(k, 0.0) + pods * v
    return total


# -------------------------------------------------------------------------- the API side

@dataclass(frozen=True)
class Queues:
    flavor: str
    cluster_queue: str
    local_queue: str
    namespace: str


@contextmanager
def queues(api: Any, namespace: str, quota: Mapping[str, str], *, prefix: str,
           preempt_lower_priority: bool = True,
           admission_checks: Sequence[str] = ()) -> Iterator[Queues]:
    """A flavor, a ClusterQueue with `quota` and a LocalQueue `prefix`-lq in `namespace`;
    the cluster-scoped ones (named after `prefix`, so tests do not share them) are deleted
    afterwards."""
    from kubernetes import client

    custom = client.CustomObjectsApi(api)
    made = Queues(f"{prefix}-flavor", f"{prefix}-cq", f"{prefix}-lq", namespace)
    custom.create_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "resourceflavors",
                                        resource_flavor(made.flavor))
    try:
        custom.create_cluster_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, "clusterqueues",
            cluster_queue(made.cluster_queue, made.flavor, quota,
                          preempt_lower_priority=preempt_lower_priority,
                          admission_checks=admission_checks))
        try:
            custom.create_namespaced_custom_object(
                KUEUE_GROUP, KUEUE_VERSION, namespace, "localqueues",
                local_queue(namespace, made.local_queue, made.cluster_queue))
            yield made
        finally:
            _delete(lambda: custom.delete_namespaced_custom_object(
                KUEUE_GROUP, KUEUE_VERSION, namespace, "localqueues", made.local_queue))
            _delete(lambda: custom.delete_cluster_custom_object(
                KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", made.cluster_queue))
    finally:
        _delete(lambda: custom.delete_cluster_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, "resourceflavors", made.flavor))


@contextmanager
def tas_queues(api: Any, namespace: str, quota: Mapping[str, str], *, prefix: str,
               levels: list[str], node_labels: Mapping[str, str],
               placed: str = "google.com/tpu") -> Iterator[Queues]:
    """A Topology with `levels`, a Topology-Aware flavor over the nodes with
    `node_labels` for the `placed` resource, a plain flavor for the rest of `quota`, a
    ClusterQueue with both and a LocalQueue `prefix`-lq; all deleted afterwards.
    `Queues.flavor` is the Topology-Aware one."""
    from kubernetes import client

    custom = client.CustomObjectsApi(api)
    made = Queues(f"{prefix}-tas", f"{prefix}-cq", f"{prefix}-lq", namespace)
    plain = {k: v for k, v in quota.items() if k != placed}
    cluster_objects = [
        ("topologies", topology(f"{prefix}-topology", levels)),
        ("resourceflavors", tas_flavor(made.flavor, f"{prefix}-topology", node_labels)),
        ("resourceflavors", resource_flavor(f"{prefix}-plain")),
        ("clusterqueues", split_cluster_queue(made.cluster_queue, [
            (f"{prefix}-plain", plain), (made.flavor, {placed: quota[placed]})])),
    ]
    created: list[tuple[str, str]] = []
    try:
        for plural, body in cluster_objects:
            custom.create_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, plural, body)
            created.append((plural, body["metadata"]["name"]))
        custom.create_namespaced_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, namespace, "localqueues",
            local_queue(namespace, made.local_queue, made.cluster_queue))
        created.append(("localqueues", made.local_queue))
        yield made
    finally:
        for plural, name in reversed(created):
            if plural == "localqueues":
                _delete(lambda n=name: custom.delete_namespaced_custom_object(
                    KUEUE_GROUP, KUEUE_VERSION, namespace, "localqueues", n))
            else:
                _delete(lambda p=plural, n=name: custom.delete_cluster_custom_object(
                    KUEUE_GROUP, KUEUE_VERSION, p, n))


@contextmanager
def priority_classes(api: Any, values: Mapping[str, int]) -> Iterator[None]:
    """WorkloadPriorityClasses (name -> value), deleted afterwards."""
    from kubernetes import client

    custom = client.CustomObjectsApi(api)
    made: list[str] = []
    try:
        for name, value in values.items():
            custom.create_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION,
                                                "workloadpriorityclasses",
                                                workload_priority_class(name, value))
            made.append(name)
        yield
    finally:
        for name in made:
            _delete(lambda n=name: custom.delete_cluster_custom_object(
                KUEUE_GROUP, KUEUE_VERSION, "workloadpriorityclasses", n))


def set_workload_active(api: Any, namespace: str, name: str, active: bool) -> None:
    """Deactivate (or reactivate) a Workload, as `kueuectl stop|resume workload` does:
    Kueue evicts a deactivated one and suspends its job."""
    from kubernetes import client

    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        KUEUE_GROUP, KUEUE_VERSION, namespace, KUEUE_WORKLOAD_PLURAL, name,
        {"spec": {"active": active}})


def _delete(call: Any) -> None:
    from kubernetes import client

    try:
        call()
    except client.ApiException as err:
        if err.status != 404:
            raise


def workloads_of(api: Any, namespace: str, jobset_uid: str) -> list[dict[str, Any]]:
    """The Workloads Kueue made for the JobSet with `jobset_uid` (one, once it has seen it)."""
    from kubernetes import client

    listed: Any = client.CustomObjectsApi(api).list_namespaced_custom_object(
        KUEUE_GROUP, KUEUE_VERSION, namespace, KUEUE_WORKLOAD_PLURAL,
        label_selector=f"{KUEUE_JOB_UID_LABEL}={jobset_uid}")
    items: list[dict[str, Any]] = listed["items"]
    return items


def condition(workload: Mapping[str, Any], kind: str) -> dict[str, Any] | None:
    for c in (workload.get("status") or {}).get("conditions") or []:
        if c["type"] == kind:
            return dict(c)
    return None


def is_true(workload: Mapping[str, Any], kind: str) -> bool:
    c = condition(workload, kind)
    return c is not None and c["status"] == "True"
