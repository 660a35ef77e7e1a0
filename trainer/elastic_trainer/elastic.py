"""The elastic runtime: one interface, two backends.

`Backend` is what the training loop sees: the slices and their devices, which slices are
healthy, waiting for slices (with a timeout), and how a slice-down error looks.

- `SimulatedBackend` (CPU): the host's devices (`--xla_force_host_platform_device_count`)
  split into N equal slices. A `SliceHealthSource` says which slices are down: a fault
  schedule (`--fail-at STEP:SLICE`) or the readiness of the job's worker pods. When a slice
  of the current mesh is down, the training step raises `jax.errors.JaxRuntimeError` with
  `DATA_LOSS` in its message, the same error Pathways raises, so the recovery code is the
  same for both backends.
- `PathwaysBackend` (TPU): a thin layer over `pathwaysutils.elastic.manager.Manager`
  (devices grouped by `slice_index`, its health check, `wait_for_slices`,
  `is_error_due_to_slice_down`, and its monitor thread for slices that come back).
"""
from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from elastic_api.names import JOB_INDEX_LABEL, worker_pods_selector

log = logging.getLogger(__name__)

# Substrings of a JaxRuntimeError that mean a slice went down (as pathwaysutils reads them).
SLICE_DOWN_MARKERS = ("DATA_LOSS", "DEADLINE_EXCEEDED", "NOT_FOUND", "INTERNAL")


class ElasticRetriesExhausted(RuntimeError):
    reason = "ElasticRetriesExhausted"


class ElasticTimeout(RuntimeError):
    reason = "ElasticTimeout"


class ScaleUpSignal(Exception):
    """Raised at a step boundary when inactive slices are healthy again (replica resize)."""


def slice_down_error(slices: Sequence[int], detail: str = "is down") -> Exception:
    """The error a slice loss raises inside a step: a real `jax.errors.JaxRuntimeError`."""
    import jax

    which = ", ".join(str(s) for s in sorted(slices))
    noun = "slice" if len(slices) == 1 else "slices"
    return jax.errors.JaxRuntimeError(f"DATA_LOSS: {noun} {which} {detail}")


def is_slice_down_message(message: str) -> bool:
    return any(marker in message for marker in SLICE_DOWN_MARKERS)


# --- slice health sources (simulated backend) -------------------------------------------


class SliceHealthSource(Protocol):
    def start(self) -> None: ...

    def down_slices(self) -> dict[int, float]:
        """{slice: unix time it went down} for every slice that is down now."""
        ...

    def on_phase(self, phase: str, step: int) -> None:
        """The loop is at `phase` ("step", "restore", "checkpoint") of `step`."""
        ...

    def close(self) -> None: ...


@dataclass
class Fault:
    step: int
    slice: int
    phase: str = "step"  # "step": while STEP runs; "checkpoint": while the save of a
    #                      step >= STEP is written; "restore": during the first restore
    #                      after a failure at a step >= STEP
    back_at_step: int | None = None  # STEP-BACK: back when the loop reaches step BACK
    fired: bool = False

    @classmethod
    def parse(cls, text: str, total_slices: int) -> Fault:
        parts = text.split(":")
        try:
            if len(parts) not in (2, 3):
                raise ValueError
            first, _, back = parts[0].partition("-")
            step, slice_index = int(first), int(parts[1])
            back_at_step = int(back) if back else None
            phase = parts[2] if len(parts) == 3 else "step"
        except ValueError:
            raise ValueError(
                f"--fail-at {text!r}: expected STEP:SLICE (e.g. 23:1), STEP-BACK:SLICE "
                "(down from step STEP until the loop reaches step BACK), "
                "STEP:SLICE:checkpoint or STEP:SLICE:restore"
            ) from None
        if phase not in ("step", "checkpoint", "restore"):
            raise ValueError(f"--fail-at {text!r}: phase must be step, checkpoint or restore")
        if not 0 <= slice_index < total_slices:
            raise ValueError(
                f"--fail-at {text!r}: slice {slice_index} does not exist "
                f"(--simulate-slices {total_slices} has slices 0..{total_slices - 1})"
            )
        if step < 1:
            raise ValueError(f"--fail-at {text!r}: STEP must be >= 1")
        if back_at_step is not None and (back_at_step <= step or phase != "step"):
            raise ValueError(f"--fail-at {text!r}: BACK must be a later step, phase step")
        return cls(step, slice_index, phase, back_at_step)


