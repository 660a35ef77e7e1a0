"""Detection at scale: N jobs x 4 slices x 4 hosts on the local control plane.

One worker pod per job is failed (kwok's chaos stage: the container exits 1). For each
failure the bench's own watches record, all in this process:

  pod_failed    the victim pod is seen Failed (or not Ready): the anchor
  operator      the job's status first shows condition SliceDown=True
  jobset        the JobSet's status.replicatedJobsStatus[worker].ready drops below the
                slice count (JobSet's own reaction; its Job never fails: backoffLimit is high)
  job           the worker Job's status.failed rises (the Job controller's reaction)

The operator runs as a subprocess (`etj operator`, through bench.opshim, which counts its
API requests); psutil samples its CPU time and resident memory.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import REPO, ratio, stats
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
from elastic_devtools.localcluster.crds import install_crd
from elastic_devtools.localcluster.faults import wait_for
from elastic_devtools.localcluster.operator_process import OperatorProcess

NAMESPACE = "etj-bench"
SLICES = 4
TOPOLOGY = "4x4"  # v5e 4x4: 4 hosts per slice
HOSTS = 4


def _log(msg: str) -> None:
    print(f"[detection] {msg}", file=sys.stderr, flush=True)


def job_manifest(name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ElasticTrainingJob",
        "metadata": {"name": name},
        "spec": {
            "backend": "pathways",
            "tpu": {"type": "v5e", "topology": TOPOLOGY, "numSlices": SLICES},
            "elastic": {"maxSliceRestarts": 5},
            "maxRestarts": 0,
            "checkpoint": {"directory": f"/tmp/etj-bench-no-checkpoints/{name}"},
            "trainer": {"image": "trainer:bench", "steps": 1000},
            "pathways": {"gcsScratch": "gs://bench-bucket/scratch"},
        },
    }


@dataclass
class Timeline:
    """First-seen times (time.time()) per job, written by the watch threads."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    running: dict[str, float] = field(default_factory=dict)
    victims: dict[str, str] = field(default_factory=dict)  # job -> victim pod name
    injected: dict[str, float] = field(default_factory=dict)
    pod_failed: dict[str, float] = field(default_factory=dict)
    operator: dict[str, float] = field(default_factory=dict)
    jobset: dict[str, float] = field(default_factory=dict)
    job: dict[str, float] = field(default_factory=dict)
    job_failed_before: dict[str, int] = field(default_factory=dict)  # worker Job -> failed
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> summary
    stop: threading.Event = field(default_factory=threading.Event)
    errors: list[str] = field(default_factory=list)


def _is_true(obj: dict[str, Any], type_: str) -> bool:
    conds = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == type_ and c.get("status") == "True" for c in conds)


def _true_since(obj: dict[str, Any], type_: str) -> float | None:
    """When condition `type_` last turned True (epoch seconds), None unless it is True."""
    from datetime import datetime

    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_ and c.get("status") == "True":
            stamp = c.get("lastTransitionTime")
            if not stamp:
                return 0.0
            return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    return None


def _watch(tl: Timeline, api_client: Any, list_fn: Any, handle: Any, what: str) -> None:
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


