"""caches.Caches: what the job, pod, JobSet, worker-Job, node and Workload caches feed the
rest of the operator. A job's own change goes to `on_job`; each change of a job's pod or
JobSet wakes that job, a worker Job's only when what replacement reads of it changed; a
pod's change tells the NodeIndex where it runs (and the cache when it arrived); a node
whose readiness changes wakes the jobs with pods on it; a Workload wakes the known job
whose JobSet owns it; a reconcile reads a job, its pods (sorted, only that job's), its
JobSet and its worker Jobs from the cache. A cluster-wide watch for namespace globs
keeps only what is in scope. Events are applied as the watch delivers them
(Informer.apply), no API server involved."""
from __future__ import annotations

import time
from typing import Any

from elastic_api.models import SliceReplacement, SliceStatus
from elastic_api.names import (
    CONTROLLER_UID_LABEL,
    HEAD_REPLICATED_JOB,
    JOB_INDEX_LABEL,
    JOB_NAME_LABEL,
    JOBSET_NAME_LABEL,
    REPLICATED_JOB_LABEL,
    WORKER_REPLICATED_JOB,
)
from elastic_operator.client.kube import Kube
from elastic_operator.watch.caches import Caches, WatchScope, owning_job
from elastic_operator.watch.node_index import NodeIndex
from tests.builders import JobSetWrapper, NodeWrapper, PodWrapper, at, etj
from tests.kueue_builders import WorkloadWrapper


def added(obj: dict[str, Any], version: int, kind: str = "ADDED") -> dict[str, Any]:
    obj["metadata"]["resourceVersion"] = str(version)
    return {"type": kind, "object": obj}


def caches(scope: WatchScope | None = None, **options: Any
           ) -> tuple[Caches, NodeIndex, list[tuple[str, str]]]:
    woken: list[tuple[str, str]] = []
    index = NodeIndex()
    return (Caches(Kube(None), index, scope or WatchScope(False, ["ns"]), woken.append,
                   **options), index, woken)


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


def test_a_pod_version_that_changes_nothing_a_reconcile_reads_wakes_no_one() -> None:
    """kwok and the kubelet update a pod's conditions, IPs and start time one by one: a
    version whose observed pod is the same as before is no news."""
    c, _, woken = caches()
    (pods,) = [i for i in c.informers if i.resource == "pods/ns"]
    pod = PodWrapper.worker(0, 0).on_node("n0").running()
    pods.apply(added(pod.obj(), 5))
    scheduled = pod.obj()
    scheduled["status"]["podIP"] = "10.0.0.7"
    scheduled["status"]["conditions"].append({"type": "PodScheduled", "status": "True"})
    pods.apply(added(scheduled, 6, "MODIFIED"))
    assert woken == [("ns", "article")]
    failed = PodWrapper.worker(0, 0).on_node("n0").failed(at(5)).obj()
    pods.apply(added(failed, 7, "MODIFIED"))
    assert woken == [("ns", "article")] * 2
    pods.apply(added(failed, 8, "DELETED"))
    assert woken == [("ns", "article")] * 3


def test_a_worker_pod_coming_nearer_to_serving_wakes_its_job_paced() -> None:
    """core/wakes.py: created, started, Ready go to `wake_paced` (the progress interval);
    a failure and the pod's deletion wake the job at once."""
    paced: list[tuple[str, str]] = []
    c, _, woken = caches(wake_paced=lambda job, _soon: paced.append(job))
    (pods,) = [i for i in c.informers if i.resource == "pods/ns"]
    pod = PodWrapper.worker(0, 0).on_node("n0")
    pods.apply(added(pod.obj(), 5))
    pods.apply(added(pod.running(ready=False).obj(), 6, "MODIFIED"))
    pods.apply(added(pod.running().obj(), 7, "MODIFIED"))
    assert (paced, woken) == ([("ns", "article")] * 3, [])
    pods.apply(added(pod.failed(at(5)).obj(), 8, "MODIFIED"))
    pods.apply(added(pod.obj(), 9, "DELETED"))
    assert (len(paced), woken) == (3, [("ns", "article")] * 2)
    head = PodWrapper("article-pathways-head-0-0").labels(
        {REPLICATED_JOB_LABEL: HEAD_REPLICATED_JOB}).on_node("n0")
    pods.apply(added(head.obj(), 10))
    pods.apply(added(head.running().obj(), 11, "MODIFIED"))
    assert (len(paced), len(woken)) == (3, 4)  # the head pod: at once, coming up or not


