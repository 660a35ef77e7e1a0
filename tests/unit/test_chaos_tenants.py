"""The multi-tenant soak's cross-job pieces (tests/support/chaos_tenants.py): who the
jobs are, one seed's spread of faults over them, and each cross-job invariant: held on a
clean record, and naming the fault it exists to catch on a record that has it."""
from __future__ import annotations

import json
import random
from types import SimpleNamespace

from elastic_api.names import (
    JOB_NAME_LABEL,
    NODE_POOL_LABEL,
    QUARANTINE_CAUSE_ANNOTATION,
    QUARANTINE_LABEL,
    TPU_ACCELERATOR_LABEL,
)
from tests.support.chaos_faults import KINDS, SLICES, plan_faults
from tests.support.chaos_tenants import (
    PRIORITIES,
    CapacitySample,
    PoolFault,
    Preemption,
    Quarantine,
    TenantSampler,
    capacity_left_idle,
    counted_once_per_job,
    free_pools,
    interleave,
    preempted_as_the_contract_says,
    quarantined_for_own_faults,
    quarantines,
    short_of_a_slice,
    tenants,
)

NAMESPACES = {"team-a": "ns-a", "team-b": "ns-b"}
QUEUES = {"team-a": "lq-a", "team-b": "lq-b"}


def test_jobs_alternate_teams_with_their_namespace_queue_and_priority() -> None:
    got = tenants(3, NAMESPACES, QUEUES)
    assert [(t.name, t.team, t.local_queue) for t in got] == [
        ("ns-a/chaos-0", "team-a", "lq-a"), ("ns-b/chaos-1", "team-b", "lq-b"),
        ("ns-a/chaos-2", "team-a", "lq-a")]
    # Team a outranks team b: its new job is the one that preempts.
    assert PRIORITIES[got[0].team][1] > PRIORITIES[got[1].team][1]
    assert got[1].priority_class == PRIORITIES["team-b"][0]


def test_one_seed_spreads_every_kind_over_every_job_and_replays() -> None:
    def spread(seed: int) -> list[tuple[int, str, list[int]]]:
        rng = random.Random(seed)
        plans = [plan_faults(random.Random(rng.getrandbits(32)), soak=False) for _ in range(3)]
        return [(i, f.kind, f.slices) for i, f in interleave(rng, plans)]

    got = spread(7)
    assert got == spread(7)  # a seed replays
    assert got != spread(8)
    for job in range(3):  # each job still gets every kind, in its own plan's order
        assert sorted(k for i, k, _ in got if i == job) == sorted(KINDS)
    assert [i for i, _, _ in got[:len(KINDS)]] != [0] * len(KINDS)  # spread, not in turn


def test_a_plan_hits_only_the_slices_a_job_has() -> None:
    for slices in (2, SLICES):
        plan = plan_faults(random.Random(5), soak=True, slices=slices)
        assert {i for f in plan for i in f.slices} == set(range(slices))
        assert all(len(f.slices) == 2 for f in plan if f.kind == "two_slices")


def test_capacity_left_idle_catches_a_job_waiting_beside_a_free_pool() -> None:
    placed = [CapacitySample(0, 1, ()), CapacitySample(1, 1, ("a/j",)),
              CapacitySample(3, 0, ()), CapacitySample(10, 1, ())]
    assert capacity_left_idle(placed, bound=5) == []
    # No pool free: waiting is no violation, however long.
    full = [CapacitySample(t, 0, ("a/j",)) for t in range(0, 60, 5)]
    assert capacity_left_idle(full, bound=5) == []
    # The spare stood free for 20 s while a/j waited: one violation, not one per sample.
    idle = [CapacitySample(t, 1, ("a/j",)) for t in range(0, 21, 2)]
    (problem,) = capacity_left_idle(idle, bound=5)
    assert problem.startswith("a/j short of a slice from t=0.0s for over 5s")


def test_the_bound_starts_again_once_the_api_server_serves_the_operator() -> None:
    """Seed 929473527: APF answered the operator with Retry-After of 15-32 s for 100 s
    while the spare stood free; the wait is the server's. After it, the bound holds."""
    throttled = [CapacitySample(t, 1, ("a/j",), held_back=t < 12) for t in range(0, 21, 2)]
    assert capacity_left_idle(throttled, bound=10) == []
    idle_after = [CapacitySample(t, 1, ("a/j",), held_back=t < 12) for t in range(0, 31, 2)]
    (problem,) = capacity_left_idle(idle_after, bound=10)
    assert problem.startswith("a/j short of a slice from t=12.0s for over 10s")


