"""Slice replacement, decided purely (core/replacement.py, core/pools.py): the record
written before the operator acts, the actions it then takes, and what a restarted
operator does with a record it finds."""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from elastic_api.conditions import ConditionType as C
from elastic_api.conditions import Reason
from elastic_api.models import ElasticTrainingJob, ElasticTrainingJobStatus
from elastic_operator.core.plan import (
    DeleteWorkerJob,
    ForceDeletePod,
    LowerBackoffLimit,
    QuarantinePool,
)
from elastic_operator.core.pools import pools_to_release
from elastic_operator.core.replacement import ReplacementPlan, needs_jobs, plan_replacements
from elastic_operator.core.status import compute_status
from elastic_operator.model.objects import FailureMark, Observed, ObservedNode, QuarantineCause
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
    tpu_node,
    worker_job,
    worker_job_uid,
)


def job(**spec: Any) -> ElasticTrainingJob:
    return etj().uid("uid-1").generation(1).spec(**spec).build()


def world(pods: list[Any] | None = None, *, spares: int = 1,
          not_ready: dict[str, datetime] | None = None,
          nodes: dict[str, ObservedNode] | None = None, jobs_gen: dict[int, int] | None = None,
          deleting: tuple[int, ...] = ()) -> Observed:
    """The article's job on pools tpu-0..2, with `spares` free pools (tpu-3...)."""
    nodes = nodes or nodes_for(spares=spares, not_ready=not_ready)
    gens = jobs_gen or {}
    return observe(pods if pods is not None else healthy_pods(), nodes=nodes,
                   pools=pools_of(nodes),
                   jobs={i: worker_job(i, gens.get(i, 0), deleting=i in deleting)
                         for i in range(SLICES)})


def running(j: ElasticTrainingJob, observed: Observed | None = None) -> ElasticTrainingJobStatus:
    st, _ = compute_status(j, observed or world(), None, at(1))
    return st


def step(j: ElasticTrainingJob, prev: ElasticTrainingJobStatus, observed: Observed,
         now: datetime) -> tuple[ElasticTrainingJobStatus, list[str], ReplacementPlan]:
    st, events = compute_status(j, observed, prev, now)
    plan = plan_replacements("ns", "article", j.spec, st, observed, now)
    return st, [e.reason for e in events], plan


def with_failed_host(slice_index: int, host: int, when: datetime) -> list[Any]:
    pods = healthy_pods()
    pods[slice_index * HOSTS + host] = WorkerPod(slice_index, host).failed(when).build()
    return pods


# --- the record, then the delete ------------------------------------------------------------


def test_a_failed_slice_is_recorded_then_its_job_deleted_with_its_uid() -> None:
    j = job()
    st0 = running(j)
    st1, reasons, plan = step(j, st0, world(with_failed_host(1, 2, at(10))), at(11))
    s1 = st1.slices[1]
    assert s1.state == "Down" and s1.restarts == 1
    assert s1.replacement is not None and s1.replacement.action == "Replace"
    assert s1.replacement.job_uid == worker_job_uid(1)
    assert s1.replacement.reason == Reason.POD_FAILED and s1.replacement.from_pool == "tpu-1"
    assert Reason.SLICE_REPLACING in reasons
    assert needs_jobs(st1)
    assert plan.actions == (DeleteWorkerJob("ns", "article-worker-1", worker_job_uid(1), 1,
                                            Reason.POD_FAILED),)


def test_a_restarted_operator_repeats_a_delete_that_did_not_happen_and_never_twice() -> None:
    j = job()
    st1, _, _ = step(j, running(j), world(with_failed_host(1, 2, at(10))), at(11))
    # The operator died after writing the status: the same Job is still there.
    _, _, again = step(j, st1, world(with_failed_host(1, 2, at(10))), at(30))
    assert [type(a) for a in again.actions] == [DeleteWorkerJob]
    # The delete went through: the Job is being deleted, then replaced by a new one.
    _, _, deleting = step(j, st1, world(with_failed_host(1, 2, at(10)), deleting=(1,)), at(31))
    assert deleting.actions == ()
    _, _, newer = step(j, st1, world(with_failed_host(1, 2, at(10)), jobs_gen={1: 1}), at(32))
    assert newer.actions == ()


