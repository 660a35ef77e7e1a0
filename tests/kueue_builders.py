"""A Kueue Workload as the API server stores it (kueue.x-k8s.io/v1beta2, Kueue v0.17), in
the states the operator reads: waiting, admitted, preempted and requeued, deactivated.
The shapes are the ones tests/integration/test_kueue.py saw on the real Kueue.

Like tests/builders.py: each setter returns the wrapper, `.obj()` a deep copy and
`.build()` the operator's ObservedWorkload.
"""
from __future__ import annotations

import copy
from datetime import datetime
from typing import Any, Self

from elastic_api.models import ElasticTrainingJob
from elastic_api.names import (
    JOBSET_API_VERSION,
    KUEUE_GROUP,
    KUEUE_JOB_UID_LABEL,
    KUEUE_PRIORITY_CLASS_LABEL,
    KUEUE_QUEUE_NAME_LABEL,
    KUEUE_VERSION,
    SUSPENDED_BY_OPERATOR_ANNOTATION,
)
from elastic_operator.model.objects import ObservedWorkload, workload_from_dict
from tests.builders import T0, etj, iso

INSUFFICIENT = ("couldn't assign flavors to pod set worker: insufficient unused quota for "
                "google.com/tpu in flavor f, 48 more needed")


class WorkloadWrapper:
    def __init__(self, jobset: str = "article", namespace: str = "ns",
                 jobset_uid: str = "article-js-uid", queue: str = "lq") -> None:
        self._obj: dict[str, Any] = {
            "apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}", "kind": "Workload",
            "metadata": {
                "name": f"jobset-{jobset}-8f2c1", "namespace": namespace,
                "creationTimestamp": iso(T0),
                "labels": {KUEUE_JOB_UID_LABEL: jobset_uid},
                "ownerReferences": [{"apiVersion": JOBSET_API_VERSION, "kind": "JobSet",
                                     "name": jobset, "uid": jobset_uid,
                                     "controller": True, "blockOwnerDeletion": True}],
            },
            "spec": {"queueName": queue, "active": True, "priority": 0,
                     "podSets": [{"name": "pathways-head", "count": 1},
                                 {"name": "worker", "count": 12}]},
            "status": {},
        }

    @property
    def name(self) -> str:
        return str(self._obj["metadata"]["name"])

    def condition(self, type_: str, status: str, reason: str, message: str,
                  at: datetime) -> Self:
        conditions = self._obj["status"].setdefault("conditions", [])
        conditions[:] = [c for c in conditions if c["type"] != type_]
        conditions.append({"type": type_, "status": status, "reason": reason,
                           "message": message, "lastTransitionTime": iso(at),
                           "observedGeneration": 1})
        return self

    def pending(self, at: datetime, message: str = INSUFFICIENT) -> Self:
        return self.condition("QuotaReserved", "False", "Pending", message, at)

    def admitted(self, at: datetime, cluster_queue: str = "cq") -> Self:
        self._obj["status"]["admission"] = {"clusterQueue": cluster_queue,
                                            "podSetAssignments": []}
        self.condition("QuotaReserved", "True", "QuotaReserved",
                       f"Quota reserved in ClusterQueue {cluster_queue}", at)
        self.condition("Admitted", "True", "Admitted",
                       "The workload is admitted", at)
        for type_ in ("Evicted", "Preempted"):  # SetQuotaReservation resets them
            if any(c["type"] == type_ and c["status"] == "True"
                   for c in self._obj["status"].get("conditions", [])):
                self.condition(type_, "False", "QuotaReserved", "Previously: evicted", at)
        return self

    def evicted(self, at: datetime, reason: str, message: str) -> Self:
        """Kueue's eviction (Evict): Evicted True, then the quota released."""
        self.condition("Evicted", "True", reason, message, at)
        self._obj["status"].pop("admission", None)
        self.condition("QuotaReserved", "False", "Pending", message, at)
        return self.condition("Admitted", "False", "NoReservation",
                              "The workload has no reservation", at)

    def preempted(self, at: datetime, *, count: int | None = 1) -> Self:
        """Preempted in its ClusterQueue; count: Kueue's schedulingStats (None: a Kueue
        that keeps none)."""
        message = "Preempted to accommodate a workload (UID: 1f3a) due to prioritization " \
                  "in the ClusterQueue"
        self.evicted(at, "Preempted", message)
        self.condition("Preempted", "True", "InClusterQueue", message, at)
        self.condition("Requeued", "True", "Preempted", message, at)
        if count is not None:
            self.scheduling_stats(Preempted=count)
        return self

    def pods_ready(self, ready: bool, at: datetime, *, recovering: bool = True) -> Self:
        """waitForPodsReady's condition: True once every pod is Ready; False while not
        (WaitForRecovery once they had been, else WaitForStart)."""
        if ready:
            return self.condition("PodsReady", "True", "Recovered" if recovering else
                                  "Started", "All pods reached readiness and the workload "
                                  "is running", at)
        if recovering:
            return self.condition("PodsReady", "False", "WaitForRecovery",
                                  "At least one pod has failed, waiting for recovery", at)
        return self.condition("PodsReady", "False", "WaitForStart",
                              "Not all pods are ready or succeeded", at)

    def evicted_by_kueue(self, at: datetime, reason: str, message: str, *,
                         count: int = 1, requeue_at: datetime | None = None) -> Self:
        """One of Kueue's own evictions (PodsReadyTimeout, NodeFailures), with its count in
        schedulingStats and, for a PodsReadyTimeout, the requeuing backoff."""
        self.evicted(at, reason, message)
        self.scheduling_stats(**{reason: count})
        if reason == "PodsReadyTimeout":
            self.condition("Requeued", "False", reason, message, at)
            self.pods_ready(False, at, recovering=False)
            self._obj["status"]["requeueState"] = {"count": count} | (
                {"requeueAt": iso(requeue_at)} if requeue_at else {})
        else:
            self.condition("Requeued", "True", reason, message, at)
        return self

    def scheduling_stats(self, **counts: int) -> Self:
        self._obj["status"]["schedulingStats"] = {"evictions": [
            {"reason": reason, "underlyingCause": "", "count": count}
            for reason, count in counts.items()]}
        return self

    def active(self, active: bool = True, *, by_operator: bool = False) -> Self:
        self._obj["spec"]["active"] = active
        annotations = self._obj["metadata"].setdefault("annotations", {})
        if by_operator:
            annotations[SUSPENDED_BY_OPERATOR_ANNOTATION] = "true"
        else:
            annotations.pop(SUSPENDED_BY_OPERATOR_ANNOTATION, None)
        return self

    def deactivated(self, at: datetime, *, by_operator: bool) -> Self:
        """spec.active false, and Kueue's eviction for it."""
        self.active(False, by_operator=by_operator)
        return self.evicted(at, "Deactivated", "The workload is deactivated")

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self._obj)

    def build(self) -> ObservedWorkload:
        return workload_from_dict(self.obj())


