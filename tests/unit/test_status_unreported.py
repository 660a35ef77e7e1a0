"""The recovery of a trainer that reports no elastic events (MaxText in spec.trainer.command,
with or without the progress sidecar): the operator closes it when every slice is back
and the head's main still runs (RecoveredUnconfirmed), the trainer's progress confirms it
(Recovered), and nothing it does not know is filled in (docs/design/recovery.md).
"""
from __future__ import annotations

from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry

from elastic_api.conditions import ConditionType as C
from elastic_api.conditions import Phase, Reason
from elastic_api.models import (
    CheckpointStatus,
    Counters,
    ElasticTrainingJob,
    ElasticTrainingJobStatus,
    TrainingReport,
)
from elastic_operator.core.patch import status_patch
from elastic_operator.core.setter import get_condition
from elastic_operator.core.status import compute_status
from elastic_operator.core.status_events import event_name
from elastic_operator.metrics.metrics import OperatorMetrics
from elastic_operator.model.objects import ObservedContainer, ObservedPod, pod_from_dict
from tests.builders import (
    HOSTS,
    PodWrapper,
    WorkerPod,
    article_job,
    foreign_job,
    head_pod,
    healthy_pods,
    main_exited,
    main_running,
    observe,
)
from tests.builders import at as s

CKPT = "gs://b/ckpt"


def cond(status: ElasticTrainingJobStatus, type_: str) -> tuple[str, str, str]:
    c = get_condition(status, type_)
    assert c is not None, f"no {type_} condition"
    return c.status, c.reason, c.message


def with_report(status: ElasticTrainingJobStatus, **report: Any) -> ElasticTrainingJobStatus:
    return status.model_copy(update={"training": TrainingReport.model_validate(report)})


def training(at_: datetime, step: int, **more: Any) -> dict[str, Any]:
    return {"observedAt": at_.isoformat(), "state": "Training", "step": step, **more}


def pods_with(head: ObservedPod | None, *, slice0: str = "ready") -> list[ObservedPod]:
    """The workers (host 0 of slice 0 failed at 10 s, replaced at 40 s, or healthy) and
    the head pod."""
    pods = healthy_pods()
    if slice0 == "failed":
        pods[0] = WorkerPod(0, 0).failed(s(10)).build()
    elif slice0 == "back":
        pods[0] = WorkerPod(0, 0).replacement(s(40)).build()
    return pods + ([head] if head is not None else [])


def checkpoint(step: int | None, at_: datetime) -> CheckpointStatus:
    return CheckpointStatus(directory=CKPT, latest_committed_step=step, observed_at=at_)


def fail_slice0(job: ElasticTrainingJob, head: ObservedPod | None,
                previous: ElasticTrainingJobStatus | None = None, **more: Any,
                ) -> ElasticTrainingJobStatus:
    """Running at 0 s (from `previous` when given), slice 0 failed at 10 s (seen at 11 s)."""
    st0 = previous or compute_status(job, observe(pods_with(head), **more), None, s(0))[0]
    st1, _ = compute_status(job, observe(pods_with(head, slice0="failed"), **more), st0, s(11))
    assert cond(st1, C.RECOVERING)[:2] == ("True", Reason.SLICE_DOWN)
    return st1


def slice_back(job: ElasticTrainingJob, head: ObservedPod | None,
               st: ElasticTrainingJobStatus, now: datetime | None = None, **more: Any,
               ) -> tuple[ElasticTrainingJobStatus, list[str]]:
    """The replacement of slice 0 Ready, seen at `now` (default 42 s)."""
    status, events = compute_status(job, observe(pods_with(head, slice0="back"), **more), st,
                                    now or s(42))
    return status, [e.reason for e in events]


# --- a trainer that reports nothing --------------------------------------------------------