@dataclass
class _Outage:
    since: float
    until: float | None  # unix time it comes back, or
    until_step: int | None  # the step at which it comes back


@dataclass
class FaultSchedule:
    """Slices go down when the loop reaches a scheduled step and come back after
    `duration` seconds (or, for STEP-BACK faults, when the loop reaches step BACK: only
    replica resize goes on training meanwhile). Each fault fires once, even if the loop
    rewinds past it."""

    faults: list[Fault]
    duration: float = 2.0
    _down: dict[int, _Outage] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        pass

    def close(self) -> None:
        pass

    def on_phase(self, phase: str, step: int) -> None:
        with self._lock:
            if phase == "step":
                for index in [i for i, o in self._down.items()
                              if o.until_step is not None and step >= o.until_step]:
                    del self._down[index]
                    log.info("slice %d is back at step %d", index, step)
            for fault in self.faults:
                if fault.fired or fault.phase != phase:
                    continue
                due = step == fault.step if phase == "step" else step >= fault.step
                if due:
                    fault.fired = True
                    now = time.time()
                    since = self._down[fault.slice].since if fault.slice in self._down else now
                    if fault.back_at_step is not None:
                        self._down[fault.slice] = _Outage(since, None, fault.back_at_step)
                        until = f"until step {fault.back_at_step}"
                    else:
                        self._down[fault.slice] = _Outage(since, now + self.duration, None)
                        until = f"for {self.duration:.1f}s"
                    log.info("fault injected: slice %d down at %s %d %s", fault.slice, phase,
                             step, until)

    def down_slices(self) -> dict[int, float]:
        now = time.time()
        with self._lock:
            for index in [i for i, o in self._down.items()
                          if o.until is not None and o.until <= now]:
                del self._down[index]
            return {i: o.since for i, o in self._down.items()}


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
                log.info("slice %d is down (%d/%d pods Ready)", index, ready, expected or 1)


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


# --- backends ------------------------------------------------------------------------------


class Backend(Protocol):
    name: str
    total_slices: int
    devices_per_slice: int
    snapshot_memory_kind: str | None

    def start(self) -> None: ...

    def slice_devices(self, slices: Sequence[int]) -> list[list[Any]]: ...

    def healthy_slices(self) -> set[int]: ...

    def wait_for_slices(self, count: int, timeout: float | None,
                        poll_interval: float = 0.1) -> set[int]:
        """Block until at least `count` slices are healthy; return the healthy ones.
        Raises ElasticTimeout after `timeout` seconds."""
        ...

    def check(self, active: set[int]) -> None:
        """Raise the slice-down error if a slice of the mesh is down (simulated only:
        on Pathways the runtime raises it by itself)."""
        ...

    def returned_slices(self, active: set[int]) -> set[int]:
        """Inactive slices that are healthy again (replica resize scales up to them)."""
        ...

    def on_phase(self, phase: str, step: int) -> None: ...

    def is_slice_down_error(self, err: BaseException) -> bool: ...

    def failed_slices(self, err: BaseException) -> tuple[list[int], float | None]:
        """The slices behind a slice-down error and when they went down (if known)."""
        ...

    def on_elastic_event(self) -> None: ...

    def close(self) -> None: ...


