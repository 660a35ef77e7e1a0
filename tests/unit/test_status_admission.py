"""A job that Kueue admits (core/admission.py, core/plan.py, core/status.py): the Admitted
condition and its reasons, status.admission, preemptions counted once and never as slice
failures, spec.suspend through the Workload's spec.active, and holds that are not the
operator's left alone. Workloads are shaped as the real Kueue v0.17 writes them
(tests/kueue_builders.py)."""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

import pytest

from elastic_api.conditions import ConditionType as C
from elastic_api.conditions import Phase, Reason
from elastic_api.models import (
    AdmissionStatus,
    ElasticTrainingJob,
    ElasticTrainingJobStatus,
    TrainingReport,
)
from elastic_api.names import SUSPENDED_BY_OPERATOR_ANNOTATION
from elastic_api.queueing import (
    ADMITTED,
    REASON_ADMITTED,
    REASON_EVICTED,
    REASON_NO_WORKLOAD,
    REASON_PREEMPTED,
    REASON_SUSPENDED_BY_USER,
    REASON_WAITING_FOR_ADMISSION,
)
from elastic_operator.core.admission import wants_workload
from elastic_operator.core.plan import (
    CreateObject,
    PatchJobSetSuspend,
    SetWorkloadActive,
    plan_reconcile,
)
from elastic_operator.core.setter import get_condition
from elastic_operator.core.status import compute_status
from elastic_operator.core.status_events import StatusEvent
from elastic_operator.model.objects import (
    Observed,
    ObservedJobSet,
    ObservedWorkload,
    workload_from_dict,
)
from elastic_operator.render import render
from tests.builders import (
    HOSTS,
    T0,
    WorkerPod,
    article_job,
    at,
    healthy_pods,
    iso,
    observe,
    observed_jobset,
)
from tests.kueue_builders import INSUFFICIENT, queued_job, workload

Status = ElasticTrainingJobStatus


def jobset_of(job: ElasticTrainingJob, *, suspended: bool = False,
              by_operator: bool = False) -> ObservedJobSet:
    return replace(observed_jobset(job).suspended(suspended).build(), uid="article-js-uid",
                   suspended_by_operator=by_operator)


def step(job: ElasticTrainingJob, prev: Status | None, now: datetime, *,
         pods: list[Any] | None = None, jobset: ObservedJobSet | None = None,
         wl: ObservedWorkload | None = None) -> tuple[Status, list[StatusEvent]]:
    jobset = jobset if jobset is not None else jobset_of(job)
    # Pods of a queued job are made once Kueue admits it (at(30) in these tests).
    pods = pods if pods is not None else healthy_pods(created=at(30))
    return compute_status(job, observe(pods, jobset, workload=wl), prev, now)


def admitted_cond(status: Status) -> tuple[str, str, str]:
    c = get_condition(status, ADMITTED)
    assert c is not None, "no Admitted condition"
    return c.status, c.reason, c.message


def ready(status: Status) -> tuple[str, str]:
    c = get_condition(status, C.READY)
    assert c is not None
    return c.status, c.reason


def reasons(events: list[StatusEvent]) -> list[tuple[str, str]]:
    return [(e.type, e.reason) for e in events]


def waiting() -> Status:
    """A queued job whose JobSet Kueue holds, Workload short of quota since at(1)."""
    job = queued_job()
    held = jobset_of(job, suspended=True)
    status, _ = step(job, None, at(1), pods=[], jobset=held,
                     wl=workload().pending(at(1)).build())
    return status


def running() -> Status:
    """Admitted at at(30) after waiting; every slice Ready."""
    status, _ = step(queued_job(), waiting(), at(31), wl=workload().admitted(at(30)).build())
    return status


# --- not queued ------------------------------------------------------------------------


def test_a_job_without_a_queue_has_no_admission() -> None:
    status, events = step(article_job(), None, T0)
    assert get_condition(status, ADMITTED) is None and status.admission is None
    assert status.phase == Phase.RUNNING and not [e for e in events if e.reason == ADMITTED]


# --- waiting ---------------------------------------------------------------------------


