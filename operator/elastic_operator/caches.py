"""The operator's watch-fed caches: the pods of every job (indexed by job), the jobs'
JobSets and the nodes.

A reconcile reads a job's pods, its JobSet and the pods' nodes from here instead of from
the API server: at 64 slices x 64 hosts a pod list is megabytes of JSON, and a reconcile
runs on every pod event. Each change also tells the NodeIndex which jobs run on which
node, and names the job to reconcile (`wake`); a node whose readiness changes wakes its
jobs.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from elastic_api.names import JOB_NAME_LABEL
from elastic_operator.informer import Informer, Key, ListPage, Watch
from elastic_operator.kube import Kube
from elastic_operator.node_index import JobKey, NodeIndex
from elastic_operator.observed import (
    ObservedJobSet,
    ObservedNode,
    ObservedPod,
    jobset_from_dict,
    node_from_dict,
    pod_from_dict,
)

# client-go's default page size: bounds the memory of one list of thousands of pods.
PAGE_SIZE = 500
DEFAULT_WATCH_TIMEOUT_S = 30


@dataclass(frozen=True)
class CachedPod:
    job: JobKey  # (namespace, value of the job-name label)
    pod: ObservedPod


@dataclass(frozen=True)
class CachedJobSet:
    job: JobKey  # (namespace, value of the job-name label)
    jobset: ObservedJobSet


def _job_of(obj: dict[str, Any]) -> JobKey:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    return (str(meta.get("namespace") or ""), str(labels.get(JOB_NAME_LABEL, "")))


def cached_jobset(obj: dict[str, Any]) -> CachedJobSet:
    return CachedJobSet(job=_job_of(obj), jobset=jobset_from_dict(obj))


def cached_pod(obj: dict[str, Any]) -> CachedPod:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    return CachedPod(job=(str(meta.get("namespace") or ""), str(labels.get(JOB_NAME_LABEL, ""))),
                     pod=pod_from_dict(obj))


def _labelled_calls(list_fn: Callable[..., dict[str, Any]],
                    watch_fn: Callable[..., Iterator[dict[str, Any]]], namespace: str | None,
                    watch_timeout_s: int) -> tuple[ListPage, Watch]:
    """List and watch the objects that carry the job-name label, in `namespace` (or all)."""
    def list_page(token: str | None) -> dict[str, Any]:
        return list_fn(namespace, JOB_NAME_LABEL, limit=PAGE_SIZE, continue_token=token)

    def watch(version: str) -> Iterator[dict[str, Any]]:
        return watch_fn(namespace, JOB_NAME_LABEL, version, watch_timeout_s)

    return list_page, watch


class Caches:
    """Per watched namespace (None: every namespace) one pod and one JobSet informer; one
    node informer.

    `wake(job)` is called from the informer threads for every job whose pods (or whose
    nodes' readiness) changed; `on_relist(resource, reason, objects)` after every list.
    """

    def __init__(
        self, kube: Kube, nodes: NodeIndex, namespaces: Sequence[str | None],
        wake: Callable[[JobKey], None], *, watch_timeout_s: int = DEFAULT_WATCH_TIMEOUT_S,
        on_relist: Callable[[str, str, int], None] | None = None,
    ) -> None:
        self.node_index = nodes
        self._wake = wake
        self._pods: dict[str | None, Informer[CachedPod]] = {}
        self._jobsets: dict[str | None, Informer[CachedJobSet]] = {}
        for ns in dict.fromkeys(namespaces):  # unique, in order
            where = "" if ns is None else f"/{ns}"
            self._pods[ns] = Informer(
                f"pods{where}",
                *_labelled_calls(kube.list_pods, kube.watch_pods, ns, watch_timeout_s),
                cached_pod, index=lambda _key, cached: cached.job,
                on_change=self._pod_changed, on_relist=on_relist)
            self._jobsets[ns] = Informer(
                f"jobsets{where}",
                *_labelled_calls(kube.list_jobsets, kube.watch_jobsets, ns, watch_timeout_s),
                cached_jobset, on_change=self._jobset_changed, on_relist=on_relist)
        self.nodes: Informer[ObservedNode] = Informer(
            "nodes", lambda token: kube.list_nodes(limit=PAGE_SIZE, continue_token=token),
            lambda version: kube.watch_nodes(version, watch_timeout_s), node_from_dict,
            on_change=self._node_changed, on_relist=on_relist)

    @property
    def informers(self) -> list[Informer[Any]]:
        return [*self._pods.values(), *self._jobsets.values(), self.nodes]

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

    def pods_of(self, namespace: str, job: str) -> tuple[ObservedPod, ...]:
        informer = self._pods.get(namespace) or self._pods.get(None)
        if informer is None:
            return ()
        pods = [cached.pod for cached in informer.indexed((namespace, job)).values()]
        return tuple(sorted(pods, key=lambda p: p.name))

    def jobset(self, namespace: str, name: str) -> ObservedJobSet | None:
        """The JobSet as last seen (None: not seen, which is no proof it is absent)."""
        informer = self._jobsets.get(namespace) or self._jobsets.get(None)
        cached = informer.get((namespace, name)) if informer is not None else None
        return cached.jobset if cached is not None else None

    def _jobset_changed(self, key: Key, old: CachedJobSet | None,
                        new: CachedJobSet | None) -> None:
        for job in {c.job for c in (old, new) if c is not None}:
            self._wake(job)

    def _pod_changed(self, key: Key, old: CachedPod | None, new: CachedPod | None) -> None:
        name = key[1]
        if old is not None and old.pod.node_name and (
                new is None or new.pod.node_name != old.pod.node_name):
            self.node_index.pod_gone(old.job, name, old.pod.node_name)
        if new is not None and new.pod.node_name:
            self.node_index.pod_seen(new.job, name, new.pod.node_name)
        for job in {c.job for c in (old, new) if c is not None}:
            self._wake(job)

    def _node_changed(self, key: Key, old: ObservedNode | None,
                      new: ObservedNode | None) -> None:
        jobs = (self.node_index.node_seen(new) if new is not None
                else self.node_index.node_gone(key[1]))
        for job in jobs:
            self._wake(job)
