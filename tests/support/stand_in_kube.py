"""A stand-in Kube for the reconciler's unit tests: one job in memory, an API server that
records each request (and the pod cache's reads among them), answers a conditional status
patch as the API server does, and raises the ApiError a test asks of a method."""
from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from dataclasses import replace as dataclass_replace
from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry

from elastic_api.models import CheckpointStatus
from elastic_api.names import GROUP, PLURAL
from elastic_operator.app import build_reconciler
from elastic_operator.checkpoints.scanner import CheckpointScanner
from elastic_operator.client.kube import ApiError, Kube
from elastic_operator.core.status_events import StatusEvent
from elastic_operator.metrics.metrics import OperatorMetrics
from elastic_operator.model.job_memory import JobMemories
from elastic_operator.model.objects import ObservedJob, ObservedJobSet, ObservedPod
from elastic_operator.model.result import Result, Wake
from elastic_operator.reconcile.own_writes import OwnWrites
from elastic_operator.reconcile.pacer import ProgressPacer
from elastic_operator.reconcile.reconcile_pass import Requeued
from elastic_operator.reconcile.reconciler import Reconciler
from elastic_operator.reconcile.schema_guard import Verdict, always_current
from elastic_operator.watch.job_reader import CacheReader
from elastic_operator.watch.node_index import NodeIndex
from tests.builders import T0, etj
from tests.support.clock import FakeClock
from tests.support.executors import FollowUpRunner, Inline, Synchronous
from tests.support.merge_patch import apply_merge_patch


def api_error(code: int, reason: str, message: str, **details: Any) -> ApiError:
    """What the API server answers, as kube.request raises it."""
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
            "reason": reason, "message": message}
    if details:
        body["details"] = details
    return ApiError(code, reason, json.dumps(body))


CONFLICT = api_error(409, "Conflict", 'Operation cannot be fulfilled on elastictrainingjobs'
                     '.elastic.pathways.dev "train": the object has been modified; please '
                     "apply your changes to the latest version and try again",
                     name="train", group=GROUP, kind=PLURAL)


POD_CACHE_READ = "pods (from the cache)"
WORKER_JOB_CACHE_READ = "worker Jobs (from the cache)"


def the_job(**spec: Any) -> dict[str, Any]:
    return (etj("train", "ml").uid("u-1").generation(1).tpu("v5e", "2x4", 1)
            .checkpoint_dir("gs://b/ckpt").spec(**spec).obj())