def test_a_jobset_kueue_holds_before_its_workload_exists_is_waiting() -> None:
    job = queued_job()
    status, events = step(job, None, at(1), pods=[], jobset=jobset_of(job, suspended=True))
    state, reason, message = admitted_cond(status)
    assert (state, reason) == ("False", REASON_WAITING_FOR_ADMISSION)
    assert "waiting for Kueue to make a Workload for JobSet article (queue lq)" in message
    assert "kubectl describe jobset article" in message  # where Kueue says why it cannot
    assert status.phase == Phase.QUEUED and ready(status) == ("False",
                                                              REASON_WAITING_FOR_ADMISSION)
    assert {(s.state, s.reason) for s in status.slices} == {("Pending",
                                                             REASON_WAITING_FOR_ADMISSION)}
    assert reasons(events) == [("Normal", REASON_WAITING_FOR_ADMISSION)]
    assert status.admission == AdmissionStatus(queue_name="lq")


def test_a_workload_short_of_quota_says_so_in_kueues_words() -> None:
    status = waiting()
    state, reason, message = admitted_cond(status)
    assert (state, reason) == ("False", REASON_WAITING_FOR_ADMISSION)
    assert message == (f"waiting in queue lq (Workload {workload().name}): Kueue: "
                       f"{INSUFFICIENT}")
    assert status.admission is not None and status.admission.workload == workload().name
    again, events = step(queued_job(), status, at(5), pods=[],
                         jobset=jobset_of(queued_job(), suspended=True),
                         wl=workload().pending(at(1)).build())
    assert events == []  # posted when it began waiting, not at each look
    assert get_condition(again, ADMITTED) == get_condition(status, ADMITTED)


# --- admitted --------------------------------------------------------------------------


def test_admission_is_dated_by_kueue_and_the_job_then_runs_as_any_other() -> None:
    job = queued_job()
    status, events = step(job, waiting(), at(31), wl=workload().admitted(at(30)).build())
    admitted = get_condition(status, ADMITTED)
    assert admitted is not None and (admitted.status, admitted.reason) == ("True",
                                                                           REASON_ADMITTED)
    assert admitted.last_transition_time == at(30)  # Kueue's time, not the operator's
    assert "admitted by ClusterQueue cq (queue lq)" in admitted.message
    assert status.admission == AdmissionStatus(
        workload=workload().name, queue_name="lq", cluster_queue="cq", admitted_at=at(30))
    assert status.phase == Phase.RUNNING and ready(status) == ("True", Reason.ALL_SLICES_READY)
    (event,) = [e for e in events if e.reason == REASON_ADMITTED]
    assert event.type == "Normal" and event.message.endswith(
        f"at {iso(at(30))} after 29 s out of quota")


# --- preempted -------------------------------------------------------------------------


def preempted_pods(now: datetime) -> list[Any]:
    """Kueue suspended the JobSet: the Job controller deletes every pod."""
    return [WorkerPod(i, h).created(at(30)).deleting(now, 0).build() for i in range(3)
            for h in range(HOSTS)]


def test_a_preemption_is_reported_and_is_no_slice_failure() -> None:
    job = queued_job()
    before = running()
    out = workload().admitted(at(30)).preempted(at(100))
    # The JobSet as read before Kueue suspended it; the pods as its suspension left them.
    status, events = step(job, before, at(101), pods=preempted_pods(at(100)), wl=out.build())
    state, reason, message = admitted_cond(status)
    assert (state, reason) == ("False", REASON_PREEMPTED)
    assert message.startswith("preempted by Kueue (Preempted to accommodate a workload")
    assert "requeued in queue lq" in message
    assert status.counters.preemptions == 1 and status.counters.slice_failures == 0
    assert {(s.state, s.reason) for s in status.slices} == {("Pending", REASON_PREEMPTED)}
    assert [s.restarts for s in status.slices] == [0, 0, 0]
    assert status.phase == Phase.QUEUED and ready(status) == ("False", REASON_PREEMPTED)
    for type_ in (C.SLICE_DOWN, C.RECOVERING):
        cond = get_condition(status, type_)
        assert cond is not None and cond.status == "False"
    assert reasons(events) == [("Warning", REASON_PREEMPTED)]
    assert status.admission is not None and status.admission.evicted_at == at(100)

    # Seen again: counted once.
    again, events = step(job, status, at(102), pods=[], jobset=jobset_of(job, suspended=True),
                         wl=out.build())
    assert again.counters.preemptions == 1 and events == []

    # Readmitted: the same JobSet runs again (new pods), nothing charged.
    back, events = step(job, again, at(203), wl=out.admitted(at(200)).build(),
                        pods=healthy_pods(created=at(200)))
    assert back.counters.preemptions == 1 and back.counters.slice_failures == 0
    assert admitted_cond(back)[:2] == ("True", REASON_ADMITTED)
    assert reasons(events) == [("Normal", REASON_ADMITTED)]
    assert {s.state for s in back.slices} == {"Ready"} and back.phase == Phase.RUNNING


