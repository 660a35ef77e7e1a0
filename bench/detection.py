"""Detection at scale on the local control plane: N jobs x S slices x H hosts.

One worker pod per slice event is failed (kwok's chaos stage: the container exits 1): with
several jobs, host 0 of slice (i % S) of job i; with one job, host 0 of each slice in turn.
For each event (a job and a slice) the bench's own watches record, all in this process:

  pod_failed    the victim pod is seen Failed (or not Ready): the anchor
  operator      the job's status counts the slice down (status.slices[s].restarts rises)
  jobset        the JobSet's status.replicatedJobsStatus[worker].ready drops below S
                (JobSet's own reaction; only when every slice was ready at the injection)
  job           the slice's worker Job's status.failed rises (the Job controller's reaction)

and, for the recovery of each event:

  ready_again      the job's status says the slice Ready again (after the operator saw it down)
  job_ready_again  the slice's worker Job counts every host ready again, after its ready
                   count dropped: the Job controller alone (with JobSet recreating the Job);
                   ours minus it is what the operator adds (the Job batches its status
                   updates, so ours, read from the pods, can come first)

Two placements (`Shape.backend`): `pathways` is the real thing, exclusive placement of
each slice on its own TPU node pool (one fake node per host, enforced by JobSet's pod
webhooks); `simulated` has no placement constraint, so a 4,096-pod job fits on a few
dozen fake CPU nodes. The operator sees the same pods either way.

The operator runs as a subprocess (`etj operator`, through bench.opshim, which counts its
API requests); psutil samples its CPU time and resident memory. `operator_source` runs
another revision's operator (its api/ and operator/ folders first on PYTHONPATH): the
before/after comparison.
"""
from __future__ import annotations

import json
import math
import os
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from bench import inplace_round
from bench.cluster_prep import prepare_namespace
from bench.common import REPO, ratio, stats
from bench.internals import (
    SERVER_FAMILIES,
    histogram,
    internals,
    request_breakdown,
    requests_but_watches,
    server,
)
from bench.load import CONTROL_PLANE_NICE, LoadGenerator, Sample, at_moment, favour
from bench.node import NodeModel
from bench.writes import WriteLog
from elastic_api.catalog import slice_shape
from elastic_api.names import (
    COMPLETION_INDEX_LABEL,
    GROUP,
    JOB_INDEX_LABEL,
    JOB_NAME_LABEL,
    JOBSET_NAME_LABEL,
    PLURAL,
    REPLICATED_JOB_LABEL,
    VERSION,
    WORKER_REPLICATED_JOB,
)
from elastic_devtools.localcluster.faults import wait_for
from elastic_devtools.localcluster.operator_process import OperatorProcess
from elastic_devtools.localcluster.operator_settings import SETTINGS

NAMESPACE = SETTINGS["bench-detection"].namespaces[0]
# What GKE runs off the operator's node (bench.load.favour).
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
PODS_PER_CPU_NODE = 200  # simulated placement: below the fake nodes' 250-pod capacity

Event = tuple[str, int]  # (job, slice)
# The result's recovery figures -> the latencies they are the statistics of.
READY_AGAIN = {"slice_ready_again_seconds": "ready_again",
               "job_ready_again_seconds": "job_ready_again",
               "ready_again_minus_job_paired_seconds": "ready_again_paired"}
Num = TypeVar("Num", int, float)  # a count or a time, for _diff


@dataclass(frozen=True)
class Shape:
    jobs: int
    slices: int
    topology: str  # v5e: 4x4 = 4 hosts, 8x8 = 16, 16x16 = 64
    backend: str = "pathways"
    tpu_type: str = "v5e"  # any catalog type: v5p 16x16x24 is 1,536 hosts

    @property
    def hosts(self) -> int:
        return slice_shape(self.tpu_type, self.topology).vms

    @property
    def pods(self) -> int:
        return self.jobs * (self.slices * self.hosts + 1)

    @property
    def label(self) -> str:
        where = ("exclusive node pools" if self.backend == "pathways"
                 else "packed on CPU nodes")
        of = "" if self.tpu_type == "v5e" else f" ({self.tpu_type} {self.topology})"
        return (f"{self.jobs} job{'s' if self.jobs > 1 else ''} x {self.slices} slices x "
                f"{self.hosts} hosts{of} ({self.pods} pods, {where})")

    @property
    def cpu_nodes(self) -> int:
        """One per head (exclusive placement), or enough to hold every pod (packed)."""
        if self.backend == "pathways":
            return self.jobs
        return math.ceil(self.pods / PODS_PER_CPU_NODE) + 1

    @property
    def nodes(self) -> int:
        tpu = self.jobs * self.slices * self.hosts if self.backend == "pathways" else 0
        return self.cpu_nodes + tpu

    def cluster_config(self, directory: Path) -> Any:
        from elastic_devtools import localcluster as lc

        pools = (lc.parse_tpu_pool(
            f"{self.tpu_type}:{self.topology}:{self.jobs * self.slices}"),) \
            if self.backend == "pathways" else ()
        return lc.ClusterConfig(dir=directory, tpu_pools=pools, cpu_nodes=self.cpu_nodes,
                                timeout=300 + 2.0 * self.nodes, die_with_parent=True)

    def victims(self, names: list[str], limit: int | None = None) -> list[Event]:
        """Several jobs: slice i % S of job i. One job: every slice in turn."""
        if len(names) > 1:
            return [(name, i % self.slices) for i, name in enumerate(names)][:limit]
        return [(names[0], s) for s in range(self.slices)][:limit]


def _log(msg: str) -> None:
    print(f"[detection] {msg}", file=sys.stderr, flush=True)


