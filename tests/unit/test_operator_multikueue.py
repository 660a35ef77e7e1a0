"""A MultiKueue job (spec.managedBy) on the manager cluster: the operator renders its
Workload and no JobSet (the PodSets Kueue's JobSet integration makes of the JobSet the
worker renders, so that the worker takes it as its prebuilt Workload), applies
spec.suspend to it, writes the status only until MultiKueue dispatches the job, and never
after (the worker's status is copied back); on the worker the copy's JobSet carries the
prebuilt-workload label."""
from __future__ import annotations

import copy
from typing import Any

from elastic_api.models import ElasticTrainingJob, ElasticTrainingJobStatus
from elastic_api.names import (
    API_VERSION,
    DISPATCHED_TO_ANNOTATION,
    KIND,
    KUEUE_PREBUILT_WORKLOAD_LABEL,
    KUEUE_QUEUE_NAME_LABEL,
    MULTIKUEUE_CONTROLLER,
    MULTIKUEUE_ORIGIN_LABEL,
    SUSPENDED_BY_OPERATOR_ANNOTATION,
)
from elastic_api.queueing import ADMITTED, REASON_WAITING_FOR_ADMISSION
from elastic_operator.core.dispatch import dispatch_status
from elastic_operator.core.plan import CreateObject, SetWorkloadActive, plan_dispatch
from elastic_operator.model.objects import workload_from_dict
from elastic_operator.render import (
    render,
    render_jobset,
    render_workload,
    workload_name,
)
from elastic_operator.watch.caches import owning_job
from tests.builders import T0, at
from tests.support.manager_kube import ManagerKube, worker_cluster
from tests.support.stand_in_kube import condition, reconciler, the_job


def mk_raw(**spec: Any) -> dict[str, Any]:
    job = the_job(managedBy=MULTIKUEUE_CONTROLLER, **spec)
    job["metadata"]["labels"] = {KUEUE_QUEUE_NAME_LABEL: "lq"}
    return job


def mk_job(**spec: Any) -> ElasticTrainingJob:
    return ElasticTrainingJob.model_validate(mk_raw(**spec))


def running_on_worker_1() -> ElasticTrainingJob:
    """The job once the operator said where MultiKueue dispatched it."""
    raw = mk_raw()
    raw["metadata"]["annotations"] = {DISPATCHED_TO_ANNOTATION: "worker-1"}
    return ElasticTrainingJob.model_validate(raw)


def with_status(workload: dict[str, Any], **status: Any) -> dict[str, Any]:
    workload = copy.deepcopy(workload)
    workload["status"] = status
    return workload


RESERVED = {"conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                            "message": "Quota reserved in ClusterQueue cq",
                            "lastTransitionTime": "2026-11-29T12:00:10Z"}],
            "admission": {"clusterQueue": "cq", "podSetAssignments": []}}


def test_the_workload_has_the_podsets_kueue_makes_of_the_workers_jobset() -> None:
    job = mk_job()
    workload = render_workload(job)
    jobset = render_jobset(job)
    assert [p["name"] for p in workload["spec"]["podSets"]] == ["pathways-head", "worker"]
    assert [p["count"] for p in workload["spec"]["podSets"]] == [1, 2]  # v5e 2x4: 2 VMs
    for pod_set, rj in zip(workload["spec"]["podSets"], jobset["spec"]["replicatedJobs"],
                           strict=True):
        assert pod_set["template"] == rj["template"]["spec"]["template"]
    assert workload["spec"]["queueName"] == "lq" and workload["spec"]["active"] is True
    # The worker renders the copy (no managedBy, other uid): the same containers.
    copy_ = mk_raw()
    copy_["spec"].pop("managedBy")
    copy_["metadata"]["uid"] = "worker-uid"
    worker = render_jobset(ElasticTrainingJob.model_validate(copy_))
    assert [rj["template"]["spec"]["template"] for rj in worker["spec"]["replicatedJobs"]] \
        == [p["template"] for p in workload["spec"]["podSets"]]


def test_a_multikueue_job_renders_its_workload_and_nothing_that_runs() -> None:
    assert [o["kind"] for o in render(mk_job())] == ["Workload"]
    assert [o["kind"] for o in render(ElasticTrainingJob.model_validate(the_job()))] == \
        ["Role", "RoleBinding", "JobSet"]


