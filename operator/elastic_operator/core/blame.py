"""Who is to blame for a slice failure: the node pool it ran on, or the job. Pure.

A quarantine takes a whole node pool away from every job, so only evidence against the
nodes earns one (docs/operations.md, "Who is to blame"):

- Node: what the control plane shows, not what the job's process says. The node is
  NotReady or gone; the kubelet counts fewer healthy TPU chips than the node has
  (allocatable google.com/tpu below capacity: the device plugin reported chips
  unhealthy), or refused the pod for its devices (UnexpectedAdmissionError,
  OutOfgoogle.com/tpu); the node's lifecycle ended the pod (DisruptionTarget by the
  taint manager or the pod garbage collector, a graceful node shutdown); GKE is stopping
  the host (maintenance ongoing, impending termination).
- Reported: the worker's own exit code or reason says the hardware failed, as the job's
  spec declares (spec.recovery.hardwareExitCodes, hardwareReasons; JobSet's
  onJobFailureReasons and xpk's --restart-on-exit-codes classify the same way).
- Job: a container that exited on a healthy node (its pod failed, or the kubelet restarts
  it in the pod). The job's own failure: it spends the slice's restart budget and
  quarantines nothing.
- Other: neither (a pod deleted or evicted, a host lost between two looks).

The strongest evidence among a slice's broken hosts decides (Node, then Reported, Job,
Other). core/pools.py decides what each calls for: failures of *different* jobs on one
pool are evidence against it; a fault that follows one job from pool to pool is the job's.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from elastic_api.conditions import Reason
from elastic_api.models import Blame, RecoverySpec
from elastic_api.names import OUT_OF_TPU, TPU_RESOURCE, UNEXPECTED_ADMISSION_ERROR
from elastic_operator.model.objects import ObservedNode, ObservedPod

# DisruptionTarget reasons of the node's lifecycle (not of an API client or the scheduler).
NODE_DISRUPTIONS = frozenset({"DeletionByTaintManager", "DeletionByPodGC"})
# Pod status reasons of a node going away: graceful node shutdown (the kubelet writes
# Terminated, older kubelets Shutdown/NodeShutdown), and the node controller's NodeLost.
NODE_SHUTDOWN_REASONS = frozenset({"Terminated", "Shutdown", "NodeShutdown", "NodeLost"})
# The kubelet refused the pod for its devices.
DEVICE_ADMISSION_REASONS = frozenset({UNEXPECTED_ADMISSION_ERROR, OUT_OF_TPU})
# Evidence against a node pool, observed (Node) or declared by the job (Reported).
POOL_BLAMES: frozenset[Blame] = frozenset({"Node", "Reported"})
# Quarantine reasons whose evidence ends when the nodes are healthy again.
NODE_EVIDENCE_REASONS = frozenset({Reason.NODE_NOT_READY, Reason.DEVICE_UNHEALTHY,
                                   Reason.NODE_DISRUPTION})
# Quarantine reasons that rest on jobs' failures (they end with the jobs).
JOB_EVIDENCE_REASONS = frozenset({Reason.HARDWARE_FAILURE, Reason.REPEATED_FAILURES})

_STRENGTH: dict[Blame, int] = {"Node": 3, "Reported": 2, "Job": 1, "Other": 0}


@dataclass(frozen=True)
class Evidence:
    """What a slice failure shows, and whom it blames."""

    blame: Blame
    # Node/Reported: the quarantine reason (NodeNotReady, DeviceUnhealthy, NodeDisruption,
    # Maintenance, HardwareFailure); else the failure's own reason (PodFailed, ...).
    reason: str
    detail: str  # in words, for the status, the Events and the node's annotation
    node: str | None = None  # the node the evidence is about


def node_evidence(name: str, node: ObservedNode | None) -> Evidence | None:
    """What a node itself shows against it, if anything."""
    if node is None:
        return Evidence("Node", Reason.NODE_NOT_READY, f"node {name} is gone", name)
    if not node.ready:
        return Evidence("Node", Reason.NODE_NOT_READY,
                        f"node {name} is NotReady (Ready={node.ready_status})", name)
    if node.unhealthy_chips:
        return Evidence("Node", Reason.DEVICE_UNHEALTHY,
                        f"node {name} has {node.unhealthy_chips} of {node.tpu_capacity} "
                        f"{TPU_RESOURCE} chips unhealthy (allocatable {node.tpu_allocatable})",
                        name)
    if node.impending_termination or node.maintenance_ongoing:
        return Evidence("Node", Reason.MAINTENANCE,
                        f"node {name}: {node.maintenance_signal}", name)
    return None


def pod_evidence(pod: ObservedPod, nodes: Mapping[str, ObservedNode],
                 recovery: RecoverySpec) -> Evidence:
    """What one broken host's pod shows (failed, terminating, or on a bad node)."""
    if pod.node_name:
        found = node_evidence(pod.node_name, nodes.get(pod.node_name))
        if found is not None:
            return found
    where = f"node {pod.node_name}" if pod.node_name else "no node"
    lifecycle = _lifecycle_evidence(pod, where)
    if lifecycle is not None:
        return lifecycle
    reported = _reported(pod, recovery)
    if reported is not None:
        return Evidence("Reported", Reason.HARDWARE_FAILURE,
                        f"pod {pod.name} on {where} {reported}", pod.node_name)
    if pod.restarting:
        return Evidence("Job", Reason.CONTAINER_RESTARTING,
                        f"pod {pod.name} {_exit(pod)} on healthy {where}, restarting in its "
                        "pod", pod.node_name)
    if pod.failed and pod.status_reason != "Evicted":
        return Evidence("Job", Reason.POD_FAILED,
                        f"pod {pod.name} {_exit(pod)} on healthy {where}", pod.node_name)
    if pod.failed or pod.status_reason == "Evicted":
        return Evidence("Other", Reason.POD_EVICTED,
                        f"pod {pod.name} evicted from {where}", pod.node_name)
    if pod.terminating:
        how = f" ({pod.disruption})" if pod.disruption else ""
        return Evidence("Other", Reason.POD_DELETED, f"pod {pod.name} deleted{how}",
                        pod.node_name)
    return Evidence("Other", Reason.HOST_LOST, f"pod {pod.name} lost", pod.node_name)


