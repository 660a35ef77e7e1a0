"""caches.Caches: what the pod, JobSet and node caches feed the rest of the operator.
Each change of a job's pod or JobSet wakes that job; a pod's change tells the NodeIndex
where it runs; a node whose readiness changes wakes the jobs with pods on it; a
reconcile reads a job's pods (sorted, only that job's) and its JobSet from the cache.
Events are applied as the watch delivers them (Informer.apply), no API server involved."""
from __future__ import annotations

from typing import Any

from elastic_api.names import JOB_NAME_LABEL
from elastic_operator.caches import Caches
from elastic_operator.kube import Kube
from elastic_operator.node_index import NodeIndex
from tests.builders import JobSetWrapper, NodeWrapper, PodWrapper, at


def added(obj: dict[str, Any], version: int, kind: str = "ADDED") -> dict[str, Any]:
    obj["metadata"]["resourceVersion"] = str(version)
    return {"type": kind, "object": obj}


def caches() -> tuple[Caches, NodeIndex, list[tuple[str, str]]]:
    woken: list[tuple[str, str]] = []
    index = NodeIndex()
    return Caches(Kube(None), index, ["ns"], woken.append), index, woken


def test_a_pod_change_wakes_its_job_and_records_its_node() -> None:
    c, index, woken = caches()
    (pods,) = [i for i in c.informers if i.resource == "pods/ns"]
    pods.apply(added(PodWrapper.worker(0, 1).on_node("n1").running().obj(), 5))
    pods.apply(added(PodWrapper.worker(0, 0).on_node("n0").running().obj(), 6))
    pods.apply(added(PodWrapper.worker(0, 0, job="other").on_node("n0").obj(), 7))
    assert woken == [("ns", "article"), ("ns", "article"), ("ns", "other")]
    assert [p.name for p in c.pods_of("ns", "article")] == ["article-worker-0-0",
                                                            "article-worker-0-1"]
    assert index.jobs_on("n0") == [("ns", "article"), ("ns", "other")]
    pods.apply(added(PodWrapper.worker(0, 0).on_node("n0").obj(), 8, "DELETED"))
    assert index.jobs_on("n0") == [("ns", "other")]
    assert [p.name for p in c.pods_of("ns", "article")] == ["article-worker-0-1"]
    assert c.pods_of("elsewhere", "article") == ()


def test_a_node_turning_not_ready_wakes_the_jobs_on_it() -> None:
    c, _, woken = caches()
    (pods,) = [i for i in c.informers if i.resource == "pods/ns"]
    pods.apply(added(PodWrapper.worker(1, 0).on_node("n0").running().obj(), 5))
    woken.clear()
    c.nodes.apply(added(NodeWrapper("n0").ready().obj(), 6))  # first sight: no news
    c.nodes.apply(added(NodeWrapper("n1").ready().obj(), 7))
    assert woken == []
    c.nodes.apply(added(NodeWrapper("n0").ready(False, since=at(5)).obj(), 8, "MODIFIED"))
    assert woken == [("ns", "article")]
    c.nodes.apply(added(NodeWrapper("n0").ready(False).obj(), 9, "DELETED"))
    assert woken == [("ns", "article")]  # already not ready


def test_not_synced_until_every_cache_has_listed() -> None:
    c, _, _ = caches()
    assert not c.synced and not c.alive


def test_a_jobset_change_wakes_its_job_and_is_read_from_the_cache() -> None:
    c, _, woken = caches()
    (jobsets,) = [i for i in c.informers if i.resource == "jobsets/ns"]
    jobset = JobSetWrapper("article", "ns").owner("u-1").restarts(2).obj()
    jobset["metadata"]["labels"] = {JOB_NAME_LABEL: "article"}  # as rendered
    jobsets.apply(added(jobset, 5))
    assert woken == [("ns", "article")]
    cached = c.jobset("ns", "article")
    assert cached is not None and cached.restarts == 2
    assert c.jobset("ns", "other") is None and c.jobset("elsewhere", "article") is None
