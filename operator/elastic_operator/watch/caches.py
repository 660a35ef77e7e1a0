"""The operator's watch-fed caches: the jobs, the pods of every job (indexed by job),
the jobs' JobSets and their worker Jobs (indexed by JobSet), the nodes and (where Kueue
is installed) the Workloads.

Everything the operator reacts to comes through one of these informers (list+watch,
elastic_api.kube.Informer) and names a job to reconcile (`wake`): a job's own change
(`on_job`: the app filters out its own status writes and forgets deleted jobs), a
change of its pods or of what a reconcile reads of its JobSet, a node whose readiness
changes (its jobs), a Workload (the job whose JobSet owns it, if that job is known), a
worker Job created, deleted or changed in what replacement reads of it (not its pod
counts, which move with every pod event already seen; no sooner than the job's next
progress write when it is a recorded replacement running its course); a pod's change,
only when what a reconcile reads of it changed, and no sooner than the job's progress
interval when a worker pod only came nearer to serving or went with its Job's teardown
(`wake_paced`, core/wakes.py), or than its next progress write when that cannot move its
slice's state (slice_index.py). A reconcile reads the job, its pods, its JobSet, its
worker Jobs and the pods' nodes from here instead of from the API server: at 64 slices
x 64 hosts a pod list is megabytes of JSON, and a reconcile runs on every pod event.
"""
from __future__ import annotations

import copy
import fnmatch
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from elastic_api.kube import Informer, Key
from elastic_api.kube.informer import ListPage, Watch
from elastic_api.names import API_VERSION, JOB_NAME_LABEL, JOBSET_GROUP, JOBSET_NAME_LABEL, KIND
from elastic_operator.client.kube import Kube
from elastic_operator.core.wakes import job_may_wait, may_wait
from elastic_operator.model.objects import (
    ObservedJob,
    ObservedJobSet,
    ObservedNode,
    ObservedPod,
    job_from_dict,
    jobset_from_dict,
    node_from_dict,
    pod_from_dict,
)
from elastic_operator.watch.node_index import JobKey, NodeIndex
from elastic_operator.watch.slice_index import SliceIndex

# client-go's default page size: bounds the memory of one list of thousands of pods.
PAGE_SIZE = 500
DEFAULT_WATCH_TIMEOUT_S = 30
# Worker Jobs remembered as torn down: more than the slices of every job served, so that
# a pod's late event still finds its Job (a deleted Job leaves the cache before its pods'
# last events may arrive, on another watch).
TORN_DOWN_KEPT = 4096
# A job changed (key, old, new; None: absent): from the job informer's thread.
JobChange = Callable[[Key, dict[str, Any] | None, dict[str, Any] | None], None]


@dataclass
class WatchScope:
    """The namespaces served: every one, or these names and globs (`team-*`)."""

    clusterwide: bool
    namespaces: list[str]

    @property
    def has_globs(self) -> bool:
        return not self.clusterwide and any(
            any(ch in p for ch in "*?[") for p in self.namespaces)

    def matches(self, namespace: str) -> bool:
        return self.clusterwide or any(fnmatch.fnmatchcase(namespace, p) for p in self.namespaces)

    @property
    def list_namespaces(self) -> list[str | None]:
        """Where to list and watch (None: every namespace, filtered by `matches`)."""
        return [None] if self.clusterwide or self.has_globs else list(self.namespaces)

    @property
    def dry_run_namespace(self) -> str:
        """Where the operator may create (dry run) a Job: a namespace it serves by name,
        else `default` (cluster-wide, its role is bound everywhere)."""
        named = [p for p in self.namespaces if not any(ch in p for ch in "*?[")]
        return named[0] if named and not self.clusterwide else "default"


EVERY_NAMESPACE = WatchScope(clusterwide=True, namespaces=[])


@dataclass(frozen=True)
class CachedPod:
    job: JobKey  # (namespace, value of the job-name label)
    pod: ObservedPod
    seen_at: float = 0.0  # time.time() when the cache received this version


