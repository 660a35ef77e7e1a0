"""The operator's calls to the Kubernetes API: its domain (jobs, JobSets, pods, nodes,
Workloads, Leases, Events), each one small method on the shared raw REST client
(elastic_api.kube.KubeClient: dicts in and out, `ApiError` with the API's Status parsed).
No other module of the operator sends a request (what its writes carry is kube_bodies.py's);
tests/unit/test_packaging_rbac.py maps every method here to the RBAC it needs.
"""
from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

from elastic_api.kube import (
    ApiError,
    KubeClient,
    NotLeading,
    WatchStalled,
    job_path,
    resource_path,
)
from elastic_api.kube.client import REQUEST_TIMEOUT_S
from elastic_api.names import (
    CRD_NAME,
    GROUP,
    KUEUE_GROUP,
    KUEUE_VERSION,
    KUEUE_WORKLOAD_PLURAL,
    MANAGED_BY,
    PLURAL,
    POD_PRIORITY_CLASS_GROUP,
    VERSION,
    WORKLOAD_PRIORITY_CLASS_PLURAL,
)
from elastic_operator.client import kube_bodies as bodies
from elastic_operator.core.status_events import StatusEvent

__all__ = ["ApiError", "Kube", "NotLeading", "WatchStalled", "collection_path", "job_path"]

JOBSET_API = "jobset.x-k8s.io/v1alpha2"
KUEUE_API = f"{KUEUE_GROUP}/{KUEUE_VERSION}"
MULTIKUEUE_CLUSTER_PLURAL = "multikueueclusters"
JOB_API = f"{GROUP}/{VERSION}"
LEASE_API = "coordination.k8s.io/v1"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"

# kind -> plural for the objects the renderer emits (anything else: lowercase + "s").
_PLURALS = {"JobSet": "jobsets", "ServiceAccount": "serviceaccounts", "Role": "roles",
            "RoleBinding": "rolebindings", "ConfigMap": "configmaps", "Service": "services",
            "Secret": "secrets", "Event": "events"}


def collection_path(api_version: str, kind: str, namespace: str | None) -> str:
    return resource_path(api_version, _PLURALS.get(kind, kind.lower() + "s"), namespace)


def _lease_path(namespace: str, name: str) -> str:
    return resource_path(LEASE_API, "leases", namespace, name)


def job_gone(error: ApiError) -> bool:
    """Whether `error` says the ElasticTrainingJob, or its namespace, went away."""
    return error.is_not_found(GROUP, PLURAL) or error.namespace_terminating