def test_the_failed_jobs_pods_going_one_by_one_are_not_a_second_failure() -> None:
    """The operator deleted the failed Job; a look between two of its pods going sees the
    slice Restarting (the failed host's pod already replaced, the rest still up), the
    next sees another old pod terminating: still the one failure, counted once. A pod of
    the new Job failing afterwards is a new one."""
    j = job()
    st1, _, _ = step(j, running(j), world(with_failed_host(1, 2, at(10))), at(11))
    assert st1.slices[1].restarts == 1
    pods = healthy_pods()
    pods[HOSTS + 2] = WorkerPod(1, 2).replacement(at(12)).not_ready().build()
    st2, reasons, _ = step(j, st1, world(pods, deleting=(1,)), at(12))
    assert st2.slices[1].state == "Restarting" and st2.slices[1].replacement is not None
    pods[HOSTS + 3] = WorkerPod(1, 3).deleting(at(12)).build()
    st3, reasons, _ = step(j, st2, world(pods, deleting=(1,)), at(13))
    assert st3.slices[1].state == "Down" and st3.slices[1].restarts == 1
    assert st3.counters.slice_failures == 1
    assert Reason.SLICE_DOWN not in reasons and Reason.SLICE_REPLACING not in reasons
    pods[HOSTS:2 * HOSTS] = [WorkerPod(1, h).recreated(at(14), 1).build()
                             for h in range(HOSTS)]
    st4, reasons, _ = step(j, st3, world(pods, jobs_gen={1: 1}), at(15))
    assert st4.slices[1].state == "Ready" and st4.slices[1].replacement is None
    pods[HOSTS] = WorkerPod(1, 0).recreated(at(14), 1).failed(at(16)).build()
    st5, reasons, _ = step(j, st4, world(pods, jobs_gen={1: 1}), at(17))
    assert st5.slices[1].restarts == 2 and Reason.SLICE_DOWN in reasons


def test_ready_on_a_new_job_closes_the_record_with_the_pools_it_moved_between() -> None:
    j = job()
    st1, _, _ = step(j, running(j), world(with_failed_host(1, 2, at(10))), at(11))
    pods = healthy_pods()
    pods[HOSTS:2 * HOSTS] = [WorkerPod(1, h).recreated(at(12), 1, node=f"tpu-3-{h}").build()
                             for h in range(HOSTS)]
    st2, reasons, plan = step(j, st1, world(pods, jobs_gen={1: 1}), at(16))
    s = st2.slices[1]
    assert s.state == "Ready" and s.replacement is None and s.restarts == 1
    assert s.pool == "tpu-3"
    assert s.last_replacement is not None
    assert (s.last_replacement.from_pool, s.last_replacement.to_pool) == ("tpu-1", "tpu-3")
    assert s.last_replacement.seconds == pytest.approx(5.0)
    assert Reason.SLICE_REPLACED in reasons and plan.actions == ()


def test_a_slice_healed_before_the_operator_acted_is_left_alone() -> None:
    """A node reporting NotReady Ready again within its grace (the operator waits it out
    before deleting the Job): the record is dropped, nothing replaced."""
    j = job()
    st1, _, plan = step(j, running(j), world(not_ready={"tpu-1-2": at(10)}), at(10.5))
    assert st1.slices[1].replacement is not None and plan.actions == ()
    st2, reasons, plan = step(j, st1, world(), at(13))
    assert st2.slices[1].state == "Ready"
    assert st2.slices[1].replacement is None and st2.slices[1].last_replacement is None
    assert Reason.SLICE_REPLACED not in reasons and plan.actions == ()


