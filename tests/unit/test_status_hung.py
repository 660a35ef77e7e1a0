"""The trainer's slice replacement request (status.training.sliceReplacement, core/hung.py):
a hung or slow slice whose pods stay Ready is recreated through the replacement machinery,
once per (processId, id), counted as a slice failure with the restart budget applying,
level-based across operator restarts; a slow one only with onSlowSlice Replace and a spare."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from elastic_api.conditions import ConditionType as C
from elastic_api.conditions import Reason
from elastic_api.models import ElasticTrainingJob, ElasticTrainingJobStatus, TrainingReport
from elastic_operator.core.plan import (
    DeleteWorkerJob,
    FailWorkerJob,
    LowerBackoffLimit,
    QuarantinePool,
)
from elastic_operator.core.pools import TRUSTING
from elastic_operator.core.replacement import plan_replacements
from elastic_operator.core.setter import get_condition
from elastic_operator.core.status import compute_status
from elastic_operator.model.objects import Observed, ObservedJob, ObservedPod
from tests.builders import (
    HOSTS,
    SLICES,
    WorkerPod,
    etj,
    healthy_pods,
    nodes_for,
    observe,
    observed_jobset,
    pools_of,
    worker_job,
)
from tests.builders import at as s

STARTED = s(0)


def job_with(**spec: Any) -> ElasticTrainingJob:
    return etj().uid("uid-1").generation(1).spec(**spec).build()


def training(step: int, request: dict[str, Any] | None = None, **more: Any) -> TrainingReport:
    fields: dict[str, Any] = {"observedAt": s(50).isoformat(), "state": "Training",
                              "step": step, "processId": 7, "hostName": "head",
                              "processStartedAt": STARTED.isoformat(), **more}
    if request is not None:
        fields["sliceReplacement"] = request
    return TrainingReport.model_validate(fields)


def request(id_: int = 1, slices: tuple[int, ...] = (1,), reason: str = Reason.SLICE_HUNG,
            at_: float = 50) -> dict[str, Any]:
    return {"id": id_, "slices": list(slices), "reason": reason,
            "requestedAt": s(at_).isoformat(), "message": "slice 1's part of step 53 did "
            "not finish while the others finished in 0.11 s"}


def with_spares(spares: int = 1, pods: list[ObservedPod] | None = None) -> Observed:
    nodes = nodes_for(spares=spares)
    return observe(pods if pods is not None else healthy_pods(), nodes=nodes,
                   pools=pools_of(nodes))


def running(job: ElasticTrainingJob, observed: Observed | None = None
            ) -> ElasticTrainingJobStatus:
    return compute_status(job, observed or observe(), None, s(10))[0]


def look(job: ElasticTrainingJob, previous: ElasticTrainingJobStatus, t: float,
         report: TrainingReport | None = None, observed: Observed | None = None,
         ) -> tuple[ElasticTrainingJobStatus, list[str]]:
    if report is not None:
        previous = previous.model_copy(update={"training": report})
    status, events = compute_status(job, observed or observe(), previous, s(t))
    return status, [e.reason for e in events]


def stored(status: ElasticTrainingJobStatus) -> ElasticTrainingJobStatus:
    """The status as a new operator reads it back."""
    return ElasticTrainingJobStatus.model_validate(
        status.model_dump(by_alias=True, mode="json", exclude_none=True))


def recreated(slice_index: int, t: float) -> list[ObservedPod]:
    pods = healthy_pods()
    return [WorkerPod(p.slice_index, p.host_index).recreated(s(t)).build()
            if p.slice_index == slice_index else p for p in pods]


def test_a_hung_slice_is_replaced_once_as_a_slice_failure() -> None:
    job = job_with()
    st0 = running(job)
    st1, reasons = look(job, st0, 51, training(52, request()))
    one = st1.slices[1]
    assert (one.state, one.reason, one.restarts) == ("Down", Reason.SLICE_HUNG, 1)
    assert "the trainer reports slice 1 hung (request 1)" in (one.message or "")
    assert st1.counters.slice_failures == 1
    assert reasons == [Reason.SLICE_DOWN, Reason.SLICE_REPLACING]
    record = one.replacement
    assert record is not None and record.action == "Replace" and record.blame == "Reported"
    assert record.job_uid == worker_job(1).uid and record.reason == Reason.SLICE_HUNG
    assert get_condition(st1, C.SLICE_DOWN).reason == Reason.SLICE_HUNG
    assert get_condition(st1, C.RECOVERING).status == "True"
    handled = st1.handled_slice_replacement
    assert handled is not None and (handled.process_id, handled.id, handled.replaced) == (
        7, 1, [1])
    # The plan deletes that Job (uid precondition).
    plan = plan_replacements("ns", "article", job.spec, st1,
                             observe(jobs={i: worker_job(i) for i in range(SLICES)}), s(51))
    assert plan.actions == (DeleteWorkerJob("ns", "article-worker-1", worker_job(1).uid, 1,
                                            Reason.SLICE_HUNG),)
    # Its pods still look Ready: the slice stays Down, nothing counts twice, also for a
    # restarted operator.
    st2, reasons = look(job, stored(st1), 52)
    assert reasons == [] and st2.slices[1].state == "Down" and st2.slices[1].restarts == 1
    assert st2.counters.slice_failures == 1
    # The Job's pods go (the deletion), then the recreated Job's come up Ready.
    going = [WorkerPod(p.slice_index, p.host_index).deleting(s(53)).build()
             if p.slice_index == 1 else p for p in healthy_pods()]
    st3, reasons = look(job, st2, 53, observed=observe(going))
    assert reasons == [] and st3.slices[1].restarts == 1
    st4, reasons = look(job, st3, 60, observed=observe(recreated(1, 58)))
    assert Reason.SLICE_REPLACED in reasons and st4.slices[1].state == "Ready"
    assert st4.slices[1].replacement is None and st4.slices[1].last_replacement is not None
    # The same request seen again changes nothing; the next one is a new failure.
    st5, reasons = look(job, st4, 70, observed=observe(recreated(1, 58)))
    assert reasons == [] and st5.slices[1].restarts == 1
    st6, reasons = look(job, st5, 80, training(90, request(2, at_=79)),
                        observe(recreated(1, 58)))
    assert st6.slices[1].restarts == 2 and Reason.SLICE_REPLACING in reasons


def test_a_hung_slices_pool_is_quarantined_when_a_spare_exists() -> None:
    """When the administrator trusts jobs' reports (--quarantine-on-job-report); by
    default the trainer's word alone quarantines no pool other teams use."""
    job = job_with()
    observed = with_spares()
    st1, _ = look(job, running(job, observed), 51, training(52, request()), observed)
    jobs = {i: worker_job(i) for i in range(SLICES)}
    nodes = nodes_for(spares=1)
    seen = observe(nodes=nodes, pools=pools_of(nodes), jobs=jobs)
    plan = plan_replacements("ns", "article", job.spec, st1, seen, s(51))
    assert [type(a) for a in plan.actions] == [DeleteWorkerJob]
    plan = plan_replacements("ns", "article", job.spec, st1, seen, s(51), TRUSTING)
    kinds = [type(a) for a in plan.actions]
    assert kinds == [QuarantinePool, DeleteWorkerJob]
    quarantine = plan.actions[0]
    assert isinstance(quarantine, QuarantinePool) and quarantine.pool == "tpu-1"
    assert quarantine.reason == Reason.HARDWARE_FAILURE


