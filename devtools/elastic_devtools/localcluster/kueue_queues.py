"""Kueue objects for tests and demos on the local cluster: a ResourceFlavor, a
ClusterQueue sized in whole jobs, a LocalQueue, WorkloadPriorityClasses; and reading
the Workload Kueue makes for a JobSet (the facts the Kueue tests check).

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