def job_manifest(name: str, shape: Shape) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "backend": shape.backend,
        "tpu": {"type": shape.tpu_type, "topology": shape.topology, "numSlices": shape.slices},
        "elastic": {"maxSliceRestarts": 5},
        "maxRestarts": 0,
        "checkpoint": {"directory": f"/tmp/etj-bench-no-checkpoints/{name}"},
        "trainer": {"image": "trainer:bench", "steps": 1000},
    }
    if shape.backend == "pathways":
        spec["pathways"] = {"gcsScratch": "gs://bench-bucket/scratch"}
    else:  # packed on CPU nodes: no TPU placement (the default places workers on TPU pools)
        spec["placement"] = "Any"
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ElasticTrainingJob",
            "metadata": {"name": name}, "spec": spec}


@dataclass
class Timeline:
    """First-seen times (time.time()) per event, written by the watch threads."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    running: dict[str, float] = field(default_factory=dict)
    victims: dict[Event, str] = field(default_factory=dict)  # event -> victim pod name
    injected: dict[Event, float] = field(default_factory=dict)
    pod_failed: dict[Event, float] = field(default_factory=dict)
    operator: dict[Event, float] = field(default_factory=dict)
    jobset: dict[Event, float] = field(default_factory=dict)
    job: dict[Event, float] = field(default_factory=dict)
    ready_again: dict[Event, float] = field(default_factory=dict)
    job_ready_again: dict[Event, float] = field(default_factory=dict)
    job_ready_dropped: set[Event] = field(default_factory=set)
    # What each event's signal is measured against, as seen at the injection.
    restarts: dict[Event, int] = field(default_factory=dict)  # status.slices[s].restarts
    jobset_armed: set[Event] = field(default_factory=set)  # every slice was ready
    job_failed_before: dict[Event, int] = field(default_factory=dict)
    # Latest seen state.
    slice_restarts: dict[Event, int] = field(default_factory=dict)
    jobset_ready: dict[str, int] = field(default_factory=dict)
    job_failed: dict[Event, int] = field(default_factory=dict)
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> summary
    stop: threading.Event = field(default_factory=threading.Event)
    errors: list[str] = field(default_factory=list)
    writes: WriteLog = field(default_factory=WriteLog)  # what each status write changed
    slices_ready: dict[str, int] = field(default_factory=dict)  # job -> status.slicesReady
    # The job object's size as served (compact JSON, as etcd stores a custom resource):
    # when every slice first ran, and the most it reached.
    job_bytes_running: dict[str, int] = field(default_factory=dict)
    job_bytes_peak: dict[str, int] = field(default_factory=dict)

    _PER_EVENT = ("victims", "injected", "pod_failed", "operator", "jobset", "job",
                  "ready_again", "job_ready_again", "job_ready_dropped", "restarts",
                  "jobset_armed", "job_failed_before")

    def forget_events(self) -> dict[str, Any]:
        """Put the per-event records aside (a second round of the same slices starts), and
        return them for `restore_events`."""
        with self.lock:
            saved = {name: getattr(self, name) for name in self._PER_EVENT}
            for name in self._PER_EVENT:
                setattr(self, name, type(saved[name])())
            return saved

    def restore_events(self, saved: dict[str, Any]) -> None:
        with self.lock:
            for name, value in saved.items():
                setattr(self, name, value)

    def arm(self, event: Event, pod: str, slices: int) -> None:
        """Record the injection of `event` and what its signals start from."""
        with self.lock:
            self.victims[event] = pod
            self.injected[event] = time.time()
            self.restarts[event] = self.slice_restarts.get(event, 0)
            self.job_failed_before[event] = self.job_failed.get(event, 0)
            if self.jobset_ready.get(event[0]) == slices:
                self.jobset_armed.add(event)

    def see_job_ready(self, event: Event, every_host: bool, now: float) -> None:
        """The slice's worker Job's ready count, seen (lock held): the Job controller's
        recovery is its count back to every host after it dropped, once per event."""
        if event not in self.injected or event in self.job_ready_again:
            return
        if not every_host:
            self.job_ready_dropped.add(event)
        elif event in self.job_ready_dropped:
            self.job_ready_again[event] = now


def _is_true(obj: dict[str, Any], type_: str) -> bool:
    conds = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == type_ and c.get("status") == "True" for c in conds)


def _watch(tl: Timeline, list_fn: Any, handle: Any, what: str) -> None:
    """List+watch `list_fn` until tl.stop; `handle(obj_dict, seen_at)` per object."""
    from kubernetes import watch

    rv = None
    while not tl.stop.is_set():
        try:
            if rv is None:
                listing = list_fn(_preload_content=False)
                data = json.loads(listing.data)
                now = time.time()
                for item in data.get("items", []):
                    handle(item, now)
                rv = data["metadata"]["resourceVersion"]
            w = watch.Watch()
            for event in w.stream(list_fn, resource_version=rv, timeout_seconds=30,
                                  _request_timeout=40, allow_watch_bookmarks=True):
                now = time.time()
                obj = event["raw_object"]
                rv = obj.get("metadata", {}).get("resourceVersion", rv)
                if event["type"] in ("ADDED", "MODIFIED"):
                    handle(obj, now)
                if tl.stop.is_set():
                    w.stop()
                    break
        except Exception as err:  # a 410 Gone or a dropped stream: list again
            status = getattr(err, "status", None)
            if status != 410 and not tl.stop.is_set():
                tl.errors.append(f"{what} watch: {type(err).__name__}: {err}"[:300])
            rv = None
            time.sleep(0.2)


def _handlers(tl: Timeline, shape: Shape) -> dict[str, Callable[[dict[str, Any], float], None]]:
    slices, hosts = shape.slices, shape.hosts

    def on_job(obj: dict[str, Any], now: float) -> None:
        name = obj["metadata"]["name"]
        status = obj.get("status") or {}
        slice_down = _is_true(obj, "SliceDown")
        size = len(json.dumps(obj, separators=(",", ":")))
        with tl.lock:
            tl.writes.see(name, status, now)
            tl.slices_ready[name] = int(status.get("slicesReady") or 0)
            tl.job_bytes_peak[name] = max(size, tl.job_bytes_peak.get(name, 0))
            # Healthy: every slice Ready and none down. (Ready may stay False: with no
            # trainer reporting, a slice that went down during start-up leaves the job
            # Recovering; that does not matter to detection.)
            if name not in tl.running and status.get("slicesReady") == slices \
                    and not slice_down:
                tl.running[name] = now
                tl.job_bytes_running[name] = size
            for entry in status.get("slices") or []:
                event = (name, int(entry.get("index", -1)))
                restarts = int(entry.get("restarts") or 0)
                tl.slice_restarts[event] = restarts
                if event in tl.injected and event not in tl.operator \
                        and restarts > tl.restarts[event]:
                    tl.operator[event] = now
                elif event in tl.operator and event not in tl.ready_again \
                        and entry.get("state") == "Ready":
                    tl.ready_again[event] = now

    def on_jobset(obj: dict[str, Any], now: float) -> None:
        name = (obj["metadata"].get("labels") or {}).get(JOB_NAME_LABEL, obj["metadata"]["name"])
        rjs = (obj.get("status") or {}).get("replicatedJobsStatus") or []
        ready = next((r.get("ready", 0) for r in rjs if r.get("name") == "worker"), None)
        with tl.lock:
            if ready is None:
                return
            tl.jobset_ready[name] = ready
            if ready < slices:
                for event in tl.jobset_armed:
                    if event[0] == name and event not in tl.jobset:
                        tl.jobset[event] = now

    def on_batch_job(obj: dict[str, Any], now: float) -> None:
        labels = obj["metadata"].get("labels") or {}
        if labels.get(REPLICATED_JOB_LABEL) != WORKER_REPLICATED_JOB:
            return
        owner = labels.get(JOB_NAME_LABEL) or labels.get(JOBSET_NAME_LABEL, "")
        event = (owner, int(labels.get(JOB_INDEX_LABEL, -1)))
        failed = int((obj.get("status") or {}).get("failed") or 0)
        ready = int((obj.get("status") or {}).get("ready") or 0)
        with tl.lock:
            tl.job_failed[event] = failed
            if event in tl.injected and event not in tl.job \
                    and failed > tl.job_failed_before[event]:
                tl.job[event] = now
            tl.see_job_ready(event, ready >= hosts, now)

    def on_pod(obj: dict[str, Any], now: float) -> None:
        meta = obj["metadata"]
        labels = meta.get("labels") or {}
        status = obj.get("status") or {}
        ready = _is_true(obj, "Ready")
        job, index = labels.get(JOB_NAME_LABEL), labels.get(JOB_INDEX_LABEL)
        with tl.lock:
            tl.pods[meta["name"]] = {
                "job": job, "phase": status.get("phase"), "ready": ready, "slice": index,
                "host": labels.get(COMPLETION_INDEX_LABEL),
                "worker": labels.get(REPLICATED_JOB_LABEL) == WORKER_REPLICATED_JOB,
                "deleting": bool(meta.get("deletionTimestamp")),
            }
            if index is None or job is None:
                return
            event = (job, int(index))
            if event in tl.injected and tl.victims.get(event) == meta["name"] \
                    and event not in tl.pod_failed \
                    and (status.get("phase") == "Failed" or not ready):
                tl.pod_failed[event] = now

    return {"jobs": on_job, "jobsets": on_jobset, "batch jobs": on_batch_job, "pods": on_pod}


def _start_watches(tl: Timeline, cluster: Any, shape: Shape) -> None:
    from kubernetes import client

    lists = {
        "jobs": lambda c: lambda **kw: client.CustomObjectsApi(c).list_namespaced_custom_object(
            GROUP, VERSION, NAMESPACE, PLURAL, **kw),
        "jobsets": lambda c: lambda **kw: client.CustomObjectsApi(c).list_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", NAMESPACE, "jobsets", **kw),
        "batch jobs": lambda c: lambda **kw: client.BatchV1Api(c).list_namespaced_job(
            NAMESPACE, **kw),
        "pods": lambda c: lambda **kw: client.CoreV1Api(c).list_namespaced_pod(NAMESPACE, **kw),
    }
    for what, handle in _handlers(tl, shape).items():
        list_fn = lists[what](cluster.api_client())
        # The watch helper needs the function's name to find its docstring-less signature.
        list_fn.__doc__ = "list"
        threading.Thread(target=_watch, args=(tl, list_fn, handle, what),
                         name=f"watch-{what}", daemon=True).start()


class BenchOperator(OperatorProcess):
    """`etj operator` through bench.opshim (which counts its API requests), with psutil
    sampling of its CPU time and resident memory (peak sampled every 0.2 s).
    `source`: a checkout whose operator runs instead of this one (no election flags)."""

    def __init__(self, kubeconfig: Path, workdir: Path, source: Path | None = None, *,
                 nice: int = 0, node: NodeModel | None = None) -> None:
        self.nice = nice
        self.node = node  # where it runs, when the operator's node is modelled
        self.counts_file = workdir / "operator-requests.json"
        self.source = source
        paths = [str(REPO), os.environ.get("PYTHONPATH")]
        if source is not None:  # its packages before the installed (editable) ones
            paths = [str(source / "api"), str(source / "operator"), *paths]
        super().__init__(
            kubeconfig, workdir / "operator.log", args=SETTINGS["bench-detection"],
            command=(sys.executable, "-m", "bench.opshim", str(self.counts_file), "--"),
            env={"PYTHONPATH": os.pathsep.join(filter(None, paths))}, cwd=REPO,
            # A session of its own, as a pod is a cgroup of its own: the CPU is shared
            # between sessions first (bench/load.py), so the bench's watches and the
            # burners do not share the operator's.
            new_session=True)
        self.peak_rss = 0
        self._sampling = threading.Event()

    def argv(self) -> list[str]:
        argv = super().argv()
        if self.source is not None:  # an operator from before leader election
            argv = argv[:argv.index("--leader-identity")]
        return argv

    def start(self, timeout: float = 120) -> None:
        import psutil

        self.spawn()
        self.ps = psutil.Process(self.pid)
        if self.node is not None:
            self.node.place_operator(self.pid)
        if self.nice and not favour({"operator": self.pid}, self.nice):
            raise RuntimeError(f"could not run the operator at nice {self.nice} (not root?)")
        self._sampling.set()
        threading.Thread(target=self._sample, name="rss-sampler", daemon=True).start()
        self.wait_healthy(timeout)

    def _sample(self) -> None:
        while self._sampling.is_set():
            try:
                self.peak_rss = max(self.peak_rss, self.rss())
            except Exception:
                return
            time.sleep(0.2)

    def cpu_seconds(self) -> float:
        t = self.ps.cpu_times()
        return float(t.user + t.system)

    def rss(self) -> int:
        return int(self.ps.memory_info().rss)

    def thread_cpu(self) -> dict[str, float]:
        """CPU seconds by thread name, numbered threads summed (reconcile-0, -1, ...; a
        pool's ThreadPoolExecutor-0_0, ckpt-scan_0); a thread the shim has not named yet
        is "unnamed"."""
        try:
            names: dict[str, str] = json.loads(Path(f"{self.counts_file}.threads").read_text())
        except (OSError, ValueError):
            names = {}
        out: dict[str, float] = {}
        for thread in self.ps.threads():
            name = re.sub(r"([-_]\d+)+$", "", names.get(str(thread.id), "unnamed"))
            out[name] = out.get(name, 0.0) + thread.user_time + thread.system_time
        return out

    def requests(self) -> dict[str, int]:
        try:
            data: dict[str, int] = json.loads(self.counts_file.read_text())
            return data
        except (OSError, ValueError):
            return {}

    def stop(self, timeout: float = 30) -> None:
        self._sampling.clear()
        super().stop(timeout)


def _thread_cpu(phases: Phases) -> dict[str, float]:
    """CPU seconds by thread name over the failure phase, most first: what the reconciles
    had to share the operator's CPU with (the caches' threads, the follow-ups)."""
    used = _diff(phases.threads.get("end", {}), phases.threads.get("events", {}))
    rounded = ((name, round(cpu, 2)) for name, cpu in used.items())
    return dict(sorted(((k, v) for k, v in rounded if v > 0), key=lambda kv: -kv[1]))


def _diff(after: dict[str, Num], before: dict[str, Num]) -> dict[str, Num]:
    """after - before, key by key (a key missing counts 0), the changed keys only."""
    keys = set(after) | set(before)
    out = {k: after.get(k, 0) - before.get(k, 0) for k in sorted(keys)}
    return {k: v for k, v in out.items() if v}


@dataclass
class Phases:
    """What the operator used, read at the edges of each phase of the run."""

    idle_rss: int = 0
    cpu: dict[str, float] = field(default_factory=dict)
    requests: dict[str, dict[str, int]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    rss_steady: int = 0
    peak_rss: int = 0
    started: list[str] = field(default_factory=list)
    inject_interval_s: float = 0.0
    stop_seconds: float | None = None  # SIGTERM -> exit (the graceful handover's start)
    wall: dict[str, float] = field(default_factory=dict)  # each mark's time.time()
    settle_s: float | None = None  # waited for the load generator's load
    recovered: bool = False  # every failed slice Ready again when the run ended

    metrics: dict[str, dict[str, float]] = field(default_factory=dict)
    threads: dict[str, dict[str, float]] = field(default_factory=dict)  # thread_cpu()
    # The API server's own request metrics at "events" and "end" (bench.internals.server).
    server: dict[str, dict[str, float]] = field(default_factory=dict)
    # The machine's load average (1, 5, 15 min) at each mark: it is shared.
    load: dict[str, list[float]] = field(default_factory=dict)

    def mark(self, name: str, operator: BenchOperator) -> None:
        self.wall[name] = time.time()
        self.load[name] = [round(x, 2) for x in os.getloadavg()]
        self.cpu[name] = operator.cpu_seconds()
        self.threads[name] = operator.thread_cpu()
        self.requests[name] = operator.requests()
        self.seconds[name] = time.monotonic()
        try:
            self.metrics[name] = operator.metrics()
        except OSError:
            self.metrics[name] = {}

    def mark_server(self, name: str, api: Any) -> None:
        """The API server's view of requests at this mark (best effort: a scrape that
        fails leaves the split of a request's time out of the result, nothing else)."""
        from elastic_devtools.localcluster import server_metrics

        try:
            self.server[name] = server_metrics.scrape(api, SERVER_FAMILIES)
        except Exception as err:  # any failure: the benchmark's other figures stand
            _log(f"API server metrics at {name}: {err}")


