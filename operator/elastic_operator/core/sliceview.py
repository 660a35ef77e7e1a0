"""One slice as every policy reads it: its worker pods, each host's newest pod and what
that host shows, the node pool it runs on, the Job it runs as, and the evidence of its
broken hosts. Pure.

`slice_views` derives each slice's view once per observation, and the job's memo
(slice_memo.py) keeps it while the slice's pods and their nodes are the same objects: a
failure costs a reconcile what one slice's view costs, not what the whole job's does.
Slice health (slices.py), the trainer's blame (hung.py), replacement (replacement.py),
maintenance (maintenance.py) and the topology domain (topology.py) read the view; none
of them groups, sorts or judges a slice's pods again.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property, partial
from typing import Any, NamedTuple

from elastic_api.conditions import Reason
from elastic_api.models import RecoverySpec
from elastic_operator.core.blame import Evidence, broken, slice_evidence
from elastic_operator.core.pools import pod_pool, slice_pool
from elastic_operator.model.objects import Observed, ObservedNode, ObservedPod

_NEVER = datetime.min.replace(tzinfo=UTC)


def newest(pods: list[ObservedPod]) -> ObservedPod:
    """The pod that represents a host: the newest. creationTimestamp has one-second
    resolution, so a replacement made in the same second as the pod it replaces ties with
    it; the Job controller only replaces a pod that failed or is going, so at a tie the
    live pod is the newer one (taking the dead one would see a slice down, or a failed
    Job, that has already come back). The name only makes the choice deterministic."""
    if len(pods) == 1:  # the common case, 4,096 times per reconcile of the largest job
        return pods[0]
    return max(pods, key=lambda p: (p.created_at or _NEVER, not (p.failed or p.terminating),
                                    p.name))


def newest_per_host(pods: Iterable[ObservedPod]) -> list[ObservedPod]:
    """Each host's newest pod (`newest`), by host index (a pod without one is a host of
    its own, after them)."""
    by_host: dict[Any, list[ObservedPod]] = {}
    for pod in pods:
        key: Any = pod.host_index if pod.host_index is not None else pod.name
        by_host.setdefault(key, []).append(pod)
    chosen = [newest(group) for group in by_host.values()]
    chosen.sort(key=lambda p: (p.host_index is None, p.host_index or 0, p.name))
    return chosen


class HostView(NamedTuple):
    """One host of a slice, represented by its newest pod. A tuple, not a dataclass: one
    is made per host per reconcile, and a frozen dataclass's __init__ was the biggest
    cost of computing a large job's status."""

    host: int | None
    pod: ObservedPod
    down_reason: str | None
    down_message: str | None
    failed_at: datetime | None
    ready: bool
    note: str | None = None  # not down, yet worth saying (Kueue replaces its node)


def host_view(pod: ObservedPod, nodes: Mapping[str, ObservedNode]) -> HostView:
    node = nodes.get(pod.node_name or "")
    label = f"host {pod.host_index} (pod {pod.name})"
    if pod.restarting and node is not None and node.ready:
        return _restarting_host(pod, label)
    if not (pod.terminating or pod.failed) and (node is None or node.ready):
        return HostView(pod.host_index, pod, None, None, None, pod.ready)  # healthy
    if pod.terminated_by_kueue:
        # Kueue's node replacement, not a failure: the node it assigned the pod to is
        # unhealthy (that failure was seen, on the pods that ran there), and the Job
        # makes another pod that Kueue places on a replacement node, or Kueue evicts
        # the job. Like a host whose pod is still pending.
        return HostView(pod.host_index, pod, None, None, None, False,
                        note=f"{label} was failed by Kueue: it could not schedule on the "
                        "unhealthy node Kueue assigned it; Kueue places its next pod on a "
                        "replacement node or evicts the job")
    if pod.terminating:
        reason = Reason.POD_EVICTED if pod.status_reason == "Evicted" else Reason.POD_DELETED
        return HostView(pod.host_index, pod, reason, f"{label} is terminating",
                        pod.failure_started_at, False)
    if pod.failed or node is None:  # (no node here means failed: healthy returned above)
        return _failed_host(pod, label)
    # On a NotReady node. kwok (and a node that was NotReady before the pod ran) can report
    # an old transition; the host cannot have failed before its pod became ready.
    failed_at = node.ready_transition_time
    if pod.ready_transition_time is not None and (
        failed_at is None or failed_at < pod.ready_transition_time
    ):
        failed_at = pod.ready_transition_time
    return HostView(pod.host_index, pod, Reason.NODE_NOT_READY,
                    f"{label}: node {node.name} is NotReady", failed_at, False)