def test_ready_again_on_the_job_being_replaced_is_not_the_end_of_the_replacement() -> None:
    """A pod force-deleted: the Job controller's new pod is Ready before the garbage
    collector tears down the Job the operator deleted (seen on the local cluster under
    load). The record stays; the teardown is the same failure, not a second one (one
    restart, one SliceReplacing); the record closes on the new Job."""
    j = job()
    st1, _, plan = step(j, running(j), world(with_failed_host(1, 2, at(10))), at(11))
    assert isinstance(plan.actions[-1], DeleteWorkerJob)
    pods = healthy_pods()
    pods[HOSTS + 2] = WorkerPod(1, 2).replacement(at(12)).build()
    st2, reasons, plan = step(j, st1, world(pods, deleting=(1,)), at(12.5))
    assert st2.slices[1].state == "Ready" and st2.slices[1].replacement is not None
    assert plan.actions == ()  # deleted already
    # The teardown, whichever way the next look finds it: its pods terminating, gone,
    # or already replaced by the new Job's (Ready) between two looks.
    new_job = [WorkerPod(1, h).recreated(at(14), 1).build() for h in range(HOSTS)]
    for seen in ([WorkerPod(1, h).deleting(at(13)).build() for h in range(HOSTS)], [],
                 new_job):
        torn = [p for p in pods if p.slice_index != 1] + seen
        st3, reasons, _ = step(j, st2, world(torn, deleting=(1,)), at(14.5))
        assert st3.slices[1].restarts == 1 and st3.counters.slice_failures == 1
        assert Reason.SLICE_DOWN not in reasons and Reason.SLICE_REPLACING not in reasons
    done = [p for p in pods if p.slice_index != 1] + new_job
    st4, reasons, _ = step(j, st3, world(done, jobs_gen={1: 1}), at(15))
    assert st4.slices[1].state == "Ready"
    assert st4.slices[1].replacement is None and st4.counters.slice_failures == 1
    assert Reason.SLICE_REPLACED in reasons


def test_a_slice_ready_on_the_job_the_operator_deleted_keeps_its_record() -> None:
    """The Job controller replaced the failed pod (same Job) after the operator deleted
    that Job: every host Ready for a moment, but the Job's pods go next. The record stays
    open, so their going is the same failure (seen on the local control plane with a
    stalled watch: two SliceDown for one failure); the slice on the new Job closes it."""
    j = job()
    st1, _, _ = step(j, running(j), world(with_failed_host(1, 2, at(10))), at(11))
    pods = healthy_pods()
    pods[HOSTS + 2] = WorkerPod(1, 2).replacement(at(12)).build()
    st2, reasons, plan = step(j, st1, world(pods, deleting=(1,)), at(12))
    assert st2.slices[1].state == "Ready" and st2.slices[1].replacement is not None
    assert reasons == [Reason.SLICE_RESTORED] and plan.actions == ()
    pods[HOSTS + 3] = WorkerPod(1, 3).deleting(at(13)).build()
    st3, reasons, _ = step(j, st2, world(pods, deleting=(1,)), at(13))
    assert st3.slices[1].state == "Down" and st3.slices[1].restarts == 1
    assert Reason.SLICE_DOWN not in reasons and st3.counters.slice_failures == 1
    pods[HOSTS:2 * HOSTS] = [WorkerPod(1, h).recreated(at(14), 1).build()
                             for h in range(HOSTS)]
    st4, reasons, _ = step(j, st3, world(pods, jobs_gen={1: 1}), at(15))
    assert st4.slices[1].replacement is None and Reason.SLICE_REPLACED in reasons


def test_without_replace_slices_nothing_is_recorded_or_done() -> None:
    j = job(recovery={"replaceSlices": False})
    st1, reasons, plan = step(j, running(j), world(with_failed_host(1, 2, at(10))), at(11))
    assert st1.slices[1].replacement is None and st1.slices[1].restarts == 1
    assert Reason.SLICE_REPLACING not in reasons and plan.actions == ()


# --- the budget -------------------------------------------------------------------------------