def test_a_paced_change_wakes_soon_only_when_it_may_move_its_slices_state() -> None:
    """slice_index.py: against the slice as last computed (Restarting, 2 hosts), a host
    created, started or Ready while another is not waits for the job's next progress
    write; the last host turning Ready, or a pod bound to a node not known Ready, may
    move the state: soon."""
    paced: list[bool] = []
    c, _, woken = caches(wake_paced=lambda _job, soon: paced.append(soon))
    (pods,) = [i for i in c.informers if i.resource == "pods/ns"]
    for version, node in enumerate(["n0", "n1"], 1):
        c.nodes.apply(added(NodeWrapper(node).ready().obj(), version))
    assert c.slice_index.record_computed(("ns", "article"), [
        SliceStatus(index=0, state="Restarting", hosts=2)]) is False
    first, second = PodWrapper.worker(0, 0).on_node("n0"), PodWrapper.worker(0, 1)
    pods.apply(added(first.obj(), 5))
    pods.apply(added(first.running(ready=False).obj(), 6, "MODIFIED"))
    pods.apply(added(first.running().obj(), 7, "MODIFIED"))
    pods.apply(added(second.obj(), 8))
    pods.apply(added(second.on_node("n1").running().obj(), 9, "MODIFIED"))
    assert (paced, woken) == ([False, False, False, False, True], [])
    stray = PodWrapper.worker(0, 2).on_node("n9")  # a node the cache does not know
    pods.apply(added(stray.obj(), 10))
    assert paced[-1] is True


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
    jobset = JobSetWrapper("article", "ns").owner("u-1").restarts(2) \
        .replicated_job_status(WORKER_REPLICATED_JOB, ready=2, active=4).obj()
    jobset["metadata"]["labels"] = {JOB_NAME_LABEL: "article"}  # as rendered
    jobsets.apply(added(jobset, 5))
    assert woken == [("ns", "article")]
    counted = JobSetWrapper("article", "ns").owner("u-1").restarts(2) \
        .replicated_job_status(WORKER_REPLICATED_JOB, ready=3, active=4).obj()
    counted["metadata"]["labels"] = {JOB_NAME_LABEL: "article"}
    jobsets.apply(added(counted, 6, "MODIFIED"))  # counts no reconcile reads: no news
    assert woken == [("ns", "article")]
    restarted = JobSetWrapper("article", "ns").owner("u-1").restarts(3).obj()
    restarted["metadata"]["labels"] = {JOB_NAME_LABEL: "article"}
    jobsets.apply(added(restarted, 7, "MODIFIED"))
    assert woken == [("ns", "article")] * 2
    cached = c.jobset("ns", "article")
    assert cached is not None and cached.restarts == 3
    assert c.jobset("ns", "other") is None and c.jobset("elsewhere", "article") is None


def worker_job(index: int, uid: str, *, active: int = 4, deleting: bool = False,
               jobset: str = "article", failed: int = 0) -> dict[str, Any]:
    """A worker Job as JobSet makes it (the rendered template's labels, JobSet's own)."""
    meta: dict[str, Any] = {
        "name": f"{jobset}-worker-{index}", "namespace": "ns", "uid": uid,
        "labels": {JOB_NAME_LABEL: jobset, JOBSET_NAME_LABEL: jobset,
                   REPLICATED_JOB_LABEL: WORKER_REPLICATED_JOB, JOB_INDEX_LABEL: str(index)}}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-29T12:00:01Z"
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
            "spec": {"backoffLimit": 20},
            "status": {"active": active, "ready": active, "failed": failed}}