def test_the_workload_name_fits_a_label_value_and_follows_the_uid() -> None:
    job = mk_job()
    name = workload_name(job)
    assert name.startswith("elastictrainingjob-train-") and len(name) <= 63
    other = mk_raw()
    other["metadata"]["uid"] = "u-2"
    assert workload_name(ElasticTrainingJob.model_validate(other)) != name


def test_the_plan_creates_the_workload_owned_by_the_job() -> None:
    job = mk_job()
    plan = plan_dispatch(job, render(job), None, ElasticTrainingJobStatus(), T0)
    (action,) = plan.actions
    assert isinstance(action, CreateObject) and action.kind == "Workload"
    ref = action.obj["metadata"]["ownerReferences"][0]
    assert (ref["apiVersion"], ref["kind"], ref["uid"], ref["controller"]) == \
        (API_VERSION, KIND, "u-1", True)
    assert owning_job(action.obj) == "train"  # its changes wake the job


def test_a_suspended_job_gets_its_workload_inactive_and_marked() -> None:
    job = mk_job(suspend=True)
    (action,) = plan_dispatch(job, render(job), None, ElasticTrainingJobStatus(), T0).actions
    assert isinstance(action, CreateObject)
    assert action.obj["spec"]["active"] is False
    assert action.obj["metadata"]["annotations"][SUSPENDED_BY_OPERATOR_ANNOTATION] == "true"


def test_suspend_and_resume_go_through_the_workload() -> None:
    workload = workload_from_dict(render_workload(mk_job()))
    (action,) = plan_dispatch(mk_job(suspend=True), [], workload,
                              ElasticTrainingJobStatus(), T0).actions
    assert action == SetWorkloadActive("ml", workload.name, active=False)
    inactive = render_workload(mk_job(suspend=True))
    inactive["metadata"]["annotations"] = {SUSPENDED_BY_OPERATOR_ANNOTATION: "true"}
    (action,) = plan_dispatch(mk_job(), [], workload_from_dict(inactive),
                              ElasticTrainingJobStatus(), T0).actions
    assert action == SetWorkloadActive("ml", workload.name, active=True)


def test_a_workload_that_existed_is_not_recreated() -> None:
    job = mk_job()
    previous = ElasticTrainingJobStatus.model_validate(
        {"admission": {"workload": workload_name(job), "queueName": "lq"}})
    plan = plan_dispatch(job, render(job), None, previous, T0)
    assert plan.actions == () and plan.why_not is not None
    worker_status = ElasticTrainingJobStatus(jobset_name="train")
    assert plan_dispatch(job, render(job), None, worker_status, T0).actions == ()


def test_a_waiting_job_says_where_it_waits() -> None:
    job = mk_job()
    workload = workload_from_dict(with_status(render_workload(job), **RESERVED))
    status, events = dispatch_status(job, workload, ElasticTrainingJobStatus(), T0)
    assert status is not None
    assert status.phase == "Queued" and status.slices_ready == 0
    admitted = next(c for c in status.conditions if c.type == ADMITTED)
    assert (admitted.status, admitted.reason) == ("False", REASON_WAITING_FOR_ADMISSION)
    assert "admission checks" in admitted.message
    assert [e.reason for e in events] == [REASON_WAITING_FOR_ADMISSION]


def test_once_dispatched_the_status_is_the_workers() -> None:
    job = mk_job()
    assert dispatch_status(job, workload_from_dict(dispatched_workload()),
                           ElasticTrainingJobStatus(), at(20)) == (None, [])
    finished = ElasticTrainingJobStatus.model_validate({"conditions": [
        {"type": "Succeeded", "status": "True", "reason": "JobSetCompleted",
         "lastTransitionTime": "2026-11-29T12:10:00Z"}]})
    assert dispatch_status(job, workload_from_dict(dispatched_workload()), finished,
                           at(20)) == (None, [])