def test_the_failure_past_max_slice_restarts_gives_up_and_lowers_backoff_limit() -> None:
    j = job(elastic={"maxSliceRestarts": 2})
    st = running(j)
    for n, t in enumerate((10, 30, 50), start=1):
        # Host 1 of the slice's current Job (generation n - 1) fails.
        pods = healthy_pods()
        pods[:HOSTS] = [WorkerPod(0, h).recreated(at(t - 5), n - 1).build() for h in range(HOSTS)]
        pods[1] = WorkerPod(0, 1).recreated(at(t - 5), n - 1).failed(at(t)).build()
        st, reasons, plan = step(j, st, world(pods, jobs_gen={0: n - 1}), at(t + 1))
        if n < 3:
            assert st.slices[0].replacement.action == "Replace"  # type: ignore[union-attr]
            assert isinstance(plan.actions[-1], DeleteWorkerJob)
            # Back on a new Job before the next failure.
            pods[:HOSTS] = [WorkerPod(0, h).recreated(at(t + 5), n).build() for h in range(HOSTS)]
            st, _, _ = step(j, st, world(pods, jobs_gen={0: n}), at(t + 6))
            assert st.slices[0].state == "Ready" and st.slices[0].replacement is None
    assert st.slices[0].restarts == 3
    assert st.slices[0].replacement.action == "GiveUp"  # type: ignore[union-attr]
    assert Reason.SLICE_RESTARTS_EXHAUSTED in reasons
    assert plan.actions == (LowerBackoffLimit("ns", "article-worker-0", worker_job_uid(0, 2), 0),)
    # Done once: a Job whose backoffLimit is already 0 is left to fail.
    lowered = world(pods, jobs_gen={0: 2})
    lowered = replace(lowered, jobs={**lowered.jobs, 0: worker_job(0, 2, backoff_limit=0)})
    assert plan_replacements("ns", "article", j.spec, st, lowered, at(52)).actions == ()


# --- a dead node, stuck pods, quarantine --------------------------------------------------------


def test_a_node_reporting_not_ready_waits_the_grace_then_quarantines_and_replaces() -> None:
    j = job()
    observed = world(not_ready={"tpu-1-2": at(10)})
    st1, _, plan = step(j, running(j), observed, at(10.5))
    assert st1.slices[1].state == "Down" and st1.slices[1].reason == Reason.NODE_NOT_READY
    assert plan.actions == () and plan.wake_after_s == pytest.approx(5.0)
    _, _, plan = step(j, st1, observed, at(16))
    quarantine, delete = plan.actions
    cause = QuarantineCause((("ns/article", "uid-1"),), "node tpu-1-2 is NotReady (Ready=False)")
    assert quarantine == QuarantinePool("tpu-1", Reason.NODE_NOT_READY,
                                        tuple(f"tpu-1-{h}" for h in range(HOSTS)), 1, cause)
    assert isinstance(delete, DeleteWorkerJob) and delete.uid == worker_job_uid(1)


def test_a_silent_node_is_replaced_at_once() -> None:
    j = job()
    nodes = nodes_for(spares=1)
    nodes["tpu-1-2"] = tpu_node("tpu-1-2", ready=False, status="Unknown", since=at(10))
    _, _, plan = step(j, running(j), world(nodes=nodes), at(10.5))
    assert [type(a) for a in plan.actions] == [QuarantinePool, DeleteWorkerJob]


def test_without_a_spare_the_pool_is_not_quarantined() -> None:
    """Nowhere else to go: the slice waits for its own pool (as without the operator)."""
    j = job()
    nodes = nodes_for(spares=0)
    nodes["tpu-1-2"] = tpu_node("tpu-1-2", ready=False, status="Unknown", since=at(10))
    _, _, plan = step(j, running(j), world(nodes=nodes, spares=0), at(10.5))
    assert [type(a) for a in plan.actions] == [DeleteWorkerJob]