def _restarting_host(pod: ObservedPod, label: str) -> HostView:
    """A container of the pod exited and the kubelet runs it again in the same pod."""
    code = f" with code {pod.terminated_exit_code}" if pod.terminated_exit_code else ""
    return HostView(pod.host_index, pod, Reason.CONTAINER_RESTARTING,
                    f"{label}: its container exited{code}, restarting in its pod",
                    pod.failure_started_at or pod.ready_transition_time, False)


def _failed_host(pod: ObservedPod, label: str) -> HostView:
    if pod.status_reason == "Evicted":
        why = f"evicted: {pod.status_message or ''}".rstrip(": ")
        return HostView(pod.host_index, pod, Reason.POD_EVICTED, f"{label} {why}",
                        pod.failure_started_at, False)
    detail = pod.terminated_reason or pod.status_reason or "Failed"
    if pod.terminated_exit_code is not None:
        detail += f", exit code {pod.terminated_exit_code}"
    return HostView(pod.host_index, pod, Reason.POD_FAILED, f"{label} failed ({detail})",
                    pod.failure_started_at, False)


def of_this_admission(pod: ObservedPod, epoch: datetime | None) -> bool:
    """Whether a pod belongs to the job's current admission by a queue (Kueue admitted
    it at `epoch`, None: not queued). A queued JobSet is suspended until admitted and an
    eviction suspends it again, deleting every pod: a pod created before the admission
    is left over from an earlier one, and its going is the eviction's doing, not a
    slice failure. Both times are whole seconds: a pod of the admission's own second
    counts as the admission's."""
    return epoch is None or pod.created_at is None or pod.created_at >= epoch


_EPOCH = datetime.min.replace(tzinfo=UTC)  # a pod without a creation time: the oldest


