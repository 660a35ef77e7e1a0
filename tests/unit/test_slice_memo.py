"""SliceMemo (elastic_operator/model/slice_memo.py): a reconcile that keeps what it derived from
each slice's pods computes exactly the status one without does, and recomputes only the
slices whose pods or nodes changed. (tests/unit/test_exactly_once.py runs its random
interleavings with the memo against a look without it too.)"""
from __future__ import annotations

from dataclasses import replace

from elastic_operator.core.status import compute_status
from elastic_operator.model.objects import Observed, ObservedPod
from elastic_operator.model.slice_memo import SliceMemo
from tests.builders import (
    T0,
    WorkerPod,
    article_job,
    at,
    healthy_pods,
    nodes_for,
    observe,
    tpu_node,
)

SLICES = 3
# A slice's values (its view, core/sliceview.py, and its Job's count), and the job's two
# groupings of all its pods (by slice, with their nodes).
RECOMPUTED = 2 + 2


class Calls:
    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> str:
        self.n += 1
        return f"value {self.n}"


def test_the_same_objects_give_back_what_was_computed_from_them() -> None:
    memo, compute = SliceMemo(), Calls()
    pods = tuple(healthy_pods(1))
    first = memo.get("hosts", 0, pods, compute)
    assert memo.get("hosts", 0, pods, compute) is first
    assert memo.get("hosts", 0, tuple(pods), compute) is first  # another tuple, same pods
    assert compute.n == 1 and (memo.hits, memo.misses) == (2, 1)


def test_an_equal_copy_is_the_same_input_and_a_changed_pod_is_not() -> None:
    memo, compute = SliceMemo(), Calls()
    pods = healthy_pods(1)
    memo.get("hosts", 0, tuple(pods), compute)
    copied = [replace(p) for p in pods]  # the node index copies a node the same way
    assert memo.get("hosts", 0, tuple(copied), compute) == "value 1"
    failed = [WorkerPod(0, 0).failed(at(5)).build(), *pods[1:]]
    assert memo.get("hosts", 0, tuple(failed), compute) == "value 2"
    assert memo.get("hosts", 0, tuple(pods), compute) == "value 3"  # only the last kept


def test_a_slice_that_changed_drops_every_value_of_that_slice_and_no_other() -> None:
    memo, compute = SliceMemo(), Calls()
    pods = healthy_pods(2)
    by_slice = {i: tuple(p for p in pods if p.slice_index == i) for i in (0, 1)}
    for what in ("hosts", "pool"):
        for i in (0, 1):
            memo.get(what, i, by_slice[i], compute)
    changed = (WorkerPod(0, 0).failed(at(5)).build(), *by_slice[0][1:])
    memo.get("hosts", 0, changed, compute)
    memo.get("pool", 0, changed, compute)
    memo.get("hosts", 1, by_slice[1], compute)
    memo.get("pool", 1, by_slice[1], compute)
    assert compute.n == 4 + 2 and memo.hits == 2


def test_more_inputs_are_compared_too() -> None:
    memo, compute = SliceMemo(), Calls()
    pods = tuple(healthy_pods(1))
    memo.get("hosts", 0, pods, compute, (None,))
    memo.get("hosts", 0, pods, compute, (T0,))  # Kueue admitted the job (the epoch)
    memo.get("hosts", 0, pods, compute, (T0,))
    assert compute.n == 2


def _look(pods: list[ObservedPod], memo: SliceMemo | None, **more: object) -> Observed:
    return replace(observe(pods, **more), memo=memo)


def test_a_status_with_the_memo_is_the_status_without_it_look_after_look() -> None:
    """Three slices through a failure, its replacement, a node going NotReady and coming
    back: at each look the memo's status and Events are those computed afresh, and a look
    after one pod changed recomputes that slice only."""
    job = article_job(SLICES)
    healthy = healthy_pods(SLICES)
    failed = [WorkerPod(1, 0).failed(at(10)).build() if p.slice_index == 1
              and p.host_index == 0 else p for p in healthy]
    replaced = [WorkerPod(1, 0).replacement(at(20)).build() if p.slice_index == 1
                and p.host_index == 0 else p for p in healthy]
    sick = nodes_for(SLICES) | {"tpu-2-3": tpu_node("tpu-2-3", ready=False, since=at(40))}
    looks = [(healthy, None), (healthy, None), (failed, None), (failed, None),
             (replaced, None), (replaced, sick), (replaced, None)]
    memo = SliceMemo()
    with_memo = without = None
    for step, (pods, nodes) in enumerate(looks):
        now = at(5 + 10 * step)
        kw = {"nodes": nodes} if nodes is not None else {}
        misses = memo.misses
        got = compute_status(job, _look(pods, memo, **kw), with_memo, now)
        want = compute_status(job, _look(pods, None, **kw), without, now)
        assert got == want, f"look {step}"
        with_memo, without = got.status, want.status
        if step in (1, 3):  # nothing changed since the look before
            assert memo.misses == misses, f"look {step}"
        if step in (2, 4, 5):  # one slice's pod or node changed: that slice only
            assert 0 < memo.misses - misses <= RECOMPUTED, f"look {step}"
    assert [s.restarts for s in with_memo.slices] == [0, 1, 1]


def test_at_the_largest_job_a_failure_recomputes_one_slice() -> None:
    """64 slices of 64 hosts: a pod failing changes what one slice's values come from."""
    slices, hosts = 64, 64
    job = article_job(slices)
    healthy = healthy_pods(slices, hosts)
    nodes = nodes_for(slices, hosts)
    jobset = replace(observe().jobset, worker_hosts_per_slice=hosts)  # type: ignore[arg-type]
    memo = SliceMemo()
    first = compute_status(job, Observed(jobset, tuple(healthy), nodes, memo=memo), None,
                           at(100)).status
    computed = memo.misses
    victim = WorkerPod(7, 5).failed(at(101)).build()
    pods = tuple(victim if (p.slice_index, p.host_index) == (7, 5) else p for p in healthy)
    got = compute_status(job, Observed(jobset, pods, nodes, memo=memo), first, at(102))
    want = compute_status(job, Observed(jobset, pods, nodes), first, at(102))
    assert got == want
    assert 0 < memo.misses - computed <= RECOMPUTED
    assert [s.index for s in got.status.slices if s.state == "Down"] == [7]