def test_a_silent_trainers_recovery_closes_when_the_slice_is_back() -> None:
    job, head = foreign_job(), head_pod(main=main_running(s(0)))
    st1 = fail_slice0(job, head)
    assert "waiting for slice 0 to be Ready again" in cond(st1, C.RECOVERING)[2]
    assert "the trainer reports no elastic events" in cond(st1, C.RECOVERING)[2]
    st2, reasons = slice_back(job, head, st1)
    assert reasons == [Reason.SLICE_RESTORED, Reason.RECOVERED_UNCONFIRMED]
    status, reason, message = cond(st2, C.RECOVERING)
    assert (status, reason) == ("False", Reason.RECOVERED_UNCONFIRMED)
    assert "every slice Ready again 32.0 s after the failure (slice 0 went down)" in message
    assert "progress is not confirmed" in message and "unknown" in message
    lr = st2.last_recovery
    assert lr is not None and lr.closed_by == "Operator" and lr.closed_at == s(42)
    assert lr.detected_at == s(10) and lr.slices == [0]
    # Nothing nobody measured: no resume time, downtime, steps lost or restore.
    assert (lr.resumed_at, lr.downtime_seconds, lr.steps_lost, lr.restored_from_step,
            lr.restore_source, lr.confirmed_by) == (None,) * 6
    assert st2.phase == Phase.RUNNING and cond(st2, C.READY)[:2] == ("True",
                                                                     Reason.ALL_SLICES_READY)
    # Goodput: the operator's timeline is closed; what only a trainer knows stays unset.
    goodput = st2.goodput
    assert goodput is not None and goodput.slice_down_seconds == 32.0
    assert goodput.slice_down_since is None
    assert (goodput.productive_seconds, goodput.ratio, goodput.badput_seconds) == (None,) * 3
    # Level-based: the next reconcile changes nothing and posts nothing.
    st3, reasons = slice_back(job, head, st2, s(300))
    assert reasons == [] and status_patch(st2, st3) is None


def test_the_bundled_trainer_is_waited_for_as_before() -> None:
    job, head = article_job(), head_pod(main=main_running(s(0)))
    st2, reasons = slice_back(job, head, fail_slice0(job, head))
    assert reasons == [Reason.SLICE_RESTORED]
    assert cond(st2, C.RECOVERING)[:2] == ("True", Reason.SLICE_DOWN)
    assert "waiting for the trainer to report a step after the failure" in \
        cond(st2, C.RECOVERING)[2]


def test_a_program_that_has_reported_elastic_events_is_waited_for() -> None:
    job, head = foreign_job(), head_pod(main=main_running(s(0)))
    st0 = compute_status(job, observe(pods_with(head)), None, s(0))[0]
    st0 = with_report(st0.model_copy(update={"counters": Counters(elastic_events=1)}),
                      **training(s(5), 40, elasticEventsTotal=1))
    st2, reasons = slice_back(job, head, fail_slice0(job, head, st0))
    assert reasons == [Reason.SLICE_RESTORED]
    assert cond(st2, C.RECOVERING)[0] == "True"


def test_a_head_whose_main_died_closes_nothing() -> None:
    job = foreign_job()
    st1 = fail_slice0(job, head_pod(main=main_running(s(0))))
    for head in (head_pod(main=main_exited()), head_pod(failed=True, main=main_exited()),
                 head_pod(main=main_running(s(0)), deleting=s(30)), None):
        st2, reasons = slice_back(job, head, st1)
        assert Reason.RECOVERED_UNCONFIRMED not in reasons, head
        status, _, message = cond(st2, C.RECOVERING)
        assert status == "True" and "the head's main is not running" in message, head


def test_a_main_started_after_the_failure_closes_on_progress_only() -> None:
    """A new head pod (a JobSet restart) is a new process: the one that lived through the
    failure is gone, so only progress since the failure closes the recovery."""
    job = foreign_job(progress=True)
    old, new = head_pod(main=main_running(s(0))), head_pod(
        name="article-pathways-head-0-0-b", created=s(30), main=main_running(s(31)))
    st1 = with_report(fail_slice0(job, old), **training(s(9), 40))
    st2, reasons = slice_back(job, new, st1)
    assert reasons == [Reason.SLICE_RESTORED]
    assert "main started after the failure" in cond(st2, C.RECOVERING)[2]
    st2 = with_report(st2, **training(s(50), 31))  # resumed from checkpoint 30
    st3, reasons = slice_back(job, new, st2, s(51))
    assert reasons == [Reason.RECOVERED]
    lr = st3.last_recovery
    assert lr is not None and lr.closed_by == "Operator" and lr.confirmed_by == "TrainingReport"
    assert lr.confirmed_step == 31 and lr.downtime_seconds is None
    assert cond(st3, C.RECOVERING)[:2] == ("False", Reason.RECOVERED)


# --- the progress sidecar and checkpoints confirm --------------------------------------------