def test_worker_jobs_are_read_from_the_cache_and_wake_only_on_what_replacement_reads(
) -> None:
    """A Job's pod counts move with every pod event (those woke the job already); its
    creation, deletion, uid or (while live) its count of failed pods is news."""
    c, _, woken = caches()
    (jobs,) = [i for i in c.informers if i.resource == "worker-jobs/ns"]
    jobs.apply(added(worker_job(0, "uid-a"), 5))
    jobs.apply(added(worker_job(1, "uid-b"), 6))
    assert woken == [("ns", "article"), ("ns", "article")]
    jobs.apply(added(worker_job(0, "uid-a", active=3), 7, "MODIFIED"))
    assert len(woken) == 2  # only its pod counts changed
    jobs.apply(added(worker_job(0, "uid-a", active=3, deleting=True), 8, "MODIFIED"))
    assert len(woken) == 3
    cached = sorted(c.worker_jobs("ns", "article"), key=lambda j: j.name)
    assert [(j.slice_index, j.uid, j.deleting, j.backoff_limit) for j in cached] == [
        (0, "uid-a", True, 20), (1, "uid-b", False, 20)]
    # Its teardown counted by the Job controller, pod by pod: no one reads the count of
    # a Job being deleted (core/counting.py). A live Job's count is news.
    jobs.apply(added(worker_job(0, "uid-a", active=2, deleting=True, failed=1), 9, "MODIFIED"))
    jobs.apply(added(worker_job(0, "uid-a", active=1, deleting=True, failed=2), 10, "MODIFIED"))
    assert len(woken) == 3
    jobs.apply(added(worker_job(1, "uid-b", failed=1), 11, "MODIFIED"))
    assert len(woken) == 4
    jobs.apply(added(worker_job(0, "uid-a", deleting=True), 12, "DELETED"))
    jobs.apply(added(worker_job(0, "uid-c"), 13))  # JobSet recreated it
    assert len(woken) == 6
    assert sorted((j.slice_index, j.uid) for j in c.worker_jobs("ns", "article")) == [
        (0, "uid-c"), (1, "uid-b")]
    assert c.worker_jobs("ns", "other") == () and c.worker_jobs("elsewhere", "article") == ()


def test_a_recorded_replacement_of_a_worker_job_waits_for_the_next_progress_write() -> None:
    """Slice 0 computed Down with its Job uid-a to replace: uid-a being deleted and gone,
    and its successor made, wait (core/wakes.py job_may_wait); the successor failing a
    pod is news at once, and so is any Job of a slice with no replacement recorded."""
    paced: list[bool] = []
    c, _, woken = caches(wake_paced=lambda _job, soon: paced.append(soon))
    (jobs,) = [i for i in c.informers if i.resource == "worker-jobs/ns"]
    jobs.apply(added(worker_job(0, "uid-a"), 1))
    jobs.apply(added(worker_job(1, "uid-b"), 2))
    woken.clear()
    c.slice_index.record_computed(("ns", "article"), [
        SliceStatus(index=0, state="Down", hosts=4, replacement=SliceReplacement(
            action="Replace", reason="PodFailed", job_uid="uid-a", requested_at=at(1))),
        SliceStatus(index=1, state="Ready", hosts=4)])
    jobs.apply(added(worker_job(0, "uid-a", deleting=True), 3, "MODIFIED"))
    jobs.apply(added(worker_job(0, "uid-a", deleting=True), 4, "DELETED"))
    jobs.apply(added(worker_job(0, "uid-c"), 5))
    assert (paced, woken) == ([False] * 3, [])
    jobs.apply(added(worker_job(0, "uid-c", failed=1), 6, "MODIFIED"))
    jobs.apply(added(worker_job(1, "uid-b", deleting=True), 7, "MODIFIED"))
    assert (len(paced), woken) == (3, [("ns", "article")] * 2)


def test_the_teardown_of_a_worker_job_being_deleted_wakes_its_job_paced() -> None:
    """Once a worker Job is seen being deleted, its pods going (terminating, killed,
    gone) are the end of a failure already known: paced, even after the Job itself left
    the cache. The same pods under a Job not being deleted wake the job at once."""
    paced: list[tuple[str, str]] = []
    c, _, woken = caches(wake_paced=lambda job, _soon: paced.append(job))
    (jobs,) = [i for i in c.informers if i.resource == "worker-jobs/ns"]
    (pods,) = [i for i in c.informers if i.resource == "pods/ns"]

    def pod(host: int, uid: str) -> PodWrapper:
        return PodWrapper.worker(0, host).labels({CONTROLLER_UID_LABEL: uid}) \
            .on_node(f"n{host}").running()

    jobs.apply(added(worker_job(0, "uid-a"), 1))
    jobs.apply(added(worker_job(1, "uid-b"), 2))
    for version, (host, uid) in enumerate([(0, "uid-a"), (1, "uid-a"), (2, "uid-b")], 3):
        pods.apply(added(pod(host, uid).obj(), version))
    paced.clear()
    woken.clear()
    jobs.apply(added(worker_job(0, "uid-a", deleting=True), 10, "MODIFIED"))
    pods.apply(added(pod(0, "uid-a").deleting(at(1)).obj(), 11, "MODIFIED"))
    pods.apply(added(pod(0, "uid-a").failed(at(2)).obj(), 12, "MODIFIED"))
    jobs.apply(added(worker_job(0, "uid-a", deleting=True), 13, "DELETED"))
    pods.apply(added(pod(1, "uid-a").obj(), 14, "DELETED"))  # late, on the pod watch
    assert (len(paced), woken) == (3, [("ns", "article")] * 2)  # the Job's own changes
    pods.apply(added(pod(2, "uid-b").deleting(at(3)).obj(), 15, "MODIFIED"))
    assert (len(paced), len(woken)) == (3, 3)