def test_the_restart_budget_applies() -> None:
    job = job_with(elastic={"maxSliceRestarts": 0})
    st1, reasons = look(job, running(job), 51, training(52, request()))
    assert st1.slices[1].replacement.action == "GiveUp"
    assert Reason.SLICE_RESTARTS_EXHAUSTED in reasons


def plan_with(job: ElasticTrainingJob, status: ElasticTrainingJobStatus, t: float,
              pods: list[ObservedPod] | None = None, **slice1: Any) -> tuple[Any, ...]:
    """The replacement actions for `status`, slice 1's Job as `slice1` says (worker_job)."""
    jobs: dict[int, ObservedJob] = {i: worker_job(i) for i in range(SLICES)}
    jobs[1] = worker_job(1, **slice1)
    return plan_replacements("ns", "article", job.spec, status,
                             observe(pods, jobs=jobs), s(t)).actions


def test_a_blamed_slice_with_its_budget_spent_ends_its_job_once() -> None:
    """Its pods never fail by themselves: the operator ends its Job through the Job's own
    deadline (the Job controller fails it and counts each pod once), once, level-based from
    the Job's spec, also after an operator restart; never a pod deleted, nothing counted
    twice."""
    job = job_with(elastic={"maxSliceRestarts": 0})
    st1, reasons = look(job, running(job), 51, training(52, request()))
    assert reasons == [Reason.SLICE_DOWN, Reason.SLICE_RESTARTS_EXHAUSTED]
    one = st1.slices[1]
    assert (one.state, one.reason, one.restarts) == ("Down", Reason.SLICE_HUNG, 1)
    assert one.replacement is not None and one.replacement.action == "GiveUp"
    end = FailWorkerJob("ns", "article-worker-1", worker_job(1).uid, 1, Reason.SLICE_HUNG)
    # backoffLimit 0 alone (maxSliceRestarts 0 renders it) fails nothing: ended all the same.
    for limit in (HOSTS * 5, 0):
        assert plan_with(job, st1, 51, backoff_limit=limit) == (end,)
        assert plan_with(job, stored(st1), 52, backoff_limit=limit) == (end,)
    # Done: the Job shows the deadline, has failed, or is another Job (JobSet's restart).
    for done in ({"active_deadline_seconds": 0, "backoff_limit": 0}, {"finished": "Failed"},
                 {"gen": 1}):
        assert plan_with(job, st1, 53, **done) == (), done
        assert plan_with(job, stored(st1), 53, **done) == (), done
    # The Job controller fails the Job, each of its pods counted once: the slice stays
    # Down, no second failure, no Event, before the Job is Failed (FailureTarget) and after.
    going = [WorkerPod(p.slice_index, p.host_index).deleting(s(54)).build()
             if p.slice_index == 1 else p for p in healthy_pods()]
    failing = replace(worker_job(1, backoff_limit=0, active_deadline_seconds=0),
                      failed_pods=HOSTS)
    for st_job in (failing, replace(failing, finished="Failed")):
        jobs = {**{i: worker_job(i) for i in range(SLICES)}, 1: st_job}
        st2, reasons = look(job, stored(st1), 55, observed=observe(going, jobs=jobs))
        assert reasons == [], st_job
        assert (st2.slices[1].state, st2.slices[1].restarts) == ("Down", 1)
        assert st2.counters.slice_failures == 1
    # Its pods gone, nothing replaces them: still Down for what it failed of, not
    # Restarting; once JobSet's restart makes the slice a new Job, Restarting.
    gone = [p for p in healthy_pods() if p.slice_index != 1]
    jobs = {**{i: worker_job(i) for i in range(SLICES)}, 1: replace(failing, finished="Failed")}
    st3, reasons = look(job, stored(st1), 56, observed=observe(gone, jobs=jobs))
    three = st3.slices[1]
    assert (three.state, three.reason, three.restarts, reasons) == (
        "Down", Reason.SLICE_HUNG, 1, [])
    assert "the trainer reports slice 1 hung" in (three.message or "")
    new = [WorkerPod(1, h).recreated(s(57)).pending().build()
           for h in range(HOSTS)]
    st4, _ = look(job, st3, 58, observed=observe(gone + new, jobs={
        **jobs, 1: worker_job(1, 1, backoff_limit=0)}))
    assert (st4.slices[1].state, st4.slices[1].restarts) == ("Restarting", 1)