@dataclass(frozen=True)
class CachedWorkerJob:
    owner: JobKey  # (namespace, value of the job-name label)
    jobset: JobKey  # (namespace, value of JobSet's jobset-name label)
    job: ObservedJob


@dataclass(frozen=True)
class CachedJobSet:
    job: JobKey  # (namespace, value of the job-name label)
    jobset: ObservedJobSet


def _as_read(cached: CachedWorkerJob | None) -> ObservedJob | None:
    """A worker Job as the reconciles read it: a Job being deleted counts no failure for
    them (core/counting.py JobCount.of), so its count of failed pods, which the Job
    controller may move with each pod of its teardown, is no news."""
    if cached is None:
        return None
    return replace(cached.job, failed_pods=0) if cached.job.deleting else cached.job


def _job_of(obj: dict[str, Any]) -> JobKey:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    return (str(meta.get("namespace") or ""), str(labels.get(JOB_NAME_LABEL, "")))


def cached_jobset(obj: dict[str, Any]) -> CachedJobSet:
    return CachedJobSet(job=_job_of(obj), jobset=jobset_from_dict(obj))


def cached_pod(obj: dict[str, Any]) -> CachedPod:
    return CachedPod(job=_job_of(obj), pod=pod_from_dict(obj), seen_at=time.time())


def cached_worker_job(obj: dict[str, Any]) -> CachedWorkerJob:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    return CachedWorkerJob(owner=_job_of(obj), jobset=(str(meta.get("namespace") or ""),
                                   str(labels.get(JOBSET_NAME_LABEL, ""))),
                           job=job_from_dict(obj))


def owning_job(workload: Any) -> str | None:
    """The job whose JobSet owns this Workload (a JobSet is named after its job), or
    that owns it itself (a MultiKueue job's, on the manager cluster)."""
    for ref in (workload.get("metadata") or {}).get("ownerReferences") or []:
        api_version = str(ref.get("apiVersion", ""))
        if ref.get("controller") and (
                (ref.get("kind") == "JobSet" and api_version.startswith(f"{JOBSET_GROUP}/"))
                or (ref.get("kind") == KIND and api_version == API_VERSION)):
            return str(ref.get("name", "")) or None
    return None


def _labelled_calls(list_fn: Callable[..., dict[str, Any]],
                    watch_fn: Callable[..., Iterator[dict[str, Any]]], namespace: str | None,
                    watch_timeout_s: int) -> tuple[ListPage, Watch]:
    """List and watch the objects that carry the job-name label, in `namespace` (or all)."""
    def list_page(token: str | None) -> dict[str, Any]:
        return list_fn(namespace, JOB_NAME_LABEL, limit=PAGE_SIZE, continue_token=token)

    def watch(version: str) -> Iterator[dict[str, Any]]:
        return watch_fn(namespace, JOB_NAME_LABEL, version, watch_timeout_s)

    return list_page, watch


def _all_calls(list_fn: Callable[..., dict[str, Any]],
               watch_fn: Callable[..., Iterator[dict[str, Any]]], namespace: str | None,
               watch_timeout_s: int) -> tuple[ListPage, Watch]:
    """List and watch every object of a resource in `namespace` (or all)."""
    def list_page(token: str | None) -> dict[str, Any]:
        return list_fn(namespace, limit=PAGE_SIZE, continue_token=token)

    def watch(version: str) -> Iterator[dict[str, Any]]:
        return watch_fn(namespace, version, watch_timeout_s)

    return list_page, watch