class JobAndPodWrites:
    """The writes that end or bound a Job's or a pod's life, each only if the object still
    has the uid the decision was made on (a precondition): deleting, and moving a Job's
    backoffLimit or deadline. Kube's, kept apart to keep each class a page."""

    client: KubeClient

    def delete_job(self, namespace: str, name: str, uid: str) -> bool:
        """Delete a Job and (Foreground) its pods first, only if it still has this uid;
        False if it is already gone or replaced (404 / 409 precondition failed)."""
        return self._delete(resource_path("batch/v1", "jobs", namespace, name),
                            {"propagationPolicy": "Foreground", "preconditions": {"uid": uid}})

    def delete_pod_now(self, namespace: str, name: str, uid: str) -> bool:
        """Delete a pod with grace period 0 (its kubelet is gone), only if it still has
        this uid; False if it is already gone."""
        return self._delete(resource_path("v1", "pods", namespace, name),
                            {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}})

    def _delete(self, path: str, options: dict[str, Any]) -> bool:
        try:
            self.client.delete(path, options)
            return True
        except ApiError as e:
            if e.status in (404, 409):
                return False
            raise

    def lower_job_backoff_limit(self, namespace: str, name: str, uid: str) -> bool:
        """Set the Job's spec.backoffLimit to 0 if it still has this uid (a JSON patch
        whose `test` is the precondition); False if it is gone or replaced."""
        return self._patch_job_if(resource_path("batch/v1", "jobs", namespace, name),
                                  bodies.backoff_limit_zero(uid))

    def _patch_job_if(self, path: str, ops: list[dict[str, Any]]) -> bool:
        """A JSON patch whose `test`s are its preconditions; False if the Job is gone,
        replaced or changed (422: a test op failed)."""
        try:
            self.client.patch(path, ops, patch_type="json")
            return True
        except ApiError as e:
            if e.status in (404, 409, 422):
                return False
            raise

    def fail_job(self, namespace: str, name: str, uid: str) -> bool:
        """End the Job now through its own deadline if it still has this uid (a JSON patch
        whose `test` is the precondition); False if it is gone or replaced."""
        return self._patch_job_if(resource_path("batch/v1", "jobs", namespace, name),
                                  bodies.job_ended_now(uid))

    def allow_job_failure(self, namespace: str, name: str, uid: str, failed: int,
                          limit: int) -> bool:
        """Raise the Job's spec.backoffLimit from `limit` to `failed` + 1 (JSON patch whose
        `test`s are the preconditions: the same Job, the same limit); False if it is gone,
        replaced or changed meanwhile."""
        return self._patch_job_if(resource_path("batch/v1", "jobs", namespace, name),
                                  bodies.backoff_limit_raised(uid, limit, failed))

    def delete_pod(self, namespace: str, name: str, uid: str) -> bool:
        """Delete a pod gracefully, only if it still has this uid; False if it is gone."""
        return self._delete(resource_path("v1", "pods", namespace, name),
                            {"preconditions": {"uid": uid}})


