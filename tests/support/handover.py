"""What a handover of the leader Lease may do to a slice that fails meanwhile, seen from
the pods: the slice comes back once. A failure that no leader acts on for long enough is
first answered by the Job controller (a new pod of the failed worker Job, after its
backoff), and then again by the new leader, which recreates the Job: the trainer loses
the slice a second time (issue 68).

`ReadyPods` watches a slice's worker pods and records, for each, its Job and when it
first turned Ready; `came_back_once` says whether any pod of the failed Job turned Ready
after the failure.
"""
from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field

from kubernetes import client, watch

from elastic_devtools.background import BackgroundLoop

JOB_UID_LABEL = "batch.kubernetes.io/controller-uid"


@dataclass(frozen=True)
class ReadyPod:
    name: str
    job_uid: str
    ready_at: float  # time.monotonic when the watch first saw it Ready


def _is_ready(pod: client.V1Pod) -> bool:
    conditions = (pod.status.conditions if pod.status is not None else None) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions) \
        and pod.metadata.deletion_timestamp is None


@dataclass
class ReadyPods(BackgroundLoop):
    """The pods matching `selector` in `namespace` that turned Ready, by uid."""

    THREAD_NAME = "ready-pods"
    api: client.ApiClient
    namespace: str
    selector: str
    seen: dict[str, ReadyPod] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        """Start watching; returns once the pods Ready now are recorded (as Ready before
        anything a caller does next), so that a pod listed late never reads as one that
        turned Ready after a failure injected meanwhile."""
        self._listed = threading.Event()
        super().start()
        if not self._listed.wait(60):
            raise TimeoutError(f"listing the pods {self.selector} for the watch")

    def _list(self, core: client.CoreV1Api) -> str:
        """The pods as they are, recorded; the list's resourceVersion to watch from."""
        listed = core.list_namespaced_pod(self.namespace, label_selector=self.selector)
        for pod in listed.items:
            if _is_ready(pod):
                self._see(pod)
        self._listed.set()
        return str(listed.metadata.resource_version)

    def _run(self) -> None:
        core = client.CoreV1Api(self.api)
        version: str | None = None
        while not self._stop.is_set():
            if version is None:
                try:
                    version = self._list(core)
                except Exception:  # the API server busy: list again
                    self._stop.wait(0.1)
                    continue
            stream = watch.Watch()
            try:
                for event in stream.stream(core.list_namespaced_pod, self.namespace,
                                           label_selector=self.selector,
                                           resource_version=version, timeout_seconds=5):
                    pod = event["object"]
                    version = pod.metadata.resource_version
                    if _is_ready(pod):
                        self._see(pod)
                    if self._stop.is_set():
                        break
            except Exception:  # expired (410), the API server busy: list and watch again
                version = None
                self._stop.wait(0.1)
            finally:
                with contextlib.suppress(Exception):
                    stream.stop()

    def _see(self, pod: client.V1Pod) -> None:
        with self._lock:
            if pod.metadata.uid not in self.seen:
                job = (pod.metadata.labels or {}).get(JOB_UID_LABEL, "")
                self.seen[pod.metadata.uid] = ReadyPod(pod.metadata.name, job, time.monotonic())

    def ready_since(self, since: float) -> list[ReadyPod]:
        with self._lock:
            return sorted((p for p in self.seen.values() if p.ready_at >= since),
                          key=lambda p: p.ready_at)


def came_back_once(pods: ReadyPods, failed_job_uid: str, failed_at: float) -> list[str]:
    """Problems, in words: a pod of the failed worker Job that turned Ready after the
    failure (the Job controller brought the slice back before a leader recreated the
    Job, which then took it away again)."""
    again = [p for p in pods.ready_since(failed_at) if p.job_uid == failed_job_uid]
    return [f"pod {p.name} of the failed worker Job {failed_job_uid} turned Ready "
            f"{p.ready_at - failed_at:.1f} s after the failure: the slice came back on it, "
            "then went again with the recreated Job" for p in again]