def test_a_pod_deleted_on_a_node_down_for_the_bound_is_force_deleted() -> None:
    """Bounded by how long the node has not been Ready: a pod deleted on a node down for
    forceDeleteAfterSeconds already goes at once (its kubelet is not coming back soon)."""
    j = job(recovery={"forceDeleteAfterSeconds": 5})
    nodes = nodes_for(spares=1)
    nodes["tpu-1-2"] = tpu_node("tpu-1-2", ready=False, status="Unknown", since=at(10))
    pods = healthy_pods()
    pods[HOSTS + 2] = WorkerPod(1, 2).deleting(at(12), grace_seconds=0).build()
    st1, _, plan = step(j, running(j), world(pods, nodes=nodes, deleting=(1,)), at(13))
    assert plan.actions == () and plan.wake_after_s == pytest.approx(2.0)
    stuck = ForceDeletePod("ns", "article-worker-1-2-g0", "article-worker-1-2-g0-uid",
                           "tpu-1-2", 1)
    _, _, plan = step(j, st1, world(pods, nodes=nodes, deleting=(1,)), at(15))
    assert plan.actions == (stuck,)
    later = healthy_pods()
    later[HOSTS + 2] = WorkerPod(1, 2).deleting(at(40), grace_seconds=0).build()
    _, _, plan = step(j, st1, world(later, nodes=nodes, deleting=(1,)), at(40))
    assert plan.actions == (stuck,)


def test_a_terminating_pod_on_a_ready_node_is_left_to_its_kubelet() -> None:
    j = job()
    pods = healthy_pods()
    pods[HOSTS + 2] = WorkerPod(1, 2).deleting(at(0), grace_seconds=0).build()
    _, _, plan = step(j, running(j), world(pods, deleting=(1,)), at(100))
    assert not any(isinstance(a, ForceDeletePod) for a in plan.actions)


def failing_twice_on(j: ElasticTrainingJob, others: tuple[FailureMark, ...] = (),
                     second_at: float = 20) -> tuple[ElasticTrainingJobStatus, ReplacementPlan]:
    """Slice 1's container exits on healthy tpu-1, is recreated there, and exits again
    (`others`: what other jobs' statuses say of tpu-1)."""
    def seen(pods: list[Any], **more: Any) -> Observed:
        observed = world(pods, **more)
        return replace(observed, pools=tuple(
            replace(p, failures_of_others=others) if p.name == "tpu-1" else p
            for p in observed.pools))

    st, _, plan = step(j, running(j), seen(with_failed_host(1, 0, at(10))), at(11))
    pods = healthy_pods()
    pods[HOSTS:2 * HOSTS] = [WorkerPod(1, h).recreated(at(15), 1).build() for h in range(HOSTS)]
    st, _, _ = step(j, st, seen(pods, jobs_gen={1: 1}), at(16))
    pods[HOSTS] = WorkerPod(1, 0).recreated(at(15), 1).failed(at(second_at)).build()
    st, _, plan = step(j, st, seen(pods, jobs_gen={1: 1}), at(second_at + 1))
    return st, plan


def test_one_jobs_crashes_on_one_pool_quarantine_nothing() -> None:
    """Exits on healthy nodes are the job's own failures: they spend its budget and
    quarantine nothing, however often they happen on one pool."""
    j = job(recovery={"quarantineAfterFailures": 2})
    st, plan = failing_twice_on(j)
    assert [(f.blame, f.reason) for f in st.pools[1].failures] == [("Job", Reason.POD_FAILED)] * 2
    assert st.slices[1].restarts == 2 and st.slices[1].replacement is not None
    assert st.slices[1].replacement.blame == "Job"
    assert "exited with code 1" in (st.slices[1].replacement.evidence or "")
    assert [type(a) for a in plan.actions] == [DeleteWorkerJob]


def test_slices_of_different_jobs_failing_on_one_pool_quarantine_it() -> None:
    j = job(recovery={"quarantineAfterFailures": 2})
    other = FailureMark("team-b/other", "uid-b", at(5), pools=1)
    st, plan = failing_twice_on(j, (other,))
    quarantine = plan.actions[0]
    assert isinstance(quarantine, QuarantinePool)
    assert (quarantine.pool, quarantine.reason) == ("tpu-1", Reason.REPEATED_FAILURES)
    assert quarantine.cause.jobs == (("ns/article", "uid-1"), ("team-b/other", "uid-b"))
    assert "slices of 2 jobs failed on it" in quarantine.cause.evidence
    # The label shows in the next look: status.pools says so, and who did it.
    nodes = {n: replace(v, quarantined=Reason.REPEATED_FAILURES,
                        quarantine_cause=quarantine.cause) if v.pool == "tpu-1" else v
             for n, v in nodes_for(spares=1).items()}
    st, _, _ = step(j, st, world(healthy_pods(), nodes=nodes, jobs_gen={1: 1}), at(22))
    assert st.pools[1].quarantined == Reason.REPEATED_FAILURES
    assert (st.pools[1].quarantine_cause or "").startswith("ns/article, team-b/other: slices")