def test_the_pod_cache_says_when_it_received_a_pods_version() -> None:
    c, _, _ = caches()
    (pods,) = [i for i in c.informers if i.resource == "pods/ns"]
    before = time.time()
    pods.apply(added(PodWrapper.worker(0, 1).on_node("n1").running().obj(), 5))
    seen = c.pod_seen_at("ns", "article-worker-0-1")
    assert seen is not None and before <= seen <= time.time()
    assert c.pod_seen_at("ns", "other") is None and c.pod_seen_at("elsewhere", "x") is None


def test_a_jobs_change_goes_to_on_job_and_the_job_is_read_from_the_cache() -> None:
    seen: list[tuple[tuple[str, str], Any, Any]] = []
    c, _, woken = caches(on_job=lambda key, old, new: seen.append((key, old, new)))
    (jobs,) = [i for i in c.informers if i.resource == "jobs/ns"]
    jobs.apply(added(etj("train", "ns").obj(), 5))
    assert c.knows_job("ns", "train") and c.job_keys() == [("ns", "train")]
    read = c.job("ns", "train")
    assert read is not None and read["metadata"]["resourceVersion"] == "5"
    read["metadata"]["name"] = "changed"  # a copy: the cache is not touched
    assert c.job("ns", "train")["metadata"]["name"] == "train"  # type: ignore[index]
    jobs.apply(added(etj("train", "ns").obj(), 6, "DELETED"))
    assert [(key, old is not None, new is not None) for key, old, new in seen] == [
        (("ns", "train"), False, True), (("ns", "train"), True, False)]
    assert woken == [] and c.job("ns", "train") is None and not c.knows_job("ns", "train")


def test_a_workload_wakes_the_known_job_whose_jobset_owns_it() -> None:
    c, _, woken = caches(watch_workloads=True, on_job=lambda *_: None)
    (jobs,) = [i for i in c.informers if i.resource == "jobs/ns"]
    (workloads,) = [i for i in c.informers if i.resource == "workloads/ns"]
    workloads.apply(added(WorkloadWrapper("article").obj(), 5))
    assert woken == []  # no such job (yet): other teams' JobSets have Workloads too
    jobs.apply(added(etj("article", "ns").obj(), 6))
    workloads.apply(added(WorkloadWrapper("article").admitted(at(1)).obj(), 7, "MODIFIED"))
    assert woken == [("ns", "article")]
    assert len(workloads) == 1  # what it keeps of a Workload: the owning job's name


def test_namespace_globs_watch_every_namespace_and_keep_those_in_scope() -> None:
    c, _, woken = caches(WatchScope(False, ["team-*"]))
    assert sorted(i.resource for i in c.informers) == ["jobs", "jobsets", "nodes", "pods",
                                                       "worker-jobs"]
    (jobs,) = [i for i in c.informers if i.resource == "jobs"]
    (pods,) = [i for i in c.informers if i.resource == "pods"]
    jobs.apply(added(etj("a", "team-x").obj(), 5))
    jobs.apply(added(etj("b", "other").obj(), 6))
    pods.apply(added(PodWrapper.worker(0, 0, namespace="other").obj(), 7))
    pods.apply(added(PodWrapper.worker(0, 0, namespace="team-x").obj(), 8))
    assert c.job_keys() == [("team-x", "a")]
    assert woken == [("team-x", "a"), ("team-x", "article")]
    assert c.pods_of("other", "article") == ()


def test_owning_job_is_the_jobset_that_controls_the_workload() -> None:
    assert owning_job(WorkloadWrapper("train").obj()) == "train"
    assert owning_job({"metadata": {"ownerReferences": [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "x", "controller": True}]}}) is None
    assert owning_job({}) is None