class TornDownJobs:
    """The uids of worker Jobs seen being deleted (in order, the newest TORN_DOWN_KEPT
    kept), with their job. Forgotten with the job (`forget_job`); the pod informer's
    thread only asks `in`. Thread-safe."""

    def __init__(self) -> None:
        self._owners: dict[str, JobKey] = {}
        self._lock = threading.Lock()

    def add(self, uid: str, job: JobKey) -> None:
        with self._lock:
            self._owners[uid] = job
            while len(self._owners) > TORN_DOWN_KEPT:
                del self._owners[next(iter(self._owners))]

    def __contains__(self, uid: object) -> bool:
        return uid in self._owners

    def job_keys(self) -> set[JobKey]:
        """The jobs it remembers torn-down worker Jobs of (job_stores.py)."""
        with self._lock:
            return set(self._owners.values())

    def forget_job(self, job: JobKey) -> None:
        """The job was deleted: its torn-down worker Jobs go (a late pod event of one
        wakes nothing but a reconcile that finds no job)."""
        with self._lock:
            self._owners = {uid: owner for uid, owner in self._owners.items()
                            if owner != job}


class Caches:
    """Per watched namespace (None: every namespace, filtered by the scope) one job, one
    pod, one JobSet and (`watch_workloads`) one Workload informer; one node informer.

    `wake(job)` is called from the informer threads for every job whose pods, JobSet,
    Workload (or whose nodes' readiness) changed; `wake_paced(job, soon)` instead
    (default: `wake`) when a worker pod only came nearer to serving or went with its Job's
    teardown (core/wakes.py), `soon` when that may still move its slice's state
    (`slice_index`, kept from every pod change); `on_job(key, old, new)` for every change
    of a job itself; `count(cause)` for each wake, by what caused it (pod, pod-paced,
    pod-progress, jobset, worker-job, worker-job-progress, node, workload);
    `on_relist(resource, reason, objects)` after every list; `slice_index`: the one
    the reconciler tells each slice as computed (default: a new one).
    """

    def __init__(
        self, kube: Kube, nodes: NodeIndex, scope: WatchScope,
        wake: Callable[[JobKey], None], *, on_job: JobChange | None = None,
        wake_paced: Callable[[JobKey, bool], None] | None = None,
        watch_workloads: bool = False,
        watch_timeout_s: int = DEFAULT_WATCH_TIMEOUT_S,
        on_relist: Callable[[str, str, int], None] | None = None,
        count: Callable[[str], None] | None = None,
        slice_index: SliceIndex | None = None,
    ) -> None:
        self.node_index = nodes
        # Kept from every pod change; the reconciler tells it each slice as computed.
        self.slice_index = slice_index or SliceIndex(nodes)
        self._wake = wake
        self._wake_paced = wake_paced or (lambda job, _soon: wake(job))
        self._count = count or (lambda _cause: None)
        # The worker Jobs seen being deleted: a pod of one going is the teardown of a
        # failure already known (core/wakes.py). A per-job store (job_stores.py).
        self.torn_down = TornDownJobs()
        self._on_job = on_job or (lambda key, _old, new: wake(key) if new else None)
        self._jobs: dict[str | None, Informer[dict[str, Any]]] = {}
        self._pods: dict[str | None, Informer[CachedPod]] = {}
        self._jobsets: dict[str | None, Informer[CachedJobSet]] = {}
        self._worker_jobs: dict[str | None, Informer[CachedWorkerJob]] = {}
        self._workloads: dict[str | None, Informer[str | None]] = {}
        for ns in dict.fromkeys(scope.list_namespaces):  # unique, in order
            where = "" if ns is None else f"/{ns}"

            def keep(key: Key, ns: str | None = ns) -> bool:
                return ns is not None or scope.matches(key[0])

            self._jobs[ns] = Informer(
                f"jobs{where}", *_all_calls(kube.list_jobs, kube.watch_jobs, ns,
                                            watch_timeout_s),
                lambda obj: obj, keep=keep, on_change=self._job_changed, on_relist=on_relist)
            self._pods[ns] = Informer(
                f"pods{where}",
                *_labelled_calls(kube.list_pods, kube.watch_pods, ns, watch_timeout_s),
                cached_pod, index=lambda _key, cached: cached.job, keep=keep,
                on_change=self._pod_changed, on_relist=on_relist)
            self._jobsets[ns] = Informer(
                f"jobsets{where}",
                *_labelled_calls(kube.list_jobsets, kube.watch_jobsets, ns, watch_timeout_s),
                cached_jobset, keep=keep, on_change=self._jobset_changed, on_relist=on_relist)
            self._worker_jobs[ns] = Informer(
                f"worker-jobs{where}",
                *_labelled_calls(kube.list_worker_jobs, kube.watch_worker_jobs, ns,
                                 watch_timeout_s),
                cached_worker_job, index=lambda _key, cached: cached.jobset, keep=keep,
                on_change=self._worker_job_changed, on_relist=on_relist)
            if watch_workloads:
                self._workloads[ns] = Informer(
                    f"workloads{where}", *_all_calls(kube.list_all_workloads,
                                                     kube.watch_workloads, ns, watch_timeout_s),
                    owning_job, keep=keep, on_change=self._workload_changed,
                    on_relist=on_relist)
        self.nodes: Informer[ObservedNode] = Informer(
            "nodes", lambda token: kube.list_nodes(limit=PAGE_SIZE, continue_token=token),
            lambda version: kube.watch_nodes(version, watch_timeout_s), node_from_dict,
            on_change=self._node_changed, on_relist=on_relist)

    @property
    def informers(self) -> list[Informer[Any]]:
        return [*self._jobs.values(), *self._pods.values(), *self._jobsets.values(),
                *self._worker_jobs.values(), *self._workloads.values(), self.nodes]

    def start(self) -> None:
        for informer in self.informers:
            informer.start()

    def stop(self) -> None:
        for informer in self.informers:
            informer.stop()

    @property
    def synced(self) -> bool:
        """Every cache holds a first complete list (before that, a job would look as if
        its pods had vanished)."""
        return all(i.synced for i in self.informers)

    @property
    def alive(self) -> bool:
        return all(i.alive for i in self.informers)

    def _in(self, caches: dict[str | None, Informer[Any]], namespace: str
            ) -> Informer[Any] | None:
        return caches.get(namespace) or caches.get(None)

    def job(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The job as last seen (a copy; None: not seen, which is no proof it is absent)."""
        informer = self._in(self._jobs, namespace)
        cached = informer.get((namespace, name)) if informer is not None else None
        return copy.deepcopy(cached) if cached is not None else None

    def job_keys(self) -> list[JobKey]:
        """Every job in scope, as last seen."""
        return sorted(key for informer in self._jobs.values() for key in informer.stored_keys())

    def knows_job(self, namespace: str, name: str) -> bool:
        informer = self._in(self._jobs, namespace)
        return informer is not None and informer.version((namespace, name)) is not None

    def pods_of(self, namespace: str, job: str) -> tuple[ObservedPod, ...]:
        informer = self._in(self._pods, namespace)
        if informer is None:
            return ()
        pods = [cached.pod for cached in informer.indexed((namespace, job)).values()]
        return tuple(sorted(pods, key=lambda p: p.name))

    def jobset(self, namespace: str, name: str) -> ObservedJobSet | None:
        """The JobSet as last seen (None: not seen, which is no proof it is absent)."""
        informer = self._in(self._jobsets, namespace)
        cached = informer.get((namespace, name)) if informer is not None else None
        return cached.jobset if cached is not None else None

    def worker_jobs(self, namespace: str, jobset: str) -> tuple[ObservedJob, ...]:
        """The JobSet's worker Jobs as last seen (a Job just created may be missing)."""
        informer = self._in(self._worker_jobs, namespace)
        if informer is None:
            return ()
        return tuple(cached.job for cached in informer.indexed((namespace, jobset)).values())

    def pod_seen_at(self, namespace: str, name: str) -> float | None:
        """When the pod cache received the pod's current version (time.time())."""
        informer = self._in(self._pods, namespace)
        cached = informer.get((namespace, name)) if informer is not None else None
        return cached.seen_at if cached is not None else None

    def _job_changed(self, key: Key, old: dict[str, Any] | None,
                     new: dict[str, Any] | None) -> None:
        self._on_job(key, old, new)

    def _workload_changed(self, key: Key, old: str | None, new: str | None) -> None:
        # Only jobs already known: other teams' JobSets have Workloads too.
        for job in {j for j in (old, new) if j}:
            if self.knows_job(key[0], job):
                self._woke("workload", (key[0], job))

    def _jobset_changed(self, key: Key, old: CachedJobSet | None,
                        new: CachedJobSet | None) -> None:
        if old == new:
            # Only what a reconcile does not read (ObservedJobSet) changed: JobSet updates
            # its replicated Jobs' ready and active counts as the pods come and go, which
            # would wake the job on every slice event.
            return
        for job in {c.job for c in (old, new) if c is not None}:
            self._woke("jobset", job)

    def _worker_job_changed(self, key: Key, old: CachedWorkerJob | None,
                            new: CachedWorkerJob | None) -> None:
        # A Job's status moves with each of its pods (their own events woke the job
        # already): only what replacement reads of a Job is news (ObservedJob).
        if new is not None and new.job.deleting:  # its pods' going is teardown from now on
            self.torn_down.add(new.job.uid, new.owner)
        if _as_read(old) == _as_read(new):
            return
        last = new or old
        if last is not None and (old is None or new is None or old.owner == new.owner) \
                and job_may_wait(old.job if old else None, new.job if new else None,
                                 self.slice_index.record_job(last.owner, last.job.slice_index)):
            self._count("worker-job-progress")  # the replacement's course (core/wakes.py)
            self._wake_paced(last.owner, False)
            return
        for job in {c.owner for c in (old, new) if c is not None}:
            self._woke("worker-job", job)

    def _pod_changed(self, key: Key, old: CachedPod | None, new: CachedPod | None) -> None:
        name = key[1]
        if old is not None and old.pod.node_name and (
                new is None or new.pod.node_name != old.pod.node_name):
            self.node_index.pod_gone(old.job, name, old.pod.node_name)
        if new is not None and new.pod.node_name:
            self.node_index.pod_seen(new.job, name, new.pod.node_name)
        if old is not None and new is not None and (old.job, old.pod) == (new.job, new.pod):
            # Nothing a reconcile reads of the pod changed (kwok and the kubelet update
            # conditions, IPs and start times one by one): each such version would cost a
            # reconcile of the whole job.
            return
        self._tally(old, new)
        last = new or old
        if last is not None and (old is None or new is None or old.job == new.job) \
                and may_wait(old.pod if old is not None else None,
                             new.pod if new is not None else None,
                             torn_down=last.pod.job_uid in self.torn_down):
            # Progress or teardown (core/wakes.py); at the progress interval if it may
            # still move its slice's state (slice_index.py), or onto a node not Ready.
            soon = self.slice_index.may_move(last.job, last.pod.slice_index) \
                or self._scheduled_onto_unready(old, new)
            self._count("pod-paced" if soon else "pod-progress")
            self._wake_paced(last.job, soon)
            return
        for job in {c.job for c in (old, new) if c is not None}:
            self._woke("pod", job)

    def _tally(self, old: CachedPod | None, new: CachedPod | None) -> None:
        if old is not None and new is not None and old.job == new.job:
            self.slice_index.pod_changed(new.job, old.pod, new.pod)
            return
        if old is not None:
            self.slice_index.pod_changed(old.job, old.pod, None)
        if new is not None:
            self.slice_index.pod_changed(new.job, None, new.pod)

    def _scheduled_onto_unready(self, old: CachedPod | None, new: CachedPod | None) -> bool:
        """A pod bound to a node not known Ready: its host is down (core/slices.py)."""
        node = new.pod.node_name if new is not None else None
        if not node or (old is not None and old.pod.node_name == node):
            return False
        known = self.node_index.nodes([node]).get(node)
        return known is None or not known.ready

    def _node_changed(self, key: Key, old: ObservedNode | None,
                      new: ObservedNode | None) -> None:
        jobs = (self.node_index.node_seen(new) if new is not None
                else self.node_index.node_gone(key[1]))
        for job in jobs:
            self._woke("node", job)

    def _woke(self, cause: str, job: JobKey) -> None:
        self._count(cause)
        self._wake(job)