def test_a_quarantine_cut_short_is_finished_by_the_next_leader() -> None:
    """The leader died labelling the pool (one node of four): the pool counts as
    quarantined, so nothing planned it again, and the recreated slice landed on its three
    unlabelled nodes with its fourth pod Pending for good (seen in the chaos soak). The
    next leader finds the Job not yet deleted and labels every node first (for the
    reason on the label: this one failure alone would not quarantine the pool)."""
    j = job()
    nodes = nodes_for(spares=1)
    nodes["tpu-1-0"] = replace(nodes["tpu-1-0"], quarantined=Reason.REPEATED_FAILURES)
    st, _, plan = step(j, running(j), world(with_failed_host(1, 2, at(10)), nodes=nodes),
                       at(11))
    quarantine, delete = plan.actions
    assert quarantine == QuarantinePool("tpu-1", Reason.REPEATED_FAILURES,
                                        tuple(f"tpu-1-{h}" for h in range(HOSTS)), 1)
    assert isinstance(delete, DeleteWorkerJob)
    # Every node labelled: done, not planned again.
    done = {n: replace(v, quarantined=Reason.REPEATED_FAILURES) if v.pool == "tpu-1" else v
            for n, v in nodes.items()}
    _, _, plan = step(j, st, world(with_failed_host(1, 2, at(10)), nodes=done), at(12))
    assert [type(a) for a in plan.actions] == [DeleteWorkerJob]


def test_another_jobs_failure_that_follows_it_or_is_old_does_not_count() -> None:
    j = job(recovery={"quarantineAfterFailures": 2, "quarantineWindowSeconds": 60})
    follows = FailureMark("team-b/other", "uid-b", at(5), pools=2)  # failed on 2 pools
    _, plan = failing_twice_on(j, (follows,))
    assert [type(a) for a in plan.actions] == [DeleteWorkerJob]
    old = FailureMark("team-b/other", "uid-b", at(5), pools=1)
    _, plan = failing_twice_on(j, (old,), second_at=200)  # 195 s later: out of the window
    assert [type(a) for a in plan.actions] == [DeleteWorkerJob]


def test_failures_older_than_the_window_drop_out_of_status_pools() -> None:
    j = job(recovery={"quarantineWindowSeconds": 60})
    st, _ = failing_twice_on(j, second_at=200)
    assert [f.at for f in st.pools[1].failures] == [at(201)]


def test_replacement_pods_with_no_pool_to_go_to_say_so() -> None:
    j = job()
    st1, _, _ = step(j, running(j), world(with_failed_host(1, 2, at(10)), spares=0), at(11))
    pods = healthy_pods()
    pods[HOSTS:2 * HOSTS] = [WorkerPod(1, h).recreated(at(12), 1).pending().on_node(None).build()
                             for h in range(HOSTS)]
    nodes = {n: replace(v, quarantined=Reason.NODE_NOT_READY) if v.pool == "tpu-1" else v
             for n, v in nodes_for().items()}
    st2, _, _ = step(j, st1, world(pods, nodes=nodes, spares=0, jobs_gen={1: 1}), at(13))
    assert st2.slices[1].state == "Restarting" and st2.slices[1].reason == Reason.NO_HEALTHY_POOL
    assert "tpu-1" in (st2.slices[1].message or "")