def test_a_job_taken_back_from_its_worker_says_where_it_waits_again() -> None:
    job = mk_job(suspend=True)
    deactivated = render_workload(job)
    deactivated["metadata"]["annotations"] = {SUSPENDED_BY_OPERATOR_ANNOTATION: "true"}
    evicted = {"conditions": [{"type": "Evicted", "status": "True", "reason": "Deactivated",
                               "message": "The workload is deactivated",
                               "lastTransitionTime": "2026-11-29T12:05:00Z"}]}
    worker = ElasticTrainingJobStatus(jobset_name="train", phase="Running", slices_ready=1)
    status, _ = dispatch_status(job, workload_from_dict(with_status(deactivated, **evicted)),
                                worker, at(400))
    assert status is not None and status.phase == "Suspended"
    assert next(c for c in status.conditions if c.type == ADMITTED).reason == "Suspended"


def test_the_manager_reconcile_makes_the_workload_then_leaves_the_status_to_the_worker(
        ) -> None:
    kube = ManagerKube(mk_raw())
    rec, _ = reconciler(kube)
    assert rec.reconcile("ml", "train").ok
    assert kube.created == ["Workload"]  # no JobSet, no RBAC: nothing runs here
    assert kube.job["status"]["phase"] == "Queued"
    assert condition(kube.job["status"], ADMITTED)["reason"] == REASON_WAITING_FOR_ADMISSION
    # MultiKueue dispatches it, and copies the worker's status (its outbox too) here.
    assert kube.workload is not None
    kube.workload = dispatched_workload()
    worker_status = {"phase": "Running", "jobSetName": "train", "slicesReady": 1,
                     "pendingEvents": [{"name": "e1", "reason": "SliceDown",
                                        "type": "Warning", "message": "on the worker"}]}
    kube.job["status"] = copy.deepcopy(worker_status)
    kube._bump()
    writes, events = kube.calls.count("patch_job_status"), len(kube.events)
    assert rec.reconcile("ml", "train").ok and rec.reconcile("ml", "train").ok
    assert kube.calls.count("patch_job_status") == writes
    assert len(kube.events) == events  # the worker posts its own Events
    assert kube.job["status"] == worker_status
    assert kube.created == ["Workload"]


def test_the_workers_copy_carries_its_prebuilt_workload_to_the_jobset() -> None:
    copy_ = the_job()
    copy_["metadata"]["labels"] = {KUEUE_QUEUE_NAME_LABEL: "lq",
                                   KUEUE_PREBUILT_WORKLOAD_LABEL: "elastictrainingjob-train-1",
                                   MULTIKUEUE_ORIGIN_LABEL: "manager"}
    labels = render_jobset(ElasticTrainingJob.model_validate(copy_))["metadata"]["labels"]
    assert labels[KUEUE_PREBUILT_WORKLOAD_LABEL] == "elastictrainingjob-train-1"
    assert labels[KUEUE_QUEUE_NAME_LABEL] == "lq"
    assert MULTIKUEUE_ORIGIN_LABEL not in labels
    # Kueue v0.19 writes it as an annotation (WorkloadIdentifierAnnotations).
    copy_["metadata"]["labels"] = {KUEUE_QUEUE_NAME_LABEL: "lq"}
    copy_["metadata"]["annotations"] = {KUEUE_PREBUILT_WORKLOAD_LABEL: "elastictrainingjob-t-2"}
    meta = render_jobset(ElasticTrainingJob.model_validate(copy_))["metadata"]
    assert meta["annotations"] == {KUEUE_PREBUILT_WORKLOAD_LABEL: "elastictrainingjob-t-2"}
    assert KUEUE_PREBUILT_WORKLOAD_LABEL not in meta["labels"]


def dispatched_workload(pods_ready: dict[str, Any] | None = None) -> dict[str, Any]:
    admitted = copy.deepcopy(RESERVED)
    admitted["conditions"].append({"type": "Admitted", "status": "True", "reason": "Admitted",
                                   "message": "", "lastTransitionTime": "2026-11-29T12:00:11Z"})
    if pods_ready is not None:
        admitted["conditions"].append({"message": "", "lastTransitionTime":
                                       "2026-11-29T12:00:20Z", **pods_ready})
    return with_status(render_workload(mk_job()), clusterName="worker-1", **admitted)


