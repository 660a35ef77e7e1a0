"""The operator's I/O edge for Kueue: the reconciler reads a queued job's Workload after
its pods (and only for a job that may have one), applies spec.suspend through the
Workload, never the JobSet Kueue owns, and counts preemptions in etj_preemptions_total;
the Workload watch wakes the job whose JobSet owns it."""
from __future__ import annotations

import copy
from typing import Any

from elastic_api.names import JOBSET_API_VERSION, KUEUE_QUEUE_NAME_LABEL
from elastic_api.queueing import ADMITTED, REASON_PREEMPTED, REASON_SUSPENDED_BY_USER
from elastic_operator.watch.caches import owning_job
from tests.builders import JobSetWrapper, at
from tests.kueue_builders import WorkloadWrapper
from tests.support.stand_in_kube import (
    POD_CACHE_READ,
    StandInKube,
    condition,
    reconciler,
    the_job,
)


def queued(**spec: Any) -> dict[str, Any]:
    job = the_job(**spec)
    job["metadata"]["labels"] = {KUEUE_QUEUE_NAME_LABEL: "lq"}
    return job


class KueueKube(StandInKube):
    """The stand-in API server, with the JobSet's Workload."""

    def __init__(self, job: dict[str, Any], jobset: dict[str, Any] | None = None,
                 workload: dict[str, Any] | None = None) -> None:
        super().__init__(job, jobset)
        self.workload = workload
        self.workload_patches: list[bool] = []

    def list_workloads(self, namespace: str, jobset_uid: str) -> list[dict[str, Any]]:
        self._call("list_workloads")
        return [copy.deepcopy(self.workload)] if self.workload is not None else []

    def patch_workload_active(self, namespace: str, name: str, active: bool,
                              suspended_after_worker_lost: str | None = None) -> dict[str, Any]:
        self._call("patch_workload_active")
        assert self.workload is not None
        self.workload_patches.append(active)
        self.workload["spec"]["active"] = active
        return copy.deepcopy(self.workload)


def jobset(*, suspended: bool = False) -> dict[str, Any]:
    return JobSetWrapper("train", "ml").owner("u-1").suspend(suspended).obj()


def admitted_workload() -> WorkloadWrapper:
    return WorkloadWrapper("train", "ml", jobset_uid="train-js-uid").admitted(at(30))


def test_a_queued_jobs_workload_is_read_after_its_pods() -> None:
    kube = KueueKube(queued(), jobset(), admitted_workload().obj())
    rec, _ = reconciler(kube)
    assert rec.reconcile("ml", "train").ok
    assert kube.calls.index(POD_CACHE_READ) < kube.calls.index("list_workloads")
    assert condition(kube.job["status"], ADMITTED)["status"] == "True"


def test_a_job_no_queue_admits_costs_no_workload_request() -> None:
    kube = KueueKube(the_job(), jobset())
    rec, _ = reconciler(kube)
    assert rec.reconcile("ml", "train").ok and rec.reconcile("ml", "train").ok
    assert "list_workloads" not in kube.calls
    assert all(c["type"] != ADMITTED for c in kube.job["status"]["conditions"])


def test_suspend_under_kueue_deactivates_the_workload_and_never_patches_the_jobset() -> None:
    kube = KueueKube(queued(suspend=True), jobset(), admitted_workload().obj())
    rec, _ = reconciler(kube)
    assert rec.reconcile("ml", "train").ok
    assert kube.workload_patches == [False] and "patch_jobset_suspend" not in kube.calls
    # The status is computed from the Workload the patch returned.
    admitted = condition(kube.job["status"], ADMITTED)
    assert (admitted["status"], admitted["reason"]) == ("False", REASON_SUSPENDED_BY_USER)


def test_a_preemption_counts_in_the_metric_once() -> None:
    kube = KueueKube(queued(), jobset(), admitted_workload().obj())
    rec, metrics = reconciler(kube)
    assert rec.reconcile("ml", "train").ok
    kube.workload = admitted_workload().preempted(at(100)).obj()
    kube.jobset = jobset(suspended=True)
    assert rec.reconcile("ml", "train").ok and rec.reconcile("ml", "train").ok
    assert metrics.get_sample_value("etj_preemptions_total",
                                    {"namespace": "ml", "job": "train"}) == 1
    assert metrics.get_sample_value("etj_slice_failures_total",
                                    {"namespace": "ml", "job": "train"}) == 0
    assert [e.reason for e in kube.events if e.reason == REASON_PREEMPTED] == [REASON_PREEMPTED]
    assert kube.job["status"]["counters"]["preemptions"] == 1


def test_a_workload_event_names_the_job_whose_jobset_owns_it() -> None:
    assert owning_job(WorkloadWrapper("train").obj()) == "train"
    assert owning_job({"metadata": {"ownerReferences": [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "x", "controller": True}]}}) is None
    assert owning_job({"metadata": {"ownerReferences": [
        {"apiVersion": JOBSET_API_VERSION, "kind": "JobSet", "name": "x"}]}}) is None
    assert owning_job({}) is None
