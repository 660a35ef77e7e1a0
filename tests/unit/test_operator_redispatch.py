"""spec.multiCluster.redispatch: a MultiKueue job whose worker cluster is lost (Kueue
took it back after workerLostTimeout) is suspended on the manager unless the user allows
running it elsewhere: its Workload deactivated before its quota is released (so Kueue
never readmits it), the status naming the cluster and the field; allowing it later
reactivates the Workload. Validation: the field belongs to MultiKueue jobs."""
from __future__ import annotations

import copy
from typing import Any

import pytest

from elastic_api.conditions import ConditionType, Phase, Reason
from elastic_api.models import ElasticTrainingJob, ElasticTrainingJobStatus
from elastic_api.names import (
    KUEUE_QUEUE_NAME_LABEL,
    MULTIKUEUE_CONTROLLER,
    MULTIKUEUE_ORIGIN_LABEL,
    SUSPENDED_AFTER_WORKER_LOST_ANNOTATION,
    SUSPENDED_BY_OPERATOR_ANNOTATION,
)
from elastic_api.queueing import ADMITTED
from elastic_api.validation import MULTI_CLUSTER_WITHOUT_MULTIKUEUE, validate_job
from elastic_operator.core.dispatch import dispatch_status, worker_lost_status
from elastic_operator.core.ownership import applied_spec
from elastic_operator.core.plan import (
    AnnotateDispatchedTo,
    ReleaseEvictedWorkload,
    SetWorkloadActive,
    plan_dispatch,
)
from elastic_operator.model.objects import worker_cluster_from_dict, workload_from_dict
from tests.builders import at
from tests.kueue_builders import dispatched_workload, retried_by_multikueue
from tests.support.manager_kube import ManagerKube, worker_cluster
from tests.support.stand_in_kube import condition, reconciler, the_job

RUNNING = {"phase": "Running", "jobSetName": "train", "slicesReady": 1, "slicesDesired": 1,
           "checkpoint": {"directory": "gs://b/ckpt", "latestCommittedStep": 40},
           "admission": {"workload": "w", "queueName": "lq", "clusterQueue": "worker-cq"},
           "conditions": [{"type": "Ready", "status": "True", "reason": "AllSlicesReady",
                           "message": "", "lastTransitionTime": "2026-11-29T12:00:30Z"}]}


def mk_raw(redispatch: str | None = None, **spec: Any) -> dict[str, Any]:
    if redispatch is not None:
        spec["multiCluster"] = {"redispatch": redispatch}
    job = the_job(managedBy=MULTIKUEUE_CONTROLLER, **spec)
    job["metadata"]["labels"] = {KUEUE_QUEUE_NAME_LABEL: "lq"}
    return job


def mk_job(redispatch: str | None = None, **spec: Any) -> ElasticTrainingJob:
    return ElasticTrainingJob.model_validate(mk_raw(redispatch, **spec))


def lost_status() -> ElasticTrainingJobStatus:
    """The worker's last copy, with what the manager wrote while worker-1 was unreachable."""
    job = mk_job()
    wl = workload_from_dict(dispatched_workload(job, at(10)))
    cluster = worker_cluster_from_dict(worker_cluster(False))
    status, _ = worker_lost_status(job, wl, cluster, ElasticTrainingJobStatus.model_validate(
        RUNNING), at(50))
    assert status is not None
    return status


def lost_workload(job: ElasticTrainingJob) -> dict[str, Any]:
    return retried_by_multikueue(dispatched_workload(job, at(10)), at(120))


def released(obj: dict[str, Any]) -> dict[str, Any]:
    """Its quota released (what release_after_eviction writes)."""
    obj = copy.deepcopy(obj)
    obj["status"].pop("admission")
    for c in obj["status"]["conditions"]:
        if c["type"] in ("QuotaReserved", "Admitted"):
            c["status"] = "False"
    return obj


def suspended_workload(job: ElasticTrainingJob, cluster: str = "worker-1") -> dict[str, Any]:
    """Suspended by the operator after the loss, its quota released."""
    obj = released(lost_workload(job))
    obj["spec"]["active"] = False
    obj["metadata"]["annotations"] = {SUSPENDED_BY_OPERATOR_ANNOTATION: "true",
                                      SUSPENDED_AFTER_WORKER_LOST_ANNOTATION: cluster}
    return obj