def worker(ready: int) -> ElasticTrainingJobStatus:
    return ElasticTrainingJobStatus(jobset_name="train", phase="Running", slices_desired=2,
                                    slices_ready=ready)


def test_kueue_hears_from_the_operator_that_the_workers_pods_are_ready() -> None:
    from elastic_operator.core.plan import SetWorkloadCondition

    job = running_on_worker_1()
    plan = plan_dispatch(job, [], workload_from_dict(dispatched_workload()), worker(2), at(30))
    (action,) = plan.actions
    assert isinstance(action, SetWorkloadCondition)
    cond = action.condition
    assert (cond["type"], cond["status"], cond["reason"]) == ("PodsReady", "True", "PodsReady")
    assert "worker-1" in cond["message"] and cond["lastTransitionTime"] == "2026-11-29T12:00:30Z"
    # Said once: the same condition is not written again.
    ready = workload_from_dict(dispatched_workload({"type": "PodsReady", "status": "True",
                                                    "reason": "PodsReady"}))
    assert plan_dispatch(job, [], ready, worker(2), at(40)).actions == ()


def test_a_slice_down_on_the_worker_is_a_recovery_for_kueue() -> None:
    from elastic_operator.core.podsready import pods_ready_condition

    ready = workload_from_dict(dispatched_workload({"type": "PodsReady", "status": "True",
                                                    "reason": "PodsReady"}))
    cond = pods_ready_condition(ready, worker(1), at(50))
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", "WaitForRecovery")
    starting = workload_from_dict(dispatched_workload())
    cond = pods_ready_condition(starting, worker(0), at(50))
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", "WaitForStart")
    # Not yet dispatched, or the worker has not reported: nothing to tell.
    waiting = workload_from_dict(with_status(render_workload(mk_job()), **RESERVED))
    assert pods_ready_condition(waiting, worker(2), at(50)) is None
    assert pods_ready_condition(starting, ElasticTrainingJobStatus(), at(50)) is None


def test_a_lost_worker_cluster_is_reported_on_the_manager_until_it_is_back() -> None:
    from elastic_api.conditions import ConditionType, Reason

    kube = ManagerKube(mk_raw())
    rec, _ = reconciler(kube)
    assert rec.reconcile("ml", "train").ok
    assert kube.workload is not None
    kube.workload = dispatched_workload()
    kube.job["status"] = {"phase": "Running", "jobSetName": "train", "slicesReady": 1,
                          "conditions": [{"type": "Ready", "status": "True",
                                          "reason": "AllSlicesReady", "message": "",
                                          "lastTransitionTime": "2026-11-29T12:00:30Z"}]}
    kube._bump()
    kube.clusters["worker-1"] = worker_cluster(False)
    assert rec.reconcile("ml", "train").ok
    status = kube.job["status"]
    lost = condition(status, ConditionType.WORKER_CLUSTER_REACHABLE)
    assert (lost["status"], lost["reason"]) == ("False", Reason.WORKER_CLUSTER_LOST)
    assert "worker-1" in lost["message"] and "since 2026-11-29T12:00:40Z" in lost["message"]
    assert "connection refused" in lost["message"]
    ready = condition(status, "Ready")
    assert (ready["status"], ready["reason"]) == ("Unknown", Reason.WORKER_CLUSTER_LOST)
    assert status["phase"] == "Running" and status["slicesReady"] == 1  # the last copy
    assert [e.reason for e in kube.events] == [REASON_WAITING_FOR_ADMISSION,
                                               Reason.WORKER_CLUSTER_LOST]
    # Said once: further reconciles write nothing, post nothing.
    writes = kube.calls.count("patch_job_status")
    assert rec.reconcile("ml", "train").ok
    assert kube.calls.count("patch_job_status") == writes and len(kube.events) == 2
    # Back: the worker's next copy replaces the status; the manager writes nothing.
    kube.clusters["worker-1"] = worker_cluster(True)
    kube.job["status"] = {"phase": "Running", "jobSetName": "train", "slicesReady": 1}
    kube._bump()
    assert rec.reconcile("ml", "train").ok
    assert kube.calls.count("patch_job_status") == writes
    assert kube.job["status"] == {"phase": "Running", "jobSetName": "train",
                                  "slicesReady": 1}


