"""What a reconcile reads about one job, behind one small interface.

`JobReader` is all the reconciler sees of the cluster: the job, its JobSet, its pods,
their nodes, the JobSet's Kueue Workload and the newest checkpoint scan.
`CacheReader` reads the job, the JobSet, the pods and the worker Jobs from the
watch-fed caches (caches.py; the job fresh from the API server when asked: the status
write is conditional on the job's version, and a write refused for a newer one reads it
again), nodes from the NodeIndex (fed by the node cache),
the Workload from the API server (a list by the JobSet's uid: one object) and scans from
the CheckpointScanner: what one reconcile asks of the API server does not grow with the
job's size.
"""
from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any, Protocol

from elastic_api.catalog import slice_shape
from elastic_api.models import CheckpointStatus, ElasticTrainingJob, PoolStatus
from elastic_operator.checkpoints.scanner import CheckpointScanner
from elastic_operator.client.kube import Kube
from elastic_operator.model.objects import (
    ObservedJob,
    ObservedJobSet,
    ObservedNode,
    ObservedPod,
    ObservedPool,
    ObservedPriorityClass,
    ObservedWorkerCluster,
    ObservedWorkload,
    PriorityClassRef,
    jobset_from_dict,
    priority_class_from_dict,
    worker_cluster_from_dict,
    workload_from_dict,
)
from elastic_operator.watch.node_index import NodeIndex

# (namespace, job name) -> every pod of the job, from the pod cache (Caches.pods_of).
PodSource = Callable[[str, str], tuple[ObservedPod, ...]]
# (namespace, JobSet name) -> the JobSet as the JobSet cache last saw it (Caches.jobset).
JobSetSource = Callable[[str, str], ObservedJobSet | None]
# (namespace, name) -> the job as the job cache last saw it (Caches.job; a copy).
JobSource = Callable[[str, str], dict[str, Any] | None]
# (namespace, JobSet name) -> its worker Jobs as the cache last saw them (Caches.worker_jobs).
WorkerJobSource = Callable[[str, str], tuple[ObservedJob, ...]]
# (namespace, pod name) -> when the pod cache received its current version (time.time()).
SeenAtSource = Callable[[str, str], float | None]


class JobReader(Protocol):
    def job(self, namespace: str, name: str, *, fresh: bool = False
            ) -> dict[str, Any] | None:
        """The ElasticTrainingJob (raw: its status is parsed leniently later), as last
        seen or (`fresh`) as stored now."""
        ...

    def jobset(self, namespace: str, name: str) -> ObservedJobSet | None: ...

    def pods(self, namespace: str, job: str) -> tuple[ObservedPod, ...]:
        """Every pod of the job (label elastic.pathways.dev/job-name)."""
        ...

    def nodes(self, names: Collection[str]) -> dict[str, ObservedNode]:
        """The nodes of these names that exist."""
        ...

    def workload(self, namespace: str, jobset_uid: str) -> ObservedWorkload | None:
        """The Workload Kueue made for the JobSet with this uid (None: none). Read after
        the pods: Kueue evicts a Workload before its JobSet's pods go."""
        ...

    def dispatch_workload(self, namespace: str, name: str) -> ObservedWorkload | None:
        """The Workload the operator made for a MultiKueue job (by name; None: none), read
        from the API server: a Workload not seen yet must not pass for one deleted."""
        ...

    def worker_cluster(self, name: str) -> ObservedWorkerCluster | None:
        """The MultiKueueCluster of this name (None: none, or no MultiKueue here)."""
        ...

    def priority_class(self, ref: PriorityClassRef) -> ObservedPriorityClass | None:
        """The WorkloadPriorityClass or PriorityClass `ref` names (None: none)."""
        ...

    def checkpoint(self, namespace: str, name: str, directory: str) -> CheckpointStatus | None:
        """The newest checkpoint scan finished since the last call (None: none)."""
        ...

    def pools_of(self, job: ElasticTrainingJob) -> tuple[ObservedPool, ...]:
        """The node pools of the job's TPU shape, for hot spares and quarantine (none when
        it is not placed on TPUs)."""
        ...

    def worker_jobs(self, namespace: str, jobset: str) -> dict[int, ObservedJob]:
        """The JobSet's worker Jobs by slice index."""
        ...

    def pod_seen_at(self, namespace: str, pod: str) -> float | None:
        """When the pod's current version reached this process (time.time(); None:
        unknown): the start of the operator's own share of a detection."""
        ...

    def note_failures(self, namespace: str, job: str, uid: str,
                      pools: list[PoolStatus]) -> None:
        """What the job's new status says of its slice failures on each pool: the
        reconciles of other jobs read it (`pools`), as no job's status shows another's."""
        ...


