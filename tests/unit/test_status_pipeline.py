"""The status pipeline (core/status.py): its stages read one context and return typed
results, and the helpers that more than one stage needs exist once, so that slice health,
the replacement records and the plan cannot disagree about which pod represents a host,
which pods are workers, or whether the job has finished."""
from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from elastic_api.conditions import ConditionType as C
from elastic_api.conditions import Reason
from elastic_api.models import Condition, ElasticTrainingJobStatus
from elastic_operator.core.failure import is_terminal
from elastic_operator.core.plan import plan_reconcile
from elastic_operator.core.replacement import plan_replacements
from elastic_operator.core.sliceview import newest_per_host, worker_pods_by_slice
from elastic_operator.core.status import (
    StatusInputs,
    compute_status,
    decide_gates,
    track_slices,
)
from elastic_operator.model.objects import Observed
from tests.builders import (
    HOSTS,
    SLICES,
    T0,
    WorkerPod,
    at,
    etj,
    head_pod,
    healthy_pods,
    nodes_for,
    observe,
    observed_jobset,
    pools_of,
    worker_job,
)


def world(pods: list[object], jobs_gen: dict[int, int] | None = None) -> Observed:
    nodes = nodes_for(spares=1)
    gens = jobs_gen or {}
    return observe(pods, nodes=nodes, pools=pools_of(nodes),  # type: ignore[arg-type]
                   jobs={i: worker_job(i, gens.get(i, 0)) for i in range(SLICES)})


def test_at_equal_creation_times_the_live_pod_represents_the_host_whatever_its_name() -> None:
    dead = WorkerPod(0, 1).failed(at(5)).named("w-0-1-zzz").build()
    live = WorkerPod(0, 1).replacement(T0, gen=1).named("w-0-1-aaa").build()
    older = WorkerPod(0, 0).replacement(T0 - timedelta(seconds=1), gen=1).build()
    newer = WorkerPod(0, 0).failed(at(5)).build()  # created later: newest, dead or not
    assert newest_per_host([dead, newer, live, older]) == [newer, live]  # by host index
    assert newest_per_host([live, dead]) == newest_per_host([dead, live]) == [live]


def test_a_slice_back_on_a_new_job_in_the_same_second_is_replaced_for_both_stages() -> None:
    """The old Job's failed pods and the new Job's Ready ones were created in the same
    second (creationTimestamp has one-second resolution) and the old ones sort last by
    name. Slice health and the replacement record must pick the same pod per host: the
    live one. (They used to break the tie differently: health saw the slice Ready on the
    new Job, the record saw the old Job's pods, and closed without lastReplacement or a
    SliceReplaced Event.)"""
    j = etj().uid("uid-1").generation(1).build()
    running, _ = compute_status(j, world(healthy_pods()), None, at(1))
    failed = healthy_pods()
    failed[HOSTS + 2] = WorkerPod(1, 2).failed(at(10)).build()
    down, _ = compute_status(j, world(failed), running, at(11))
    record = down.slices[1].replacement
    assert record is not None and record.action == "Replace"

    pods = healthy_pods()
    pods[HOSTS:2 * HOSTS] = [
        WorkerPod(1, h).recreated(T0, gen=1).named(f"article-worker-1-{h}-a").build()
        for h in range(HOSTS)]
    pods += [WorkerPod(1, h).failed(at(10)).named(f"article-worker-1-{h}-z").build()
             for h in range(HOSTS)]
    back, events = compute_status(j, world(pods, jobs_gen={1: 1}), down, at(16))
    s = back.slices[1]
    assert s.state == "Ready" and s.replacement is None
    assert s.last_replacement is not None and s.last_replacement.action == "Replace"
    assert Reason.SLICE_REPLACED in [e.reason for e in events]


def test_one_filter_says_which_pods_are_workers() -> None:
    """The head pod carries job-index 0 too; no stage may count it as slice 0's host."""
    pods = [*healthy_pods(), head_pod(failed=True)]
    by_slice = worker_pods_by_slice(observe(pods))
    assert sorted(by_slice) == list(range(SLICES))
    assert all(len(p) == HOSTS for p in by_slice.values())
    st, _ = compute_status(etj().uid("uid-1").build(), observe(pods), None, at(1))
    assert st.slices[0].state == "Ready" and st.slices[0].ready_hosts == HOSTS


def test_the_worker_pods_are_grouped_once_per_observation() -> None:
    """Every stage reads one grouping of the pods by slice: at 4,096 pods a pass over
    them per stage cost a quarter of a reconcile's pure time. A new observation (or one
    with other worker Jobs, `replace`) groups its own pods."""
    observed = observe([*healthy_pods(), head_pod()])
    assert worker_pods_by_slice(observed) is worker_pods_by_slice(observed)
    other = replace(observed, pods=tuple(healthy_pods(num_slices=1)))
    assert sorted(worker_pods_by_slice(other)) == [0]
    assert sorted(worker_pods_by_slice(observed)) == list(range(SLICES))


def test_a_status_with_two_failed_conditions_is_finished_for_every_reader() -> None:
    """A hand edit (or an older operator) left Failed twice, the first False. The plan
    and the replacement asked "any True"; the status computation asked "the first": the
    job was finished for one and not the other, and the next status dropped the
    failure. Now one rule: any True Failed or Succeeded counts (both are sticky)."""
    j = etj().uid("uid-1").generation(1).build()
    running, _ = compute_status(j, world(healthy_pods()), None, at(1))
    conditions = [c for c in running.conditions if c.type != C.FAILED] + [
        Condition(type=C.FAILED, status="False", reason=Reason.NOT_FAILED,
                  last_transition_time=T0),
        Condition(type=C.FAILED, status="True", reason=Reason.HEAD_FAILED,
                  message="the head failed", last_transition_time=T0)]
    previous = running.model_copy(update={"conditions": conditions})
    assert is_terminal(previous)
    assert plan_reconcile(j, [], observed_jobset(j).build(), previous).why_not is not None
    new, events = compute_status(j, world(healthy_pods()), previous, at(2))
    failed = [c for c in new.conditions if c.type == C.FAILED]
    assert [(c.status, c.reason) for c in failed] == [("True", Reason.HEAD_FAILED)]
    assert is_terminal(new) and new.phase == "Failed"
    assert events == []  # the failure was reported when it happened
    assert plan_replacements("ns", "article", j.spec, new, world(healthy_pods()),
                             at(2)).actions == ()


def test_stages_read_one_context_and_a_finished_job_freezes_slice_tracking() -> None:
    j = etj().uid("uid-1").generation(1).build()
    running, _ = compute_status(j, world(healthy_pods()), None, at(1))
    done = running.model_copy(update={"conditions": [
        *running.conditions,
        Condition(type=C.SUCCEEDED, status="True", reason=Reason.JOBSET_COMPLETED,
                  last_transition_time=T0)]})
    failed = healthy_pods()
    failed[0] = WorkerPod(0, 0).failed(at(5)).build()
    ctx = StatusInputs.of(j, world(failed), done, at(6))
    gates = decide_gates(ctx)
    assert gates.terminal and gates.events == []
    tracking = track_slices(ctx, gates)
    assert tracking.slices == done.slices and tracking.changes == [] and tracking.events == []
    assert StatusInputs.of(j, world(failed), None, at(6)).previous == \
        ElasticTrainingJobStatus()