def test_spares_condition_counts_healthy_free_pools() -> None:
    j = job(tpu={"spares": 2})
    st = running(j)
    assert st.spare_pools == 1
    cond = next(c for c in st.conditions if c.type == C.SPARES_AVAILABLE)
    assert (cond.status, cond.reason) == ("False", Reason.FEWER_SPARES)
    assert "1 healthy spare node pool (tpu-3)" in cond.message
    nodes = nodes_for(spares=2)
    busy = world(nodes=nodes)
    busy = replace(busy, pools=pools_of(nodes, busy=("tpu-4",)))
    assert running(j, busy).spare_pools == 1


# --- releasing a quarantine ---------------------------------------------------------------------


def q(name: str, *, ready: bool = True, since: datetime, reason: str = Reason.NODE_NOT_READY,
      at_: datetime | None = None) -> ObservedNode:
    return tpu_node(name, "tpu-1", ready=ready, since=since, quarantined=reason,
                    quarantined_at=at_ or at(0))


def test_a_quarantined_pool_is_released_only_after_all_its_nodes_were_ready_long_enough() -> None:
    nodes = [q(f"tpu-1-{h}", since=at(0)) for h in range(3)] + [q("tpu-1-3", since=at(500))]
    assert pools_to_release(nodes, at(1000), 600, 3600) == []
    (release,) = pools_to_release(nodes, at(1101), 600, 3600)
    assert release.pool == "tpu-1" and len(release.nodes) == 4
    flapping = [*nodes[:3], q("tpu-1-3", ready=False, since=at(1090))]
    assert pools_to_release(flapping, at(5000), 600, 3600) == []


def test_a_repeated_failures_quarantine_lasts_its_minimum() -> None:
    nodes = [q(f"tpu-1-{h}", since=at(0), reason=Reason.REPEATED_FAILURES, at_=at(100))
             for h in range(4)]
    assert pools_to_release(nodes, at(1000), 600, 3600) == []
    assert [r.pool for r in pools_to_release(nodes, at(3701), 600, 3600)] == ["tpu-1"]


def test_a_pool_with_a_maintenance_signal_stays_quarantined() -> None:
    nodes = [q(f"tpu-1-{h}", since=at(0), reason=Reason.MAINTENANCE) for h in range(4)]
    nodes[0] = replace(nodes[0], maintenance_ongoing=True)
    assert pools_to_release(nodes, at(10_000), 600, 3600) == []


def test_unknown_times_are_never_taken_as_long_ago() -> None:
    nodes = [replace(q(f"tpu-1-{h}", since=at(0)), ready_transition_time=None) for h in range(4)]
    assert pools_to_release(nodes, at(10_000), 600, 3600) == []


@pytest.mark.parametrize("gap", [timedelta(seconds=0), timedelta(seconds=59)])
def test_a_second_failure_within_the_flap_keeps_one_record(gap: timedelta) -> None:
    """A slice already Down is not counted again, however often it is looked at."""
    j = job()
    pods = with_failed_host(2, 0, at(10))
    st, _, _ = step(j, running(j), world(pods), at(11))
    st, reasons, _ = step(j, st, world(pods), at(11) + gap)
    assert st.slices[2].restarts == 1 and Reason.SLICE_REPLACING not in reasons


def test_two_dead_slices_and_one_spare_quarantine_one_pool() -> None:
    """The other slice waits on its own pool for its host (nowhere else to go), instead
    of racing for the one spare and waiting for a release."""
    j = job()
    nodes = nodes_for(spares=1)
    for name in ("tpu-0-1", "tpu-2-3"):
        nodes[name] = tpu_node(name, ready=False, status="Unknown", since=at(10))
    _, _, plan = step(j, running(j), world(nodes=nodes), at(10.5))
    assert [type(a) for a in plan.actions].count(QuarantinePool) == 1
    assert [type(a) for a in plan.actions].count(DeleteWorkerJob) == 2