def test_the_podsets_ask_for_the_topology_kueue_asks_of_a_jobset() -> None:
    from elastic_api.names import (
        KUEUE_PODSET_SLICE_REQUIRED_TOPOLOGY,
        KUEUE_PODSET_SLICE_SIZE,
    )
    from elastic_operator.render import topology_request

    head, workers = render_workload(mk_job(tpu={"type": "v5e", "topology": "2x4",
                                                "numSlices": 3}))["spec"]["podSets"]
    assert workers["topologyRequest"] == {
        "podIndexLabel": "batch.kubernetes.io/job-completion-index",
        "subGroupIndexLabel": "jobset.sigs.k8s.io/job-index", "subGroupCount": 3}
    assert head["topologyRequest"]["subGroupCount"] == 1
    # A template that asks Topology-Aware Scheduling for one block per slice.
    rj = copy.deepcopy(render_jobset(mk_job())["spec"]["replicatedJobs"][1])
    rj["template"]["spec"]["template"]["metadata"]["annotations"] = {
        KUEUE_PODSET_SLICE_REQUIRED_TOPOLOGY: "cloud.google.com/gce-topology-block",
        KUEUE_PODSET_SLICE_SIZE: "2"}
    request = topology_request(rj)
    assert request["podSetSliceRequiredTopology"] == "cloud.google.com/gce-topology-block"
    assert request["podSetSliceSize"] == 2


def test_an_evicted_workload_has_its_quota_released_by_the_operator() -> None:
    from elastic_operator.core.plan import ReleaseEvictedWorkload

    evicted = dispatched_workload()
    evicted["status"]["conditions"].append(
        {"type": "Evicted", "status": "True", "reason": "Deactivated",
         "message": "The workload is deactivated", "lastTransitionTime": "2026-11-29T12:05:00Z"})
    (action,) = plan_dispatch(running_on_worker_1(), [], workload_from_dict(evicted),
                              worker(2), at(400)).actions
    assert isinstance(action, ReleaseEvictedWorkload)
    ops = list(action.ops)
    replaced = {op["value"]["type"]: op["value"] for op in ops if op["op"] == "replace"}
    assert (replaced["QuotaReserved"]["status"], replaced["QuotaReserved"]["reason"]) == \
        ("False", "Pending")
    assert replaced["Admitted"]["status"] == "False"
    tests = [op for op in ops if op["op"] == "test"]
    assert len(tests) == len(replaced)  # every replacement checks it hits its condition
    added = [op["value"] for op in ops if op["op"] == "add"]
    assert [(a["type"], a["status"]) for a in added] == [("Requeued", "False")]
    assert ops[-1] == {"op": "remove", "path": "/status/admission"}
    # Released (or never evicted): nothing to do.
    assert plan_dispatch(running_on_worker_1(), [], workload_from_dict(dispatched_workload(
        {"type": "PodsReady", "status": "True", "reason": "PodsReady"})), worker(2),
        at(400)).actions == ()


def with_label(raw: dict[str, Any], key: str, value: str) -> dict[str, Any]:
    raw["metadata"]["labels"][key] = value
    return raw


