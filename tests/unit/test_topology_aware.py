"""spec.tpu.topologyAware: Kueue's Topology-Aware Scheduling places the slices. What is
rendered (render.py), refused (validation.py) and reported (core/topology.py), and that
the operator's quarantine and spares stand aside (core/replacement.py). On the real
Kueue: tests/integration/test_kueue_tas.py."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from elastic_api.catalog import CUBE_LABEL
from elastic_api.conditions import ConditionType as C
from elastic_api.conditions import Reason
from elastic_api.models import ElasticTrainingJob, ElasticTrainingJobStatus
from elastic_api.names import (
    EXCLUSIVE_TOPOLOGY_ANNOTATION,
    HOSTNAME_LABEL,
    KUEUE_PODSET_REQUIRED_TOPOLOGY,
    KUEUE_PODSET_SLICE_REQUIRED_TOPOLOGY,
    KUEUE_PODSET_SLICE_SIZE,
    KUEUE_QUEUE_NAME_LABEL,
    NODE_POOL_LABEL,
    TOPOLOGY_BLOCK_LABEL,
    TPU_SLICE_TOPOLOGY_ANNOTATION,
    TPU_TOPOLOGY_LABEL,
)
from elastic_api.validation import (
    TAS_CUBE,
    TAS_HOSTNAME,
    TAS_LEVEL_FORMAT,
    TAS_PLACEMENT,
    TAS_SAME_LEVEL,
    TAS_SUPER_SLICE,
    validate_job,
)
from elastic_operator.core.plan import DeleteWorkerJob, QuarantinePool
from elastic_operator.core.replacement import plan_replacements
from elastic_operator.core.setter import get_condition
from elastic_operator.core.status import compute_status
from elastic_operator.model.objects import ObservedNode, ObservedWorkload
from elastic_operator.render import render_jobset, render_workload
from tests.builders import (
    HOSTS,
    SLICES,
    WorkerPod,
    at,
    etj,
    healthy_pods,
    nodes_for,
    observe,
    pools_of,
    worker_job,
)
from tests.kueue_builders import workload

TAS = {"sliceLevel": NODE_POOL_LABEL, "jobLevel": TOPOLOGY_BLOCK_LABEL}


def manifest(tpu: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    obj = etj().spec(tpu=tpu or {"type": "v5e", "topology": "4x4", "numSlices": 3,
                                 "topologyAware": TAS}, **spec).obj()
    obj["metadata"]["labels"] = {KUEUE_QUEUE_NAME_LABEL: "lq"}
    return obj


def job(**kw: Any) -> ElasticTrainingJob:
    return validate_job(manifest(**kw))


def worker_template(j: ElasticTrainingJob) -> dict[str, Any]:
    (worker,) = [r for r in render_jobset(j)["spec"]["replicatedJobs"] if r["name"] == "worker"]
    template: dict[str, Any] = worker["template"]
    return template


# --- rendered ------------------------------------------------------------------------------


def test_each_slice_is_one_kueue_topology_slice_instead_of_one_node_pool() -> None:
    template = worker_template(job())
    pod = template["spec"]["template"]
    assert pod["metadata"]["annotations"] == {
        KUEUE_PODSET_SLICE_REQUIRED_TOPOLOGY: NODE_POOL_LABEL,
        KUEUE_PODSET_SLICE_SIZE: str(HOSTS),  # hosts per slice: one pod each
        KUEUE_PODSET_REQUIRED_TOPOLOGY: TOPOLOGY_BLOCK_LABEL,
    }
    # No JobSet exclusive placement, no quarantine affinity: Kueue places and keeps.
    assert EXCLUSIVE_TOPOLOGY_ANNOTATION not in template["metadata"].get("annotations", {})
    assert "affinity" not in pod["spec"]
    assert pod["spec"]["nodeSelector"][TPU_TOPOLOGY_LABEL] == "4x4"
    plain = worker_template(validate_job(etj().obj()))
    assert plain["metadata"]["annotations"][EXCLUSIVE_TOPOLOGY_ANNOTATION] == NODE_POOL_LABEL
    assert "annotations" not in plain["spec"]["template"]["metadata"]


def test_tpu7x_is_sliced_dynamically_from_the_cubes_kueue_assigns() -> None:
    level = "cloud.google.com/gke-tpu-partition-4x4x4-id"
    j = job(tpu={"type": "tpu7x", "topology": "4x4x4", "numSlices": 2,
                 "topologyAware": {"sliceLevel": level}})
    pod = worker_template(j)["spec"]["template"]
    assert pod["metadata"]["annotations"] == {
        KUEUE_PODSET_SLICE_REQUIRED_TOPOLOGY: level, KUEUE_PODSET_SLICE_SIZE: "16",
        TPU_SLICE_TOPOLOGY_ANNOTATION: "4x4x4"}
    assert TPU_TOPOLOGY_LABEL not in pod["spec"]["nodeSelector"]


@pytest.mark.parametrize(("tpu_type", "topology", "hosts"), [
    ("v5p", "16x16x24", "1536"), ("tpu7x", "8x8x8", "128"), ("tpu7x", "16x24x24", "2304"),
    ("v4", "12x16x16", "768")])
def test_a_slice_larger_than_a_cube_is_one_node_pool_of_its_topology(
        tpu_type: str, topology: str, hosts: str) -> None:
    j = job(tpu={"type": tpu_type, "topology": topology, "numSlices": 3, "topologyAware": TAS})
    pod = worker_template(j)["spec"]["template"]
    # The whole slice in one node pool (no dynamic slicing: no cube holds it), all three
    # in one block.
    assert pod["metadata"]["annotations"] == {
        KUEUE_PODSET_SLICE_REQUIRED_TOPOLOGY: NODE_POOL_LABEL, KUEUE_PODSET_SLICE_SIZE: hosts,
        KUEUE_PODSET_REQUIRED_TOPOLOGY: TOPOLOGY_BLOCK_LABEL}
    assert pod["spec"]["nodeSelector"][TPU_TOPOLOGY_LABEL] == topology
    (workers,) = [p for p in render_workload(j)["spec"]["podSets"] if p["name"] == "worker"]
    assert workers["count"] == 3 * int(hosts)
    assert workers["topologyRequest"]["podSetSliceSize"] == int(hosts)
    assert workers["topologyRequest"]["subGroupCount"] == 3


def test_a_cube_holds_no_larger_slice() -> None:
    tpu = {"type": "v5p", "topology": "8x8x8", "numSlices": 2,
           "topologyAware": {"sliceLevel": CUBE_LABEL}}
    assert TAS_CUBE.format(type="v5p", topology="8x8x8") in \
        error_of(manifest(tpu=tpu)).splitlines()
    validate_job(manifest(tpu={**tpu, "topology": "4x4x4"}))


@pytest.mark.parametrize("topology", ["4x4x8", "4x4x20", "8x8x8", "16x24x24"])
def test_tpu7x_super_slicing_is_refused_saying_what_to_use(topology: str) -> None:
    """Several tpu7x cubes joined into one slice at the cube level is GKE's super-slicing
    (xpk's --super-slicing: cloud.google.com/gke-tpu-slice-topology, Kueue's
    accelerator.gke.io/slice admission check, GKE 1.35.2+): not supported yet; the message
    says so and names the two ways that work."""
    tpu = {"type": "tpu7x", "topology": topology, "numSlices": 2,
           "topologyAware": {"sliceLevel": CUBE_LABEL}}
    lines = error_of(manifest(tpu=tpu)).splitlines()
    assert lines == [TAS_SUPER_SLICE.format(type="tpu7x", topology=topology)]
    assert "super-slicing" in lines[0] and "not support" in lines[0]
    assert "sliceLevel cloud.google.com/gke-nodepool" in lines[0] and "4x4x4" in lines[0]
    # The same slice on node pools of its own topology is admitted.
    validate_job(manifest(tpu={**tpu, "topologyAware": {
        "sliceLevel": "cloud.google.com/gke-nodepool"}}))
    validate_job(manifest(tpu={**tpu, "topology": "4x4x4"}))


def test_a_one_host_slice_may_fill_a_host() -> None:
    j = job(tpu={"type": "v6e", "topology": "2x2", "numSlices": 4,
                 "topologyAware": {"sliceLevel": HOSTNAME_LABEL}})
    annotations = worker_template(j)["spec"]["template"]["metadata"]["annotations"]
    assert annotations[KUEUE_PODSET_SLICE_SIZE] == "1"


# --- refused -------------------------------------------------------------------------------


def error_of(obj: dict[str, Any]) -> str:
    with pytest.raises(ValueError) as info:
        validate_job(obj)
    return str(info.value)


@pytest.mark.parametrize("level", ["Node Pool", "a/b/c", "-x", "x" * 64,
                                   "a" * 254 + "/pool", "example.com/", ""])
def test_a_level_that_is_no_label_key_is_refused(level: str) -> None:
    tpu = {"type": "v5e", "topology": "4x4", "numSlices": 3,
           "topologyAware": {"sliceLevel": NODE_POOL_LABEL, "jobLevel": level}}
    assert TAS_LEVEL_FORMAT.replace("{field}", "jobLevel") in \
        error_of(manifest(tpu=tpu)).splitlines()


def test_contradictions_are_refused_naming_the_fix() -> None:
    same = {"type": "v5e", "topology": "4x4", "numSlices": 3,
            "topologyAware": {"sliceLevel": NODE_POOL_LABEL, "jobLevel": NODE_POOL_LABEL}}
    assert TAS_SAME_LEVEL in error_of(manifest(tpu=same)).splitlines()
    host = {"type": "v5e", "topology": "4x4", "numSlices": 3,
            "topologyAware": {"sliceLevel": HOSTNAME_LABEL}}
    assert TAS_HOSTNAME.format(type="v5e", topology="4x4") in \
        error_of(manifest(tpu=host)).splitlines()
    anywhere = manifest(backend="simulated", placement="Any")
    assert TAS_PLACEMENT in error_of(anywhere).splitlines()


# --- reported, and what the operator does not do -------------------------------------------


def admitted() -> ObservedWorkload:
    return workload().admitted(at(0)).build()


def labelled(nodes: dict[str, ObservedNode], **levels: str) -> dict[str, ObservedNode]:
    """Each node with its pool as the node-pool level, and `levels` (label -> value)."""
    return {name: replace(n, labels=tuple(sorted({NODE_POOL_LABEL: n.pool or "",
                                                  **levels}.items())))
            for name, n in nodes.items()}


def step(j: ElasticTrainingJob, prev: ElasticTrainingJobStatus | None, pods: list[Any],
         nodes: dict[str, ObservedNode], wl: ObservedWorkload | None = None,
         now_s: float = 5) -> ElasticTrainingJobStatus:
    observed = observe(pods, nodes=nodes, pools=pools_of(nodes), workload=wl or admitted(),
                       jobs={i: worker_job(i) for i in range(SLICES)})
    status, _ = compute_status(j, observed, prev, at(now_s))
    return status


def condition(status: ElasticTrainingJobStatus, type_: str) -> tuple[str, str, str]:
    c = get_condition(status, type_)
    assert c is not None
    return c.status, c.reason, c.message


def test_the_status_says_where_kueue_placed_each_slice_and_that_spares_do_not_apply() -> None:
    nodes = labelled(nodes_for(spares=1), **{TOPOLOGY_BLOCK_LABEL: "b0"})
    status = step(job(), None, healthy_pods(created=at(0)), nodes)
    assert [s.domain for s in status.slices] == ["tpu-0", "tpu-1", "tpu-2"]
    state, reason, message = condition(status, C.TOPOLOGY_PLACEMENT)
    assert (state, reason) == ("True", Reason.PLACED_BY_KUEUE)
    assert "slice 0 in tpu-0, 1 in tpu-1, 2 in tpu-2" in message
    assert condition(status, C.SPARES_AVAILABLE)[:2] == ("Unknown", Reason.PLACED_BY_KUEUE)
    assert status.spare_pools is None


def test_a_failed_slice_is_recreated_in_its_domain_and_no_pool_is_quarantined() -> None:
    j = job()
    nodes = labelled(nodes_for(spares=1), **{TOPOLOGY_BLOCK_LABEL: "b0"})
    prev = step(j, None, healthy_pods(created=at(0)), nodes)
    dead = {**nodes, "tpu-1-0": replace(nodes["tpu-1-0"], ready=False, ready_status="Unknown")}
    pods = healthy_pods(created=at(0))
    status = step(j, prev, pods, dead, now_s=10)
    assert status.slices[1].state == "Down" and status.slices[1].replacement is not None
    observed = observe(pods, nodes=dead, pools=pools_of(dead), workload=admitted(),
                       jobs={i: worker_job(i) for i in range(SLICES)})
    plan = plan_replacements("ns", "article", j.spec, status, observed, at(10))
    assert [type(a) for a in plan.actions] == [DeleteWorkerJob]  # no QuarantinePool
    # Without topologyAware the same failure quarantines the pool first (a spare exists).
    plain = validate_job(etj().obj())
    base, _ = compute_status(plain, observe(pods, nodes=nodes, pools=pools_of(nodes)), None,
                             at(5))
    down, _ = compute_status(plain, observe(pods, nodes=dead, pools=pools_of(dead)), base,
                             at(10))
    plan = plan_replacements("ns", "article", plain.spec, down, replace(
        observed, workload=None), at(10))
    assert [type(a) for a in plan.actions] == [QuarantinePool, DeleteWorkerJob]


def test_a_level_no_node_carries_is_named() -> None:
    nodes = labelled(nodes_for(spares=1))  # no block label anywhere
    status = step(job(), None, [], nodes, wl=workload().pending(at(0)).build())
    state, reason, message = condition(status, C.TOPOLOGY_PLACEMENT)
    assert (state, reason) == ("False", Reason.TOPOLOGY_LEVEL_NOT_FOUND)
    assert f"carries the label {TOPOLOGY_BLOCK_LABEL} (spec.tpu.topologyAware.jobLevel)" \
        in message


def test_without_kueue_nothing_places_the_slices_and_it_says_so() -> None:
    obj = manifest()
    obj["metadata"]["labels"] = {}
    j = validate_job(obj)
    nodes = labelled(nodes_for(), **{TOPOLOGY_BLOCK_LABEL: "b0"})
    observed = observe(healthy_pods(), nodes=nodes, pools=pools_of(nodes))
    status, _ = compute_status(j, observed, None, at(5))
    assert condition(status, C.TOPOLOGY_PLACEMENT)[:2] == ("False", Reason.NOT_QUEUED)
    unseen = step(job(), None, [], {})
    assert condition(unseen, C.TOPOLOGY_PLACEMENT)[:2] == ("Unknown", Reason.NO_NODES)


def test_the_replacing_event_names_the_domain() -> None:
    j = job()
    nodes = labelled(nodes_for(), **{TOPOLOGY_BLOCK_LABEL: "b0"})
    prev = step(j, None, healthy_pods(created=at(0)), nodes)
    pods = healthy_pods(created=at(0))
    pods[HOSTS] = WorkerPod(1, 0).created(at(0)).failed(at(9)).build()
    observed = observe(pods, nodes=nodes, pools=pools_of(nodes), workload=admitted())
    _, events = compute_status(j, observed, prev, at(10))
    (replacing,) = [e for e in events if e.reason == Reason.SLICE_REPLACING]
    assert f"in its {NODE_POOL_LABEL} domain tpu-1 (Kueue keeps a slice where it placed it)" \
        in replacing.message


def test_a_pod_kueue_fails_off_the_dead_node_it_assigned_is_no_second_failure() -> None:
    """Kueue v0.17 ungates the recreated slice's pods onto the dead node its assignment
    still names, then fails the one that cannot schedule there (TerminatedByKueue) on its
    way to a replacement node or an eviction: the node's failure, counted once, and
    nothing for the operator to replace again."""
    j = job()
    nodes = labelled(nodes_for(spares=1), **{TOPOLOGY_BLOCK_LABEL: "b0"})
    prev = step(j, None, healthy_pods(created=at(0)), nodes)
    dead = {**nodes, "tpu-1-0": replace(nodes["tpu-1-0"], ready=False, ready_status="Unknown")}
    down = step(j, prev, healthy_pods(created=at(0)), dead, now_s=10)
    assert down.counters.slice_failures == 1 and down.slices[1].replacement is not None
    # The operator deleted the worker Job; JobSet made the next, whose pods wait.
    others = [p for p in healthy_pods(created=at(0)) if p.slice_index != 1]
    fresh = [WorkerPod(1, h).recreated(at(12)).on_node(None).pending() for h in range(HOSTS)]
    restarting = step(j, down, others + [p.build() for p in fresh], dead, now_s=13)
    assert restarting.slices[1].state == "Restarting"

    fresh[0] = fresh[0].failed_by_kueue()
    pods = others + [p.build() for p in fresh]
    observed = observe(pods, nodes=dead, pools=pools_of(dead), workload=admitted(),
                       jobs={i: worker_job(i, gen=1 if i == 1 else 0) for i in range(SLICES)})
    status, events = compute_status(j, observed, restarting, at(14))
    assert status.counters.slice_failures == 1
    assert (status.slices[1].state, status.slices[1].restarts) == ("Restarting", 1)
    assert "was failed by Kueue: it could not schedule on the unhealthy node" \
        in (status.slices[1].message or "")
    assert not [e for e in events if e.reason in (Reason.SLICE_DOWN, Reason.SLICE_REPLACING)]
    plan = plan_replacements("ns", "article", j.spec, status, observed, at(14))
    assert not [a for a in plan.actions if isinstance(a, DeleteWorkerJob)]
    # The same pod failed by anything else is the new Job's own failure.
    fresh[0] = WorkerPod(1, 0).recreated(at(12)).on_node(None).failed(at(13.5))
    again, _ = compute_status(j, observe(
        others + [p.build() for p in fresh], nodes=dead, pools=pools_of(dead),
        workload=admitted()), restarting, at(14))
    assert again.counters.slice_failures == 2
