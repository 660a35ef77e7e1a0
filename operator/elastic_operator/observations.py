"""What a reconcile reads about one job, behind one small interface.

`Observations` is all the reconciler sees of the cluster: the job, its JobSet, its pods,
their nodes, the JobSet's Kueue Workload and the newest checkpoint scan.
`ApiObservations` reads them from the API server (kube.py), nodes from the node watch
(NodeIndex) and scans from the CheckpointScanner; a watch-fed cache can take its place
without touching the reconciler.
"""
from __future__ import annotations

from collections.abc import Collection
from typing import Any, Protocol

from elastic_api.models import CheckpointStatus
from elastic_operator.kube import Kube
from elastic_operator.node_index import NodeIndex
from elastic_operator.observed import (
    ObservedJob,
    ObservedJobSet,
    ObservedNode,
    ObservedPod,
    ObservedPool,
    ObservedWorkload,
    job_from_dict,
    jobset_from_dict,
    node_from_dict,
    pod_from_dict,
    workload_from_dict,
)
from elastic_operator.scanner import CheckpointScanner


class Observations(Protocol):
    def job(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The ElasticTrainingJob as stored (raw: its status is parsed leniently later)."""
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

    def checkpoint(self, namespace: str, name: str, directory: str) -> CheckpointStatus | None:
        """The newest checkpoint scan finished since the last call (None: none)."""
        ...

    def pools(self, namespace: str, job: str, accelerator: str,
              topology: str) -> tuple[ObservedPool, ...]:
        """The node pools of this TPU shape (for hot spares and quarantine)."""
        ...

    def worker_jobs(self, namespace: str, jobset: str) -> dict[int, ObservedJob]:
        """The JobSet's worker Jobs by slice index."""
        ...


class ApiObservations:
    def __init__(self, kube: Kube, nodes: NodeIndex, scanner: CheckpointScanner) -> None:
        self.kube = kube
        self.node_index = nodes
        self.scanner = scanner

    def job(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.kube.get_job(namespace, name)

    def jobset(self, namespace: str, name: str) -> ObservedJobSet | None:
        raw = self.kube.get_jobset(namespace, name)
        return jobset_from_dict(raw) if raw is not None else None

    def pods(self, namespace: str, job: str) -> tuple[ObservedPod, ...]:
        return tuple(pod_from_dict(p) for p in self.kube.list_job_pods(namespace, job))

    def nodes(self, names: Collection[str]) -> dict[str, ObservedNode]:
        known = self.node_index.nodes(names)
        missing = set(names) - set(known)
        if missing:  # not seen on the node watch yet
            known.update((n.name, n) for n in map(node_from_dict, self.kube.get_nodes(missing)))
        return known

    def workload(self, namespace: str, jobset_uid: str) -> ObservedWorkload | None:
        found = self.kube.list_workloads(namespace, jobset_uid)
        if not found:
            return None
        # One per JobSet; should Kueue ever hold two (one replacing the other), the newest.
        newest = max(found, key=lambda w: str(w.get("metadata", {}).get("creationTimestamp")))
        return workload_from_dict(newest)

    def checkpoint(self, namespace: str, name: str, directory: str) -> CheckpointStatus | None:
        return self.scanner.latest((namespace, name), directory)

    def pools(self, namespace: str, job: str, accelerator: str,
              topology: str) -> tuple[ObservedPool, ...]:
        return self.node_index.pools(accelerator, topology, (namespace, job))

    def worker_jobs(self, namespace: str, jobset: str) -> dict[int, ObservedJob]:
        jobs = [job_from_dict(j) for j in self.kube.list_worker_jobs(namespace, jobset)]
        # The live Job of a slice wins over one being deleted.
        ordered = sorted(jobs, key=lambda j: (not j.deleting, j.name))
        return {j.slice_index: j for j in ordered if j.slice_index is not None}