def run(n_jobs: int, quick: bool = False, keep_dir: bool = False, *,
        shape: Shape | None = None, operator_source: Path | None = None,
        max_events: int | None = None, load: float = 0.0,
        load_control_plane: bool = False, operator_nice: int = 0,
        operator_request_m: int | None = None) -> dict[str, Any]:
    """The benchmark on its own cluster. `shape` defaults to N x 4 slices x v5e 4x4.
    `load` > 0: bench.load's generator keeps the machine's load average there from the
    moment every job runs (the failures wait for it to get there, a few minutes at most),
    the cluster's control plane and kwok run ahead of it (bench.load.favour) unless
    `load_control_plane`. `operator_nice`: the operator's session and threads at that nice
    (bench.load.favour), its weight against the burners' (0: one burner's).
    `operator_request_m`: the operator's node modelled with cgroups instead, the operator
    weighted by that CPU request (bench/node.py)."""
    from elastic_devtools import localcluster as lc

    shape = shape or Shape(n_jobs, 4, "4x4")
    workdir = Path(tempfile.mkdtemp(prefix="etj-bench-detect-"))
    cluster_dir = workdir / "cluster"
    _log(f"{shape.label}; {shape.nodes} nodes; operator from "
         f"{operator_source or 'this checkout'}; work dir {workdir}")
    t_up = time.monotonic()
    cluster = lc.up(shape.cluster_config(cluster_dir), progress=_log)
    cluster_up_s = time.monotonic() - t_up
    favoured = {} if load <= 0 or load_control_plane else _favour_control_plane(cluster_dir)
    node = None if operator_request_m is None else _model_node(cluster_dir, operator_request_m)
    tl = Timeline()
    phases = Phases()
    operator: BenchOperator | None = None
    generator = LoadGenerator(load, place=node.place_tenant if node else None)
    names = [f"bench-{i:03d}" for i in range(shape.jobs)]
    in_place: dict[str, Any] = {}
    try:
        operator = BenchOperator(cluster.kubeconfig, workdir, operator_source,
                                 nice=operator_nice, node=node)
        _start_jobs(cluster, shape, names, tl, phases, operator)
        generator.start()
        in_place = _measure(cluster, shape, tl, phases, operator, quick, max_events,
                            generator)
    finally:
        tl.stop.set()
        generator.stop()
        if operator is not None:
            stopping = time.monotonic()
            operator.stop()
            phases.stop_seconds = round(time.monotonic() - stopping, 2)
        lc.down(cluster_dir, progress=_log)
        if node is not None:
            try:
                node.remove()
            except RuntimeError as err:  # the figures stand; the machine needs a look
                _log(str(err))
    result = _result(shape, names, tl, phases, cluster_up_s, quick)
    # The same slices, before their pod failures, failed by a process exit on a healthy
    # host: Ready in place.
    result["in_place"] = in_place
    result["operator_source"] = str(operator_source) if operator_source else None
    result["operator_nice"] = operator_nice
    result["node_model"] = node.describe() if node else None
    result["load_generator"] = {
        **generator.summary(phases.wall.get("events"), phases.wall.get("end")),
        "settle_seconds": phases.settle_s,
        # Component -> threads run ahead of the burners; empty: the whole machine loaded.
        "favoured": favoured}
    result["slowest_detections"] = slowest_detections(tl, generator.samples)
    if not keep_dir:
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
    else:
        result["work_dir"] = str(workdir)
    return result


