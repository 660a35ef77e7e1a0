"""The restart budgets in the operator's status (core/budget_tracking.py, core/replacement.py;
the rule: elastic_api.budgets): a slice crash loop given up within minutes, the same
failures an hour apart replaced each time, the JobSet's restarts counted per window and
the JobSet ended once they are spent, every count kept across an operator restart."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from elastic_api.conditions import ConditionType as C
from elastic_api.conditions import Reason
from elastic_api.models import ElasticTrainingJob, ElasticTrainingJobStatus
from elastic_operator.core.budget_tracking import plan_end_head
from elastic_operator.core.plan import DeleteWorkerJob, EndHeadJob, LowerBackoffLimit
from elastic_operator.core.replacement import plan_replacements
from elastic_operator.core.setter import get_condition
from elastic_operator.core.status import compute_status
from elastic_operator.model.objects import Observed
from tests.builders import (
    HOSTS,
    WorkerPod,
    etj,
    head_pod,
    healthy_pods,
    observe,
    observed_jobset,
    worker_job,
)
from tests.builders import at as s

HOUR = 3600.0


def job_with(**spec: Any) -> ElasticTrainingJob:
    return etj().uid("uid-1").generation(1).spec(**spec).build()


def stored(status: ElasticTrainingJobStatus) -> ElasticTrainingJobStatus:
    """The status as a new operator reads it back (what a restarted operator knows)."""
    return ElasticTrainingJobStatus.model_validate(
        status.model_dump(by_alias=True, mode="json", exclude_none=True))


def world(pods: list[Any], gen: int) -> Observed:
    return observe(pods, jobs={i: worker_job(i, gen if i == 1 else 0) for i in range(3)})


def slice_1_fails(job: ElasticTrainingJob, times: list[float]) -> list[tuple[
        ElasticTrainingJobStatus, list[str], list[type]]]:
    """Slice 1's worker exits 1 at each of `times` (seconds), each time on the Job the
    operator recreated after the failure before, Ready again 3 s before it fails; the
    status is stored and read back between looks (an operator restart each time)."""
    status: ElasticTrainingJobStatus | None = None
    out = []
    for n, t in enumerate(times):
        pods = healthy_pods()
        if n:
            pods[HOSTS:2 * HOSTS] = [WorkerPod(1, h).recreated(s(t - 5), n).build()
                                     for h in range(HOSTS)]
        status = stored(compute_status(job, world(pods, n), status, s(t - 3))[0])
        assert status.slices[1].state == "Ready", n
        pods[HOSTS] = replace(pods[HOSTS], phase="Failed", ready=False,
                              terminated_at=s(t), terminated_exit_code=1,
                              terminated_reason="Error")
        new, events = compute_status(job, world(pods, n), status, s(t + 1))
        plan = plan_replacements("ns", "article", job.spec, new, world(pods, n), s(t + 1))
        status = stored(new)
        out.append((status, [e.reason for e in events], [type(a) for a in plan.actions]))
    return out


def test_a_slice_crash_loop_is_given_up_at_the_fourth_failure_within_the_hour() -> None:
    looks = slice_1_fails(job_with(), [100 + 20 * n for n in range(4)])
    for _, reasons, actions in looks[:3]:
        assert Reason.SLICE_REPLACING in reasons and actions == [DeleteWorkerJob]
    status, reasons, actions = looks[3]
    assert Reason.SLICE_RESTARTS_EXHAUSTED in reasons and actions == [LowerBackoffLimit]
    assert status.slices[1].replacement is not None
    assert status.slices[1].replacement.action == "GiveUp"
    budget = status.budgets.slice_restarts if status.budgets else None
    assert budget is not None and (budget.allowed, budget.window_seconds) == (3, 3600)
    assert (budget.used, budget.slice, budget.spent_at) == (4, 1, s(161))
    assert status.slices[1].recent_failures == [s(101), s(121), s(141), s(161)]


def test_the_same_failures_an_hour_apart_are_replaced_every_time() -> None:
    looks = slice_1_fails(job_with(), [100 + 1.01 * HOUR * n for n in range(6)])
    for status, reasons, actions in looks:
        assert Reason.SLICE_REPLACING in reasons and actions == [DeleteWorkerJob]
        assert status.budgets is not None and status.budgets.slice_restarts.used == 1
    assert looks[-1][0].slices[1].restarts == 6  # the run's count still grows


def test_a_count_the_spec_sets_holds_over_the_whole_run() -> None:
    looks = slice_1_fails(job_with(elastic={"maxSliceRestarts": 2}),
                          [100 + 2 * HOUR * n for n in range(3)])
    assert [actions for _, _, actions in looks] == [
        [DeleteWorkerJob], [DeleteWorkerJob], [LowerBackoffLimit]]
    budget = looks[-1][0].budgets.slice_restarts if looks[-1][0].budgets else None
    assert budget is not None and budget.window_seconds is None and budget.used == 3
    assert looks[-1][0].slices[1].recent_failures == []


def _jobset_restarts(job: ElasticTrainingJob, times: list[float]) -> tuple[
        ElasticTrainingJobStatus, list[str]]:
    """The JobSet restarts once at each of `times`; the status (stored and read back at
    each look) and the Events of the last look."""
    status: ElasticTrainingJobStatus | None = None
    reasons: list[str] = []
    for n, t in enumerate([0.0, *times]):
        jobset = observed_jobset(job).restarts(n).build()
        new, events = compute_status(job, observe(healthy_pods(), jobset), status, s(t + 1))
        status, reasons = stored(new), [e.reason for e in events]
    assert status is not None
    return status, reasons


def test_a_jobset_crash_loop_is_ended_and_the_job_fails_saying_so() -> None:
    job = job_with()
    status, reasons = _jobset_restarts(job, [60.0, 120.0, 180.0])
    assert reasons == []
    budget = status.budgets.jobset_restarts if status.budgets else None
    assert budget is not None and (budget.allowed, budget.used, budget.spent_at) == (3, 3, None)
    assert plan_end_head("ns", "article", status,
                           [replace(head_pod(), job_uid="head-job-uid")]) is None
    status, reasons = _jobset_restarts(job, [60.0, 120.0, 180.0, 240.0])
    assert reasons == [Reason.MAX_RESTARTS_EXCEEDED]
    budget = status.budgets.jobset_restarts if status.budgets else None
    assert budget is not None and budget.spent_at == s(241)
    head = replace(head_pod(), job_uid="head-job-uid")
    end = plan_end_head("ns", "article", status, [head])
    assert end == EndHeadJob("ns", "article-pathways-head-0", "head-job-uid", 4, 0)
    # The JobSet's failure rule ends it: the job fails, and says why.
    failed = observed_jobset(job).restarts(4).terminal(
        "Failed", "failed by rule RestartBudgetSpent").build()
    final, _ = compute_status(job, observe([], failed), status, s(250))
    condition = get_condition(final, C.FAILED)
    assert condition is not None and condition.reason == Reason.MAX_RESTARTS_EXCEEDED
    assert "4 of them within any 1 h: a crash loop" in condition.message


def test_jobset_restarts_hours_apart_spend_nothing() -> None:
    status, reasons = _jobset_restarts(job_with(), [HOUR * n + 60 for n in range(1, 9)])
    assert reasons == []
    budget = status.budgets.jobset_restarts if status.budgets else None
    assert budget is not None and budget.used == 1 and budget.spent_at is None
    assert status.counters.jobset_restarts == 8


def test_a_jobset_count_over_the_run_is_jobsets_own() -> None:
    status, _ = _jobset_restarts(job_with(maxRestarts=2), [60.0, 61.0, 62.0])
    budget = status.budgets.jobset_restarts if status.budgets else None
    assert budget is not None and (budget.window_seconds, budget.used, budget.spent_at) == (
        None, 3, None)
    assert plan_end_head("ns", "article", status, [head_pod()]) is None


def test_slices_that_go_with_a_jobset_restart_charge_no_slice_budget() -> None:
    """Slice 1 failed three times within the hour (its budget's count); then the trainer
    crashes and JobSet restarts: every pod of the earlier attempt is deleted. That is
    the JobSet's restart, counted by its own budget: slice 1 is not given up."""
    job = job_with()
    status = slice_1_fails(job, [100, 120, 140])[-1][0]
    pods = healthy_pods()
    pods[HOSTS:2 * HOSTS] = [WorkerPod(1, h).recreated(s(145), 3).build() for h in range(HOSTS)]
    ready = compute_status(job, world(pods, 3), status, s(150))[0]
    going = [p if p.slice_index == 2 else replace(p, restart_attempt=0,
                                                   deletion_timestamp=s(160)) for p in pods]
    restarted = observed_jobset(job).restarts(1).build()
    new, events = compute_status(job, observe(going, restarted,
                                              jobs={i: worker_job(i, 3 if i == 1 else 0)
                                                    for i in range(3)}), stored(ready), s(161))
    assert Reason.SLICE_RESTARTS_EXHAUSTED not in [e.reason for e in events]
    assert new.slices[1].state == "Down" and new.slices[1].replacement is not None
    assert new.slices[1].replacement.action == "Replace"
    assert new.slices[1].recent_failures == [s(101), s(121), s(141)]
    assert new.budgets is not None and new.budgets.jobset_restarts.used == 1
    assert new.budgets.jobset_restarts.last_at == s(161)
    # Slice 2's pods, still up at that look, all gone by its next: the same restart.
    assert new.slices[2].state == "Ready"
    gone = [p for p in going if p.slice_index != 2]
    later, events = compute_status(job, observe(gone, restarted,
                                                jobs={i: worker_job(i) for i in range(3)}),
                                   stored(new), s(170))
    assert later.slices[2].state == "Down" and later.slices[2].recent_failures == []
    assert any("with the JobSet's restart" in e.message for e in events
               if e.reason == Reason.SLICE_REPLACING)


def test_a_slice_back_after_a_jobset_restart_carries_no_replacement_left_over() -> None:
    """Every pod of slice 2 was gone when the operator looked (the JobSet's restart
    deleted them): its record names no Job, and the operator deletes none. The JobSet's
    new pods come up Ready: the record ends there. Before, it stayed for the rest of the
    run (the goodput check's hour, 2026-12-07: three slices carried one for 20 minutes),
    and a slice with a record is never moved: a maintenance notice 25 minutes after a
    crash released the trainer without moving the slice, and the maintenance took it."""
    job = job_with()
    pods = healthy_pods()
    ready = compute_status(job, world(pods, 0), None, s(150))[0]
    restarted = observed_jobset(job).restarts(1).build()
    gone = [p for p in pods if p.slice_index != 2]
    down, _ = compute_status(job, observe(gone, restarted,
                                          jobs={i: worker_job(i) for i in range(3)}),
                             stored(ready), s(170))
    record = down.slices[2].replacement
    assert down.slices[2].state == "Down" and record is not None and record.job_uid is None
    new_pods = [WorkerPod(i, h).recreated(s(175), 1).build() if i == 2 else p
                for i in range(3) for h, p in enumerate(pods[i * HOSTS:(i + 1) * HOSTS])]
    back, _ = compute_status(job, observe(new_pods, restarted,
                                          jobs={i: worker_job(i, 1 if i == 2 else 0)
                                                for i in range(3)}), stored(down), s(180))
    assert back.slices[2].state == "Ready"
    assert back.slices[2].replacement is None
    last = back.slices[2].last_replacement
    assert last is not None and last.ready_at == s(180)