def test_the_default_is_never_and_the_field_is_the_managers_alone() -> None:
    assert mk_job().spec.redispatch == "Never"
    assert mk_job("OnWorkerLost").spec.redispatch == "OnWorkerLost"
    # It renders into nothing: a JobSet rendered before it changed has no drift.
    assert applied_spec(mk_job("OnWorkerLost")) == applied_spec(mk_job())


def test_while_unreachable_the_manager_records_the_cluster_and_says_what_follows() -> None:
    status = lost_status()
    assert status.admission is not None and status.admission.worker_cluster == "worker-1"
    lost = next(c for c in status.conditions
                if c.type == ConditionType.WORKER_CLUSTER_REACHABLE)
    assert "keeps it from running elsewhere (spec.multiCluster.redispatch Never)" \
        in lost.message
    allowed = mk_job("OnWorkerLost")
    wl = workload_from_dict(dispatched_workload(allowed, at(10)))
    status, _ = worker_lost_status(allowed, wl, worker_cluster_from_dict(
        worker_cluster(False)), ElasticTrainingJobStatus.model_validate(RUNNING), at(50))
    assert status is not None and "dispatches the job again" in status.conditions[-1].message


def test_a_lost_worker_suspends_the_workload_before_its_quota_is_released() -> None:
    job = mk_job()
    plan = plan_dispatch(job, [], workload_from_dict(lost_workload(job)), lost_status(),
                         at(121))
    suspend, release = plan.actions
    assert suspend == SetWorkloadActive("ml", workload_from_dict(lost_workload(job)).name,
                                     active=False, suspended_after_worker_lost="worker-1")
    assert isinstance(release, ReleaseEvictedWorkload)


def test_with_redispatch_allowed_the_quota_is_released_and_kueue_dispatches_again() -> None:
    job = mk_job("OnWorkerLost")
    (action,) = plan_dispatch(job, [], workload_from_dict(lost_workload(job)), lost_status(),
                              at(121)).actions
    assert isinstance(action, ReleaseEvictedWorkload)


@pytest.mark.parametrize("why", [
    'Workload evicted on worker cluster: "worker-1", resetting for re-admission. '
    'Previously: "Ready"',
    "Admitting remote no longer exists"])
def test_an_eviction_the_worker_answered_for_is_no_partition_and_is_not_suspended(
        why: str) -> None:
    job = mk_job()
    evicted = retried_by_multikueue(dispatched_workload(job, at(10)), at(120), why)
    (action,) = plan_dispatch(job, [], workload_from_dict(evicted), lost_status(),
                              at(121)).actions
    assert isinstance(action, ReleaseEvictedWorkload)


def test_a_suspension_is_planned_even_after_the_quota_went_and_never_once_readmitted() -> None:
    job = mk_job()
    (action,) = plan_dispatch(job, [], workload_from_dict(released(lost_workload(job))),
                              lost_status(),
                              at(121)).actions
    assert isinstance(action, SetWorkloadActive) and action.active is False
    readmitted = dispatched_workload(job, at(200), cluster="worker-2")
    readmitted["status"]["conditions"].append(
        {"type": "Evicted", "status": "False", "reason": "QuotaReserved",
         "message": "Previously: evicted", "lastTransitionTime": "2026-11-29T12:03:20Z"})
    # Nothing to suspend; only where it now runs is said (the Cluster column).
    assert plan_dispatch(job, [], workload_from_dict(readmitted),
                         ElasticTrainingJobStatus(), at(201)).actions == (
        AnnotateDispatchedTo("ml", "train", "worker-2"),)


def test_a_suspended_job_stays_suspended_until_the_user_allows_redispatch() -> None:
    never = mk_job()
    suspended = workload_from_dict(suspended_workload(never))
    assert plan_dispatch(never, [], suspended, lost_status(), at(130)).actions == ()
    # spec.suspend set and cleared again is no way around it.
    assert plan_dispatch(mk_job(suspend=True), [], suspended, lost_status(),
                         at(130)).actions == ()
    allowed = mk_job("OnWorkerLost")
    assert plan_dispatch(allowed, [], suspended, lost_status(), at(130)).actions == (
        SetWorkloadActive("ml", suspended.name, active=True),)