def _in_place_round(cluster: Any, shape: Shape, tl: Timeline, operator: BenchOperator,
                    phases: Phases, quick: bool, max_events: int | None) -> dict[str, Any]:
    """The slices failed by a healthy host's process exiting: back in place
    (bench/inplace_round.py), before the pod failures, while every slice is Ready (at
    4 x 1,536 hosts and more the recreation round's slices are not all back within its
    bounded wait). The round's per-event records are put aside after it."""
    before = tl.forget_events()
    try:
        return inplace_round.run(cluster, NAMESPACE, shape.victims(phases.started, max_events),
                                 _victim_of, tl, operator, 60.0 if quick else 300.0, _log)
    except Exception as err:  # the pod failures' figures stand without it
        return {"error": f"{type(err).__name__}: {err}"[:300]}
    finally:
        tl.restore_events(before)


def _control_plane(cluster_dir: Path) -> dict[str, int]:
    """The pids of what GKE runs off the operator's node: the control plane, and kwok
    (the kubelets of the TPU nodes). JobSet's controller runs on a node, as ours does."""
    return _components(cluster_dir, CONTROL_PLANE)


def _components(cluster_dir: Path, names: tuple[str, ...] | None = None) -> dict[str, int]:
    """The pids of the cluster's live components (those of `names`, or all)."""
    from elastic_devtools import localcluster as lc

    return {c.name: c.pid for c in lc.status(cluster_dir).components
            if (names is None or c.name in names) and c.pid is not None and c.alive}