def workload(jobset: str = "article", **kw: Any) -> WorkloadWrapper:
    return WorkloadWrapper(jobset, **kw)


def queued_job(queue: str = "lq", *, suspend: bool = False,
               priority_class: str | None = None) -> ElasticTrainingJob:
    """The article's job (tests.builders.article_job), labelled for a Kueue LocalQueue."""
    obj = etj().uid("uid-1").generation(1).suspend(suspend).obj()
    labels = {KUEUE_QUEUE_NAME_LABEL: queue}
    if priority_class is not None:
        labels[KUEUE_PRIORITY_CLASS_LABEL] = priority_class
    obj["metadata"]["labels"] = labels
    return ElasticTrainingJob.model_validate(obj)


# --- a MultiKueue job's Workload on the manager cluster -----------------------------------

MULTIKUEUE_CHECK = "mk-check"


def dispatched_workload(job: ElasticTrainingJob, at: datetime,
                        cluster: str = "worker-1") -> dict[str, Any]:
    """The job's Workload (render_workload) as Kueue keeps it once MultiKueue dispatched
    it: quota reserved, its MultiKueue check Ready, admitted, status.clusterName."""
    from elastic_operator.render import render_workload

    obj = render_workload(job)
    obj["metadata"]["namespace"] = job.metadata.namespace
    stamp = iso(at)
    obj["status"] = {
        "admission": {"clusterQueue": "cq", "podSetAssignments": []},
        "clusterName": cluster,
        "admissionChecks": [{"name": MULTIKUEUE_CHECK, "state": "Ready",
                             "message": f'The workload got reservation on "{cluster}"',
                             "lastTransitionTime": stamp}],
        "conditions": [
            {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
             "message": "Quota reserved in ClusterQueue cq", "lastTransitionTime": stamp},
            {"type": "Admitted", "status": "True", "reason": "Admitted",
             "message": "The workload is admitted", "lastTransitionTime": stamp}]}
    return obj


def retried_by_multikueue(obj: dict[str, Any], at: datetime,
                          why: str = "Admitting remote lost") -> dict[str, Any]:
    """Kueue v0.19.2 after MultiKueue set the check to Retry (`why`: its worker cluster
    unreachable past workerLostTimeout; "Workload evicted on worker cluster: ..." after
    the worker's Kueue evicted its copy): the Workload evicted, reason AdmissionCheck,
    status.clusterName cleared, checks reset to Pending; the quota stays reserved until
    the job's integration (the operator) says the job has stopped."""
    obj = copy.deepcopy(obj)
    status = obj["status"]
    status.pop("clusterName", None)
    status["admissionChecks"] = [{"name": MULTIKUEUE_CHECK, "state": "Pending",
                                  "message": "Reset to Pending after eviction. Previously: "
                                             "Retry", "lastTransitionTime": iso(at)}]
    status["conditions"].append(
        {"type": "Evicted", "status": "True", "reason": "AdmissionCheck",
         "message": f'Evicted due to AdmissionCheck in Retry state: "{MULTIKUEUE_CHECK}" '
                    f'({why}, Previously: "Ready")', "lastTransitionTime": iso(at)})
    return obj