def test_a_suspended_job_says_why_naming_the_cluster_and_the_field() -> None:
    job = mk_job()
    status, events = dispatch_status(job, workload_from_dict(suspended_workload(job)),
                                     lost_status(), at(130))
    assert status is not None and status.phase == Phase.SUSPENDED
    admitted = next(c for c in status.conditions if c.type == ADMITTED)
    assert (admitted.status, admitted.reason) == ("False", Reason.REDISPATCH_NOT_ALLOWED)
    assert "worker cluster worker-1 was lost" in admitted.message
    assert "spec.multiCluster.redispatch is Never" in admitted.message
    assert "set spec.multiCluster.redispatch to OnWorkerLost" in admitted.message
    ready = next(c for c in status.conditions if c.type == ConditionType.READY)
    assert (ready.status, ready.reason) == ("False", Reason.REDISPATCH_NOT_ALLOWED)
    reachable = next(c for c in status.conditions
                     if c.type == ConditionType.WORKER_CLUSTER_REACHABLE)
    assert (reachable.status, reachable.reason) == ("False", Reason.WORKER_CLUSTER_LOST)
    assert status.checkpoint is not None and status.checkpoint.latest_committed_step == 40
    assert [(e.reason, e.type) for e in events] == [(Reason.REDISPATCH_NOT_ALLOWED,
                                                     "Warning")]
    # Said once.
    again, events = dispatch_status(job, workload_from_dict(suspended_workload(job)), status,
                                    at(160))
    assert again is not None and events == []
    assert next(c for c in again.conditions if c.type == ADMITTED).last_transition_time \
        == admitted.last_transition_time
    # A cluster the manager never learnt the name of.
    unnamed, _ = dispatch_status(job, workload_from_dict(suspended_workload(job, "")),
                                 ElasticTrainingJobStatus(), at(130))
    assert unnamed is not None and "its worker cluster was lost" in unnamed.conditions[0].message


def test_the_manager_reconcile_deactivates_before_it_releases_then_resumes_the_job() -> None:
    kube = ManagerKube(mk_raw())
    rec, _ = reconciler(kube)
    assert rec.reconcile("ml", "train").ok
    job = ElasticTrainingJob.model_validate(kube.job)
    kube.workload = dispatched_workload(job, at(10))
    kube.job["status"] = copy.deepcopy(RUNNING)
    kube._bump()
    kube.clusters["worker-1"] = worker_cluster(False)
    assert rec.reconcile("ml", "train").ok  # WorkerClusterReachable False, the name kept
    kube.workload = lost_workload(job)
    kube.calls.clear()
    assert rec.reconcile("ml", "train").ok
    writes = [c for c in kube.calls if c.startswith("patch_workload")]
    assert writes == ["patch_workload_active", "patch_workload_status"]
    assert kube.workload["spec"]["active"] is False
    assert kube.workload["metadata"]["annotations"][SUSPENDED_AFTER_WORKER_LOST_ANNOTATION] \
        == "worker-1"
    assert condition(kube.workload["status"], "QuotaReserved")["status"] == "False"
    status = kube.job["status"]
    assert status["phase"] == Phase.SUSPENDED
    assert condition(status, ADMITTED)["reason"] == Reason.REDISPATCH_NOT_ALLOWED
    assert kube.events[-1].reason == Reason.REDISPATCH_NOT_ALLOWED
    # Nothing more while suspended (once the outbox of that write is cleared).
    assert rec.reconcile("ml", "train").ok
    kube.calls.clear()
    assert rec.reconcile("ml", "train").ok
    assert not [c for c in kube.calls if c.startswith("patch_")]
    # The user allows it: reactivated, the marks gone; it queues again.
    kube.job["spec"]["multiCluster"] = {"redispatch": "OnWorkerLost"}
    kube.job["metadata"]["generation"] = 2
    kube._bump()
    assert rec.reconcile("ml", "train").ok
    assert kube.workload["spec"]["active"] is True
    assert not kube.workload["metadata"].get("annotations")
    assert kube.job["status"]["phase"] == Phase.QUEUED


def test_multi_cluster_belongs_to_a_multikueue_job() -> None:
    local = the_job(multiCluster={"redispatch": "OnWorkerLost"})
    with pytest.raises(ValueError) as err:
        validate_job(local)
    assert MULTI_CLUSTER_WITHOUT_MULTIKUEUE in str(err.value)
    # MultiKueue's copy in a worker cluster carries it without managedBy: accepted.
    local["metadata"]["labels"] = {MULTIKUEUE_ORIGIN_LABEL: "manager",
                                   KUEUE_QUEUE_NAME_LABEL: "lq"}
    validate_job(local)
    validate_job(mk_raw("Never"))
    with pytest.raises(ValueError) as err:
        validate_job(mk_raw("Always"))
    assert "spec.multiCluster.redispatch" in str(err.value)