def test_the_same_pods_going_without_an_eviction_are_slice_failures() -> None:
    """The control: what the Workload says is all that tells the two apart."""
    status, _ = step(queued_job(), running(), at(101), pods=preempted_pods(at(100)),
                     wl=workload().admitted(at(30)).build())
    assert status.counters.slice_failures == 3 and status.counters.preemptions == 0


def test_a_preemption_missed_between_two_reconciles_is_counted_once() -> None:
    job = queued_job()
    wl = workload().admitted(at(30)).preempted(at(100)).admitted(at(150))
    status, events = step(job, running(), at(151), wl=wl.build())
    assert status.counters.preemptions == 1
    assert reasons(events) == [("Warning", REASON_PREEMPTED)]
    assert "between two looks of the operator" in events[0].message
    assert admitted_cond(status)[:2] == ("True", REASON_ADMITTED)
    again, events = step(job, status, at(152), wl=wl.build())
    assert again.counters.preemptions == 1 and events == []


def test_a_kueue_that_keeps_no_eviction_count_still_counts_a_preemption_once() -> None:
    job = queued_job()
    wl = workload().admitted(at(30)).preempted(at(100), count=None)
    status, _ = step(job, running(), at(101), pods=[], wl=wl.build())
    again, _ = step(job, status, at(102), pods=[], wl=wl.build())
    assert (status.counters.preemptions, again.counters.preemptions) == (1, 1)


def test_another_workloads_preemptions_count_from_zero() -> None:
    """Kueue recreated the Workload: its own count starts again."""
    job = queued_job()
    prev = running().model_copy(update={"admission": AdmissionStatus(
        workload="jobset-article-old00", queue_name="lq", workload_preemptions=4)})
    status, _ = step(job, prev, at(101), pods=[],
                     wl=workload().admitted(at(30)).preempted(at(100)).build())
    assert status.counters.preemptions == 1
    assert status.admission is not None and status.admission.workload_preemptions == 1


def trainer_report(started: datetime, pid: int) -> TrainingReport:
    return TrainingReport.model_validate({
        "observedAt": iso(started), "state": "Training", "step": 10, "processId": pid,
        "hostName": "head", "processStartedAt": iso(started)})


@pytest.mark.parametrize("preempted", [True, False])
def test_a_trainer_started_after_a_preemption_is_no_restart(preempted: bool) -> None:
    job = queued_job()
    first, _ = step(job, running().model_copy(update={"training": trainer_report(at(40), 7)}),
                    at(41), wl=workload().admitted(at(30)).build())
    wl = workload().admitted(at(30))
    if preempted:
        wl = wl.preempted(at(100)).admitted(at(200))
    later = first.model_copy(update={"training": trainer_report(at(210), 8)})
    status, events = step(job, later, at(211), wl=wl.build())
    assert status.trainer_process is not None and status.trainer_process.process_id == 8
    restarted = [e for e in events if e.reason == Reason.TRAINER_RESTARTED]
    assert (len(restarted), status.counters.trainer_restarts) == \
        ((0, 0) if preempted else (1, 1))


