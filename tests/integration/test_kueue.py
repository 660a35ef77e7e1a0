"""Kueue (v0.19.2; v0.17.0 in make test-compat) on the real local control plane admits
seed-shaped JobSets by TPU quota.

A ClusterQueue whose quota fits exactly one of the article's JobSets (3 x v5e 4x4: 12
worker pods x 4 chips, plus the head's Pathways servers), rendered by our renderer and
labelled with the queue: the first is held suspended by Kueue until admitted, then runs;
a second waits (suspended, no pods) until the first is deleted, then runs. A higher
priority one preempts a running one; a deactivated Workload suspends its JobSet. These
are the facts the operator's Kueue support relies on: the Workload's name, owner and
labels, and its conditions while waiting, once admitted, preempted and deactivated.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from elastic_api.names import (
    KUEUE_JOB_UID_LABEL,
    KUEUE_PRIORITY_CLASS_LABEL,
    KUEUE_QUEUE_NAME_LABEL,
)
from elastic_api.validation import validate_job
from elastic_devtools.localcluster import Cluster
from elastic_devtools.localcluster import kueue_queues as kq
from elastic_devtools.localcluster.faults import wait_for
from elastic_operator.render import render_jobset

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
JOBSETS = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
TIMEOUT = 90


@pytest.fixture
def api(kueue: Cluster) -> Iterator[client.ApiClient]:
    api_client = kueue.api_client()
    yield api_client
    api_client.close()


def seed_jobset(name: str, namespace: str, queue: str,
                priority_class: str | None = None) -> dict[str, Any]:
    """The article's JobSet as the operator renders it, labelled for `queue`."""
    obj = yaml.safe_load((REPO / "examples" / "article.yaml").read_text())
    labels = {KUEUE_QUEUE_NAME_LABEL: queue}
    if priority_class is not None:
        labels[KUEUE_PRIORITY_CLASS_LABEL] = priority_class
    obj["metadata"] = {"name": name, "namespace": namespace, "labels": labels}
    return render_jobset(validate_job(obj))


QUOTA = {k: str(int(v)) for k, v in kq.jobset_requests(seed_jobset("x", "x", "x")).items()}
POD_COUNT = 1 + 3 * 4


def short(namespace: str) -> str:
    """A name unique to this test (the namespace's random suffix), short enough for a
    queue label."""
    return "q" + namespace.rsplit("-", 1)[-1]