class CacheReader:
    def __init__(self, kube: Kube, nodes: NodeIndex, scanner: CheckpointScanner, *,
                 pods: PodSource, jobsets: JobSetSource | None = None,
                 jobs: JobSource | None = None, worker_jobs: WorkerJobSource | None = None,
                 seen_at: SeenAtSource | None = None) -> None:
        self.kube = kube
        self.node_index = nodes
        self.scanner = scanner
        self.pod_source = pods
        self.jobset_source = jobsets
        self.job_source = jobs
        self.worker_job_source = worker_jobs
        self.seen_at_source = seen_at

    def job(self, namespace: str, name: str, *, fresh: bool = False
            ) -> dict[str, Any] | None:
        # A job missing from the cache is read from the API server (just created and not
        # seen yet, or gone).
        cached = self.job_source(namespace, name) \
            if self.job_source is not None and not fresh else None
        return cached if cached is not None else self.kube.get_job(namespace, name)

    def jobset(self, namespace: str, name: str) -> ObservedJobSet | None:
        # From the cache when it has it; its absence is confirmed by a GET (just created
        # and not seen yet, or really gone: taking the first for the second would report
        # the JobSet lost, for good).
        cached = self.jobset_source(namespace, name) if self.jobset_source else None
        if cached is not None:
            return cached
        raw = self.kube.get_jobset(namespace, name)
        return jobset_from_dict(raw) if raw is not None else None

    def pods(self, namespace: str, job: str) -> tuple[ObservedPod, ...]:
        return self.pod_source(namespace, job)

    def nodes(self, names: Collection[str]) -> dict[str, ObservedNode]:
        # The node cache holds every node once synced (reconciles wait for that): a
        # node missing from it is gone.
        return self.node_index.nodes(names)

    def workload(self, namespace: str, jobset_uid: str) -> ObservedWorkload | None:
        found = self.kube.list_workloads(namespace, jobset_uid)
        if not found:
            return None
        # One per JobSet; should Kueue ever hold two (one replacing the other), the newest.
        newest = max(found, key=lambda w: str(w.get("metadata", {}).get("creationTimestamp")))
        return workload_from_dict(newest)

    def dispatch_workload(self, namespace: str, name: str) -> ObservedWorkload | None:
        raw = self.kube.get_workload(namespace, name)
        return workload_from_dict(raw) if raw is not None else None

    def worker_cluster(self, name: str) -> ObservedWorkerCluster | None:
        raw = self.kube.get_multikueue_cluster(name)
        return worker_cluster_from_dict(raw) if raw is not None else None

    def priority_class(self, ref: PriorityClassRef) -> ObservedPriorityClass | None:
        raw = self.kube.get_priority_class(ref.group, ref.name)
        return priority_class_from_dict(ref, raw) if raw is not None else None

    def checkpoint(self, namespace: str, name: str, directory: str) -> CheckpointStatus | None:
        return self.scanner.latest((namespace, name), directory)

    def pools_of(self, job: ElasticTrainingJob) -> tuple[ObservedPool, ...]:
        if job.spec.placement != "TPU" and job.spec.backend != "pathways":
            return ()
        shape = slice_shape(job.spec.tpu.type, job.spec.tpu.topology)
        return self.node_index.pools(shape.family.accelerator_label, shape.topology,
                                     (job.metadata.namespace or "", job.metadata.name))

    def worker_jobs(self, namespace: str, jobset: str) -> dict[int, ObservedJob]:
        # From the cache: a Job missing there was just created (the record's own Job is
        # older than its pods' failure) or is gone, and either way there is nothing to do.
        jobs = self.worker_job_source(namespace, jobset) \
            if self.worker_job_source is not None else ()
        # The live Job of a slice wins over one being deleted.
        ordered = sorted(jobs, key=lambda j: (not j.deleting, j.name))
        return {j.slice_index: j for j in ordered if j.slice_index is not None}

    def pod_seen_at(self, namespace: str, pod: str) -> float | None:
        return self.seen_at_source(namespace, pod) if self.seen_at_source is not None else None

    def note_failures(self, namespace: str, job: str, uid: str,
                      pools: list[PoolStatus]) -> None:
        self.node_index.note_failures((namespace, job), uid, pools)