class StandInKube(Kube):
    """One job in memory. `fail` maps a method name to the ApiError it raises."""

    def __init__(self, job: dict[str, Any], jobset: dict[str, Any] | None = None) -> None:
        super().__init__(None)
        self.job = job
        self.job["metadata"].setdefault("resourceVersion", "1")
        self.jobset = jobset
        self.fail: dict[str, ApiError] = {}
        self.calls: list[str] = []
        self.created: list[str] = []
        self.patches: list[dict[str, Any]] = []
        self.events: list[StatusEvent] = []
        self.event_names: list[str] = []
        # Runs before each status patch is applied (another writer, in between).
        self.before_patch: Callable[[], None] = lambda: None

    def write_training(self, report: dict[str, Any]) -> None:
        """The trainer's merge patch of status.training: a new resourceVersion."""
        self.job.setdefault("status", {})["training"] = report
        self._bump()

    def _bump(self) -> None:
        meta = self.job["metadata"]
        meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)

    def _call(self, method: str) -> None:
        self.calls.append(method)
        if method in self.fail:
            raise self.fail[method]

    def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        self._call("get_job")
        return copy.deepcopy(self.job)

    def get_jobset(self, namespace: str, name: str) -> dict[str, Any] | None:
        self._call("get_jobset")
        return copy.deepcopy(self.jobset)

    def create(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        self._call(f"create {obj['kind']}")
        self.created.append(obj["kind"])
        if obj["kind"] != "JobSet":
            return copy.deepcopy(obj)
        stored = copy.deepcopy(obj)
        stored["metadata"]["uid"] = "js-uid"
        self.jobset = stored
        return copy.deepcopy(stored)

    def patch_jobset_suspend(self, namespace: str, name: str, suspend: bool) -> dict[str, Any]:
        self._call("patch_jobset_suspend")
        assert self.jobset is not None
        self.jobset["spec"]["suspend"] = suspend
        return copy.deepcopy(self.jobset)

    def patch_job_status(self, namespace: str, name: str, patch: dict[str, Any],
                         resource_version: str | None = None) -> dict[str, Any] | None:
        self._call("patch_job_status")
        self.before_patch()
        if resource_version not in (None, self.job["metadata"]["resourceVersion"]):
            raise CONFLICT
        self.patches.append(patch)
        self.job["status"] = apply_merge_patch(self.job.get("status") or {}, patch["status"])
        self._bump()
        return copy.deepcopy(self.job)  # the job as the write left it, as the API answers

    def worker_jobs(self, namespace: str, jobset: str) -> tuple[ObservedJob, ...]:
        """What the worker-Job cache holds: none (the JobSet controller has not made
        them)."""
        self.calls.append(WORKER_JOB_CACHE_READ)
        return ()

    def post_event(self, job: dict[str, Any], event: StatusEvent, now: datetime,
                   name: str | None = None) -> bool:
        self._call("post_event")
        if name is not None and name in self.event_names:
            return False  # 409 AlreadyExists
        self.event_names.append(name or "")
        self.events.append(event)
        return True


@dataclass
class FollowingReconciler(Reconciler):
    """The reconciler with what the work queue's worker does after each reconcile: its
    Result's follow-ups handed to `runner` (inline, or held back), the Result without
    them (a pass cut short runs them when its `again` is called through here)."""

    runner: FollowUpRunner = field(default_factory=Inline)

    def reconcile(self, namespace: str, name: str, requeued: Requeued | None = None) -> Result:
        return self._follow(namespace, name, super().reconcile(namespace, name, requeued))

    def _follow(self, namespace: str, name: str, result: Result) -> Result:
        again = result.again
        if again is not None:
            return dataclass_replace(result, again=lambda: self._follow(namespace, name, again()))
        for work in result.follow_ups:
            self.runner.submit((namespace, name), work)
        return dataclass_replace(result, follow_ups=())


def reconciler(kube: Kube, scan: Callable[[str, datetime], CheckpointStatus] | None = None,
               pods: tuple[ObservedPod, ...] | Callable[[], tuple[ObservedPod, ...]] = (),
               jobsets: Callable[[str, str], ObservedJobSet | None] | None = None,
               nodes: NodeIndex | None = None,
               jobs: Callable[[str, str], dict[str, Any] | None] | None = None,
               progress_interval_s: float = 0.0,
               clock: FakeClock | None = None,
               follow_ups: FollowUpRunner | None = None,
               wake: Wake | None = None,
               schema: Verdict = always_current,
               ) -> tuple[Reconciler, CollectorRegistry]:
    """`pods`: what the pod cache holds (or a function that says, at each read);
    the worker-Job cache is the stand-in's `worker_jobs`. Progress-only status writes
    are not paced unless `progress_interval_s` says (`clock`: the reconciler's, T0 by default).
    `follow_ups`: what runs the work after a status write (default: at once, inline,
    telling `wake`, the work queue's add_after, when a piece asks to look again; default:
    nobody); `schema`: the verdict on the served CRD (default: the operator's own). Built
    as app.py builds it; no work queue: a pass never starts over unless a test wires one
    (app.queued_reconcile)."""
    registry = CollectorRegistry()
    metrics = OperatorMetrics(registry)

    def no_checkpoint(directory: str, now: datetime) -> CheckpointStatus:
        return CheckpointStatus(directory=directory, observed_at=now)

    scanner = CheckpointScanner(scan=scan or no_checkpoint, executor=Synchronous(),
                                clock=FakeClock(T0))
    def pod_cache(namespace: str, job: str) -> tuple[ObservedPod, ...]:
        if isinstance(kube, StandInKube):  # the order of reads matters (Kueue's tests)
            kube.calls.append(POD_CACHE_READ)
        return pods() if callable(pods) else pods

    reader = CacheReader(
        kube, nodes or NodeIndex(), scanner, pods=pod_cache, jobsets=jobsets, jobs=jobs,
        worker_jobs=kube.worker_jobs if isinstance(kube, StandInKube) else None)
    clock = clock or FakeClock(T0)
    memory = JobMemories()
    built = build_reconciler(kube, reader, metrics, clock, memory=memory,
                             own_writes=OwnWrites(memory),
                             pacer=ProgressPacer(memory, metrics, clock, progress_interval_s),
                             schema=schema, dry_run_missing_jobs=False)
    rec = FollowingReconciler(**{f.name: getattr(built, f.name) for f in fields(built)},
                              runner=follow_ups or Inline(requeue=wake))
    return rec, registry


class Looks:
    """Every look at the job again a reconciler asks, in order: returned in a
    reconcile's Result (`reconciled`), or asked later through its wake (`wake`)."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    def wake(self, namespace: str, name: str, delay: float) -> None:
        self.delays.append(delay)

    def reconciled(self, result: Result) -> bool:
        """The looks `result` asks recorded; whether the reconcile worked."""
        self.delays += [d for d in (result.requeue_after, result.paced_after)
                        if d is not None]
        return result.ok


def condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == type_)
