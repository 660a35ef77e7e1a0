"""Slice health from the job's worker pods (the simulated backend in a cluster).

`PodReadiness` keeps this job's worker pods in a list+watch cache (elastic_api.kube's
Informer, the one the operator keeps its caches with) and says which slices have their
expected number of Ready pods. It is a `SliceHealthSource` (see simulated_faults.py).
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from elastic_api.budgets import known_hosts_per_slice, spec_of
from elastic_api.kube import Backoff, Informer, Key, KubeClient, job_path, resource_path
from elastic_api.names import JOB_INDEX_LABEL, worker_pods_selector

log = logging.getLogger(__name__)


# A watch request lasts WATCH_SECONDS (the API server ends it; the next one resumes from
# the last resourceVersion); one silent for 5 s longer is a dead connection.
WATCH_SECONDS = 30
# After an error, list again after 0.05 s, doubling per failed attempt up to 5 s.
RELIST_BACKOFF = Backoff(base_s=0.05, cap_s=5.0)
PAGE_SIZE = 500


@dataclass(frozen=True)
class WorkerPod:
    slice: int
    ready: bool  # the Ready condition is True and the pod is not being deleted
    expected: int  # Ready pods its slice needs


def slice_readiness(pods: Iterable[WorkerPod]) -> dict[int, tuple[int, int]]:
    """{slice: (Ready pods, pods needed)} for every slice that has pods."""
    out: dict[int, tuple[int, int]] = {}
    for pod in pods:
        ready, expected = out.get(pod.slice, (0, 0))
        out[pod.slice] = (ready + int(pod.ready), max(expected, pod.expected))
    return out


class PodReadiness:
    """Slice health from this job's worker pods: a slice is up when it has its expected
    number of Ready pods. Pods are selected by `elastic.pathways.dev/job-name=<job>` and
    `jobset.sigs.k8s.io/replicatedjob-name=worker`; the slice is the pod label
    `jobset.sigs.k8s.io/job-index`. Expected pods per slice: `hosts_per_slice` (env
    ETJ_HOSTS_PER_SLICE), else the VMs per slice of the job's TPU shape (the trainer may
    `get` its ElasticTrainingJob), else the owning Job's `spec.parallelism`, else 1.

    `start` lists the pods once; then a background thread watches them from the list's
    resourceVersion, so a pod that turns NotReady is seen as soon as the API server sends
    the change. Any error (an expired resourceVersion, a dropped or stalled connection, a
    failed request) starts again with a list, after a backoff that grows with each
    failure in a row (RELIST_BACKOFF); meanwhile the last known health stays.
    """

    def __init__(self, namespace: str, job_name: str, total_slices: int,
                 hosts_per_slice: int | None = None, client: KubeClient | None = None) -> None:
        self.namespace, self.job_name, self.total_slices = namespace, job_name, total_slices
        self.hosts_per_slice = hosts_per_slice
        self.selector = worker_pods_selector(job_name)
        self.lists = 0  # successful lists so far: one at start, one per recovered error
        self._job_parallelism: dict[str, int] = {}
        self._down: dict[int, float] = {i: time.time() for i in range(total_slices)}
        self._losses: dict[int, int] = {}  # times each slice went from up to down
        self._lock = threading.Lock()  # guards _down and _losses
        self._client = client  # by default one from the environment, at start
        self._pods: Informer[WorkerPod] = Informer(
            "worker pods", self._list_page, self._watch, self._worker_pod,
            index=lambda _key, pod: pod.slice, on_change=self._changed,
            on_relist=self._listed, backoff=RELIST_BACKOFF, relist_on_error=True, logger=log)

    def start(self) -> None:
        if self._client is None:
            self._client = KubeClient.from_environment()
        if not self.hosts_per_slice:
            self.hosts_per_slice = self._hosts_from_job()
        # Every slice stays down until a list succeeds.
        self._pods.start(list_first=True)

    def close(self) -> None:
        self._pods.stop()

    def on_phase(self, phase: str, step: int) -> None:
        pass

    def replace(self, slices: list[int]) -> bool:
        return False  # the operator recreates their worker Jobs: the pods say when

    def down_slices(self) -> dict[int, float]:
        with self._lock:
            return dict(self._down)

    def losses(self) -> dict[int, int]:
        with self._lock:
            return dict(self._losses)

    @property
    def watching(self) -> bool:
        """The background thread is alive (it never gives up before `close`)."""
        return self._pods.alive

    # --- the informer's calls ---

    def _list_page(self, token: str | None) -> dict[str, Any]:
        assert self._client is not None
        return self._client.list_page(resource_path("v1", "pods", self.namespace),
                                      limit=PAGE_SIZE, continue_token=token,
                                      label_selector=self.selector, timeout_s=10)

    def _watch(self, resource_version: str) -> Iterator[dict[str, Any]]:
        assert self._client is not None
        return self._client.watch(resource_path("v1", "pods", self.namespace),
                                  resource_version, WATCH_SECONDS,
                                  label_selector=self.selector)

    def _listed(self, _resource: str, _reason: str, _objects: int) -> None:
        self.lists += 1

    def _changed(self, _key: Key, old: WorkerPod | None, new: WorkerPod | None) -> None:
        self._update({pod.slice for pod in (old, new) if pod is not None})

    # --- what a pod says ---

    def _hosts_from_job(self) -> int | None:
        """The VMs per slice of the job's TPU shape, read as the operator reads it (None:
        the Jobs' parallelism says)."""
        assert self._client is not None
        try:
            obj = self._client.get(job_path(self.namespace, self.job_name), timeout_s=10)
        except Exception as err:  # fall back to the Jobs' parallelism
            log.info("hosts per slice from job %s/%s: %s", self.namespace, self.job_name,
                     str(err).splitlines()[0] if str(err) else type(err).__name__)
            return None
        spec = spec_of(obj)
        hosts = None if spec is None else known_hosts_per_slice(spec)
        if hosts is None:
            log.info("hosts per slice from job %s/%s: no TPU shape in its spec that "
                     "parses; from the Jobs' parallelism", self.namespace, self.job_name)
        return hosts

    def _expected(self, meta: dict[str, Any]) -> int:
        if self.hosts_per_slice:
            return self.hosts_per_slice
        for owner in meta.get("ownerReferences") or []:
            if owner.get("kind") != "Job":
                continue
            name = str(owner.get("name", ""))
            if name not in self._job_parallelism:
                self._job_parallelism[name] = self._parallelism(name)
            return self._job_parallelism[name]
        return 1

    def _parallelism(self, job: str) -> int:
        assert self._client is not None
        try:
            found = self._client.get(resource_path("batch/v1", "jobs", self.namespace, job),
                                     timeout_s=5)
            return int((found.get("spec") or {}).get("parallelism") or 1)
        except Exception as err:
            log.warning("reading Job %s for its parallelism: %s; expecting 1 pod per slice "
                        "(set ETJ_HOSTS_PER_SLICE)", job, err)
            return 1

    def _worker_pod(self, pod: dict[str, Any]) -> WorkerPod | None:
        """What the cache keeps of a pod (None: not a worker pod of a slice)."""
        meta = pod.get("metadata") or {}
        try:
            index = int((meta.get("labels") or {})[JOB_INDEX_LABEL])
        except (KeyError, ValueError):
            return None
        conditions = (pod.get("status") or {}).get("conditions") or []
        ready = meta.get("deletionTimestamp") is None and any(
            c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
        return WorkerPod(index, ready, self._expected(meta))

    def _update(self, slices: set[int]) -> None:
        """Mark these slices up or down from their pods as the cache has them now."""
        now = time.time()
        with self._lock:
            for index in sorted(slices & set(range(self.total_slices))):
                counts = slice_readiness(self._pods.indexed(index).values())
                ready, expected = counts.get(index, (0, 0))
                if index in counts and ready >= expected:
                    self._down.pop(index, None)
                elif index not in self._down:
                    self._down[index] = now
                    self._losses[index] = self._losses.get(index, 0) + 1
                    log.info("slice %d is down (%d/%d pods Ready)", index, ready,
                             expected or 1)