def _model_node(cluster_dir: Path, request_m: int) -> NodeModel:
    """The operator's node as cgroups (bench/node.py): off it, the control plane, kwok,
    JobSet's controller (another controller's pod, kept off the burners so that its
    baseline is not slowed by them) and the benchmark itself, which observes, ahead of
    its CPU's other work as the control plane is; the operator goes on it when started."""
    node = NodeModel(request_m)
    node.create()
    outside = _components(cluster_dir)
    outside["benchmark"] = os.getpid()
    try:
        for pid in outside.values():
            node.place_outside(pid)
        # Its children inherit the nice, which counts only among the threads of their
        # own cgroup: the operator's are all its own, the burners' all burners.
        favour({"benchmark": os.getpid()})
    except Exception:
        node.remove()
        raise
    _log(f"the operator's node: CPU {node.node_cpus}, the operator's request "
         f"{request_m}m (cpu.shares {node.operator_shares} against the tenants' "
         f"{node.tenant_shares}); off it, on CPU {node.outside_cpus}: "
         f"{', '.join(sorted(outside))}")
    return node


def _favour_control_plane(cluster_dir: Path) -> dict[str, int]:
    """bench.load.favour on the control plane, saying what it could not raise (raising
    a priority needs root): that part of the machine then carries the load too."""
    pids = _control_plane(cluster_dir)
    favoured = favour(pids)
    missed = sorted(set(pids) - set(favoured))
    _log(f"ahead of the burners at nice {CONTROL_PLANE_NICE}: {', '.join(sorted(favoured))}"
         + (f"; NOT raised (not root?), loaded like the operator: {', '.join(missed)}"
            if missed else ""))
    return favoured


