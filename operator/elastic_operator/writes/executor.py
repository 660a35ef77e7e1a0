"""Executes the typed actions of a reconcile's plan (core/plan.py): create the JobSet or
the Workload (and what they need), suspend or resume the JobSet, and the Workload's
writes. Each returns the object as the write left it, for the rest of the reconcile.

An object the spec renders to that the API server refuses (`Refused`) is reported on
the job as InvalidSpec, once: raising would only repeat the refusal at every resync.
"""
from __future__ import annotations

import logging
from typing import Any, assert_never

from elastic_api.names import MULTIKUEUE_CONTROLLER
from elastic_operator.client.kube import ApiError, Kube
from elastic_operator.core.plan import (
    AnnotateDispatchedTo,
    CreateObject,
    PatchJobSetSuspend,
    Plan,
    ReleaseEvictedWorkload,
    SetWorkloadActive,
    SetWorkloadCondition,
)
from elastic_operator.model.objects import (
    ObservedJobSet,
    ObservedWorkload,
    jobset_from_dict,
    workload_from_dict,
)
from elastic_operator.model.result import Refused
from elastic_operator.watch.job_reader import JobReader

logger = logging.getLogger("elastic_operator")

# The API server's reason in a condition message: enough to act on, bounded.
MAX_REFUSAL_MESSAGE = 1024


def refusal_message(obj: dict[str, Any], error: ApiError) -> str:
    """Why the job cannot run: the object the API server refused and its reason."""
    reason = error.message.strip().rstrip(".")
    if len(reason) > MAX_REFUSAL_MESSAGE:
        reason = reason[:MAX_REFUSAL_MESSAGE - 3] + "..."
    return (f"the API server refused the {obj.get('kind')} "
            f"{obj.get('metadata', {}).get('name')} rendered from this spec "
            f"(HTTP {error.status}): {reason}")


class ActionExecutor:
    def __init__(self, kube: Kube, reader: JobReader) -> None:
        self.kube = kube
        self.reader = reader

    def execute(self, plan: Plan, jobset: ObservedJobSet | None,
                workload: ObservedWorkload | None,
                ) -> tuple[ObservedJobSet | None, ObservedWorkload | None]:
        """Run the plan's actions in order; the JobSet and the Workload as the last
        writes returned them. Refused: the API server refused an object to create."""
        for action in plan.actions:
            match action:
                case CreateObject() if action.kind == "Workload":
                    workload = self._create_workload(action) or workload
                case CreateObject():
                    jobset = self._create(action) or jobset
                case PatchJobSetSuspend():
                    patched = self.kube.patch_jobset_suspend(action.namespace, action.jobset,
                                                             action.suspend)
                    logger.info("%s JobSet %s/%s", "suspended" if action.suspend else "resumed",
                                action.namespace, action.jobset)
                    jobset = jobset_from_dict(patched)
                case SetWorkloadActive():
                    patched = self.kube.patch_workload_active(
                        action.namespace, action.workload, action.active,
                        action.suspended_after_worker_lost)
                    logger.info("%s Workload %s/%s%s", "reactivated" if action.active
                                else "deactivated", action.namespace, action.workload,
                                "" if action.suspended_after_worker_lost is None else
                                " (its worker cluster was lost; redispatch not allowed)")
                    workload = workload_from_dict(patched)
                case ReleaseEvictedWorkload():
                    patched = self.kube.patch_workload_status(action.namespace,
                                                              action.workload,
                                                              list(action.ops))
                    logger.info("Workload %s/%s: evicted, its quota released (the job "
                                "runs in no pod here)", action.namespace, action.workload)
                    workload = workload_from_dict(patched)
                case AnnotateDispatchedTo():
                    self.kube.annotate_dispatched_to(action.namespace, action.name,
                                                     action.cluster)
                    logger.info("%s/%s: dispatched to %s", action.namespace, action.name,
                                action.cluster or "no cluster (taken back)")
                case SetWorkloadCondition():
                    patched = self.kube.apply_workload_condition(
                        action.namespace, action.workload, action.condition)
                    logger.info("Workload %s/%s: %s %s (%s)", action.namespace,
                                action.workload, action.condition["type"],
                                action.condition["status"], action.condition["reason"])
                    workload = workload_from_dict(patched)
                case _:
                    assert_never(action)
        return jobset, workload

    def _create_workload(self, action: CreateObject) -> ObservedWorkload | None:
        """Create a MultiKueue job's Workload; the Workload as it now is. Refused where
        this cluster does not serve Kueue's Workloads: retrying cannot help until Kueue is
        installed, and the user must hear why the job does not queue."""
        try:
            created = self._created(action)
        except ApiError as e:
            if e.status != 404 or e.api_status:  # a Status body: the namespace, not the API
                raise
            raise Refused(
                f"the API server refused the Workload {action.obj['metadata'].get('name')} "
                f"rendered from this spec (HTTP 404): this cluster does not serve Kueue's "
                f"{action.obj.get('apiVersion')} Workloads, which spec.managedBy "
                f"{MULTIKUEUE_CONTROLLER} needs; install Kueue (with MultiKueue) and restart "
                "the operator, or remove spec.managedBy to run the job in this cluster"
            ) from e
        if created is not None:
            return workload_from_dict(created)
        meta = action.obj.get("metadata", {})
        return self.reader.dispatch_workload(meta.get("namespace", ""),
                                                   meta.get("name", ""))

    def _create(self, action: CreateObject) -> ObservedJobSet | None:
        """Create one object; for a JobSet, the JobSet as it now is."""
        meta = action.obj.get("metadata", {})
        created = self._created(action)
        if action.kind != "JobSet":
            return None
        if created is not None:
            return jobset_from_dict(created)
        return self.reader.jobset(meta.get("namespace", ""), meta.get("name", ""))

    def _created(self, action: CreateObject) -> dict[str, Any] | None:
        """Create one object: as created, or None if it existed."""
        meta = action.obj.get("metadata", {})
        try:
            created = self.kube.create(action.obj)
        except ApiError as e:
            if not e.refuses_object:
                raise
            # Admitted, yet what it renders to is refused (an int32 overflow, a quantity
            # or name the CRD schema cannot check): say so in the status, once; raising
            # would only repeat the refusal at every resync.
            raise Refused(refusal_message(action.obj, e)) from e
        # "found" is no news (a job whose JobSet is refused retries every resync).
        logger.log(logging.INFO if created is not None else logging.DEBUG, "%s %s %s/%s",
                   "created" if created is not None else "found", action.kind,
                   meta.get("namespace"), meta.get("name"))
        return created