def test_the_failed_job_names_the_slice_and_its_budget() -> None:
    """JobSet's failurePolicy ends the job: its Failed condition says which slice's
    restart budget was spent, why the slice failed, and the budget, before JobSet's own
    words; a JobSet failure with no slice given up on says JobSet's words only."""
    job = job_with(elastic={"maxSliceRestarts": 0}, maxRestarts=0)
    st1, _ = look(job, running(job), 51, training(52, request()))
    failed = observed_jobset(job).terminal(
        "Failed", "jobset failed due to reaching max number of restarts (first failed "
        "job: article-worker-1)").build()
    st2, reasons = look(job, stored(st1), 56, observed=observe([], failed))
    cond = get_condition(st2, C.FAILED)
    assert (cond.status, cond.reason) == ("True", Reason.MAX_RESTARTS_EXCEEDED)
    assert cond.message == (
        "slice 1 failed (SliceHung) with its restart budget spent (maxSliceRestarts 0), so "
        "JobSet article failed after 0 restarts (maxRestarts 0): jobset failed due to "
        "reaching max number of restarts (first failed job: article-worker-1)")
    assert reasons == [Reason.MAX_RESTARTS_EXCEEDED]
    plain, _ = look(job, running(job), 56, observed=observe([], failed))
    assert get_condition(plain, C.FAILED).message.startswith("JobSet article failed")


