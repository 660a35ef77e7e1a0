"""Slice health from the job's worker pods (the simulated backend in a cluster).

`PodReadiness` lists this job's worker pods once, then watches them, and says which slices
have their expected number of Ready pods. It is a `SliceHealthSource` (see faults.py).
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from elastic_api.names import JOB_INDEX_LABEL, worker_pods_selector

log = logging.getLogger(__name__)


# A watch request lasts WATCH_SECONDS (the API server ends it; the next one resumes from
# the last resourceVersion), so a read that stalls past WATCH_READ_TIMEOUT_S is a dead
# connection that nobody reset.
WATCH_SECONDS = 30
WATCH_READ_TIMEOUT_S = WATCH_SECONDS + 15
# After an error, list again after 0.05 s, doubling per failed attempt up to 5 s.
RELIST_BACKOFF_S = (0.05, 5.0)


def relist_delay(failures: int) -> float:
    """Seconds to wait before listing again after `failures` attempts in a row failed."""
    first, longest = RELIST_BACKOFF_S
    return float(min(longest, first * 2 ** max(failures - 1, 0)))


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

    A background thread lists the pods once (`poll_once`), then watches them from the
    list's resourceVersion, so a pod that turns NotReady is seen as soon as the API
    server sends the change. Any error (an expired resourceVersion, a dropped or stalled
    connection, a failed request) starts again with a list, after a backoff that grows
    with each failure in a row (RELIST_BACKOFF_S); meanwhile the last known health stays.
    """

    def __init__(self, namespace: str, job_name: str, total_slices: int,
                 hosts_per_slice: int | None = None, core_api: Any = None) -> None:
        self.namespace, self.job_name, self.total_slices = namespace, job_name, total_slices
        self.hosts_per_slice = hosts_per_slice
        self.selector = worker_pods_selector(job_name)
        self.lists = 0  # successful lists so far: one at start, one per recovered error
        self._job_parallelism: dict[str, int] = {}
        self._pods: dict[str, WorkerPod] = {}  # by pod name; guarded by _lock, as _down
        self._down: dict[int, float] = {i: time.time() for i in range(total_slices)}
        self._losses: dict[int, int] = {}  # times each slice went from up to down
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._watch: Any = None
        self._resource_version: str | None = None
        self._core: Any = core_api  # a CoreV1Api; by default one from the kubeconfig
        self._batch: Any = None

    def start(self) -> None:
        if self._core is None:
            from kubernetes import client

            from elastic_trainer.report import kube_api_client

            api = kube_api_client()
            self._core, self._batch = client.CoreV1Api(api), client.BatchV1Api(api)
            if not self.hosts_per_slice:
                self.hosts_per_slice = self._hosts_from_job(client.CustomObjectsApi(api))
        try:
            self._resource_version = self.poll_once()
        except Exception as err:  # every slice stays down until a list succeeds
            log.warning("slice health: listing worker pods failed: %s; trying again",
                        _first_line(err))
        self._thread = threading.Thread(target=self._run, name="slice-health", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        watch = self._watch
        if watch is not None:
            watch.stop()  # shuts its socket down: the blocked read returns at once

    def on_phase(self, phase: str, step: int) -> None:
        pass

    def down_slices(self) -> dict[int, float]:
        with self._lock:
            return dict(self._down)

    def losses(self) -> dict[int, int]:
        with self._lock:
            return dict(self._losses)

    @property
    def watching(self) -> bool:
        """The background thread is alive (it never gives up before `close`)."""
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        from kubernetes import watch

        self._watch = watch.Watch()
        resource_version = self._resource_version
        # Attempts in a row that failed before a watch got anywhere (start's list counts).
        failures = 0 if resource_version else 1
        while not self._stop.is_set():
            watched_from = None
            try:
                if resource_version is None:
                    resource_version = self.poll_once()
                    if failures > 1:
                        log.info("slice health: listed worker pods again after %d failed "
                                 "attempt(s)", failures)
                watched_from = resource_version
                resource_version = self._watch_from(resource_version)
                failures = 0  # the server ended the watch: resume from where it was
            except Exception as err:
                if self._stop.is_set():
                    return
                if watched_from is not None and self._watch.resource_version != watched_from:
                    failures = 0  # events (or bookmarks) came through before it broke
                resource_version = None
                failures += 1
                if failures == 1:  # once per outage, not once per attempt
                    gone = getattr(err, "status", None) == 410
                    log.log(logging.INFO if gone else logging.WARNING,
                            "slice health: pod watch %s (%s: %s); listing worker pods again",
                            "expired" if gone else "broke", type(err).__name__,
                            _first_line(err))
                else:
                    log.debug("slice health: attempt %d failed: %s", failures, err)
                self._stop.wait(relist_delay(failures))

    def _watch_from(self, resource_version: str) -> str:
        """Apply pod events from `resource_version` until the server ends the watch;
        returns the resourceVersion to resume from. Raises on any error."""
        w = self._watch
        w.resource_version = resource_version
        for event in w.stream(self._core.list_namespaced_pod, self.namespace,
                              label_selector=self.selector, resource_version=resource_version,
                              allow_watch_bookmarks=True, timeout_seconds=WATCH_SECONDS,
                              _request_timeout=(10, WATCH_READ_TIMEOUT_S)):
            if self._stop.is_set():
                break
            if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                pod = event["object"]
                worker = self._worker_pod(pod) if event["type"] != "DELETED" else None
                with self._lock:
                    if worker is None:
                        self._pods.pop(pod.metadata.name, None)
                    else:
                        self._pods[pod.metadata.name] = worker
                    self._update_locked()
        return str(w.resource_version or resource_version)

    def _hosts_from_job(self, api: Any) -> int | None:
        from elastic_api.catalog import slice_shape
        from elastic_api.models import ElasticTrainingJob
        from elastic_api.names import GROUP, PLURAL, VERSION

        try:
            obj = api.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL,
                                                   self.job_name, _request_timeout=10)
            tpu = ElasticTrainingJob.model_validate(obj).spec.tpu
            return slice_shape(tpu.type, tpu.topology).vms
        except Exception as err:  # fall back to the Jobs' parallelism
            log.info("hosts per slice from job %s/%s: %s", self.namespace, self.job_name, err)
            return None

    def _expected(self, pod: Any) -> int:
        if self.hosts_per_slice:
            return self.hosts_per_slice
        for owner in pod.metadata.owner_references or []:
            if owner.kind != "Job":
                continue
            if owner.name not in self._job_parallelism:
                try:
                    job = self._batch.read_namespaced_job(owner.name, self.namespace,
                                                          _request_timeout=5)
                    self._job_parallelism[owner.name] = int(job.spec.parallelism or 1)
                except Exception as err:
                    log.warning("reading Job %s for its parallelism: %s; expecting 1 pod "
                                "per slice (set ETJ_HOSTS_PER_SLICE)", owner.name, err)
                    self._job_parallelism[owner.name] = 1
            return self._job_parallelism[owner.name]
        return 1

    def _worker_pod(self, pod: Any) -> WorkerPod | None:
        labels = pod.metadata.labels or {}
        try:
            index = int(labels[JOB_INDEX_LABEL])
        except (KeyError, ValueError):
            return None
        conditions = (pod.status.conditions if pod.status else None) or []
        ready = pod.metadata.deletion_timestamp is None and any(
            c.type == "Ready" and c.status == "True" for c in conditions)
        return WorkerPod(index, ready, self._expected(pod))

    def poll_once(self) -> str:
        """List the worker pods and replace what is known of them (the watch's re-list
        step); returns the list's resourceVersion, where a watch starts."""
        listing = self._core.list_namespaced_pod(self.namespace, label_selector=self.selector,
                                                 _request_timeout=10)
        pods = {}
        for pod in listing.items:
            worker = self._worker_pod(pod)
            if worker is not None:
                pods[pod.metadata.name] = worker
        with self._lock:
            self._pods = pods
            self._update_locked()
            self.lists += 1
        return str(listing.metadata.resource_version)

    def _update_locked(self) -> None:
        """Mark slices up or down from `_pods` (the caller holds `_lock`)."""
        counts = slice_readiness(self._pods.values())
        now = time.time()
        for index in range(self.total_slices):
            ready, expected = counts.get(index, (0, 0))
            if index in counts and ready >= expected:
                self._down.pop(index, None)
            elif index not in self._down:
                self._down[index] = now
                self._losses[index] = self._losses.get(index, 0) + 1
                log.info("slice %d is down (%d/%d pods Ready)", index, ready, expected or 1)


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