def _lifecycle_evidence(pod: ObservedPod, where: str) -> Evidence | None:
    """The node's lifecycle, or its kubelet's device admission, ended the pod."""
    if pod.disruption in NODE_DISRUPTIONS or pod.status_reason in NODE_SHUTDOWN_REASONS:
        why = pod.disruption or pod.status_reason
        return Evidence("Node", Reason.NODE_DISRUPTION,
                        f"pod {pod.name} was ended by the lifecycle of {where} ({why})",
                        pod.node_name)
    if pod.status_reason in DEVICE_ADMISSION_REASONS:
        said = f": {pod.status_message}" if pod.status_message else ""
        return Evidence("Node", Reason.DEVICE_UNHEALTHY,
                        f"{where} refused pod {pod.name} ({pod.status_reason}{said})"[:300],
                        pod.node_name)
    return None


def _reported(pod: ObservedPod, recovery: RecoverySpec) -> str | None:
    """The job's declared hardware signal on this pod, in words (None: none)."""
    code = pod.terminated_exit_code
    if code is not None and code in recovery.hardware_exit_codes:
        return f"exited with code {code} (spec.recovery.hardwareExitCodes)"
    named = set(recovery.hardware_reasons)
    for reason in (pod.terminated_reason, pod.status_reason, pod.disruption):
        if reason is not None and reason in named:
            return f"ended with reason {reason} (spec.recovery.hardwareReasons)"
    return None


def _exit(pod: ObservedPod) -> str:
    detail = pod.terminated_reason or pod.status_reason or "Failed"
    if pod.terminated_exit_code is not None:
        return f"exited with code {pod.terminated_exit_code} ({detail})"
    return f"failed ({detail})"


def on_ready_node(pod: ObservedPod, nodes: Mapping[str, ObservedNode]) -> bool:
    """The pod is not scheduled yet, or its node is Ready."""
    node = nodes.get(pod.node_name or "")
    return pod.node_name is None or (node is not None and node.ready)


def broken(pod: ObservedPod, nodes: Mapping[str, ObservedNode]) -> bool:
    """A host's pod that is down: failed, going, restarting its containers, or on a node
    that is not Ready."""
    return pod.failed or pod.terminating or pod.restarting or not on_ready_node(pod, nodes)


def slice_evidence(broken_hosts: Iterable[ObservedPod], nodes: Mapping[str, ObservedNode],
                   recovery: RecoverySpec) -> Evidence:
    """The strongest evidence among a slice's broken hosts (the newest pod of each:
    core/sliceview.py SliceView.broken)."""
    found = [pod_evidence(p, nodes, recovery) for p in broken_hosts]
    if not found:
        return Evidence("Other", Reason.HOST_LOST, "no broken pod left to look at")
    return max(found, key=lambda e: _STRENGTH[e.blame])
