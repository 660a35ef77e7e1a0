"""Slices placed by Kueue's Topology-Aware Scheduling (spec.tpu.topologyAware): which
domain each slice runs in, whether the nodes carry the levels at all (condition
TopologyPlacement), and what becomes of the operator's spare pools. Pure.

Kueue assigns every pod of a slice to a host of one sliceLevel domain when it admits
the job, and keeps that assignment: the pods of a recreated worker Job are let through
its scheduling gate onto the same hosts. So the operator still replaces a failed slice
(a fresh Job, no pod backoff), in its own domain; it does not quarantine a pool (the
recreated pods could not be scheduled on their assigned hosts) nor count spares. A host
that dies is Kueue's to replace within the domain (TASFailedNodeReplacement); when no
host is free there, Kueue evicts the job (NodeFailures) and readmits it on healthy
domains, where it resumes from its newest committed checkpoint.
"""
from __future__ import annotations

from collections import Counter

from elastic_api.conditions import ConditionType, Reason
from elastic_api.models import Condition, ElasticTrainingJobSpec, SliceStatus
from elastic_operator.core.setter import ConditionSetter
from elastic_operator.core.sliceview import SliceViews
from elastic_operator.core.wording import plural
from elastic_operator.model.objects import Observed, ObservedNode


def slice_domains(spec: ElasticTrainingJobSpec, slices: list[SliceStatus],
                  views: SliceViews) -> list[SliceStatus]:
    """slices[].domain: the sliceLevel value most of a slice's live pods' nodes carry
    (the last one seen while none is scheduled)."""
    tas = spec.tpu.topology_aware
    if tas is None:
        return slices
    out = []
    for s in slices:
        view = views[s.index]
        values = Counter(
            value for pod in view.pods
            if not pod.terminating and not pod.failed and pod.node_name
            for value in [_label(view.nodes.get(pod.node_name), tas.slice_level)] if value)
        domain = sorted(values.items(), key=lambda kv: (-kv[1], kv[0]))[0][0] if values \
            else s.domain
        out.append(s.model_copy(update={"domain": domain}) if domain != s.domain else s)
    return out


def _label(node: ObservedNode | None, key: str) -> str | None:
    return node.label(key) if node is not None else None


def topology_condition(setter: ConditionSetter, spec: ElasticTrainingJobSpec,
                       observed: Observed, slices: list[SliceStatus],
                       queued: bool) -> Condition | None:
    """TopologyPlacement (only with spec.tpu.topologyAware): True while the nodes of the
    job's TPU shape carry its levels and Kueue manages the job; False naming a level no
    such node carries (Kueue cannot place the slices: they would stay Pending), or when
    no Kueue Workload places it."""
    tas = spec.tpu.topology_aware
    if tas is None:
        return None
    t = ConditionType.TOPOLOGY_PLACEMENT
    nodes = [n for pool in observed.pools for n in pool.nodes]
    if not nodes:
        return setter.unknown(t, Reason.NO_NODES, "no node of this TPU shape seen: cannot "
                              "tell whether its nodes carry the topology levels")
    levels = [("sliceLevel", tas.slice_level)] + (
        [("jobLevel", tas.job_level)] if tas.job_level is not None else [])
    missing = [(field, key) for field, key in levels
               if not any(n.label(key) for n in nodes)]
    if missing:
        field, key = missing[0]
        return setter.false(
            t, Reason.TOPOLOGY_LEVEL_NOT_FOUND,
            f"no node of this TPU shape ({plural(len(nodes), 'node')}) carries the label "
            f"{key} (spec.tpu.topologyAware.{field}): Kueue cannot place the slices and "
            "the job stays Pending; use a level of your Kueue Topology that these nodes "
            "carry, e.g. cloud.google.com/gke-nodepool")
    if not queued:
        return setter.false(
            t, Reason.NOT_QUEUED,
            "spec.tpu.topologyAware needs Kueue to place the slices, and no Kueue Workload "
            "admits this job: label it with kueue.x-k8s.io/queue-name (a queue with a "
            "Topology-Aware ResourceFlavor)")
    placed = [f"{s.index} in {s.domain}" for s in slices if s.domain]
    where = f" (slice {', '.join(placed)})" if placed else ""
    return setter.true(
        t, Reason.PLACED_BY_KUEUE,
        f"Kueue places each slice in one {tas.slice_level} domain{where} and keeps it "
        "there: a failed slice is recreated in its own domain; spare pools and quarantine "
        "do not apply")


def spares_placed_by_kueue(setter: ConditionSetter, spec: ElasticTrainingJobSpec
                           ) -> Condition:
    """SparesAvailable under Topology-Aware Scheduling: the operator moves no slice."""
    return setter.unknown(
        ConditionType.SPARES_AVAILABLE, Reason.PLACED_BY_KUEUE,
        "spec.tpu.topologyAware: Kueue assigns each slice its domain at admission and "
        "keeps it there, so the operator moves no slice to a spare pool and quarantines "
        "none; a dead host is Kueue's to replace within the domain, or it evicts the job "
        f"(NodeFailures) and readmits it on healthy domains (spec.tpu.spares "
        f"{spec.tpu.spares}: domains beyond the slices make that readmission possible)")