def test_a_stretch_restarts_when_the_job_got_its_slice() -> None:
    samples = [CapacitySample(0, 1, ("a/j",)), CapacitySample(4, 1, ("a/j",)),
               CapacitySample(5, 1, ()), CapacitySample(6, 1, ("a/j",)),
               CapacitySample(10, 1, ("a/j",))]
    assert capacity_left_idle(samples, bound=5) == []


TEAM_OF = {"ns-a/chaos-0": "team-a", "ns-b/chaos-1": "team-b"}


def test_a_quarantine_stands_on_the_naming_jobs_own_faults() -> None:
    faults = [PoolFault("ns-a/chaos-0", "pool-1", 10), PoolFault("ns-a/chaos-0", "pool-1", 20)]
    assert quarantined_for_own_faults(
        [Quarantine("pool-1", 21, ("ns-a/chaos-0",))], faults, TEAM_OF, window=60) == []


def test_a_quarantine_for_the_other_teams_faults_is_named() -> None:
    faults = [PoolFault("ns-a/chaos-0", "pool-1", 10), PoolFault("ns-a/chaos-0", "pool-1", 20)]
    (problem,) = quarantined_for_own_faults(
        [Quarantine("pool-1", 21, ("ns-b/chaos-1",))], faults, TEAM_OF, window=60)
    assert "ns-b/chaos-1 (team-b) quarantined pool pool-1" in problem
    assert "the other team's faults (ns-a/chaos-0)" in problem


def test_own_faults_on_another_pool_or_too_long_ago_do_not_count() -> None:
    elsewhere = [PoolFault("ns-b/chaos-1", "pool-2", 20)]
    old = [PoolFault("ns-b/chaos-1", "pool-1", 0)]
    q = [Quarantine("pool-1", 100, ("ns-b/chaos-1",))]
    assert "on no fault at all" in quarantined_for_own_faults(q, elsewhere, TEAM_OF, 60)[0]
    assert quarantined_for_own_faults(q, old, TEAM_OF, 60) != []


def test_counted_once_per_job_catches_twice_missed_and_misattributed() -> None:
    assert counted_once_per_job({"a": 2, "b": 1}, {"a": 2, "b": 1}) == []
    (twice,) = counted_once_per_job({"a": 2}, {"a": 3})
    assert "counted twice" in twice
    (missed,) = counted_once_per_job({"a": 2}, {"a": 1})
    assert "not counted" in missed
    # b's failure counted as a's: the totals agree, each job is wrong.
    wrong = counted_once_per_job({"a": 1, "b": 1}, {"a": 2})
    assert len(wrong) == 2 and "another job's" in wrong[0] and "not counted" in wrong[1]


def preemption(**change: object) -> Preemption:
    fields: dict[str, object] = dict(
        job="ns-b/chaos-1", admitted_reasons=("Admitted", "Preempted", "Admitted"),
        counters={"preemptions": 1, "evictions": 0, "sliceFailures": 4}, preempted=1,
        slice_failures_injected=4, committed_at_eviction=120, resumed_from=(120, "checkpoint"))
    fields.update(change)
    return Preemption(**fields)  # type: ignore[arg-type]


def test_a_preemption_as_the_contract_says_has_no_violation() -> None:
    assert preempted_as_the_contract_says(preemption()) == []


def test_each_way_a_preemption_goes_wrong_is_named() -> None:
    cases = {
        "never showed Preempted": dict(admitted_reasons=("Admitted", "Evicted")),
        "counters.preemptions 0": dict(counters={"sliceFailures": 4}),
        "counted as an eviction": dict(counters={"preemptions": 1, "evictions": 1,
                                                 "sliceFailures": 4}),
        "counted as slice failures": dict(counters={"preemptions": 1, "sliceFailures": 16}),
        "not the newest committed": dict(resumed_from=(110, "checkpoint")),
    }
    for words, change in cases.items():
        got = preempted_as_the_contract_says(preemption(**change))
        assert len(got) == 1 and words in got[0], (words, got)