def _start_jobs(cluster: Any, shape: Shape, names: list[str], tl: Timeline, phases: Phases,
                operator: BenchOperator) -> None:
    """The operator started and the jobs created, until every slice of each is Ready."""
    from kubernetes import client

    api = cluster.api_client()
    prepare_namespace(api, NAMESPACE)
    operator.start(timeout=120)
    _start_watches(tl, cluster, shape)
    time.sleep(2.0)  # let the idle operator settle before its baseline
    phases.idle_rss = operator.rss()
    phases.mark("created", operator)
    custom = client.CustomObjectsApi(api)
    for name in names:
        custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL,
                                               job_manifest(name, shape))
    _log(f"created {len(names)} job(s); waiting for every slice to be Ready")

    def all_running() -> bool:
        with tl.lock:
            return len(tl.running) >= len(names)

    def progress() -> str:
        with tl.lock:
            ready = sum(tl.slices_ready.get(n, 0) for n in names)
            pods = sum(1 for info in tl.pods.values() if info["phase"] == "Running")
        return f"{ready} of {len(names) * shape.slices} slices Ready; {pods} pods Running"

    try:
        wait_for(_saying(all_running, progress), 180 + 0.3 * shape.pods,
                 "every job with every slice Ready", 0.5)
    except TimeoutError as err:  # at scale: measure the jobs that did start
        tl.errors.append(str(err))
    phases.mark("running", operator)
    with tl.lock:
        phases.started = [n for n in names if n in tl.running]
    if not phases.started:
        raise RuntimeError("no job got every slice Ready")


def _measure(cluster: Any, shape: Shape, tl: Timeline, phases: Phases,
             operator: BenchOperator, quick: bool, max_events: int | None,
             generator: LoadGenerator) -> dict[str, Any]:
    """The in-place round, then the pod failures (their figures in `tl` and `phases`):
    the in-place round's figures."""
    from elastic_devtools.localcluster.faults import fail_pod

    api = cluster.api_client()
    quiet_s = 5.0 if quick else 30.0
    _log(f"{len(phases.started)} job(s) Running in "
         f"{phases.seconds['running'] - phases.seconds['created']:.1f}s; quiet {quiet_s:.0f}s")
    if generator.target > 0:
        phases.settle_s = round(generator.settle(30.0 if quick else 240.0), 1)
        _log(f"load generator: target {generator.target}, load {os.getloadavg()[0]:.1f} "
             f"after {phases.settle_s:.0f}s")
    time.sleep(2.0 if quick else 10.0)  # let the start-up churn end
    in_place = _in_place_round(cluster, shape, tl, operator, phases, quick, max_events)
    time.sleep(2.0 if quick else 10.0)  # and the in-place round's
    phases.mark("quiet", operator)
    time.sleep(quiet_s)  # steady state: resyncs, kwok heartbeats, no failures
    phases.mark("events", operator)
    phases.mark_server("events", api)
    phases.rss_steady = operator.rss()
    phases.inject_interval_s = 0.2 if quick else (0.25 if len(phases.started) > 1 else 0.5)
    events = shape.victims(phases.started, max_events)
    for event in events:
        pod = _victim_of(tl, event)
        tl.arm(event, pod, shape.slices)
        fail_pod(api, NAMESPACE, pod)
        time.sleep(phases.inject_interval_s)

    def all_seen() -> bool:
        # JobSet's ready count may never drop (the Job controller can report the
        # failure and the replacement pod in one status update); the Job's
        # status.failed always rises, so the baseline is whichever comes first.
        with tl.lock:
            return all(e in tl.operator and (e in tl.jobset or e in tl.job)
                       and e in tl.pod_failed for e in events)

    def seen() -> str:
        with tl.lock:
            return (f"of {len(events)} failures: {sum(e in tl.operator for e in events)} "
                    f"seen by the operator, {sum(e in tl.jobset or e in tl.job for e in events)}"
                    " by JobSet or the Job")

    try:
        wait_for(_saying(all_seen, seen), 120 + 0.5 * len(events),
                 "every failure seen by operator and JobSet", 0.25)
    except TimeoutError as err:
        tl.errors.append(str(err))
    time.sleep(2.0)  # the operator's trailing writes (events, metrics) for the last one
    phases.mark("end", operator)
    phases.mark_server("end", api)
    phases.peak_rss = operator.peak_rss
    _wait_recovered(tl, shape, phases, operator, quick)
    phases.mark_server("recovered", api)  # every client's requests, failures to Ready
    return in_place


def _saying(done: Callable[[], bool], say: Callable[[], str],
            every: float = 30.0) -> Callable[[], bool]:
    """`done`, logging say() every `every` seconds while it is False: at 4,096 pods a
    start or a recovery takes minutes, and a silent wait reads as a hang."""
    last = [time.monotonic()]

    def check() -> bool:
        if done():
            return True
        if time.monotonic() - last[0] >= every:
            last[0] = time.monotonic()
            _log(f"  {say()}")
        return False
    return check