def test_a_new_step_after_the_closure_confirms_it() -> None:
    job, head = foreign_job(progress=True), head_pod(main=main_running(s(0)))
    st0 = with_report(compute_status(job, observe(pods_with(head)), None, s(0))[0],
                      **training(s(5), 40))
    st1 = fail_slice0(job, head, st0)
    assert st1.last_recovery is not None and st1.last_recovery.step_at_detection == 40
    # A step reported before the slice was back proves nothing about the recovery.
    st1 = with_report(st1, **training(s(41), 45))
    st2, reasons = slice_back(job, head, st1)
    assert reasons == [Reason.SLICE_RESTORED, Reason.RECOVERED_UNCONFIRMED]
    assert st2.last_recovery is not None and st2.last_recovery.step_at_closure == 45
    # The same step reported again after the closure (a restarted sidecar) neither.
    st3, reasons = slice_back(job, head, with_report(st2, **training(s(50), 45)), s(51))
    assert reasons == [] and cond(st3, C.RECOVERING)[1] == Reason.RECOVERED_UNCONFIRMED
    st4, events = compute_status(job, observe(pods_with(head, slice0="back")),
                                 with_report(st3, **training(s(55), 47)), s(56))
    assert [e.reason for e in events] == [Reason.RECOVERED]
    assert events[0].downtime_seconds is None and events[0].steps_lost is None
    status, reason, message = cond(st4, C.RECOVERING)
    assert (status, reason) == ("False", Reason.RECOVERED)
    assert "training confirmed by step 47 reported" in message
    assert "downtime and steps lost not reported by the trainer" in message
    lr = st4.last_recovery
    assert lr is not None and (lr.confirmed_by, lr.confirmed_at, lr.confirmed_step) == (
        "TrainingReport", s(55), 47)
    assert lr.downtime_seconds is None and lr.steps_lost is None
    # Confirmed once: later steps change nothing.
    st5, events = compute_status(job, observe(pods_with(head, slice0="back")),
                                 with_report(st4, **training(s(70), 60)), s(71))
    assert events == [] and st5.last_recovery == lr


def test_a_checkpoint_newer_than_the_failure_confirms_it() -> None:
    job, head = foreign_job(), head_pod(main=main_running(s(0)))
    at_failure = checkpoint(100, s(2))
    st0 = compute_status(job, observe(pods_with(head), checkpoint=at_failure), None, s(3))[0]
    st1 = fail_slice0(job, head, st0)
    assert st1.last_recovery is not None
    assert st1.last_recovery.checkpoint_step_at_detection == 100
    st2, reasons = slice_back(job, head, st1)
    assert reasons == [Reason.SLICE_RESTORED, Reason.RECOVERED_UNCONFIRMED]
    # A listing after the closure that still shows the step of the failure: not yet.
    same, reasons = slice_back(job, head, st2, s(60), checkpoint=checkpoint(100, s(59)))
    assert reasons == [] and cond(same, C.RECOVERING)[1] == Reason.RECOVERED_UNCONFIRMED
    st3, reasons = slice_back(job, head, st2, s(90), checkpoint=checkpoint(200, s(89)))
    assert reasons == [Reason.RECOVERED]
    lr = st3.last_recovery
    assert lr is not None and (lr.confirmed_by, lr.confirmed_step, lr.confirmed_at) == (
        "Checkpoint", 200, s(89))
    assert "training confirmed by checkpoint 200 committed" in cond(st3, C.RECOVERING)[2]


def test_a_save_begun_before_the_failure_confirms_nothing() -> None:
    """Seen in make e2e-maxtext on gs://: a save in flight at the failure committed after
    the closure. Only a step beyond all the failure knew of (listed, committed or in
    flight, or reported by the trainer) was saved after it."""
    job, head = foreign_job(progress=True), head_pod(main=main_running(s(0)))
    at_failure = CheckpointStatus(directory=CKPT, latest_committed_step=100,
                                  incomplete_steps=[150], observed_at=s(2))
    st0 = compute_status(job, observe(pods_with(head), checkpoint=at_failure), None, s(3))[0]
    st1 = fail_slice0(job, head, with_report(st0, **training(s(5), 180)))
    assert st1.last_recovery is not None
    assert st1.last_recovery.checkpoint_step_at_detection == 150
    st2, _ = slice_back(job, head, st1)
    for step in (150, 175, 180):
        st3, reasons = slice_back(job, head, st2, s(60), checkpoint=checkpoint(step, s(59)))
        assert reasons == [], step
        assert cond(st3, C.RECOVERING)[1] == Reason.RECOVERED_UNCONFIRMED
    st3, reasons = slice_back(job, head, st2, s(90), checkpoint=checkpoint(200, s(89)))
    assert reasons == [Reason.RECOVERED]
    assert st3.last_recovery is not None and st3.last_recovery.confirmed_step == 200