def lost_slices_report(started: datetime, lost: datetime) -> TrainingReport:
    """A trainer (started at `started`) that lost every slice at `lost`, waiting."""
    return TrainingReport.model_validate({
        "observedAt": iso(lost), "state": "Recovering", "step": 10, "processId": 7,
        "hostName": "head", "processStartedAt": iso(started), "elasticEventsTotal": 1,
        "retriesRemaining": 2, "elasticEvent": {
            "id": 1, "kind": "slice_down", "phase": "WaitingForSlices",
            "detectedAt": iso(lost), "failedStep": 10, "slicesDown": [0, 1, 2]}})


@pytest.mark.parametrize("preempted", [True, False])
def test_the_trainers_loss_to_a_preemption_is_no_recovery(preempted: bool) -> None:
    """The real trainer reports the slices it lost when Kueue took them back (an elastic
    event): the job is Queued, not Recovering, until it is readmitted and a new trainer
    reports (tests/integration/test_kueue_operator.py runs `etj train` through two
    preemptions). The same report without an eviction is a recovery."""
    job = queued_job()
    wl = workload().admitted(at(30))
    if preempted:
        wl = wl.preempted(at(100))
    prev = running().model_copy(update={"training": trainer_report(at(40), 7)})
    prev, _ = step(job, prev, at(101), pods=preempted_pods(at(100)) if preempted else None,
                   wl=wl.build())
    prev = prev.model_copy(update={"training": lost_slices_report(at(40), at(100.5))})
    status, events = step(job, prev, at(102), pods=[] if preempted else None,
                          jobset=jobset_of(job, suspended=preempted), wl=wl.build())
    recovering = get_condition(status, C.RECOVERING)
    assert recovering is not None
    assert status.counters.elastic_events == 1  # the trainer counted it either way
    if preempted:
        assert status.phase == Phase.QUEUED and recovering.status == "False"
        assert status.last_recovery is None
        assert not [e for e in events if e.reason == Reason.RECOVERED]
    else:
        assert recovering.status == "True" and status.last_recovery is not None


# --- other evictions -------------------------------------------------------------------


def test_another_eviction_is_named() -> None:
    wl = workload().admitted(at(30)).evicted(at(100), "ClusterQueueStopped",
                                             "The ClusterQueue is stopped")
    status, events = step(queued_job(), running(), at(101), pods=[], wl=wl.build())
    state, reason, message = admitted_cond(status)
    assert (state, reason) == ("False", REASON_EVICTED)
    assert message == ("evicted by Kueue (ClusterQueueStopped: The ClusterQueue is stopped); "
                       "requeued in queue lq: it resumes from its newest committed checkpoint "
                       "when admitted again")
    assert reasons(events) == [("Warning", REASON_EVICTED)]
    assert status.counters.preemptions == 0 and status.phase == Phase.QUEUED
    # Kueue's own eviction, counted once (this Kueue keeps no count: the condition says).
    assert status.counters.evictions == 1
    assert status.admission is not None
    assert status.admission.last_eviction_reason == "ClusterQueueStopped"
    again, events = step(queued_job(), status, at(102), pods=[], wl=wl.build())
    assert again.counters.evictions == 1 and events == []


def test_a_workload_deactivated_by_someone_else_is_reported_and_left_alone() -> None:
    job = queued_job()
    wl = workload().admitted(at(30)).deactivated(at(100), by_operator=False).build()
    status, _ = step(job, running(), at(101), pods=[], wl=wl)
    state, reason, message = admitted_cond(status)
    assert (state, reason) == ("False", REASON_EVICTED)
    assert "deactivated (spec.active: false) by someone other than this operator" in message
    plan = plan_reconcile(job, render(job), jobset_of(job, suspended=True), status,
                          workload=wl)
    assert plan.actions == ()


def test_a_jobset_running_without_a_workload_is_no_queued_job_to_hold() -> None:
    status, _ = step(queued_job(), None, T0)
    state, reason, message = admitted_cond(status)
    assert (state, reason) == ("Unknown", REASON_NO_WORKLOAD)
    assert "runs without a Kueue Workload" in message
    assert status.phase == Phase.RUNNING