def test_a_pod_failing_on_the_failed_job_before_the_operator_deleted_it_is_a_new_failure(
) -> None:
    """Issue #33 (the chaos run of seed 891255318, fault 8). A slice failed and its
    replacement was recorded, but the Job was not deleted yet (the DELETE throttled, then
    dropped with the leader that was to send it); the Job controller replaced the failed
    pod and the slice was Ready again on the same Job, the record still open. Then another
    pod of that Job, which nobody was deleting, failed: a second failure, not the first's
    teardown (the Job is live). Counted, and the restarted operator replaces the slice."""
    j = job()
    st1, _, plan = step(j, running(j), world(with_failed_host(1, 2, at(10))), at(11))
    assert st1.slices[1].restarts == 1 and isinstance(plan.actions[-1], DeleteWorkerJob)
    pods = healthy_pods()
    pods[HOSTS + 2] = WorkerPod(1, 2).replacement(at(21)).build()
    st2, _, _ = step(j, st1, world(pods), at(23))
    assert st2.slices[1].state == "Ready" and st2.slices[1].restarts == 1
    pods[HOSTS + 0] = WorkerPod(1, 0).failed(at(40)).build()
    st3, reasons, plan = step(j, st2, world(pods), at(41))
    assert st3.slices[1].state == "Down"
    assert st3.slices[1].restarts == 2 and st3.counters.slice_failures == 2
    assert Reason.SLICE_DOWN in reasons and Reason.SLICE_REPLACING in reasons
    assert [type(a) for a in plan.actions] == [DeleteWorkerJob]


def test_a_failure_replaced_between_two_looks_is_counted_from_the_jobs_own_count() -> None:
    """The recreated slice's pods coming up (Restarting); one fails and the Job controller
    replaces it before any look (the operator was restarting): the pods show nothing, the
    Job's own count (status.failed) does. Counted once (HostLost), and not again."""
    j = job()
    st1, _, _ = step(j, running(j), world(with_failed_host(1, 2, at(10))), at(11))
    pods = healthy_pods()
    pods[HOSTS:2 * HOSTS] = [WorkerPod(1, h).recreated(at(14), 1).not_ready().build()
                             for h in range(HOSTS)]
    st2, _, _ = step(j, st1, world(pods, jobs_gen={1: 1}), at(15))
    assert st2.slices[1].state == "Restarting" and st2.slices[1].restarts == 1
    # The record moves to the new Job once the slice is back, not before: a failed pod
    # of it until then is a new failure.
    assert st2.slices[1].counted is not None
    assert st2.slices[1].counted.job_uid == worker_job_uid(1, 0)
    pods[HOSTS:2 * HOSTS] = [WorkerPod(1, h).recreated(at(14), 1).build() for h in range(HOSTS)]
    pods[HOSTS] = WorkerPod(1, 0).recreated(at(40), 1).build()  # its replacement, Ready
    counted = world(pods, jobs_gen={1: 1})
    counted = replace(counted, jobs={**counted.jobs,
                                     1: replace(counted.jobs[1], failed_pods=1)})
    st3, reasons, plan = step(j, st2, counted, at(41))
    s = st3.slices[1]
    assert s.state == "Down" and s.reason == Reason.HOST_LOST and s.restarts == 2
    assert "counts 1 failed pod" in (s.message or "")
    assert Reason.SLICE_DOWN in reasons and isinstance(plan.actions[-1], DeleteWorkerJob)
    st4, reasons, _ = step(j, st3, counted, at(42))
    assert st4.slices[1].restarts == 2 and Reason.SLICE_DOWN not in reasons


def test_a_status_from_before_the_count_takes_the_jobs_count_as_its_start() -> None:
    """A status an older operator wrote has no slices[].counted: the Job's failed pods so
    far are the failures it counted (or did not: nothing to go on), none is new."""
    j = job()
    st0 = running(j)
    old = st0.model_copy(update={"slices": [s.model_copy(update={"counted": None})
                                            for s in st0.slices]})
    seen = world()
    seen = replace(seen, jobs={i: replace(jb, failed_pods=3) for i, jb in seen.jobs.items()})
    st1, reasons, _ = step(j, old, seen, at(20))
    assert [s.restarts for s in st1.slices] == [0] * SLICES and Reason.SLICE_DOWN not in reasons
    assert all(s.counted is not None and s.counted.failed_pods == 3 for s in st1.slices)