def test_the_trainers_own_late_elastic_event_reopens_and_closes_it() -> None:
    """A program that reports elastic events itself, on its first one: the operator closed
    the recovery before the report came; the event (detected before the closure) is this
    failure's, and the trainer's figures close it."""
    job, head = foreign_job(), head_pod(main=main_running(s(0)))
    st2, _ = slice_back(job, head, fail_slice0(job, head))
    event = {"id": 1, "phase": "Restoring", "detectedAt": s(20).isoformat(),
             "failedStep": 50, "slicesDown": [0]}
    st2 = with_report(st2, observedAt=s(44).isoformat(), state="Recovering", step=50,
                      elasticEventsTotal=1, elasticEvent=event)
    st3, reasons = slice_back(job, head, st2, s(45))
    assert reasons == []
    assert cond(st3, C.RECOVERING)[:2] == ("True", Reason.ELASTIC_EVENT)
    assert st3.last_recovery is not None and st3.last_recovery.detected_at == s(10)
    resumed = dict(event, phase="Resumed", restoredFromStep=45, restoreSource="snapshot",
                   resumedAt=s(50).isoformat())
    st3 = with_report(st3, **training(s(51), 46, elasticEventsTotal=1, elasticEvent=resumed))
    st4, events = compute_status(job, observe(pods_with(head, slice0="back")), st3, s(52))
    assert [e.reason for e in events] == [Reason.RECOVERED]
    assert events[0].downtime_seconds == 40.0 and events[0].steps_lost == 5
    lr = st4.last_recovery
    assert lr is not None and lr.closed_by == "Trainer" and lr.steps_lost == 5
    assert cond(st4, C.RECOVERING)[:2] == ("False", Reason.RECOVERED)


# --- what the operator reads, posts and measures ---------------------------------------------


def test_the_heads_main_container_is_read_from_the_pod() -> None:
    pod = PodWrapper("article-pathways-head-0-0").running().obj()
    pod["status"]["containerStatuses"] = [
        {"name": "progress", "state": {"running": {"startedAt": "2026-11-29T11:00:00Z"}}},
        {"name": "main", "restartCount": 0,
         "state": {"running": {"startedAt": "2026-11-29T12:00:05Z"}}}]
    main = pod_from_dict(pod).main
    assert main is not None and main.state == "running" and main.started_at == s(5)
    pod["status"]["containerStatuses"][1]["state"] = {"terminated": {"exitCode": 0}}
    main = pod_from_dict(pod).main
    assert main is not None and main.state == "terminated" and main.started_at is None
    pod["status"]["containerStatuses"] = [{"name": "main", "state": "junk",
                                           "restartCount": "x"}]
    assert pod_from_dict(pod).main == ObservedContainer(state=None)


def test_unconfirmed_and_confirmed_closures_are_distinct_events_and_no_downtime() -> None:
    job, head = foreign_job(progress=True), head_pod(main=main_running(s(0)))
    st2, events2 = compute_status(job, observe(pods_with(head, slice0="back")),
                                  fail_slice0(job, head), s(42))
    st3, events3 = compute_status(job, observe(pods_with(head, slice0="back")),
                                  with_report(st2, **training(s(50), 7)), s(51))
    (unconfirmed,) = [e for e in events2 if e.reason == Reason.RECOVERED_UNCONFIRMED]
    (confirmed,) = events3
    names = {event_name("article", "uid-1", unconfirmed, st2),
             event_name("article", "uid-1", confirmed, st3)}
    assert len(names) == 2
    registry = CollectorRegistry()
    metrics = OperatorMetrics(registry)
    metrics.record_status("ns", "article", st2, st3)
    metrics.record_events("ns", [unconfirmed, confirmed], written_at_s=s(51).timestamp())
    get = registry.get_sample_value
    assert get("etj_recovery_duration_seconds_count", {"namespace": "ns"}) == 0
    assert get("etj_recovery_steps_lost_count", {"namespace": "ns"}) == 0
    assert get("etj_recoveries_unconfirmed_total", {"namespace": "ns"}) == 1
    assert get("etj_recovering", {"namespace": "ns", "job": "article"}) == 0


def test_two_slices_one_back_is_still_recovering() -> None:
    job, head = foreign_job(), head_pod(main=main_running(s(0)))
    st1 = fail_slice0(job, head)
    pods = pods_with(head, slice0="back")
    pods[HOSTS] = WorkerPod(1, 0).failed(s(41)).build()
    st2, events = compute_status(job, observe(pods), st1, s(42))
    assert Reason.RECOVERED_UNCONFIRMED not in [e.reason for e in events]
    assert cond(st2, C.RECOVERING)[0] == "True"
    assert "waiting for slice 1 to be Ready again" in cond(st2, C.RECOVERING)[2]
    assert st2.last_recovery is not None and st2.last_recovery.slices == [0, 1]