def test_a_finished_job_keeps_its_admission_as_it_was() -> None:
    job = queued_job()
    before = running()
    done = replace(jobset_of(job), terminal_state="Completed")
    status, events = step(job, before, at(500), jobset=done,
                          wl=workload().admitted(at(30)).preempted(at(400)).build())
    assert get_condition(status, ADMITTED) == get_condition(before, ADMITTED)
    assert status.admission == before.admission and status.counters.preemptions == 0
    assert not [e for e in events if e.reason == REASON_PREEMPTED]


# --- spec.suspend ----------------------------------------------------------------------


def test_the_users_suspend_under_kueue_goes_through_the_workload() -> None:
    job = queued_job(suspend=True)
    admitted = workload().admitted(at(30))
    plan = plan_reconcile(job, render(job), jobset_of(job), running(),
                          workload=admitted.build())
    assert plan.actions == (SetWorkloadActive("ns", admitted.name, active=False),)

    out = admitted.deactivated(at(100), by_operator=True)
    status, events = step(job, running(), at(101), wl=out.build())
    state, reason, message = admitted_cond(status)
    assert (state, reason) == ("False", REASON_SUSPENDED_BY_USER)
    assert message == ("spec.suspend is true: its Workload is deactivated, and it holds no "
                       "quota of queue lq")
    assert status.phase == Phase.SUSPENDED
    assert not [e for e in events if e.type == "Warning"]

    resumed = queued_job()
    plan = plan_reconcile(resumed, render(resumed), jobset_of(job, suspended=True), status,
                          workload=out.build())
    assert plan.actions == (SetWorkloadActive("ns", admitted.name, active=True),)
    # Reactivated: requeued, marked Evicted until Kueue admits it again.
    requeued, _ = step(resumed, status, at(102), pods=[],
                       jobset=jobset_of(job, suspended=True),
                       wl=out.active(True).build())
    assert admitted_cond(requeued) == (
        "False", REASON_WAITING_FOR_ADMISSION,
        f"waiting in queue lq (Workload {admitted.name}): reactivated, requeued")
    assert requeued.phase == Phase.QUEUED


def test_a_trainer_started_after_the_users_suspend_is_no_restart_either() -> None:
    job = queued_job()
    prev = running().model_copy(update={"training": trainer_report(at(40), 7),
                                        "trainer_process": None})
    first, _ = step(job, prev, at(41), wl=workload().admitted(at(30)).build())
    wl = workload().admitted(at(30)).deactivated(at(100), by_operator=True).active(True)
    later = first.model_copy(update={"training": trainer_report(at(210), 8)})
    status, events = step(job, later, at(211), wl=wl.admitted(at(200)).build())
    assert not [e for e in events if e.reason == Reason.TRAINER_RESTARTED]
    assert status.counters.trainer_restarts == 0


def test_a_queued_job_created_suspended_gets_its_jobset_when_resumed() -> None:
    job = queued_job(suspend=True)
    plan = plan_reconcile(job, render(job), None, Status())
    assert plan.actions == () and plan.why_not is not None
    status, _ = compute_status(job, Observed(jobset=None), None, T0)
    assert admitted_cond(status) == (
        "False", REASON_SUSPENDED_BY_USER,
        "spec.suspend is true: no JobSet is created until it is resumed, and it holds no "
        "quota of queue lq")
    assert status.phase == Phase.SUSPENDED
    resumed = queued_job()
    created = plan_reconcile(resumed, render(resumed), None, status)
    assert "JobSet" in [a.kind for a in created.actions if isinstance(a, CreateObject)]


def test_without_kueue_a_job_created_suspended_marks_its_hold() -> None:
    job = article_job(suspend=True)
    plan = plan_reconcile(job, render(job), None, Status())
    (jobset,) = [a.obj for a in plan.actions
                 if isinstance(a, CreateObject) and a.kind == "JobSet"]
    assert jobset["spec"]["suspend"] is True
    assert jobset["metadata"]["annotations"][SUSPENDED_BY_OPERATOR_ANNOTATION] == "true"
    running_job = article_job()
    (jobset,) = [a.obj for a in plan_reconcile(running_job, render(running_job), None,
                                               Status()).actions
                 if isinstance(a, CreateObject) and a.kind == "JobSet"]
    assert SUSPENDED_BY_OPERATOR_ANNOTATION not in jobset["metadata"]["annotations"]