def test_only_a_blamed_slices_job_is_ended() -> None:
    """A dead slice with its budget spent fails by its failed pods (backoffLimit 0); a
    blamed slice whose budget is not spent is replaced; a slow one past its budget is
    ended as a hung one is."""
    job = job_with(elastic={"maxSliceRestarts": 0})
    pods = [WorkerPod(1, 0).failed(s(40)).build() if (p.slice_index, p.host_index) == (1, 0)
            else p for p in healthy_pods()]
    dead, reasons = look(job, running(job), 41, observed=observe(pods))
    assert Reason.SLICE_RESTARTS_EXHAUSTED in reasons
    assert plan_with(job, dead, 41, pods) == (
        LowerBackoffLimit("ns", "article-worker-1", worker_job(1).uid, 1),)
    assert plan_with(job, dead, 41, pods, backoff_limit=0) == ()
    spared = job_with()
    st1, _ = look(spared, running(spared), 51, training(52, request()))
    assert [type(a) for a in plan_with(spared, st1, 51)] == [DeleteWorkerJob]
    slow = job_with(elastic={"maxSliceRestarts": 0, "onSlowSlice": "Replace"})
    observed = with_spares()
    st1, _ = look(slow, running(slow, observed), 51,
                  training(52, request(reason=Reason.SLICE_SLOW)), observed)
    assert plan_with(slow, st1, 51) == (
        FailWorkerJob("ns", "article-worker-1", worker_job(1).uid, 1, Reason.SLICE_SLOW),)


# (case, spec, request, observed, replaced?, why not)
SLOW: list[tuple[str, dict[str, Any], bool, bool, str | None]] = [
    ("onSlowSlice unset: Replace, with a spare", {}, True, True, None),
    ("onSlowSlice Report", {"elastic": {"onSlowSlice": "Report"}}, True, False,
     "onSlowSlice is Report"),
    ("Replace with a spare", {"elastic": {"onSlowSlice": "Replace"}}, True, True, None),
    ("Replace without a spare", {"elastic": {"onSlowSlice": "Replace"}}, False, False,
     "no healthy spare node pool"),
]


@pytest.mark.parametrize(("case", "spec", "spare", "replaced", "why"), SLOW,
                         ids=[c[0] for c in SLOW])
def test_a_slow_slice(case: str, spec: dict[str, Any], spare: bool, replaced: bool,
                      why: str | None) -> None:
    job = job_with(**spec)
    observed = with_spares(1 if spare else 0)
    st1, reasons = look(job, running(job, observed), 51,
                        training(52, request(reason=Reason.SLICE_SLOW)), observed)
    assert (st1.slices[1].state == "Down") == replaced, case
    assert st1.handled_slice_replacement is not None and st1.handled_slice_replacement.id == 1
    if replaced:
        assert st1.slices[1].reason == Reason.SLICE_SLOW and st1.counters.slice_failures == 1
    else:
        assert reasons == [Reason.SLICE_REPLACEMENT_DECLINED]
        assert why in (st1.handled_slice_replacement.message or "")


# (case, what is different, why not)
DECLINED: list[tuple[str, dict[str, Any], str]] = [
    ("made by an earlier trainer process", {"at": -5}, "an earlier trainer process"),
    ("the slice is down already", {"down": True}, "slice 1 is Down already"),
    ("the job is suspended", {"suspended": True}, "the job is Suspended"),
    ("replaceSlices false", {"spec": {"recovery": {"replaceSlices": False}}},
     "replaceSlices is false"),
    ("no such slice", {"slices": (9,)}, "slice 9: no such slice"),
]


@pytest.mark.parametrize(("case", "different", "why"), DECLINED, ids=[c[0] for c in DECLINED])
def test_a_request_not_acted_on_says_why(case: str, different: dict[str, Any],
                                         why: str) -> None:
    job = job_with(**different.get("spec", {}))
    st0 = running(job)
    pods = healthy_pods()
    if different.get("down"):
        pods = [WorkerPod(1, 0).failed(s(40)).build() if (p.slice_index, p.host_index) == (1, 0)
                else p for p in pods]
        st0, _ = look(job, st0, 41, observed=observe(pods))
    jobset = observed_jobset().suspended(different.get("suspended", False)).build()
    st1, reasons = look(job, st0, 51, training(52, request(
        slices=different.get("slices", (1,)), at_=different.get("at", 50))),
        observe(pods, jobset))
    assert Reason.SLICE_REPLACEMENT_DECLINED in reasons, case
    assert st1.counters.slice_failures == st0.counters.slice_failures
    handled = st1.handled_slice_replacement
    assert handled is not None and handled.replaced == [] and why in (handled.message or "")
    # Handled once: the same request again posts nothing.
    _, again = look(job, st1, 60, observed=observe(pods, jobset))
    assert Reason.SLICE_REPLACEMENT_DECLINED not in again


def test_a_new_process_numbering_from_1_again_is_a_new_request() -> None:
    job = job_with()
    st1, _ = look(job, running(job), 51, training(52, request()))
    st2, _ = look(job, st1, 60, observed=observe(recreated(1, 58)))
    again = training(5, request(1, at_=120), processStartedAt=s(100).isoformat(), processId=8)
    st3, reasons = look(job, st2, 121, again, observe(recreated(1, 58)))
    assert st3.slices[1].restarts == 2 and Reason.SLICE_REPLACING in reasons