def _victim_of(tl: Timeline, event: Event) -> str:
    job, index = event
    with tl.lock:
        for pod, info in sorted(tl.pods.items()):
            if info["job"] == job and info["worker"] and info["phase"] == "Running" \
                    and info["ready"] and not info["deleting"] \
                    and info["slice"] == str(index) and info["host"] == "0":
                return pod
    raise RuntimeError(f"no Running worker pod for slice {index} of {job}")


def _wait_recovered(tl: Timeline, shape: Shape, phases: Phases, operator: BenchOperator,
                    quick: bool) -> None:
    """Until every failed slice is Ready again (bounded): the status writes per slice
    event are counted over the whole of each event, its recovery included."""
    def recovered() -> bool:
        with tl.lock:
            return all(tl.slices_ready.get(n) == shape.slices for n in phases.started)

    def ready() -> str:
        with tl.lock:
            n = sum(tl.slices_ready.get(name, 0) for name in phases.started)
        return f"{n} of {len(phases.started) * shape.slices} slices Ready again"

    try:
        wait_for(_saying(recovered, ready), recovery_timeout(shape, len(tl.injected), quick),
                 "every slice Ready again", 0.5)
        time.sleep(2.0)  # the outbox's clearing after the last Ready
    except TimeoutError as err:
        tl.errors.append(str(err))
    phases.recovered = recovered()
    phases.mark("recovered", operator)
    phases.peak_rss = operator.peak_rss  # the recreation of the pods included


def recovery_timeout(shape: Shape, events: int, quick: bool) -> float:
    """How long the failed slices may take to be Ready again: 5 minutes, or 0.15 s per pod
    to replace where that is longer, at most 20 minutes. A replaced slice's pods are each
    deleted (the garbage collector) and created again (the Job controller), each at its
    client's 20 requests/s; a 1,536-pod slice took 237 s at load 7-17, and 4 of them at
    once 786 s at load 10 (docs/benchmarks.md, 2026-12-06).
    """
    if quick:
        return 30.0
    return min(1200.0, max(300.0, 0.15 * shape.hosts * events))


def _latencies(tl: Timeline) -> dict[str, list[float]]:
    with tl.lock:
        events = list(tl.injected)
        baseline = {e: min(t for t in (tl.jobset.get(e), tl.job.get(e)) if t is not None)
                    for e in events if e in tl.jobset or e in tl.job}
        anchor = tl.pod_failed
        return {
            "operator": [tl.operator[e] - anchor[e] for e in events
                         if e in tl.operator and e in anchor],
            "jobset_only": [tl.jobset[e] - anchor[e] for e in events
                            if e in tl.jobset and e in anchor],
            "baseline": [baseline[e] - anchor[e] for e in events if e in baseline and e in anchor],
            "job": [tl.job[e] - anchor[e] for e in events if e in tl.job and e in anchor],
            "operator_from_injection": [tl.operator[e] - tl.injected[e] for e in events
                                        if e in tl.operator],
            "baseline_from_injection": [baseline[e] - tl.injected[e] for e in events
                                        if e in baseline],
            "paired": [tl.operator[e] - baseline[e] for e in events
                       if e in tl.operator and e in baseline],
            "ready_again": [tl.ready_again[e] - anchor[e] for e in events
                            if e in tl.ready_again and e in anchor],
            "job_ready_again": [tl.job_ready_again[e] - anchor[e] for e in events
                                if e in tl.job_ready_again and e in anchor],
            "ready_again_paired": [tl.ready_again[e] - tl.job_ready_again[e] for e in events
                                   if e in tl.ready_again and e in tl.job_ready_again],
        }


def slowest_detections(tl: Timeline, samples: list[Sample], n: int = 5
                       ) -> list[dict[str, Any]]:
    """The `n` slowest detections (pod failed -> SliceDown seen), slowest first: when,
    after the first injection, and what the load generator was running then, so a tail
    can be told apart from a moment the burners crowded the machine."""
    with tl.lock:
        seen = [(tl.operator[e] - tl.pod_failed[e], tl.pod_failed[e]) for e in tl.injected
                if e in tl.operator and e in tl.pod_failed]
        first = min(tl.injected.values(), default=0.0)
    out = []
    for seconds, failed in sorted(seen, reverse=True)[:n]:
        sample = at_moment(samples, failed)
        out.append({"seconds": round(seconds, 3),
                    "after_first_injection_s": round(failed - first, 1),
                    "burners": sample.burners if sample else None,
                    "load1": round(sample.load1, 2) if sample else None})
    return out