def suspended_status() -> Status:
    status, _ = step(article_job(suspend=True), None, T0, pods=[])
    return status


@pytest.mark.parametrize(("name", "job", "jobset", "prev", "wl", "expected"), [
    ("suspend: the operator suspends the JobSet", article_job(suspend=True),
     jobset_of(article_job()), Status(), None, (PatchJobSetSuspend("ns", "article", True),)),
    ("resume: its own hold is released", article_job(),
     jobset_of(article_job(), suspended=True, by_operator=True), Status(), None,
     (PatchJobSetSuspend("ns", "article", False),)),
    ("resume: another's hold is left alone", article_job(),
     jobset_of(article_job(), suspended=True), Status(), None, ()),
    ("resume: an older operator's hold (the status says so) is released", article_job(),
     jobset_of(article_job(), suspended=True), suspended_status(), None,
     (PatchJobSetSuspend("ns", "article", False),)),
    ("queued, no Workload yet: Kueue's webhook holds it", queued_job(),
     jobset_of(queued_job(), suspended=True), suspended_status(), None, ()),
    ("queued, Kueue not managing it: suspended as any", queued_job(suspend=True),
     jobset_of(queued_job()), Status(), None, (PatchJobSetSuspend("ns", "article", True),)),
    ("Kueue owns the JobSet's suspend, even with our old mark", queued_job(),
     jobset_of(queued_job(), suspended=True, by_operator=True), Status(),
     workload().build(), ()),
    ("already deactivated by us", queued_job(suspend=True), jobset_of(queued_job()),
     Status(), workload().active(False, by_operator=True).build(), ()),
])
def test_spec_suspend_releases_only_the_operators_own_holds(
        name: str, job: ElasticTrainingJob, jobset: ObservedJobSet, prev: Status,
        wl: ObservedWorkload | None, expected: tuple[Any, ...]) -> None:
    plan = plan_reconcile(job, render(job), jobset, prev, workload=wl)
    assert plan.actions == expected, name


# --- what is read ------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "job", "jobset", "prev", "wanted"), [
    ("no JobSet: no Workload", queued_job(), None, Status(), False),
    ("names a queue", queued_job(), jobset_of(queued_job()), Status(), True),
    ("queued before", article_job(), jobset_of(article_job()),
     Status(admission=AdmissionStatus(workload="w")), True),
    ("held by someone else", article_job(), jobset_of(article_job(), suspended=True),
     Status(), True),
    ("held by the operator", article_job(),
     jobset_of(article_job(), suspended=True, by_operator=True), Status(), False),
    ("running, never queued", article_job(), jobset_of(article_job()), Status(), False),
])
def test_the_workload_is_looked_for_only_when_it_can_matter(
        name: str, job: ElasticTrainingJob, jobset: ObservedJobSet | None, prev: Status,
        wanted: bool) -> None:
    assert wants_workload(job, jobset, prev) is wanted, name


def test_a_workload_is_read_leniently() -> None:
    assert workload_from_dict({}) == ObservedWorkload(name="")
    garbage = workload_from_dict({"metadata": {"name": "w", "annotations": "x"},
                                  "spec": {"active": "no", "queueName": 3},
                                  "status": {"conditions": [{"type": 1}, "x", {}],
                                             "schedulingStats": {"evictions": [
                                                 {"reason": "Preempted", "count": "x"},
                                                 {"reason": "Preempted", "count": -2}]}}})
    assert garbage == ObservedWorkload(name="w")
    counted = workload().scheduling_stats(Preempted=2, Deactivated=5).build()
    assert counted.preemptions == 2 and counted.active
    assert workload().active(False, by_operator=True).build().suspended_by_operator