def node(name: str, pool: str, *, ready: bool = True, tpu: bool = True,
         quarantined_by: tuple[str, ...] | None = None) -> SimpleNamespace:
    labels = {NODE_POOL_LABEL: pool}
    if tpu:
        labels[TPU_ACCELERATOR_LABEL] = "tpu-v5-lite-podslice"
    annotations = {}
    if quarantined_by is not None:
        labels[QUARANTINE_LABEL] = "RepeatedFailures"
        annotations[QUARANTINE_CAUSE_ANNOTATION] = json.dumps(
            {"jobs": [{"name": j, "uid": "u"} for j in quarantined_by], "evidence": "e"})
    return SimpleNamespace(
        metadata=SimpleNamespace(name=name, labels=labels, annotations=annotations),
        status=SimpleNamespace(conditions=[SimpleNamespace(type="Ready",
                                                           status=str(ready))]))


def pod(node_name: str, job: str | None = "chaos-0", phase: str = "Running") -> SimpleNamespace:
    return SimpleNamespace(spec=SimpleNamespace(node_name=node_name),
                           metadata=SimpleNamespace(labels={JOB_NAME_LABEL: job} if job else {}),
                           status=SimpleNamespace(phase=phase))


def test_a_free_pool_is_ready_unquarantined_and_runs_no_job() -> None:
    nodes = [node("p0-0", "p0"), node("p1-0", "p1"), node("p2-0", "p2", ready=False),
             node("p3-0", "p3", quarantined_by=("ns-a/chaos-0",)), node("p4-0", "p4"),
             node("p4-1", "p4"), node("cpu-0", "cpu", tpu=False)]
    pods = [pod("p0-0"), pod("p1-0", phase="Succeeded"), pod("p4-1"), pod("cpu-0"),
            pod("p1-0", job=None)]  # not a job's: leaves p1 free
    assert free_pools(nodes, pods) == ["p1"]


def test_short_of_a_slice_only_while_admitted() -> None:
    assert short_of_a_slice({"slicesReady": 2}, 3)
    assert not short_of_a_slice({"slicesReady": 3}, 3)
    waiting = {"slicesReady": 0, "conditions": [{"type": "Admitted", "status": "False",
                                                 "reason": "Preempted"}]}
    assert not short_of_a_slice(waiting, 3)  # short of quota, not of capacity
    admitted = {"slicesReady": 1, "conditions": [{"type": "Admitted", "status": "True"}]}
    assert short_of_a_slice(admitted, 3)


def test_quarantines_read_the_cause_annotation_per_pool() -> None:
    nodes = [node("p0-0", "p0", quarantined_by=("ns-b/chaos-1",)), node("p0-1", "p0"),
             node("p1-0", "p1")]
    assert quarantines(nodes, 7.0) == [Quarantine("p0", 7.0, ("ns-b/chaos-1",))]
    # What it reads feeds the check: b quarantined p0 on a's faults.
    (problem,) = quarantined_for_own_faults(
        quarantines(nodes, 7.0), [PoolFault("ns-a/chaos-0", "p0", 5.0)], TEAM_OF, 60)
    assert "the other team's faults" in problem


def test_the_tenant_sampler_records_capacity_admission_and_new_quarantines() -> None:
    sampler = TenantSampler(api=None, statuses=dict, slices=3)
    nodes = [node("p0-0", "p0"), node("p1-0", "p1", quarantined_by=("ns-a/chaos-0",))]
    preempted = {"slicesReady": 0, "conditions": [{"type": "Admitted", "status": "False",
                                                   "reason": "Preempted"}]}
    for t, b in ((1.0, preempted), (2.0, preempted), (3.0, {"slicesReady": 2})):
        sampler._take(t, nodes, [], {"ns-a/chaos-0": {"slicesReady": 2}, "ns-b/chaos-1": b})
    assert sampler.capacity[0] == CapacitySample(1.0, 1, ("ns-a/chaos-0",))
    assert sampler.capacity[2].short == ("ns-a/chaos-0", "ns-b/chaos-1")
    assert sampler.admitted == {"ns-b/chaos-1": ["Preempted"]}  # each change once
    assert sampler.seen_quarantines == [Quarantine("p1", 1.0, ("ns-a/chaos-0",))]
