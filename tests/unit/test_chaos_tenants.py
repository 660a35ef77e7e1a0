"""The multi-tenant soak's cross-job pieces (tests/support/chaos_tenants.py): who the
jobs are, one seed's spread of faults over them, and each cross-job invariant: held on a
clean record, and naming the fault it exists to catch on a record that has it."""
from __future__ import annotations

import random

from tests.support.chaos_faults import KINDS, SLICES, plan_faults
from tests.support.chaos_tenants import (
    PRIORITIES,
    CapacitySample,
    PoolFault,
    Preemption,
    Quarantine,
    capacity_left_idle,
    counted_once_per_job,
    interleave,
    preempted_as_the_contract_says,
    quarantined_for_own_faults,
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