def _start_watches(tl: Timeline, cluster: Any, slices: int) -> list[threading.Thread]:
    from kubernetes import client

    def on_job(obj: dict[str, Any], now: float) -> None:
        name = obj["metadata"]["name"]
        status = obj.get("status") or {}
        # Healthy: every slice Ready and no SliceDown. (Ready may stay False: with no
        # trainer reporting, a slice that went down during start-up leaves the job
        # Recovering; that does not matter to detection.)
        since = _true_since(obj, "SliceDown")
        with tl.lock:
            if (name not in tl.running and status.get("slicesReady") == slices
                    and since is None):
                tl.running[name] = now
            # A SliceDown that turned True after the injection (the clock is shared:
            # the API server runs on this machine; 1 s for its whole-second stamps).
            if name in tl.injected and name not in tl.operator and since is not None \
                    and since >= tl.injected[name] - 1.0:
                tl.operator[name] = now

    def on_jobset(obj: dict[str, Any], now: float) -> None:
        name = (obj["metadata"].get("labels") or {}).get(JOB_NAME_LABEL, obj["metadata"]["name"])
        rjs = (obj.get("status") or {}).get("replicatedJobsStatus") or []
        ready = next((r.get("ready", 0) for r in rjs if r.get("name") == "worker"), None)
        with tl.lock:
            if name in tl.injected and name not in tl.jobset and ready is not None \
                    and ready < slices:
                tl.jobset[name] = now

    def on_batch_job(obj: dict[str, Any], now: float) -> None:
        labels = obj["metadata"].get("labels") or {}
        if labels.get(REPLICATED_JOB_LABEL) != WORKER_REPLICATED_JOB:
            return
        owner = labels.get(JOB_NAME_LABEL) or labels.get(JOBSET_NAME_LABEL, "")
        failed = int((obj.get("status") or {}).get("failed") or 0)
        key = obj["metadata"]["name"]
        with tl.lock:
            if owner not in tl.injected:
                tl.job_failed_before[key] = failed
            elif owner not in tl.job and failed > tl.job_failed_before.get(key, 0):
                tl.job[owner] = now

    def on_pod(obj: dict[str, Any], now: float) -> None:
        meta = obj["metadata"]
        labels = meta.get("labels") or {}
        status = obj.get("status") or {}
        ready = _is_true(obj, "Ready")
        with tl.lock:
            tl.pods[meta["name"]] = {
                "job": labels.get(JOB_NAME_LABEL), "phase": status.get("phase"), "ready": ready,
                "slice": labels.get(JOB_INDEX_LABEL),
                "host": labels.get(COMPLETION_INDEX_LABEL),
                "worker": labels.get(REPLICATED_JOB_LABEL) == WORKER_REPLICATED_JOB,
                "deleting": bool(meta.get("deletionTimestamp")),
            }
            job = labels.get(JOB_NAME_LABEL)
            if job in tl.injected and tl.victims.get(job) == meta["name"] \
                    and job not in tl.pod_failed \
                    and (status.get("phase") == "Failed" or not ready):
                tl.pod_failed[job] = now

    threads = []
    for what, make_list, handle in (
        ("jobs", lambda c: lambda **kw: client.CustomObjectsApi(c).list_namespaced_custom_object(
            GROUP, VERSION, NAMESPACE, PLURAL, **kw), on_job),
        ("jobsets", lambda c: lambda **kw: client.CustomObjectsApi(c).list_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", NAMESPACE, "jobsets", **kw), on_jobset),
        ("batch jobs", lambda c: lambda **kw: client.BatchV1Api(c).list_namespaced_job(
            NAMESPACE, **kw), on_batch_job),
        ("pods", lambda c: lambda **kw: client.CoreV1Api(c).list_namespaced_pod(
            NAMESPACE, **kw), on_pod),
    ):
        api_client = cluster.api_client()
        list_fn = make_list(api_client)
        # The watch helper needs the function's name to find its docstring-less signature.
        list_fn.__doc__ = "list"
        t = threading.Thread(target=_watch, args=(tl, api_client, list_fn, handle, what),
                             name=f"watch-{what}", daemon=True)
        t.start()
        threads.append(t)
    return threads


class BenchOperator(OperatorProcess):
    """`etj operator` through bench.opshim (which counts its API requests), with psutil
    sampling of its CPU time and resident memory (peak sampled every 0.2 s)."""

    def __init__(self, kubeconfig: Path, workdir: Path) -> None:
        self.counts_file = workdir / "operator-requests.json"
        super().__init__(
            kubeconfig, workdir / "operator.log", args=("--namespace", NAMESPACE),
            command=(sys.executable, "-m", "bench.opshim", str(self.counts_file), "--"),
            env={"PYTHONPATH": os.pathsep.join(filter(None, [str(REPO),
                                                             os.environ.get("PYTHONPATH")]))},
            cwd=REPO)
        self.peak_rss = 0
        self._sampling = threading.Event()

    def start(self, timeout: float = 120) -> None:
        import psutil

        self.spawn()
        self.ps = psutil.Process(self.pid)
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

    def requests(self) -> dict[str, int]:
        try:
            data: dict[str, int] = json.loads(self.counts_file.read_text())
            return data
        except (OSError, ValueError):
            return {}

    def stop(self, timeout: float = 30) -> None:
        self._sampling.clear()
        super().stop(timeout)


def _diff(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    keys = set(after) | set(before)
    out = {k: after.get(k, 0) - before.get(k, 0) for k in sorted(keys)}
    return {k: v for k, v in out.items() if v}


def run(n_jobs: int, quick: bool = False, keep_dir: bool = False) -> dict[str, Any]:
    from kubernetes import client

    from elastic_devtools import localcluster as lc
    from elastic_devtools.localcluster.faults import fail_pod

    pods_total = n_jobs * (SLICES * HOSTS + 1)
    quiet_s = 5.0 if quick else 30.0
    inject_interval_s = 0.2 if quick else 0.25
    workdir = Path(tempfile.mkdtemp(prefix="etj-bench-detect-"))
    cluster_dir = workdir / "cluster"
    _log(f"N={n_jobs} jobs x {SLICES} slices x {HOSTS} hosts = {pods_total} pods "
         f"({n_jobs * SLICES} TPU node pools, {n_jobs * SLICES * HOSTS} TPU nodes); "
         f"work dir {workdir}")
    t_up = time.monotonic()
    cluster = lc.up(lc.ClusterConfig(
        dir=cluster_dir,
        tpu_pools=(lc.parse_tpu_pool(f"v5e:{TOPOLOGY}:{n_jobs * SLICES}"),),
        cpu_nodes=n_jobs,  # one head per CPU node (exclusive placement)
        timeout=300 + 2.0 * n_jobs * SLICES * HOSTS, die_with_parent=True,
    ), progress=_log)
    cluster_up_s = time.monotonic() - t_up
    tl = Timeline()
    operator: BenchOperator | None = None
    try:
        api = cluster.api_client()
        install_crd(api)
        core = client.CoreV1Api(api)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
        wait_for(lambda: any(sa.metadata is not None and sa.metadata.name == "default" for sa in
                          core.list_namespaced_service_account(NAMESPACE).items),
              60, "the namespace's default ServiceAccount")
        operator = BenchOperator(cluster.kubeconfig, workdir)
        operator.start(timeout=120)
        _start_watches(tl, cluster, SLICES)
        time.sleep(2.0)  # let the idle operator settle before its baseline
        idle_rss = operator.rss()
        cpu0, t0 = operator.cpu_seconds(), time.monotonic()

        names = [f"bench-{i:03d}" for i in range(n_jobs)]
        custom = client.CustomObjectsApi(api)
        for name in names:
            custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL,
                                                   job_manifest(name))
        _log(f"created {n_jobs} jobs; waiting for them to run")

        def all_running() -> bool:
            with tl.lock:
                return len(tl.running) >= n_jobs

        try:
            wait_for(all_running, 180 + 0.3 * pods_total, f"{n_jobs} jobs with every slice Ready",
                  0.5)
        except TimeoutError as err:  # at scale: measure the jobs that did start
            tl.errors.append(str(err))
        startup_s = time.monotonic() - t0
        cpu1 = operator.cpu_seconds()
        with tl.lock:
            started = [n for n in names if n in tl.running]
        if not started:
            raise RuntimeError(f"no job got every slice Ready; see {workdir}")
        _log(f"{len(started)}/{n_jobs} jobs Running in {startup_s:.1f}s; "
             f"quiet window {quiet_s:.0f}s")

        time.sleep(2.0 if quick else 10.0)  # let the start-up churn end
        cpu1b, req1b = operator.cpu_seconds(), operator.requests()
        time.sleep(quiet_s)  # steady state: resyncs, kwok heartbeats, no failures
        cpu2, req2, rss_steady = operator.cpu_seconds(), operator.requests(), operator.rss()

        # Fail host 0 of slice (i % 4) of job i, one every inject_interval_s.
        def victim_of(job: str, index: int) -> str:
            with tl.lock:
                for pod, info in sorted(tl.pods.items()):
                    if info["job"] == job and info["worker"] and info["phase"] == "Running" \
                            and info["ready"] and not info["deleting"] \
                            and info["slice"] == str(index % SLICES) and info["host"] == "0":
                        return pod
            raise RuntimeError(f"no Running worker pod for slice {index % SLICES} of {job}")

        t_inject0 = time.monotonic()
        for i, name in enumerate(started):
            pod = victim_of(name, i)
            with tl.lock:
                tl.victims[name] = pod
                tl.injected[name] = time.time()
            fail_pod(api, NAMESPACE, pod)
            time.sleep(inject_interval_s)

        def all_seen() -> bool:
            # JobSet's ready count may never drop (the Job controller can report the
            # failure and the replacement pod in one status update); the Job's
            # status.failed always rises, so the baseline is whichever comes first.
            with tl.lock:
                return all(n in tl.operator and (n in tl.jobset or n in tl.job)
                           and n in tl.pod_failed for n in started)

        try:
            wait_for(all_seen, 120 + 0.5 * n_jobs, "every failure seen by operator and JobSet",
                     0.25)
        except TimeoutError as err:
            tl.errors.append(str(err))
        time.sleep(2.0)  # the operator's trailing writes (events, metrics) for the last one
        events_s = time.monotonic() - t_inject0
        cpu3, req3 = operator.cpu_seconds(), operator.requests()
        peak_rss = operator.peak_rss
    finally:
        tl.stop.set()
        if operator is not None:
            operator.stop()
        lc.down(cluster_dir, progress=_log)

    with tl.lock:
        op_lat = [tl.operator[n] - tl.pod_failed[n] for n in names
                  if n in tl.operator and n in tl.pod_failed]
        jobset_only = [tl.jobset[n] - tl.pod_failed[n] for n in names
                       if n in tl.jobset and n in tl.pod_failed]
        # The baseline: the first status change of JobSet's or the Job controller's.
        baseline = {n: min(t for t in (tl.jobset.get(n), tl.job.get(n)) if t is not None)
                    for n in names if n in tl.jobset or n in tl.job}
        js_lat = [baseline[n] - tl.pod_failed[n] for n in names
                  if n in baseline and n in tl.pod_failed]
        job_lat = [tl.job[n] - tl.pod_failed[n] for n in names
                   if n in tl.job and n in tl.pod_failed]
        op_from_inject = [tl.operator[n] - tl.injected[n] for n in names if n in tl.operator]
        js_from_inject = [baseline[n] - tl.injected[n] for n in names if n in baseline]
        paired = [tl.operator[n] - baseline[n]
                  for n in names if n in tl.operator and n in baseline]
        jobset_never = sum(1 for n in started if n not in tl.jobset)
    op_s, js_s = stats(op_lat), stats(js_lat)
    kpods = pods_total / 1000.0
    quiet_requests = _diff(req2, req1b)
    event_requests = _diff(req3, req2)
    quiet_total = sum(quiet_requests.values())
    event_total = sum(event_requests.values())
    # Subtract the steady-state request rate (resyncs) over the event phase's duration.
    net_event = event_total - quiet_total * (events_s / quiet_s)
    events = len(op_lat)
    result = {
        "n_jobs": n_jobs, "slices_per_job": SLICES, "hosts_per_slice": HOSTS,
        "pods": pods_total, "tpu_node_pools": n_jobs * SLICES,
        "nodes": n_jobs * SLICES * HOSTS + n_jobs,
        "cluster_up_seconds": round(cluster_up_s, 2),
        "jobs_running_seconds": round(startup_s, 2),
        "jobs_started": len(started),
        "failures_injected": len(started), "failures_detected": events,
        "inject_interval_seconds": inject_interval_s,
        "operator_slice_down_seconds": op_s,
        "jobset_ready_drop_seconds": js_s,
        "jobset_replicated_jobs_ready_drop_only_seconds": stats(jobset_only),
        "jobset_ready_never_dropped": jobset_never,
        "job_failed_count_seconds": stats(job_lat),
        "operator_from_injection_seconds": stats(op_from_inject),
        "jobset_from_injection_seconds": stats(js_from_inject),
        "operator_minus_jobset_paired_seconds": stats(paired),
        "ratio_p50_operator_vs_jobset": ratio(op_s["p50"], js_s["p50"]),
        "ratio_p99_operator_vs_jobset": ratio(op_s["p99"], js_s["p99"]),
        "operator_cpu_seconds": {
            "startup": round(cpu1 - cpu0, 3), "quiet": round(cpu2 - cpu1b, 3),
            "events": round(cpu3 - cpu2, 3),
        },
        "operator_cpu_seconds_per_1000_pods": {
            "startup": (cpu1 - cpu0) / kpods,
            "quiet_per_minute": (cpu2 - cpu1b) / kpods * 60.0 / quiet_s,
            "per_slice_event": ratio(cpu3 - cpu2, events),
        },
        "operator_rss_bytes": {"idle": idle_rss, "steady": rss_steady, "peak": peak_rss},
        "operator_peak_rss_mib_per_1000_pods": peak_rss / 2**20 / kpods,
        "operator_rss_growth_mib_per_1000_pods": (peak_rss - idle_rss) / 2**20 / kpods,
        "operator_requests": {
            "quiet_window_seconds": quiet_s, "quiet": quiet_requests,
            "event_window_seconds": round(events_s, 2), "events": event_requests,
        },
        "api_requests_per_slice_event": ratio(event_total, events),
        "api_requests_per_slice_event_net_of_resync": ratio(net_event, events),
        "errors": tl.errors[:20],
    }
    if not keep_dir:
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
    else:
        result["work_dir"] = str(workdir)
    return result