@dataclass(frozen=True, eq=False)
class SliceView:
    """One slice's pods and the nodes they run on, and what every policy derives from
    them. Each derivation is computed the first time it is read and kept with the view
    (the memo keeps the view across reconciles): a pure function of the pods and nodes,
    never changed once computed."""

    pods: tuple[ObservedPod, ...] = ()  # every worker pod of the slice, old ones too
    # The nodes its pods run on, by name (a node not seen is absent).
    nodes: Mapping[str, ObservedNode] = field(default_factory=dict)

    @classmethod
    def of(cls, pods: Iterable[ObservedPod], nodes: Mapping[str, ObservedNode]) -> SliceView:
        """The view of `pods`, with their nodes taken from `nodes` (the job's)."""
        own = tuple(pods)
        return cls(own, {p.node_name: nodes[p.node_name] for p in own
                         if p.node_name is not None and p.node_name in nodes})

    @cached_property
    def newest(self) -> tuple[ObservedPod, ...]:
        """Each host's newest pod, by host index (`newest_per_host`)."""
        return tuple(newest_per_host(self.pods))

    @cached_property
    def hosts(self) -> tuple[HostView, ...]:
        """Each host as its newest pod and that pod's node show it."""
        return tuple(host_view(pod, self.nodes) for pod in self.newest)

    def hosts_since(self, epoch: datetime | None) -> tuple[HostView, ...]:
        """The hosts as the pods of the current admission show them (`of_this_admission`;
        None: every pod, `hosts`)."""
        if epoch is None:
            return self.hosts
        pods = newest_per_host(p for p in self.pods if of_this_admission(p, epoch))
        return tuple(host_view(pod, self.nodes) for pod in pods)

    @cached_property
    def pool(self) -> str | None:
        """The node pool most of its live pods run on (None: none is scheduled)."""
        return slice_pool(self.pods, self.nodes)

    @cached_property
    def job_uid(self) -> str | None:
        """The Job its newest pods belong to."""
        return next((p.job_uid for p in self.newest if p.job_uid), None)

    @cached_property
    def broken(self) -> tuple[ObservedPod, ...]:
        """The newest pods of its hosts that are down: failed, going, or on a node that
        is not Ready (or gone)."""
        return tuple(p for p in self.newest if broken(p, self.nodes))

    @cached_property
    def failed_job_uid(self) -> str | None:
        """The Job whose pods failed: that of a broken host's pod, else the current one."""
        return next((p.job_uid for p in (*self.broken, *self.newest) if p.job_uid), None)

    @cached_property
    def _replaced_failures(self) -> dict[int | None, ObservedPod]:
        """By host: the failed pod the Job controller has already replaced in the same Job
        (restart policy OnFailure) with a pod that is not up yet. A look that came after
        the replacement still finds the failure's evidence in it (the slice's state is
        its hosts' newest pods'). One pass over the pods: a large slice's status is
        computed every reconcile."""
        fresh = {p.host_index: p for p in self.newest
                 if not p.ready and not broken(p, self.nodes)}
        out: dict[int | None, ObservedPod] = {}
        for pod in self.pods:
            new = fresh.get(pod.host_index)
            if new is None or not pod.failed or pod.uid == new.uid or \
                    pod.job_uid != new.job_uid:
                continue
            kept = out.get(pod.host_index)
            if kept is None or (pod.created_at or _EPOCH) > (kept.created_at or _EPOCH):
                out[pod.host_index] = pod
        return out

    def evidence(self, recovery: RecoverySpec) -> Evidence:
        """The strongest evidence among its broken hosts (core/blame.py); with none left
        broken, that of the failed pods the Job controller replaced before a look."""
        return slice_evidence(self.broken or tuple(self._replaced_failures.values()),
                              self.nodes, recovery)

    def failed_pool(self, evidence: Evidence, known: str | None) -> str | None:
        """The pool of the slice's failure: of the node the evidence is about, else of its
        broken hosts, else `known` (where it ran)."""
        node = self.nodes.get(evidence.node or "")
        if node is not None and node.pool:
            return node.pool
        return next((pool for p in self.broken if (pool := pod_pool(p, self.nodes))), known)

    @cached_property
    def signalled_nodes(self) -> tuple[ObservedNode, ...]:
        """The nodes its live pods run on that carry a maintenance signal, by name."""
        names = {p.node_name for p in self.pods
                 if p.node_name and not p.terminating and not p.failed}
        return tuple(node for node in (self.nodes.get(n) for n in sorted(names))
                     if node is not None and node.maintenance_signal is not None)


NO_PODS = SliceView()


def worker_pods_by_slice(observed: Observed) -> dict[int, list[ObservedPod]]:
    """The worker pods of each slice (its job-index), grouped once per observation
    (Observed.worker_pods_by_slice). Read-only."""
    return observed.worker_pods_by_slice


class SliceViews(dict[int, SliceView]):
    """Each slice's view by its index; a slice of which no pod is seen has an empty one."""

    def __missing__(self, index: int) -> SliceView:
        return NO_PODS


def slice_views(observed: Observed) -> SliceViews:
    """Each slice's view, derived once per observation: from the memo while the slice's
    pods and their nodes are the same objects as when it was last derived."""
    return SliceViews({
        index: observed.per_slice("view", index, partial(SliceView.of, pods, observed.nodes))
        for index, pods in observed.worker_pods_by_slice.items()})
