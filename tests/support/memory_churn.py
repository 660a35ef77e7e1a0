"""The operator's whole in-process path, for what it keeps per job: build_operator against
an API server kept in memory (`MemoryApi`), its caches fed as their watches would feed
them, its work queue and follow-up threads running real reconciles. A job is created with
its JobSet, a worker Job and its pods, reconciled (its children made, its status written,
its checkpoint root scanned, its metrics recorded), then deleted as the user and the
garbage collector delete it (tests/unit/test_operator_job_stores.py)."""
from __future__ import annotations

import argparse
import copy
import gc
import itertools
import json
import subprocess
import sys
import tracemalloc
import types
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from elastic_api.crd import build_crd
from elastic_api.kube import ApiError, Informer
from elastic_api.models import ElasticTrainingJobStatus, SliceStatus
from elastic_operator.app import Operator, build_operator, queued_reconcile
from elastic_operator.client.kube import Kube
from elastic_operator.core.parsing import parse_job
from elastic_operator.core.status_events import StatusEvent
from elastic_operator.metrics.metrics import OperatorMetrics
from elastic_operator.model.result import Result
from elastic_operator.queue.work_queue import ReconcileFunction
from elastic_operator.reconcile.reconciler import CONFLICT_ATTEMPTS
from tests.builders import T0, JobSetWrapper, NodeWrapper, PodWrapper, etj
from tests.support.executors import Synchronous
from tests.support.merge_patch import apply_merge_patch
from tests.support.stand_in_kube import CONFLICT

NAMESPACE = "churn"
TEMPLATE = "template-job"  # the name every object of a job carries, renamed per job
NODES = ("node-0", "node-1")
HOSTS = 2
DEADLINE_S = 30.0
EMPTY_PAGE: dict[str, Any] = {"items": [], "metadata": {"resourceVersion": "1"}}


