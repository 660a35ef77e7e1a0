"""A crash of main restarts it in its pod (core/trainer_restarts.py, render's restart
rule): rendered only with a budget to spend, spent by main's restarts in place and the
JobSet's own together, each once (core/budget_tracking.py), then the head Job ended and the job
Failed for it."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from elastic_api.conditions import Reason
from elastic_api.models import ElasticTrainingJob, ElasticTrainingJobStatus
from elastic_api.names import (
    HEAD_REPLICATED_JOB,
    JOBSET_BUDGET_RULE,
    MAIN_CONTAINER,
    TRAINER_FINAL_EXIT_CODES,
)
from elastic_operator.core.budget_tracking import plan_end_head
from elastic_operator.core.failure import jobset_failure
from elastic_operator.core.plan import EndHeadJob, RestartTrainer
from elastic_operator.core.progressing import plan_trainer_restart
from elastic_operator.core.status import compute_status
from elastic_operator.core.trainer_restarts import (
    EXIT_GRACE_SECONDS,
    asks_in_place,
    exit_due_in,
    exit_overdue,
    in_place_restarts,
)
from elastic_operator.model.objects import ObservedContainer, ObservedJobSet, ObservedPod
from elastic_operator.render import render_jobset
from elastic_trainer.checkpoint_requests import asked_to_exit, request_view
from tests.builders import at, etj, head_pod, healthy_pods, observe, observed_jobset
from tests.support.progress_run import HEAD, STARTED, pods, progressing, started_run


def job(max_restarts: int, **spec: Any) -> ElasticTrainingJob:
    return etj().uid("uid-1").generation(1).max_restarts(max_restarts).spec(**spec).build()


def head(restarts: int, *, phase: str = "Running") -> ObservedPod:
    main = ObservedContainer(state="running", started_at=at(restarts), restart_count=restarts)
    return replace(head_pod(main=main, created=at(0)), phase=phase, job_uid="head-uid")


def jobset(restarts: int = 0, terminal: str | None = None) -> ObservedJobSet:
    return ObservedJobSet(name="article", suspended=False, restarts=restarts,
                          terminal_state=terminal)


def main_of(rendered: dict[str, Any]) -> dict[str, Any]:
    head_rj = next(r for r in rendered["spec"]["replicatedJobs"]
                   if r["name"] == HEAD_REPLICATED_JOB)
    containers = head_rj["template"]["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == MAIN_CONTAINER)


def test_main_restarts_in_place_on_a_crash_not_on_a_code_that_ends_the_run() -> None:
    rendered = render_jobset(job(2))
    main = main_of(rendered)
    assert main["restartPolicy"] == "Never"
    assert main["restartPolicyRules"] == [{"action": "Restart", "exitCodes": {
        "operator": "NotIn", "values": list(TRAINER_FINAL_EXIT_CODES)}}]
    assert rendered["spec"]["failurePolicy"]["rules"] == [{
        "name": JOBSET_BUDGET_RULE, "action": "FailJobSet",
        "onJobFailureReasons": ["DeadlineExceeded"],
        "targetReplicatedJobs": [HEAD_REPLICATED_JOB]}]


def test_a_program_of_its_own_restarts_on_any_failure() -> None:
    custom = job(2, trainer={"image": "maxtext:1", "command": ["python3", "-m", "train"]})
    assert main_of(render_jobset(custom))["restartPolicyRules"][0]["exitCodes"]["values"] == [0]


@pytest.mark.parametrize("spec", [job(0), job(3, recovery={"restartInPlace": False})],
                         ids=["no-budget", "in-place-off"])
def test_without_a_budget_or_with_in_place_off_a_crash_fails_the_pod_as_before(
        spec: ElasticTrainingJob) -> None:
    rendered = render_jobset(spec)
    assert "restartPolicyRules" not in main_of(rendered)
    assert "rules" not in rendered["spec"]["failurePolicy"]


def looks(spec_job: ElasticTrainingJob, seen: list[tuple[float, int, ObservedPod]],
          ) -> tuple[ElasticTrainingJobStatus, list[str]]:
    """The job looked at once per (seconds, the JobSet's restarts, its head pod), the
    status stored and read back between looks (a restarted operator each time); the
    status and the Events of the last look."""
    status: ElasticTrainingJobStatus | None = None
    reasons: list[str] = []
    for t, restarts, pod in seen:
        observed = observe([*healthy_pods(), pod],
                           observed_jobset(spec_job).restarts(restarts).build())
        new, events = compute_status(spec_job, observed, status, at(t))
        status = ElasticTrainingJobStatus.model_validate(
            new.model_dump(by_alias=True, mode="json", exclude_none=True))
        reasons = [e.reason for e in events]
    assert status is not None
    return status, reasons


def crashed(restarts: int, uid: str = "head-pod-1") -> ObservedPod:
    """The running head pod whose main restarted in place `restarts` times."""
    return replace(head(restarts), uid=uid, main_restarts_in_place=True)


def test_the_budget_counts_restarts_in_place_and_the_jobsets_together_once_each() -> None:
    spec_job = job(3)  # 3 over the whole run
    status, reasons = looks(spec_job, [(0, 0, crashed(0)), (10, 0, crashed(2)),
                                       (11, 0, crashed(2)), (20, 1, crashed(0, "head-pod-2"))])
    budget = status.budgets.jobset_restarts if status.budgets else None
    assert budget is not None and (budget.used, budget.spent_at) == (3, None)
    assert reasons == []
    assert plan_end_head("ns", "article", status, [crashed(0, "head-pod-2")]) is None
    status, reasons = looks(spec_job, [(0, 0, crashed(0)), (10, 0, crashed(2)),
                                       (20, 1, crashed(0, "head-pod-2")),
                                       (30, 1, crashed(1, "head-pod-2"))])
    assert reasons == [Reason.MAX_RESTARTS_EXCEEDED]
    counted = status.budgets.main_restarts if status.budgets else None
    assert counted is not None and (counted.pod_uid, counted.restarts, counted.total) == (
        "head-pod-2", 1, 3)
    assert plan_end_head("ns", "article", status, [crashed(1, "head-pod-2")]) == EndHeadJob(
        "ns", "article-pathways-head-0", "head-uid", 4, 3)


def test_a_jobsets_own_restarts_over_the_run_are_jobsets_to_count() -> None:
    status, reasons = looks(job(3), [(0, 0, crashed(0)), (10, 3, crashed(0, "head-pod-2"))])
    assert reasons == [] and status.budgets is not None
    assert status.budgets.jobset_restarts.used == 3
    assert plan_end_head("ns", "article", status, [crashed(0, "head-pod-2")]) is None


def test_a_crash_loop_in_place_spends_a_windowed_budget_and_crashes_hours_apart_do_not() -> None:
    loop = [(60.0 * n, 0, crashed(n)) for n in range(5)]
    status, reasons = looks(job(3, elastic={"restartWindowSeconds": 3600}), loop)
    assert reasons == [Reason.MAX_RESTARTS_EXCEEDED]
    assert plan_end_head("ns", "article", status, [crashed(4)]) is not None
    apart = [(3600.0 * n + 60, 0, crashed(n)) for n in range(8)]
    status, reasons = looks(job(3, elastic={"restartWindowSeconds": 3600}), apart)
    budget = status.budgets.jobset_restarts if status.budgets else None
    assert budget is not None and budget.spent_at is None and budget.used == 1


def test_nothing_is_planned_once_the_head_pod_ended() -> None:
    status, _ = looks(job(1), [(0, 0, crashed(0)), (10, 0, crashed(2))])
    assert in_place_restarts([head(5, phase="Failed")]) == 0
    assert plan_end_head("ns", "article", status, [head(5, phase="Failed")]) is None
    going = replace(crashed(2), deletion_timestamp=at(9))
    assert plan_end_head("ns", "article", status, [going]) is None


def test_the_job_fails_for_its_restarts_in_place_also_once_the_head_pod_is_gone() -> None:
    """JobSet's message names the FailJobSet action on the head Job (the only such rule
    rendered); the head pod went with its Job. Read so even without the budget's status
    (a status written by a release that kept none)."""
    spec = job(2).spec
    said = ("applying FailJobSet failure policy action (first failed job: "
            "article-pathways-head-0)")
    gone = observe([], jobset=replace(jobset(terminal="Failed"), failed_message=said))
    failure = jobset_failure(spec, gone)
    assert failure is not None and failure.reason == Reason.MAX_RESTARTS_EXCEEDED
    assert "the operator ended the head Job" in failure.message
    other = observe([], jobset=replace(jobset(terminal="Failed"), failed_message=said.replace(
        "pathways-head-0", "worker-1")))
    failure = jobset_failure(spec, other)
    assert failure is not None and failure.reason != Reason.MAX_RESTARTS_EXCEEDED


def test_the_job_fails_for_its_restarts_in_place() -> None:
    spec_job = job(2)
    status, _ = looks(spec_job, [(0, 0, crashed(0)), (10, 0, crashed(3))])
    observed = observe([head(3, phase="Failed")], jobset=jobset(terminal="Failed"))
    failure = jobset_failure(spec_job.spec, observed, budgets=status.budgets)
    assert failure is not None and failure.reason == Reason.MAX_RESTARTS_EXCEEDED
    assert "failed after 0 restarts and 3 of main in place" in failure.message
    assert "3 of them over the whole run: the budget spent (allowed: 2" in failure.message


# --- a stall (spec.elastic.onStall Recover), in place ---------------------------------------


def in_place_head(restarts: int = 0) -> ObservedPod:
    main = ObservedContainer(state="running", started_at=at(0), restart_count=restarts)
    return replace(HEAD, main=main, main_restarts_in_place=True)


def test_a_stalled_trainer_is_asked_to_exit_and_its_pod_restarts_main() -> None:
    run, _ = started_run()
    run.look(161, observed=observe(pods(in_place_head())))
    restart = run.status.progress.restart if run.status.progress else None
    assert restart is not None and restart.in_place and restart.main_restarts == 0
    assert restart.process_started_at == STARTED
    assert run.reasons() == [Reason.PROGRESS_DEADLINE_EXCEEDED, Reason.TRAINER_RESTARTING]
    assert "its pod restarts main in place" in (run.events or [])[-1].message
    # Nothing to delete: the trainer exits by itself; woken at the grace's end.
    assert plan_trainer_restart("ns", "article", run.status.progress,
                                pods(in_place_head())) is None
    assert exit_due_in(restart, at(161)) == EXIT_GRACE_SECONDS
    assert "restarting the trainer in its pod" in progressing(run.status)[2]
    # The trainer's own reading of that status asks exactly that process to exit.
    view = request_view(run.status.model_dump(by_alias=True, mode="json", exclude_none=True))
    assert asked_to_exit(view, STARTED.timestamp())
    assert not asked_to_exit(view, STARTED.timestamp() + 60)  # its successor stays


def test_main_restarted_within_the_grace_is_done() -> None:
    run, _ = started_run()
    run.look(161, observed=observe(pods(in_place_head())))
    restart = run.status.progress.restart if run.status.progress else None
    assert restart is not None
    assert not exit_overdue(restart, in_place_head(restarts=1), at(300))
    assert exit_overdue(restart, in_place_head(), at(161 + EXIT_GRACE_SECONDS))


def test_a_trainer_that_does_not_exit_falls_back_to_deleting_its_head_pod_once() -> None:
    run, last = started_run()
    stuck = observe(pods(in_place_head()))
    run.look(161, observed=stuck)
    run.events = []
    run.look(180, observed=stuck)
    assert run.reasons() == []  # within the grace
    run.look(161 + EXIT_GRACE_SECONDS, observed=stuck)
    restart = run.status.progress.restart if run.status.progress else None
    assert restart is not None and not restart.in_place
    assert run.reasons() == [Reason.TRAINER_RESTARTING]
    assert "did not exit within 30 s" in (run.events or [])[0].message
    assert plan_trainer_restart("ns", "article", run.status.progress, pods(in_place_head())) \
        == RestartTrainer("ns", "article-pathways-head-0", "head-job-uid", HEAD.name,
                          "head-uid-1", last)
    run.events = []
    run.look(200, observed=stuck)
    assert run.reasons() == []


def test_a_head_without_the_rule_or_a_program_of_its_own_is_deleted_as_before() -> None:
    run, _ = started_run()
    run.look(161)  # HEAD: main without a restart rule (a JobSet of an earlier release)
    assert run.status.progress is not None and run.status.progress.restart is not None
    assert not run.status.progress.restart.in_place
    custom = job(0, trainer={"image": "maxtext:1", "command": ["python3", "-m", "train"]})
    assert not asks_in_place(custom.spec, in_place_head())


def test_a_stall_restart_in_place_is_charged_to_the_stall_budget_not_as_a_crash() -> None:
    run, _ = started_run()
    run.look(161, observed=observe(pods(in_place_head())))
    run.look(170, observed=observe(pods(in_place_head(restarts=1))))  # the one asked for
    counted = run.status.budgets.main_restarts if run.status.budgets else None
    assert counted is not None and (counted.restarts, counted.total) == (1, 0)
    run.look(180, observed=observe(pods(in_place_head(restarts=2))))  # then a crash
    counted = run.status.budgets.main_restarts if run.status.budgets else None
    assert counted is not None and (counted.restarts, counted.total) == (2, 1)


def test_a_windowed_budget_spent_by_restarts_in_place_is_named_a_crash_loop() -> None:
    spec_job = job(2, elastic={"restartWindowSeconds": 3600})
    status, _ = looks(spec_job, [(0, 0, crashed(0)), (10, 0, crashed(3))])
    observed = observe([head(3, phase="Failed")], jobset=jobset(terminal="Failed"))
    failure = jobset_failure(spec_job.spec, observed, budgets=status.budgets)
    assert failure is not None and failure.reason == Reason.MAX_RESTARTS_EXCEEDED
    assert "3 of them within any 1 h: a crash loop (allowed: 2" in failure.message