class Kube(JobAndPodWrites):
    def __init__(self, client: KubeClient) -> None:
        self.client = client

    @classmethod
    def from_environment(cls, *, pool_maxsize: int | None = None) -> Kube:
        """$KUBECONFIG, else in-cluster (the pod's service account), else ~/.kube/config;
        `pool_maxsize`: connections kept (a watch holds one while it runs)."""
        return cls(KubeClient.from_environment(pool_maxsize=pool_maxsize))

    # --- reads ---

    def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.client.get_or_none(job_path(namespace, name))

    def list_jobs(self, namespace: str | None, *, limit: int,
                  continue_token: str | None = None) -> dict[str, Any]:
        """One page of the jobs in `namespace` (None: every namespace)."""
        return self.client.list_page(resource_path(JOB_API, PLURAL, namespace), limit=limit,
                                     continue_token=continue_token)

    def watch_jobs(self, namespace: str | None, resource_version: str,
                   timeout_s: int) -> Iterator[dict[str, Any]]:
        return self.client.watch(resource_path(JOB_API, PLURAL, namespace), resource_version,
                                 timeout_s)

    def get_jobset(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.client.get_or_none(resource_path(JOBSET_API, "jobsets", namespace, name))

    def list_pods(self, namespace: str | None, label_selector: str, *, limit: int,
                  continue_token: str | None = None) -> dict[str, Any]:
        """One page of a pod list (a PodList: items, metadata.resourceVersion and
        metadata.continue), in `namespace` or every namespace."""
        return self.client.list_page(resource_path("v1", "pods", namespace), limit=limit,
                                     continue_token=continue_token,
                                     label_selector=label_selector)

    def watch_pods(self, namespace: str | None, label_selector: str, resource_version: str,
                   timeout_s: int) -> Iterator[dict[str, Any]]:
        """Watch events on pods from `resource_version` (KubeClient.watch)."""
        return self.client.watch(resource_path("v1", "pods", namespace), resource_version,
                                 timeout_s, label_selector=label_selector)

    def list_jobsets(self, namespace: str | None, label_selector: str, *, limit: int,
                     continue_token: str | None = None) -> dict[str, Any]:
        return self.client.list_page(resource_path(JOBSET_API, "jobsets", namespace),
                                     limit=limit, continue_token=continue_token,
                                     label_selector=label_selector)

    def watch_jobsets(self, namespace: str | None, label_selector: str, resource_version: str,
                      timeout_s: int) -> Iterator[dict[str, Any]]:
        return self.client.watch(resource_path(JOBSET_API, "jobsets", namespace),
                                 resource_version, timeout_s, label_selector=label_selector)

    def list_nodes(self, *, limit: int, continue_token: str | None = None) -> dict[str, Any]:
        return self.client.list_page("/api/v1/nodes", limit=limit,
                                     continue_token=continue_token)

    def watch_nodes(self, resource_version: str, timeout_s: int) -> Iterator[dict[str, Any]]:
        return self.client.watch("/api/v1/nodes", resource_version, timeout_s)

    def list_all_workloads(self, namespace: str | None, *, limit: int,
                           continue_token: str | None = None) -> dict[str, Any]:
        """One page of every Kueue Workload in `namespace` (None: every namespace)."""
        return self.client.list_page(resource_path(KUEUE_API, KUEUE_WORKLOAD_PLURAL, namespace),
                                     limit=limit, continue_token=continue_token)

    def watch_workloads(self, namespace: str | None, resource_version: str,
                        timeout_s: int) -> Iterator[dict[str, Any]]:
        return self.client.watch(resource_path(KUEUE_API, KUEUE_WORKLOAD_PLURAL, namespace),
                                 resource_version, timeout_s)

    # Our own CRD, by name: RBAC's resourceNames match the field selector.

    def list_crd(self, *, limit: int, continue_token: str | None = None) -> dict[str, Any]:
        return self.client.list_page(CRD_PATH, limit=limit, continue_token=continue_token,
                                     field_selector=bodies.by_name(CRD_NAME))

    def watch_crd(self, resource_version: str, timeout_s: int) -> Iterator[dict[str, Any]]:
        return self.client.watch(CRD_PATH, resource_version, timeout_s,
                                 field_selector=bodies.by_name(CRD_NAME))

    # Lease requests take a short timeout: a renewal must fail in time to be retried
    # before the renew deadline, not hang past it. They are tried at the election's own
    # period (back_off=False): a Retry-After longer than the renew deadline, waited out,
    # would give up the leadership to a standby that the same throttle holds back as well.

    def get_lease(self, namespace: str, name: str, *, timeout_s: float = REQUEST_TIMEOUT_S
                  ) -> dict[str, Any] | None:
        return self.client.get_or_none(_lease_path(namespace, name), timeout_s=timeout_s,
                                       back_off=False)

    def create_lease(self, namespace: str, lease: dict[str, Any], *,
                     timeout_s: float = REQUEST_TIMEOUT_S) -> dict[str, Any]:
        """Create the Lease; ApiError 409 if another replica created it first."""
        return self.client.create(
            resource_path(LEASE_API, "leases", namespace), lease, timeout_s=timeout_s,
            fenced=False, back_off=False)

    def patch_lease(self, namespace: str, name: str, spec: dict[str, Any],
                    resource_version: str, *, timeout_s: float = REQUEST_TIMEOUT_S
                    ) -> dict[str, Any]:
        """Write the Lease's spec, only if the Lease is still at `resource_version`
        (else ApiError 409 Conflict: another replica wrote it since we read it)."""
        return self.client.patch(
            _lease_path(namespace, name), bodies.lease_spec(spec, resource_version),
            timeout_s=timeout_s, fenced=False, back_off=False)

    def list_worker_jobs(self, namespace: str | None, label_selector: str, *, limit: int,
                         continue_token: str | None = None) -> dict[str, Any]:
        """One page of the worker Jobs (one per slice) of our JobSets: those with
        `label_selector` (the job-name label) that JobSet made for the worker
        replicatedJob, in `namespace` or every namespace."""
        return self.client.list_page(resource_path("batch/v1", "jobs", namespace), limit=limit,
                                     continue_token=continue_token,
                                     label_selector=bodies.worker_jobs(label_selector))

    def watch_worker_jobs(self, namespace: str | None, label_selector: str,
                          resource_version: str, timeout_s: int) -> Iterator[dict[str, Any]]:
        return self.client.watch(resource_path("batch/v1", "jobs", namespace),
                                 resource_version, timeout_s,
                                 label_selector=bodies.worker_jobs(label_selector))

    def get_workload(self, namespace: str, name: str) -> dict[str, Any] | None:
        """One Kueue Workload by name (None: none, or Kueue's API is not served)."""
        return self.client.get_or_none(
            resource_path(KUEUE_API, KUEUE_WORKLOAD_PLURAL, namespace, name))

    def get_multikueue_cluster(self, name: str) -> dict[str, Any] | None:
        """A MultiKueueCluster (cluster-scoped: a worker cluster of the manager's Kueue);
        None: none."""
        return self.client.get_or_none(
            resource_path(KUEUE_API, MULTIKUEUE_CLUSTER_PLURAL, None, name))

    def get_priority_class(self, group: str, name: str) -> dict[str, Any] | None:
        """A WorkloadPriorityClass (group kueue.x-k8s.io) or a pod PriorityClass
        (scheduling.k8s.io), cluster-scoped; None: none of that name."""
        if group == POD_PRIORITY_CLASS_GROUP:
            path = resource_path(f"{POD_PRIORITY_CLASS_GROUP}/v1", "priorityclasses", None, name)
        else:
            path = resource_path(KUEUE_API, WORKLOAD_PRIORITY_CLASS_PLURAL, None, name)
        return self.client.get_or_none(path)

    def annotate_dispatched_to(self, namespace: str, name: str, cluster: str | None
                               ) -> dict[str, Any]:
        """Set (None: remove) a MultiKueue job's DISPATCHED_TO_ANNOTATION, on the manager:
        the one write of a job's own metadata (its status is MultiKueue's copy)."""
        return self.client.patch(job_path(namespace, name), bodies.dispatched_to(cluster))

    def list_workloads(self, namespace: str, jobset_uid: str) -> list[dict[str, Any]]:
        """The Kueue Workloads of the JobSet with this uid; none where Kueue's API is not
        served."""
        found = self.client.get_or_none(
            resource_path(KUEUE_API, KUEUE_WORKLOAD_PLURAL, namespace),
            query={"labelSelector": bodies.workloads_of(jobset_uid)})
        return list((found or {}).get("items", []))

    def api_groups(self) -> dict[str, Any]:
        """Discovery: the APIGroupList of every group the server serves and its versions
        (GET /apis, which every authenticated client may read)."""
        return self.client.get("/apis")

    def server_version(self) -> dict[str, Any]:
        """Discovery: the API server's version (GET /version, which every authenticated
        client may read)."""
        return self.client.get("/version")

    def dry_run_job(self, namespace: str, job: dict[str, Any]) -> dict[str, Any]:
        """Create a batch Job as a server-side dry run (nothing is stored): the Job as the
        server would store it, after its defaulting and the fields it drops."""
        return self.client.create(f"/apis/batch/v1/namespaces/{namespace}/jobs", job,
                                  query={"dryRun": "All"})

    def serves(self, group_version: str, plural: str) -> bool:
        """Whether the API server serves this resource (discovery, which every
        authenticated client may read)."""
        found = self.client.get_or_none(f"/apis/{group_version}")
        return found is not None and any(
            isinstance(r, dict) and r.get("name") == plural for r in found.get("resources", []))

    # --- writes ---

    def create(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        """Create obj and return it as stored; None if it already exists (creation is
        idempotent)."""
        meta = obj.get("metadata", {})
        path = collection_path(obj["apiVersion"], obj["kind"], meta.get("namespace"))
        try:
            return self.client.create(path, obj)
        except ApiError as e:
            if e.status == 409 and e.status_reason in ("AlreadyExists", ""):
                return None
            raise

    def patch_jobset_suspend(self, namespace: str, name: str, suspend: bool) -> dict[str, Any]:
        """Set the JobSet's spec.suspend, marked as the operator's suspension (the mark goes on
        resume); the JobSet as patched."""
        return self.client.patch(resource_path(JOBSET_API, "jobsets", namespace, name),
                                 bodies.jobset_suspend(suspend))

    def patch_workload_active(self, namespace: str, name: str, active: bool,
                              suspended_after_worker_lost: str | None = None) -> dict[str, Any]:
        """Set a Kueue Workload's spec.active (what `kueuectl stop|resume workload` does),
        with the operator's marks (kube_bodies.workload_active); the Workload as patched."""
        return self.client.patch(
            resource_path(KUEUE_API, KUEUE_WORKLOAD_PLURAL, namespace, name),
            bodies.workload_active(active, suspended_after_worker_lost))

    def apply_workload_condition(self, namespace: str, name: str,
                                 condition: dict[str, Any]) -> dict[str, Any]:
        """Set one condition of a Kueue Workload's status by server-side apply (its
        conditions are a list keyed by type: Kueue's own stay as they are); the Workload
        as patched."""
        return self.client.patch(
            resource_path(KUEUE_API, KUEUE_WORKLOAD_PLURAL, namespace, name) + "/status",
            bodies.workload_condition(KUEUE_API, namespace, name, condition),
            patch_type="apply", query={"fieldManager": MANAGED_BY, "force": "true"})

    def patch_workload_status(self, namespace: str, name: str,
                              ops: list[dict[str, Any]]) -> dict[str, Any]:
        """A JSON patch (RFC 6902, with its tests) of a Kueue Workload's status; the
        Workload as patched (ApiError 422 when a test fails: it changed meanwhile)."""
        return self.client.patch(
            resource_path(KUEUE_API, KUEUE_WORKLOAD_PLURAL, namespace, name) + "/status",
            ops, patch_type="json")

    def get_batch_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A Job (the head's, before a trainer restart), or None if it is gone."""
        return self.client.get_or_none(resource_path("batch/v1", "jobs", namespace, name))

    def label_node(self, name: str, labels: dict[str, str | None],
                   annotations: dict[str, str | None]) -> None:
        """Merge labels and annotations into a node (None removes one)."""
        self.client.patch(resource_path("v1", "nodes", None, name),
                          {"metadata": {"labels": labels, "annotations": annotations}})

    def patch_job_status(self, namespace: str, name: str, patch: dict[str, Any],
                         resource_version: str | None = None) -> dict[str, Any] | None:
        """Merge-patch the status; the job as the write left it (its new resourceVersion
        in it: the next reconcile reads it rather than GET the job again). With
        `resource_version`, only if the job is still at that version (else ApiError 409
        Conflict): no two writers both apply a change computed from the same old status."""
        patched = self.client.patch(job_path(namespace, name) + "/status",
                                    bodies.if_at_version(patch, resource_version))
        return patched if isinstance(patched, dict) else None

    # --- reviews (who scrapes /metrics): they store nothing, so a standby sends them too

    def review_token(self, token: str) -> dict[str, Any]:
        """The API server's TokenReview of `token`: its status (authenticated, user)."""
        reviewed = self.client.create("/apis/authentication.k8s.io/v1/tokenreviews",
                                      bodies.token_review(token), fenced=False,
                                      back_off=False)
        return dict((reviewed or {}).get("status") or {})

    def review_metrics_access(self, user: dict[str, Any], path: str) -> dict[str, Any]:
        """The API server's SubjectAccessReview: may `user` GET the URL `path`? Its status
        (allowed, reason)."""
        reviewed = self.client.create(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            bodies.metrics_access_review(user, path), fenced=False, back_off=False)
        return dict((reviewed or {}).get("status") or {})

    def post_event(self, job: dict[str, Any], event: StatusEvent, now: datetime,
                   name: str | None = None) -> bool:
        """Post an Event on the job; False if one of this `name` exists already (the same
        status change, posted before by this or another replica)."""
        body = bodies.event(job, event, now, name)
        namespace = body["metadata"]["namespace"]
        try:
            self.client.create(resource_path("v1", "events", namespace), body)
        except ApiError as e:
            if name and e.status == 409 and e.status_reason == "AlreadyExists":
                return False
            raise
        return True