def _result(shape: Shape, names: list[str], tl: Timeline, phases: Phases,
            cluster_up_s: float, quick: bool) -> dict[str, Any]:
    lat = _latencies(tl)
    op_s, js_s = stats(lat["operator"]), stats(lat["baseline"])
    kpods = shape.pods / 1000.0
    req, sec = phases.requests, phases.seconds
    quiet_s = sec["events"] - sec["quiet"]
    events_s = sec["end"] - sec["events"]
    quiet_requests = _diff(req["events"], req["quiet"])
    event_requests = _diff(req["end"], req["events"])
    quiet_total = sum(quiet_requests.values())
    event_total = sum(event_requests.values())
    # Subtract the steady-state request rate (resyncs) over the event phase's duration.
    net_event = event_total - quiet_total * (events_s / quiet_s)
    events = len(lat["operator"])
    phase = (phases.metrics.get("events", {}), phases.metrics.get("end", {}))
    with tl.lock:
        injected = len(tl.injected)
        jobset_never = sum(1 for e in tl.injected if e not in tl.jobset)
        job_bytes = {"running": max(tl.job_bytes_running.values(), default=None),
                     "peak": max(tl.job_bytes_peak.values(), default=None)}
    return {
        "shape": shape.label, "backend": shape.backend,
        "n_jobs": shape.jobs, "slices_per_job": shape.slices, "hosts_per_slice": shape.hosts,
        "pods": shape.pods, "nodes": shape.nodes,
        "tpu_node_pools": shape.jobs * shape.slices if shape.backend == "pathways" else 0,
        "cluster_up_seconds": round(cluster_up_s, 2),
        "jobs_running_seconds": round(sec["running"] - sec["created"], 2),
        "jobs_started": len(phases.started),
        "failures_injected": injected, "failures_detected": events,
        "inject_interval_seconds": phases.inject_interval_s,
        "operator_slice_down_seconds": op_s,
        "jobset_ready_drop_seconds": js_s,
        "jobset_replicated_jobs_ready_drop_only_seconds": stats(lat["jobset_only"]),
        "jobset_ready_never_dropped": jobset_never,
        "job_failed_count_seconds": stats(lat["job"]),
        "operator_from_injection_seconds": stats(lat["operator_from_injection"]),
        "jobset_from_injection_seconds": stats(lat["baseline_from_injection"]),
        "operator_minus_jobset_paired_seconds": stats(lat["paired"]),
        "ratio_p50_operator_vs_jobset": ratio(op_s["p50"], js_s["p50"]),
        "ratio_p99_operator_vs_jobset": ratio(op_s["p99"], js_s["p99"]),
        # Failure -> the slice Ready again in the job's status, beside the Job controller
        # alone (its Job counting every host ready again), and ours minus it per event.
        **{key: stats(lat[of]) for key, of in READY_AGAIN.items()},
        **_cpu(phases.cpu, kpods, quiet_s, events),
        "operator_thread_cpu_seconds": _thread_cpu(phases),
        "operator_rss_bytes": {"idle": phases.idle_rss, "steady": phases.rss_steady,
                               "peak": phases.peak_rss},
        # The largest job's object, far below etcd's 1.5 MiB (docs/api.md, the slice cap).
        "job_object_bytes": job_bytes,
        "operator_peak_rss_mib_per_1000_pods": phases.peak_rss / 2**20 / kpods,
        "operator_rss_growth_mib_per_1000_pods": (phases.peak_rss - phases.idle_rss)
        / 2**20 / kpods,
        "operator_requests": {
            "quiet_window_seconds": round(quiet_s, 2), "quiet": quiet_requests,
            "event_window_seconds": round(events_s, 2), "events": event_requests,
        },
        "api_requests_per_slice_event": ratio(event_total, events),
        "api_requests_per_slice_event_net_of_resync": ratio(net_event, events),
        "api_requests_per_slice_event_by_kind": request_breakdown(
            event_requests, quiet_requests, quiet_s, events_s, events),
        "api_requests_per_slice_event_every_client_until_ready": _every_client(phases, events),
        "load_average": phases.load,
        # Where the time goes, from the operator's metrics over the failure phase.
        "operator_internals": internals(*phase, events_s),
        # The same phase as the API server timed it (bench.internals.server).
        "api_server_internals": server(*(phases.server.get(m, {}) for m in ("events", "end"))),
        "operator_stop_seconds": phases.stop_seconds,
        # The operator's own view over the failure phase: failure -> status written
        # (from kwok's finishedAt, whole seconds). A reconcile's wall time is in
        # operator_internals.reconcile_seconds.
        "operator_reported_detection_mean_seconds": histogram(
            *phase, "etj_slice_down_detection_seconds")["mean"],
        # What the status writes carried, from the failures' start until every failed
        # slice was Ready again (bench/writes.py), as this process's job watch saw them.
        "status_writes_seen": _writes_summary(tl, phases, events),
        "errors": tl.errors[:20],
        "quick": quick,
    }


def _every_client(phases: Phases, events: int) -> float | None:
    """Every client's requests per slice event (the garbage collector's, the Job
    controller's, kwok's as the kubelets, ...), from the failures to every slice Ready
    again, watches left out (None: the API server was not scraped)."""
    start, end = phases.server.get("events"), phases.server.get("recovered")
    return ratio(requests_but_watches(start, end), events) if start and end else None


def _cpu(cpu: dict[str, float], kpods: float, quiet_s: float, events: int
         ) -> dict[str, dict[str, Any]]:
    """The operator's CPU seconds per phase, and per 1,000 pods (per slice event)."""
    return {
        "operator_cpu_seconds": {
            "startup": round(cpu["running"] - cpu["created"], 3),
            "quiet": round(cpu["events"] - cpu["quiet"], 3),
            "events": round(cpu["end"] - cpu["events"], 3),
        },
        "operator_cpu_seconds_per_1000_pods": {
            "startup": (cpu["running"] - cpu["created"]) / kpods,
            "quiet_per_minute": (cpu["events"] - cpu["quiet"]) / kpods * 60.0 / quiet_s,
            "per_slice_event": ratio(cpu["end"] - cpu["events"], events),
        },
    }


def _writes_summary(tl: Timeline, phases: Phases, events: int) -> dict[str, Any]:
    """The status writes from the failures' start until every failed slice was Ready
    again: what they carried (bench/writes.py, this process's job watch) and how many the
    operator counted (its metric: changes, progress paced, progress held back)."""
    start, end = phases.wall.get("events", 0.0), phases.wall.get("recovered", time.time())
    with tl.lock:
        seen = tl.writes.summary(start, end, events)
    metric = internals(phases.metrics.get("events", {}), phases.metrics.get("recovered", {}),
                       1.0)["status_writes"]
    return {**seen, "operator_metric_per_slice_event": {
        k: round(v / max(1, events), 2) for k, v in metric.items()},
        "until_recovered": phases.recovered, "seconds": round(end - start, 1)}