class SimulatedBackend:
    name = "simulated"
    snapshot_memory_kind: str | None = None

    def __init__(self, total_slices: int, devices_per_slice: int,
                 health: SliceHealthSource) -> None:
        import jax

        devices = jax.devices()
        need = total_slices * devices_per_slice
        if len(devices) < need:
            raise RuntimeError(
                f"--simulate-slices {total_slices} x --devices-per-slice {devices_per_slice} "
                f"needs {need} devices, jax sees {len(devices)}: XLA_FLAGS must carry "
                f"--xla_force_host_platform_device_count={need} before jax is imported"
            )
        self.total_slices, self.devices_per_slice = total_slices, devices_per_slice
        self._devices = devices[:need]
        self.health = health
        self._last_failure: tuple[list[int], float | None] = ([], None)

    def start(self) -> None:
        self.health.start()

    def slice_devices(self, slices: Sequence[int]) -> list[list[Any]]:
        d = self.devices_per_slice
        return [list(self._devices[i * d : (i + 1) * d]) for i in slices]

    def healthy_slices(self) -> set[int]:
        return set(range(self.total_slices)) - set(self.health.down_slices())

    def wait_for_slices(self, count: int, timeout: float | None,
                        poll_interval: float = 0.05) -> set[int]:
        start = time.monotonic()
        while True:
            healthy = self.healthy_slices()
            if len(healthy) >= count:
                return healthy
            if timeout is not None and time.monotonic() - start > timeout:
                raise ElasticTimeout(
                    f"waited {timeout:g}s for {count} healthy slice(s), have {len(healthy)} "
                    f"({sorted(healthy)}); raise --elastic-timeout or lower --min-slices"
                )
            time.sleep(poll_interval)

    def check(self, active: set[int]) -> None:
        down = {s: t for s, t in self.health.down_slices().items() if s in active}
        if down:
            self._last_failure = (sorted(down), min(down.values()))
            raise slice_down_error(sorted(down))

    def failed_slices(self, err: BaseException) -> tuple[list[int], float | None]:
        if self._last_failure[0]:
            failure, self._last_failure = self._last_failure, ([], None)
            return failure
        # Raised elsewhere (e.g. a checkpoint write): whatever is down now.
        down = self.health.down_slices()
        return sorted(down), (min(down.values()) if down else None)

    def returned_slices(self, active: set[int]) -> set[int]:
        return self.healthy_slices() - active

    def on_phase(self, phase: str, step: int) -> None:
        self.health.on_phase(phase, step)

    def is_slice_down_error(self, err: BaseException) -> bool:
        import jax

        return isinstance(err, jax.errors.JaxRuntimeError) and is_slice_down_message(str(err))

    def on_elastic_event(self) -> None:
        pass  # compiled steps per mesh stay valid: the devices are the same objects

    def close(self) -> None:
        self.health.close()


class PathwaysBackend:
    """pathwaysutils' Manager as MaxText uses it. Needs TPU slices behind a Pathways proxy
    (devices with `slice_index`); it cannot run on CPU."""

    name = "pathways"
    snapshot_memory_kind: str | None = "pinned_host"

    def __init__(self, poll_interval: float = 10.0) -> None:
        import pathwaysutils
        from pathwaysutils.elastic import manager

        pathwaysutils.initialize()  # the IFRT proxy backend (JAX_PLATFORMS=proxy)
        self._manager = manager.Manager()
        self.poll_interval = poll_interval
        self.total_slices = self._manager.total_slice_count
        sizes = {len(d) for d in self._manager.slice_to_devices.values()}
        if len(sizes) != 1:
            raise RuntimeError(f"slices have different device counts: {sorted(sizes)}")
        self.devices_per_slice = sizes.pop()

    def start(self) -> None:
        # The monitor thread fills available_inactive_slices when a slice returns.
        self._manager.start_monitoring(self.poll_interval)

    def slice_devices(self, slices: Sequence[int]) -> list[list[Any]]:
        return [list(self._manager.slice_to_devices[i]) for i in slices]

    def healthy_slices(self) -> set[int]:
        from pathwaysutils.elastic import elastic

        return set(elastic.get_active_slice_indices(self._manager.slice_to_devices))

    def wait_for_slices(self, count: int, timeout: float | None,
                        poll_interval: float = 10.0) -> set[int]:
        from pathwaysutils.elastic import elastic

        try:
            active = elastic.wait_for_slices(
                slice_count=count, slice_to_devices=self._manager.slice_to_devices,
                poll_interval=self.poll_interval, timeout=timeout,
            )
        except TimeoutError as err:
            raise ElasticTimeout(
                f"waited {timeout}s for {count} healthy slice(s): {err}; raise "
                "--elastic-timeout or lower --min-slices"
            ) from err
        self._manager.active_slice_indices = active
        return set(active)

    def check(self, active: set[int]) -> None:
        pass

    def failed_slices(self, err: BaseException) -> tuple[list[int], float | None]:
        # Pathways does not say which slice or when: the slices its health check misses.
        down = set(self._manager.all_slice_indices) - self.healthy_slices()
        return sorted(down), None

    def returned_slices(self, active: set[int]) -> set[int]:
        return set(self._manager.available_inactive_slices) - active

    def on_phase(self, phase: str, step: int) -> None:
        pass

    def is_slice_down_error(self, err: BaseException) -> bool:
        import jax
        from pathwaysutils.elastic import elastic

        return isinstance(err, jax.errors.JaxRuntimeError) and bool(
            elastic.is_error_due_to_slice_down(err)
        )

    def on_elastic_event(self) -> None:
        import jax

        with contextlib.suppress(RuntimeError, ValueError):  # no trace running
            jax.profiler.stop_trace()
        jax.clear_caches()  # executables of the old mesh; the persistent cache refills

    def close(self) -> None:
        self._manager.close()