def test_the_workload_is_ordered_by_the_jobs_priority_class_as_kueue_orders_a_jobset() -> None:
    from elastic_api.names import KUEUE_PRIORITY_CLASS_LABEL

    kube = ManagerKube(with_label(mk_raw(priorityClassName="pods-high"),
                                  KUEUE_PRIORITY_CLASS_LABEL, "low"))
    kube.priority_classes[("kueue.x-k8s.io", "low")] = {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
        "metadata": {"name": "low"}, "value": 100}
    kube.priority_classes[("scheduling.k8s.io", "pods-high")] = {"value": 9000}
    rec, _ = reconciler(kube)
    assert rec.reconcile("ml", "train").ok
    assert kube.workload is not None
    # The label wins over the pods' PriorityClass, as in Kueue's jobframework.
    assert kube.workload["spec"]["priorityClassRef"] == {
        "group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "low"}
    assert kube.workload["spec"]["priority"] == 100
    # Without the label, the pods' PriorityClass; with neither, no priority (Kueue's 0).
    kube = ManagerKube(mk_raw(priorityClassName="pods-high"))
    kube.priority_classes[("scheduling.k8s.io", "pods-high")] = {"value": 9000}
    rec, _ = reconciler(kube)
    assert rec.reconcile("ml", "train").ok and kube.workload is not None
    assert kube.workload["spec"]["priorityClassRef"]["kind"] == "PriorityClass"
    assert kube.workload["spec"]["priority"] == 9000
    plain = render_workload(mk_job())["spec"]
    assert "priority" not in plain and "priorityClassRef" not in plain


def test_a_priority_class_that_does_not_exist_makes_no_workload_and_says_so() -> None:
    from elastic_api.conditions import ConditionType, Reason
    from elastic_api.names import KUEUE_PRIORITY_CLASS_LABEL

    kube = ManagerKube(with_label(mk_raw(), KUEUE_PRIORITY_CLASS_LABEL, "urgent"))
    rec, _ = reconciler(kube)
    assert rec.reconcile("ml", "train").ok
    assert kube.workload is None and kube.created == []
    applied = condition(kube.job["status"], ConditionType.SPEC_APPLIED)
    assert (applied["status"], applied["reason"]) == ("False", Reason.INVALID_SPEC)
    assert KUEUE_PRIORITY_CLASS_LABEL in applied["message"]
    assert "WorkloadPriorityClass 'urgent', which does not exist" in applied["message"]
    # Created: the next reconcile makes the Workload.
    kube.priority_classes[("kueue.x-k8s.io", "urgent")] = {"value": 5}
    assert rec.reconcile("ml", "train").ok
    assert kube.workload is not None and kube.workload["spec"]["priority"] == 5


def test_the_job_says_which_cluster_it_was_dispatched_to_and_forgets_it_when_taken_back(
        ) -> None:
    kube = ManagerKube(mk_raw())
    rec, _ = reconciler(kube)
    assert rec.reconcile("ml", "train").ok
    annotations = kube.job["metadata"].get("annotations") or {}
    assert DISPATCHED_TO_ANNOTATION not in annotations  # waiting: no cluster
    kube.workload = dispatched_workload()
    kube._bump()
    assert rec.reconcile("ml", "train").ok
    assert kube.job["metadata"]["annotations"][DISPATCHED_TO_ANNOTATION] == "worker-1"
    assert rec.reconcile("ml", "train").ok
    assert kube.calls.count("annotate_dispatched_to") == 1  # said once
    # Preempted: Kueue takes the Workload back (not admitted, no cluster any more).
    kube.workload = with_status(render_workload(mk_job()), **RESERVED)
    kube._bump()
    assert rec.reconcile("ml", "train").ok
    assert DISPATCHED_TO_ANNOTATION not in kube.job["metadata"]["annotations"]


class NoKueueKube(ManagerKube):
    """A cluster where Kueue is not installed: its Workload API answers 404, no Status."""

    serves_workloads = False

    def create(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        from elastic_api.kube.client import ApiError

        if obj["kind"] == "Workload" and not self.serves_workloads:
            self._call("create Workload")
            raise ApiError(404, "Not Found", "404 page not found")
        return super().create(obj)


def test_without_kueue_a_multikueue_job_says_what_it_needs_and_queues_once_it_is_there() -> None:
    from elastic_api.conditions import ConditionType, Reason

    kube = NoKueueKube(mk_raw())
    rec, _ = reconciler(kube)
    assert rec.reconcile("ml", "train").ok  # said, not retried as a failure
    applied = condition(kube.job["status"], ConditionType.SPEC_APPLIED)
    assert (applied["status"], applied["reason"]) == ("False", Reason.INVALID_SPEC)
    assert "does not serve Kueue's kueue.x-k8s.io/v1beta2 Workloads" in applied["message"]
    assert "remove spec.managedBy" in applied["message"]
    writes = kube.calls.count("patch_job_status")
    assert rec.reconcile("ml", "train").ok
    assert kube.calls.count("patch_job_status") == writes  # a resync says it once
    kube.serves_workloads = True  # Kueue installed: the next reconcile queues the job
    assert rec.reconcile("ml", "train").ok
    assert kube.workload is not None and kube.job["status"]["phase"] == "Queued"
