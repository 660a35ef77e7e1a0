"""The node index: which jobs a node's readiness change concerns, learned from pod
events, and the nodes a reconcile reads."""
from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from elastic_operator.model.objects import ObservedNode
from elastic_operator.watch.node_index import JobKey, NodeIndex
from tests.builders import T0
from tests.support.clock import FakeClock

A, B = ("ns", "a"), ("ns", "b")


def ready(name: str, is_ready: bool = True) -> ObservedNode:
    return ObservedNode(name, is_ready, ready_transition_time=T0)


def test_a_readiness_change_names_the_jobs_with_pods_on_the_node() -> None:
    index = NodeIndex()
    index.pod_seen(A, "a-worker-0-0", "n1")
    index.pod_seen(B, "b-worker-0-0", "n1")
    index.pod_seen(B, "b-worker-1-0", "n2")
    assert index.node_seen(ready("n1")) == []  # first sight: the resync's business
    assert index.node_seen(ready("n1")) == []  # a heartbeat
    assert index.node_seen(ready("n1", False)) == [A, B]
    assert index.node_seen(ready("n1", False)) == []
    assert index.node_seen(ready("n1")) == [A, B]  # back
    seen = index.nodes(["n1", "n2"])  # n2 not seen yet
    assert list(seen) == ["n1"] and seen["n1"].ready


def test_a_deleted_node_counts_as_not_ready() -> None:
    index = NodeIndex()
    index.pod_seen(A, "a-worker-0-0", "n1")
    index.node_seen(ready("n1"))
    assert index.node_gone("n1") == [A]
    assert index.nodes(["n1"]) == {}
    assert index.node_seen(ready("n1")) == [A]  # re-registered Ready: a change


def test_a_job_stays_on_a_node_while_any_of_its_pods_does() -> None:
    index = NodeIndex()
    index.pod_seen(A, "a-worker-0-0-old", "n1")
    index.pod_seen(A, "a-worker-0-0-new", "n1")  # the replacement, on the same node
    index.pod_gone(A, "a-worker-0-0-old", "n1")
    assert index.jobs_on("n1") == [A]
    index.pod_gone(A, "a-worker-0-0-new", "n1")
    assert index.jobs_on("n1") == []


def test_a_deleted_job_is_forgotten_everywhere() -> None:
    index = NodeIndex()
    index.pod_seen(A, "a-0", "n1")
    index.pod_seen(A, "a-1", "n2")
    index.pod_seen(B, "b-0", "n2")
    index.forget_job(A)
    assert index.jobs_on("n1") == [] and index.jobs_on("n2") == [B]


def test_pools_of_a_shape_and_whether_another_job_uses_them() -> None:
    from tests.builders import tpu_node

    index = NodeIndex()
    for pool in ("tpu-0", "tpu-1"):
        for h in range(2):
            index.node_seen(tpu_node(f"{pool}-{h}", pool))
    index.node_seen(ObservedNode("cpu-0", True, pool="cpu-np"))
    index.pod_seen(B, "b-worker-0-0", "tpu-1-0")
    index.pod_seen(A, "a-worker-0-0", "tpu-0-0")
    pools = index.pools("tpu-v5-lite-podslice", "4x4", A)
    assert [(p.name, len(p.nodes), p.used_by_others) for p in pools] == [
        ("tpu-0", 2, False), ("tpu-1", 2, True)]
    assert index.pools("tpu-v5-lite-podslice", "8x8", A) == ()


def test_a_transition_is_never_earlier_than_the_watch_saw_it() -> None:
    """kwok reports the Ready condition's transition as the node's creation: a node that
    just failed must not look failed for an hour (the detection time), nor a revived one
    Ready all along (the pool warden)."""
    from datetime import timedelta

    clock = FakeClock(T0 + timedelta(hours=1))
    index = NodeIndex(clock)
    index.node_seen(ObservedNode("n1", True, ready_transition_time=T0))
    index.node_seen(ObservedNode("n1", False, ready_transition_time=T0))  # stale time
    assert index.nodes(["n1"])["n1"].ready_transition_time == clock.now()
    clock.advance(5 * 60)
    index.node_seen(ObservedNode("n1", True, ready_transition_time=T0))
    (node,) = index.all_nodes()
    assert node.ready_transition_time == clock.now()
    fresh = T0 + timedelta(hours=2)  # a kubelet's own, later time stands
    index.node_seen(ObservedNode("n1", False, ready_transition_time=fresh))
    assert index.nodes(["n1"])["n1"].ready_transition_time == fresh


SHAPES = [("tpu-v5-lite-podslice", "2x2"), ("tpu-v5-lite-podslice", "4x4")]


def _node(name: str, pool: str, shape: int, is_ready: bool) -> ObservedNode:
    accelerator, topology = SHAPES[shape]
    return ObservedNode(name, is_ready, ready_transition_time=T0, pool=pool,
                        accelerator=accelerator, topology=topology)


_ops = st.one_of(
    st.tuples(st.just("node"), st.sampled_from(["n0", "n1", "n2", "n3"]),
              st.sampled_from(["p0", "p1", "p2"]), st.integers(0, 1), st.booleans()),
    st.tuples(st.just("node_gone"), st.sampled_from(["n0", "n1", "n2", "n3"])),
    st.tuples(st.just("pod"), st.sampled_from([A, B]), st.sampled_from(["x", "y"]),
              st.sampled_from(["n0", "n1", "n2", "n3"])),
    st.tuples(st.just("pod_gone"), st.sampled_from([A, B]), st.sampled_from(["x", "y"])),
    st.tuples(st.just("forget"), st.sampled_from([A, B])),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_ops, max_size=25))
def test_pools_read_after_any_changes_equal_a_fresh_index_of_the_same_state(
        ops: list[tuple[Any, ...]]) -> None:
    """The pools of a shape are grouped once and kept until a node changes: read after
    every change, they are what an index that saw only the resulting state gives."""
    index = NodeIndex()
    nodes: dict[str, ObservedNode] = {}
    pods: dict[tuple[JobKey, str], str] = {}  # (job, pod) -> node
    for op in ops:
        match op:
            case ("node", name, pool, shape, is_ready):
                nodes[name] = _node(name, pool, shape, is_ready)
                index.node_seen(nodes[name])
            case ("node_gone", name):
                nodes.pop(name, None)
                index.node_gone(name)
            case ("pod", job, pod, node):
                if (job, pod) in pods:
                    index.pod_gone(job, pod, pods[(job, pod)])
                pods[(job, pod)] = node
                index.pod_seen(job, pod, node)
            case ("pod_gone", job, pod) if (job, pod) in pods:
                index.pod_gone(job, pod, pods.pop((job, pod)))
            case ("forget", job):
                pods = {k: v for k, v in pods.items() if k[0] != job}
                index.forget_job(job)
        fresh = NodeIndex()
        for node in nodes.values():
            fresh.node_seen(node)
        for (job, pod), node_name in pods.items():
            fresh.pod_seen(job, pod, node_name)
        for shape in SHAPES:
            for job in (A, B):
                assert index.pools(*shape, job) == fresh.pools(*shape, job)