class MemoryApi(Kube):
    """The API server, in memory: the jobs it stores (a status patch applied as the API
    server applies it, conditional on the version), every create answered, every Event
    accepted; it keeps nothing of a job but the job. `written(job)`: each status write, as
    the job watch then delivers it."""

    def __init__(self) -> None:
        super().__init__(None)
        self.jobs: dict[tuple[str, str], dict[str, Any]] = {}
        self._versions = itertools.count(2)
        self.written = lambda job: None

    def version(self) -> str:
        return str(next(self._versions))

    def list_jobs(self, namespace: str | None, *, limit: int,
                  continue_token: str | None = None) -> dict[str, Any]:
        return EMPTY_PAGE

    def list_pods(self, namespace: str | None, label_selector: str, *, limit: int,
                  continue_token: str | None = None) -> dict[str, Any]:
        return EMPTY_PAGE

    def list_jobsets(self, namespace: str | None, label_selector: str, *, limit: int,
                     continue_token: str | None = None) -> dict[str, Any]:
        return EMPTY_PAGE

    def list_worker_jobs(self, namespace: str | None, label_selector: str, *, limit: int,
                         continue_token: str | None = None) -> dict[str, Any]:
        return EMPTY_PAGE

    def list_nodes(self, *, limit: int, continue_token: str | None = None) -> dict[str, Any]:
        return EMPTY_PAGE

    def list_crd(self, *, limit: int, continue_token: str | None = None) -> dict[str, Any]:
        crd = build_crd()
        crd["metadata"]["resourceVersion"] = "1"
        return {"items": [crd], "metadata": {"resourceVersion": "1"}}

    def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        job = self.jobs.get((namespace, name))
        return copy.deepcopy(job) if job is not None else None

    def get_jobset(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None  # the JobSet cache holds every one there is

    def create(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        made = copy.deepcopy(obj)
        made["metadata"].update(uid=f"uid-{self.version()}", resourceVersion=self.version())
        return made

    def patch_job_status(self, namespace: str, name: str, patch: dict[str, Any],
                         resource_version: str | None = None) -> dict[str, Any] | None:
        job = self.jobs.get((namespace, name))
        if job is None:
            return None
        if resource_version not in (None, job["metadata"]["resourceVersion"]):
            raise CONFLICT
        job["status"] = apply_merge_patch(job.get("status") or {}, patch["status"])
        job["metadata"]["resourceVersion"] = self.version()
        self.written(copy.deepcopy(job))
        return copy.deepcopy(job)

    def post_event(self, job: dict[str, Any], event: StatusEvent, now: Any,
                   name: str | None = None) -> bool:
        return True

    def list_workloads(self, namespace: str, jobset_uid: str) -> list[dict[str, Any]]:
        return []


class Churn:
    """The operator, built as `etj operator` builds it but on a MemoryApi, its caches
    synced (empty, the CRD our own), its nodes Ready, its work queue running.
    `cycle(name)`: one job's life. `passes`: what the work queue runs for a job named
    (default: the real reconcile, app.queued_reconcile). Stop it with `close`."""

    def __init__(self, checkpoint_root: Path,
                 passes: Callable[[Operator], ReconcileFunction] | None = None) -> None:
        self.api = MemoryApi()
        self.registry = CollectorRegistry()
        self.root = checkpoint_root
        self._template = json.dumps(self._made(checkpoint_root))
        self.op: Operator = build_operator(self.api, OperatorMetrics(self.registry),
                                           scan_executor=Synchronous(), workers=1)
        self._informers: dict[str, Informer[Any]] = {i.resource: i for i in self.op.informers}
        for informer in self.op.informers:
            informer.relist("test")
        self.api.written = lambda job: self._apply("jobs", "MODIFIED", job)
        for node in NODES:
            self._apply("nodes", "ADDED", NodeWrapper(node).ready().obj())
        assert self.op.gate.open
        reconcile = passes(self.op) if passes is not None else queued_reconcile(
            self.op.reconciler, self.op.work_queue)
        self.op.work_queue.start(self.op.gate.wrap(reconcile))


    def _apply(self, resource: str, kind: str, obj: dict[str, Any]) -> None:
        """As the resource's watch delivers it (`obj` is the cache's from then on)."""
        obj["metadata"].setdefault("resourceVersion", self.api.version())
        self._informers[resource].apply({"type": kind, "object": obj})

    def objects(self, name: str) -> dict[str, list[dict[str, Any]]]:
        """What a job of `name` is made of, as the API server returns it (the template's,
        renamed: one JSON round trip, cheaper than building each)."""
        return json.loads(self._template.replace(TEMPLATE, name))

    @staticmethod
    def _made(root: Path) -> dict[str, list[dict[str, Any]]]:
        name = TEMPLATE
        uid = f"{name}-uid"
        job = (etj(name, NAMESPACE).uid(uid).generation(1).tpu("v5e", "2x4", 1)
               .checkpoint_dir(str(root)).obj())
        jobset = JobSetWrapper(name, NAMESPACE).owner(uid).workers(1, HOSTS).obj()
        worker = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {
            "name": f"{name}-worker-0", "namespace": NAMESPACE, "uid": f"{name}-w0-uid",
            "labels": {"elastic.pathways.dev/job-name": name,
                       "jobset.sigs.k8s.io/jobset-name": name,
                       "jobset.sigs.k8s.io/replicatedjob-name": "worker",
                       "jobset.sigs.k8s.io/job-index": "0"}},
            "spec": {"backoffLimit": 10}, "status": {"active": HOSTS}}
        pods = [PodWrapper.worker(0, host, job=name, namespace=NAMESPACE)
                .labels({"batch.kubernetes.io/controller-uid": f"{name}-w0-uid"})
                .on_node(NODES[host]).running().obj() for host in range(HOSTS)]
        return {"jobs": [job], "jobsets": [jobset], "worker-jobs": [worker], "pods": pods}

    def cycle(self, name: str, *, children: bool = True) -> None:
        """One job's life: its objects appear (the job last, as the JobSet controller
        would make the rest from it: the order the caches see them matters not), it is
        reconciled until idle, then deleted (the job, then what the garbage collector
        deletes), and everything it set going has ended. `children` False: the job and
        its JobSet alone, its checkpoint root one the operator may not list (no scan:
        CheckpointRootAllowed)."""
        made = self.objects(name)
        if not children:
            made = {"jobs": made["jobs"], "jobsets": made["jobsets"], "worker-jobs": [],
                    "pods": []}
            made["jobs"][0]["spec"]["checkpoint"]["directory"] = f"gs://churn/{name}"
        for resource in ("jobsets", "worker-jobs", "pods"):
            for obj in made[resource]:
                self._apply(resource, "ADDED", obj)
        job = made["jobs"][0]
        job["metadata"]["resourceVersion"] = self.api.version()
        self.api.jobs[(NAMESPACE, name)] = copy.deepcopy(job)  # the API server's own
        self._informers["jobs"].apply({"type": "ADDED", "object": job})
        self.settle(name)
        gone = self.api.jobs.pop((NAMESPACE, name))
        self._apply("jobs", "DELETED", gone)
        for resource in ("pods", "worker-jobs", "jobsets"):
            for obj in made[resource]:
                self._apply(resource, "DELETED", obj)
        self.settle(name)

    def settle(self, name: str) -> None:
        """Until the job is neither queued nor reconciled, and no follow-up runs."""
        for _ in range(2):  # a follow-up may ask for one more reconcile
            assert self.op.work_queue.wait_idle(NAMESPACE, name, DEADLINE_S)
            assert self.op.work_queue.drain(DEADLINE_S)

    def close(self) -> None:
        self.op.work_queue.stop()
        self.op.close()


class StoresOnly:
    """What a reconcile keeps of a job, written by the collaborators a reconcile writes it
    through and in its order, without its computation (parsing, rendering and computing
    the status cost a few ms a job: 10,000 jobs in seconds): its children made, its
    status written (our write read back, the pacing, the outbox and its Events posted by
    the follow-ups), its spec and status in the metrics, its checkpoint root scanned, its
    slices told to the slice index, its failures on pools to the node index, its worker
    Jobs under deletion. The statuses are the same objects for every job."""

    def __init__(self, op: Operator) -> None:
        self.op = op
        self.spec = parse_job(etj().tpu("v5e", "2x4", 1).checkpoint_dir("/c").obj()).job.spec
        self.before = ElasticTrainingJobStatus()
        slices = [SliceStatus(index=0, state="Down", hosts=HOSTS, reason="PodFailed")]
        self.after = ElasticTrainingJobStatus(phase="Running", slices=slices)
        self.events = [StatusEvent(reason="SliceDown", message="slice 0 down", type="Warning",
                                   slice_index=0)]

    def __call__(self, namespace: str, name: str) -> Result:
        """As the reconcile does (reconciler.py `_reconcile_fresh`), a write refused
        because the job changed since it was read is made again from a fresh read: left
        to the work queue's retry, the refusal's logged traceback stays in the test's
        log capture, and tracemalloc counts it as kept by the operator."""
        attempt = 1
        while True:
            try:
                return self._once(namespace, name, fresh=attempt > 1)
            except ApiError as e:
                if not e.is_conflict or attempt == CONFLICT_ATTEMPTS:
                    raise
                attempt += 1

    def _once(self, namespace: str, name: str, *, fresh: bool) -> Result:
        rec, key = self.op.reconciler, (namespace, name)
        raw = rec.reads.own_writes.read_job(rec.reads.reader, namespace, name, fresh)
        if raw is None:
            return Result()
        remembered = rec.memory.of(key)
        remembered.children_ensured = raw["metadata"]["uid"]
        rec.reads.reader.checkpoint(namespace, name, raw["spec"]["checkpoint"]["directory"])
        rec.reads.reader.note_failures(namespace, name, raw["metadata"]["uid"], [])
        assert rec.record_computed is not None
        rec.record_computed(key, self.after.slices or [])
        rec.writes.replacements.worker_jobs(key, name, planned=True)
        pending = rec.writes.outbox.merge(raw, [], self.events, self.after)
        with rec.reads.own_writes.writing(namespace, name):
            written = self.op.kube.patch_job_status(
                namespace, name, {"status": {"phase": "Running"}},
                raw["metadata"]["resourceVersion"])
            rec.reads.own_writes.remember(key, raw["metadata"]["resourceVersion"], written)
        rec.writes.writer.pacer.wrote(key, progress=False, settled=False)
        rec.writes.outbox.written(raw, pending)
        rec.metrics.record_spec(namespace, name, self.spec)
        rec.metrics.record_status(namespace, name, self.before, self.after)
        rec.metrics.record_events(namespace, self.events, T0.timestamp())
        rec.writes.outbox.post(raw, pending, T0 + timedelta(seconds=1))
        rec.reads.own_writes.overwritten(key)
        return Result()


def retained_per_job(churn: Churn, jobs: int, *, traced: int, prefix: str, warm: int = 200,
                     windows: int = 4, limit: float | None = None
                     ) -> tuple[float, list[str]]:
    """Bytes still allocated per job created and forgotten, by tracemalloc over `traced`
    of `jobs` cycles, after `warm` (the caches', the metrics' and the interpreter's first
    growth): what a leak leaves grows with every job, so it shows in any of them, and
    tracing costs four times the work; the rest run untraced. The traced jobs run in
    `windows` windows; the growth counts from the end of the first, so that a one-time
    allocation there (a buffer or a table grown once, when the machine's load changes
    how the threads interleave) is not divided among a few hundred jobs, while a leak,
    growing with every job, shows in each window. Checked after each window: a leak (an
    average over `limit`) fails in seconds. Also the source lines whose allocations grew
    most over the traced jobs: where to look."""
    assert not tracemalloc.is_tracing() and warm + traced <= jobs and windows >= 2
    names = (f"{prefix}-{i:05d}" for i in range(jobs))
    for name in itertools.islice(names, warm):
        churn.cycle(name)
    gc.collect()
    tracemalloc.start(1)
    window = traced // windows
    try:
        # Taken before any figure is read: the snapshot's own objects are not the jobs'.
        before = tracemalloc.take_snapshot()
        start, done = 0, 0
        while done < traced:
            for name in itertools.islice(names, min(window, traced - done)):
                churn.cycle(name)
            done = min(traced, done + window)
            gc.collect()
            if done == window:
                start = tracemalloc.get_traced_memory()[0]
                continue
            per_job = (tracemalloc.get_traced_memory()[0] - start) / (done - window)
            if limit is not None and per_job > limit:
                break
        grew = _grew_most(before, tracemalloc.take_snapshot())
    finally:
        tracemalloc.stop()
    if limit is None or per_job <= limit:
        for name in names:
            churn.cycle(name)
    return per_job, grew


def _grew_most(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot,
               lines: int = 8) -> list[str]:
    """The source lines whose allocations grew most between the snapshots (tracemalloc's
    own left out)."""
    mine = [tracemalloc.Filter(False, tracemalloc.__file__)]
    diff = after.filter_traces(mine).compare_to(before.filter_traces(mine), "lineno")
    return [str(d) for d in diff[:lines]]


def leak_on_forget(churn: Churn, nbytes: int) -> list[bytes]:
    """Make the job memory's forget keep `nbytes` of each job it forgets (a leak the
    measure must see); the list that keeps them."""
    kept: list[bytes] = []
    forget = churn.op.reconciler.memory.forget_job

    def leaky_forget(key: tuple[str, str]) -> None:
        kept.append(bytes(nbytes) + key[1].encode())
        forget(key)

    (at,) = [i for i, s in enumerate(churn.op.stores.stores) if s.name == "job-memory"]
    churn.op.stores.stores[at] = replace(churn.op.stores.stores[at], forget=leaky_forget)
    return kept


@dataclass(frozen=True)
class Retained:
    """What `retained_apart` measured: bytes per job, the counts the stores ended with,
    and the source lines that grew most (tracemalloc's statistics, for a failure's
    message)."""

    per_job: float
    counts: set[int]
    grew: list[str]


def retained_apart(directory: Path, jobs: int, *, traced: int, prefix: str, warm: int = 200,
                   limit: float | None = None, leak_bytes: int = 0) -> Retained:
    """`retained_per_job` over StoresOnly reconciles, in a Python process of its own, and
    the counts its stores end with. tracemalloc counts every thread's allocations: in a
    test process, threads earlier tests left behind (their log records, their buffers)
    would count as the jobs', the more so the slower the machine runs."""
    args = [sys.executable, "-m", "tests.support.memory_churn", str(directory), str(jobs),
            str(traced), prefix, "--warm", str(warm), "--leak-bytes", str(leak_bytes)]
    if limit is not None:
        args += ["--limit", str(limit)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=600, check=False,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    return Retained(float(out["per_job"]), set(out["counts"]), list(out["grew"]))


def _main() -> None:
    parser = argparse.ArgumentParser(description=retained_apart.__doc__)
    parser.add_argument("directory", type=Path)
    parser.add_argument("jobs", type=int)
    parser.add_argument("traced", type=int)
    parser.add_argument("prefix")
    parser.add_argument("--warm", type=int, default=200)
    parser.add_argument("--limit", type=float, default=None)
    parser.add_argument("--leak-bytes", type=int, default=0)
    args = parser.parse_args()
    churn = Churn(args.directory, passes=StoresOnly)
    if args.leak_bytes:
        leak_on_forget(churn, args.leak_bytes)
    try:
        per_job, grew = retained_per_job(churn, args.jobs, traced=args.traced,
                                         prefix=args.prefix, warm=args.warm, limit=args.limit)
        counts = sorted(set(churn.op.stores.counts().values()))
    finally:
        churn.close()
    print(json.dumps({"per_job": per_job, "counts": counts, "grew": grew}))


def holding(root: object, needle: str, *, skip: tuple[object, ...] = ()) -> list[str]:
    """Every object reachable from `root` that holds a string containing `needle` (the
    type of the holder, and the string): a walk of the object graph as the garbage
    collector sees it, but not into classes, modules or a function's globals (the rest of
    the program), nor into `skip` (the API server stand-in)."""
    seen = {id(s) for s in skip}
    stack: list[object] = [root]
    found: list[str] = []
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, type | types.ModuleType):
            continue
        seen.add(id(obj))
        if isinstance(obj, types.FunctionType):
            cells = [c.cell_contents for c in obj.__closure__ or () if _filled(c)]
            stack.extend([*cells, *(obj.__defaults__ or ()), *(obj.__kwdefaults__ or {}).values()])
            continue
        for child in gc.get_referents(obj):
            if isinstance(child, str):
                if needle in child:
                    found.append(f"{type(obj).__name__} holds {child!r}")
            else:
                stack.append(child)
    return found


def _filled(cell: types.CellType) -> bool:
    try:
        cell.cell_contents  # noqa: B018 (an empty cell raises)
    except ValueError:
        return False
    return True


if __name__ == "__main__":
    _main()