def create(api: client.ApiClient, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    created: dict[str, Any] = client.CustomObjectsApi(api).create_namespaced_custom_object(
        *JOBSETS[:2], namespace, JOBSETS[2], body)
    return created


def get(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    got: dict[str, Any] = client.CustomObjectsApi(api).get_namespaced_custom_object(
        *JOBSETS[:2], namespace, JOBSETS[2], name)
    return got


def pods(api: client.ApiClient, namespace: str, jobset: str) -> list[client.V1Pod]:
    items: list[client.V1Pod] = client.CoreV1Api(api).list_namespaced_pod(
        namespace, label_selector=f"jobset.sigs.k8s.io/jobset-name={jobset}").items
    return items


def workload(api: client.ApiClient, namespace: str, jobset: dict[str, Any]) -> dict[str, Any]:
    uid, name = jobset["metadata"]["uid"], jobset["metadata"]["name"]
    found: list[dict[str, Any]] = wait_for(lambda: kq.workloads_of(api, namespace, uid),
                                           TIMEOUT, f"Kueue's Workload for {name}")
    (wl,) = found
    return wl


def wait_admitted_and_running(api: client.ApiClient, namespace: str, jobset: dict[str, Any],
                              pod_count: int) -> dict[str, Any]:
    name = jobset["metadata"]["name"]
    wl: dict[str, Any] = wait_for(
        lambda: next((w for w in kq.workloads_of(api, namespace, jobset["metadata"]["uid"])
                      if kq.is_true(w, "Admitted")), None),
        TIMEOUT, f"{name}'s Workload admitted")
    wait_for(lambda: get(api, namespace, name)["spec"].get("suspend") is False, TIMEOUT,
             f"Kueue to unsuspend {name}")
    wait_for(lambda: sum(p.status.phase == "Running" for p in pods(api, namespace, name))
             == pod_count, TIMEOUT, f"{pod_count} pods of {name} running")
    return wl


def test_seed_jobsets_are_admitted_one_at_a_time_by_tpu_quota(api: client.ApiClient,
                                                              namespace: str) -> None:
    # 12 worker pods x 4 chips; the head's resource manager (8) and proxy (16) CPUs.
    assert QUOTA["google.com/tpu"] == "48" and QUOTA["cpu"] == "24"
    pod_count = POD_COUNT

    with kq.queues(api, namespace, QUOTA, prefix=short(namespace)) as queues:
        first = seed_jobset("seed-a", namespace, queues.local_queue)
        assert first["spec"]["suspend"] is False  # as rendered: Kueue decides
        created = create(api, namespace, first)
        assert created["spec"]["suspend"] is True  # Kueue's webhook holds it at creation

        # The Workload: named after the JobSet, owned by it, labelled with its uid.
        wl = workload(api, namespace, created)
        assert wl["metadata"]["name"].startswith("jobset-seed-a-")
        (owner,) = wl["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
            "JobSet", "seed-a", created["metadata"]["uid"], True)
        assert wl["metadata"]["labels"][KUEUE_JOB_UID_LABEL] == created["metadata"]["uid"]
        assert wl["spec"]["queueName"] == queues.local_queue
        assert [ps["name"] for ps in wl["spec"]["podSets"]] == ["pathways-head", "worker"]
        assert [ps["count"] for ps in wl["spec"]["podSets"]] == [1, 12]

        admitted = wait_admitted_and_running(api, namespace, created, pod_count)
        assert kq.is_true(admitted, "QuotaReserved")
        assert admitted["status"]["admission"]["clusterQueue"] == queues.cluster_queue
        # Admission marks every pod with its pod set.
        assert {p.metadata.labels.get("kueue.x-k8s.io/podset")
                for p in pods(api, namespace, "seed-a")} == {"pathways-head", "worker"}

        # The second one waits: Kueue tried it and found no quota; suspended, no pods.
        second = create(api, namespace, seed_jobset("seed-b", namespace, queues.local_queue))
        assert second["spec"]["suspend"] is True

        def short_of_quota() -> dict[str, Any] | None:
            for w in kq.workloads_of(api, namespace, second["metadata"]["uid"]):
                reserved = kq.condition(w, "QuotaReserved")
                if reserved is not None and reserved["status"] == "False":
                    return w
            return None

        waiting = wait_for(short_of_quota, TIMEOUT, "seed-b's Workload found short of quota")
        reserved = kq.condition(waiting, "QuotaReserved")
        assert reserved is not None and reserved["reason"] == "Pending", reserved
        assert "insufficient" in reserved["message"], reserved
        assert not kq.is_true(waiting, "Admitted")
        assert get(api, namespace, "seed-b")["spec"]["suspend"] is True
        assert pods(api, namespace, "seed-b") == []
        assert sum(p.status.phase == "Running" for p in pods(api, namespace, "seed-a")) \
            == pod_count

        # The first goes; its quota admits the second, which then runs.
        client.CustomObjectsApi(api).delete_namespaced_custom_object(
            *JOBSETS[:2], namespace, JOBSETS[2], "seed-a", propagation_policy="Foreground")
        wait_admitted_and_running(api, namespace, second, pod_count)
        wait_for(lambda: not pods(api, namespace, "seed-a"), TIMEOUT, "seed-a's pods gone")


def test_a_jobset_without_a_queue_is_not_held(api: client.ApiClient, namespace: str) -> None:
    """Kueue manages only what names a queue (manageJobsWithoutQueueName stays false)."""
    obj = yaml.safe_load((REPO / "examples" / "article.yaml").read_text())
    obj["metadata"] = {"name": "unqueued", "namespace": namespace}
    created = create(api, namespace, render_jobset(validate_job(obj)))
    assert created["spec"]["suspend"] is False
    wait_for(lambda: len(pods(api, namespace, "unqueued")) == 13, TIMEOUT, "unqueued pods")
    assert kq.workloads_of(api, namespace, created["metadata"]["uid"]) == []


def wait_evicted(api: client.ApiClient, namespace: str, jobset: dict[str, Any],
                 reason: str) -> dict[str, Any]:
    """Until Kueue has evicted the JobSet's Workload for `reason`, suspended the JobSet and
    its pods are gone; returns the Workload."""
    name, uid = jobset["metadata"]["name"], jobset["metadata"]["uid"]

    def evicted() -> dict[str, Any] | None:
        for w in kq.workloads_of(api, namespace, uid):
            c = kq.condition(w, "Evicted")
            if c is not None and c["status"] == "True" and c["reason"] == reason:
                return w
        return None

    wl: dict[str, Any] = wait_for(evicted, TIMEOUT, f"{name}'s Workload evicted ({reason})")
    wait_for(lambda: get(api, namespace, name)["spec"].get("suspend") is True, TIMEOUT,
             f"Kueue to suspend {name}")
    wait_for(lambda: not pods(api, namespace, name), TIMEOUT, f"{name}'s pods gone")
    return wl


def test_a_higher_priority_jobset_preempts_a_running_one(api: client.ApiClient,
                                                         namespace: str) -> None:
    low, high = f"{short(namespace)}-low", f"{short(namespace)}-high"
    with kq.priority_classes(api, {low: 100, high: 1000}), \
            kq.queues(api, namespace, QUOTA, prefix=short(namespace)) as queues:
        first = create(api, namespace, seed_jobset("low", namespace, queues.local_queue, low))
        wait_admitted_and_running(api, namespace, first, POD_COUNT)
        second = create(api, namespace,
                        seed_jobset("high", namespace, queues.local_queue, high))

        evicted = wait_evicted(api, namespace, first, "Preempted")
        preempted = kq.condition(evicted, "Preempted")
        assert preempted is not None and preempted["status"] == "True", evicted["status"]
        assert preempted["reason"] == "InClusterQueue", preempted
        assert evicted["spec"]["priority"] == 100
        assert evicted["spec"]["priorityClassRef"]["name"] == low
        wait_admitted_and_running(api, namespace, second, POD_COUNT)

        def requeued() -> dict[str, Any] | None:
            (w,) = kq.workloads_of(api, namespace, first["metadata"]["uid"])
            return w if kq.is_true(w, "Requeued") and not kq.is_true(w, "QuotaReserved") \
                else None

        wait_for(requeued, TIMEOUT, "the preempted Workload requeued, without quota")
        # The preempted one comes back when the quota is free again: the same JobSet and
        # Jobs, unsuspended. Neither JobSet's restart budget nor a worker Job's backoffLimit
        # (maxSliceRestarts) paid for the preemption.
        client.CustomObjectsApi(api).delete_namespaced_custom_object(
            *JOBSETS[:2], namespace, JOBSETS[2], "high", propagation_policy="Foreground")
        wait_admitted_and_running(api, namespace, first, POD_COUNT)
        status = get(api, namespace, "low").get("status") or {}
        assert status.get("restarts", 0) == 0, status
        jobs = client.BatchV1Api(api).list_namespaced_job(
            namespace, label_selector="jobset.sigs.k8s.io/jobset-name=low").items
        assert len(jobs) == 4
        assert all(not (j.status.failed or 0) for j in jobs), [
            (j.metadata.name, j.status.failed) for j in jobs]


def test_a_deactivated_workload_suspends_its_jobset_until_reactivated(
        api: client.ApiClient, namespace: str) -> None:
    """How a queued job is paused and resumed: the Workload's spec.active (what `kueuectl
    stop workload` sets), not the JobSet's suspend, which Kueue would undo."""
    with kq.queues(api, namespace, QUOTA, prefix=short(namespace)) as queues:
        jobset = create(api, namespace, seed_jobset("paused", namespace, queues.local_queue))
        wl = wait_admitted_and_running(api, namespace, jobset, POD_COUNT)
        kq.set_workload_active(api, namespace, wl["metadata"]["name"], False)
        wait_evicted(api, namespace, jobset, "Deactivated")

        def released() -> bool:
            (w,) = kq.workloads_of(api, namespace, jobset["metadata"]["uid"])
            return not kq.is_true(w, "Admitted") and not kq.is_true(w, "QuotaReserved")

        wait_for(released, TIMEOUT, "the deactivated Workload's quota released")
        kq.set_workload_active(api, namespace, wl["metadata"]["name"], True)
        wait_admitted_and_running(api, namespace, jobset, POD_COUNT)
