"""The stand-in API server of a MultiKueue manager cluster: the job (StandInKube), its
Workload, the MultiKueueClusters and the priority classes, with the writes the manager's
operator makes (the Workload's spec.active with its marks, a JSON patch of its status, one
condition applied; the job's dispatched-to annotation)."""
from __future__ import annotations

import copy
from typing import Any

from elastic_api.names import (
    DISPATCHED_TO_ANNOTATION,
    SUSPENDED_AFTER_WORKER_LOST_ANNOTATION,
    SUSPENDED_BY_OPERATOR_ANNOTATION,
)
from tests.support.stand_in_kube import StandInKube


def worker_cluster(active: bool, name: str = "worker-1") -> dict[str, Any]:
    """A MultiKueueCluster as the manager's Kueue keeps it."""
    reason, message = ("Active", "Connected") if active else \
        ("ClientConnectionFailed", "dial tcp 127.0.0.1:6443: connect: connection refused")
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueCluster",
            "metadata": {"name": name},
            "status": {"conditions": [{"type": "Active", "status": str(active),
                                       "reason": reason, "message": message,
                                       "lastTransitionTime": "2026-11-29T12:00:40Z"}]}}


def apply_json_patch(obj: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 as the API server applies the operator's: test, replace, add (a key, or
    `-` to append), remove; a failed test raises (the API server answers 422)."""
    out = copy.deepcopy(obj)
    for op in ops:
        *parents, last = op["path"].strip("/").split("/")
        node: Any = out
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        key: Any = int(last) if isinstance(node, list) and last != "-" else last
        if op["op"] == "test":
            assert node[key] == op["value"], f"test failed at {op['path']}"
        elif op["op"] == "replace":
            node[key] = copy.deepcopy(op["value"])
        elif op["op"] == "add" and key == "-":
            node.append(copy.deepcopy(op["value"]))
        elif op["op"] == "add":
            node[key] = copy.deepcopy(op["value"])
        elif op["op"] == "remove":
            del node[key]
        else:
            raise AssertionError(f"unexpected op {op}")
    return out


class ManagerKube(StandInKube):
    """The manager cluster: the job, its Workload (None until created), the worker
    clusters (worker-1 Active) and the priority classes by (group, name) (none)."""

    def __init__(self, job: dict[str, Any]) -> None:
        super().__init__(job)
        self.workload: dict[str, Any] | None = None
        self.clusters: dict[str, dict[str, Any]] = {"worker-1": worker_cluster(True)}
        self.priority_classes: dict[tuple[str, str], dict[str, Any]] = {}

    def get_priority_class(self, group: str, name: str) -> dict[str, Any] | None:
        self._call("get_priority_class")
        return copy.deepcopy(self.priority_classes.get((group, name)))

    def annotate_dispatched_to(self, namespace: str, name: str, cluster: str | None
                               ) -> dict[str, Any]:
        self._call("annotate_dispatched_to")
        annotations = self.job["metadata"].setdefault("annotations", {})
        if cluster is None:
            annotations.pop(DISPATCHED_TO_ANNOTATION, None)
        else:
            annotations[DISPATCHED_TO_ANNOTATION] = cluster
        self._bump()
        return copy.deepcopy(self.job)

    def get_workload(self, namespace: str, name: str) -> dict[str, Any] | None:
        self._call("get_workload")
        return copy.deepcopy(self.workload)

    def get_multikueue_cluster(self, name: str) -> dict[str, Any] | None:
        self._call("get_multikueue_cluster")
        return copy.deepcopy(self.clusters.get(name))

    def create(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        created = super().create(obj)
        if obj["kind"] == "Workload":
            self.workload = copy.deepcopy(obj)
        return created

    def patch_workload_active(self, namespace: str, name: str, active: bool,
                              suspended_after_worker_lost: str | None = None) -> dict[str, Any]:
        self._call("patch_workload_active")
        assert self.workload is not None
        self.workload["spec"]["active"] = active
        annotations = self.workload["metadata"].setdefault("annotations", {})
        for key, value in ((SUSPENDED_BY_OPERATOR_ANNOTATION, None if active else "true"),
                           (SUSPENDED_AFTER_WORKER_LOST_ANNOTATION,
                            None if active else suspended_after_worker_lost)):
            if value is None:
                annotations.pop(key, None)
            else:
                annotations[key] = value
        return copy.deepcopy(self.workload)

    def patch_workload_status(self, namespace: str, name: str,
                              ops: list[dict[str, Any]]) -> dict[str, Any]:
        self._call("patch_workload_status")
        assert self.workload is not None
        self.workload = apply_json_patch(self.workload, ops)
        return copy.deepcopy(self.workload)

    def apply_workload_condition(self, namespace: str, name: str,
                                 condition: dict[str, Any]) -> dict[str, Any]:
        self._call("apply_workload_condition")
        assert self.workload is not None
        conditions = self.workload.setdefault("status", {}).setdefault("conditions", [])
        conditions[:] = [c for c in conditions if c["type"] != condition["type"]]
        conditions.append(copy.deepcopy(condition))
        return copy.deepcopy(self.workload)
