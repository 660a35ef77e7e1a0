"""Maintenance ahead of time (core/maintenance.py) and goodput (core/goodput_status.py), purely:
GKE's signal on a slice's nodes -> a checkpoint request -> the trainer's ack -> a
planned move to a spare (a move, not a failure) -> released."""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

import pytest

from elastic_api.conditions import ConditionType as C
from elastic_api.conditions import Reason
from elastic_api.models import (
    ElasticTrainingJob,
    ElasticTrainingJobStatus,
    SliceReplacement,
    TrainingReport,
)
from elastic_operator.core.maintenance import next_notice_in
from elastic_operator.core.plan import DeleteWorkerJob, QuarantinePool
from elastic_operator.core.replacement import plan_replacements
from elastic_operator.core.status import compute_status
from elastic_operator.model.objects import Observed
from tests.builders import (
    HOSTS,
    WorkerPod,
    at,
    etj,
    healthy_pods,
    iso,
    nodes_for,
    observe,
    pools_of,
    worker_job,
    worker_job_uid,
)


def job(**spec: Any) -> ElasticTrainingJob:
    return etj().uid("uid-1").generation(1).spec(**spec).build()


def world(pods: list[Any] | None = None, *, maintenance_on: str | None = None,
          scheduled: datetime | None = None, ongoing: bool = False, spares: int = 1,
          jobs_gen: dict[int, int] | None = None) -> Observed:
    nodes = nodes_for(spares=spares)
    if maintenance_on is not None:
        nodes = {n: replace(v, scheduled_maintenance=scheduled, maintenance_ongoing=ongoing)
                 if v.pool == maintenance_on else v for n, v in nodes.items()}
    gens = jobs_gen or {}
    return observe(pods if pods is not None else healthy_pods(), nodes=nodes,
                   pools=pools_of(nodes), jobs={i: worker_job(i, gens.get(i, 0))
                                                for i in range(3)})


def training(step: int, when: datetime, **more: Any) -> TrainingReport:
    return TrainingReport.model_validate({"observedAt": iso(when), "state": "Training",
                                          "step": step, "activeSlices": 3, **more})


def with_report(st: ElasticTrainingJobStatus, report: TrainingReport) -> ElasticTrainingJobStatus:
    return st.model_copy(update={"training": report})


def test_scheduled_maintenance_within_the_lead_time_asks_for_a_checkpoint() -> None:
    j = job(maintenance={"leadSeconds": 600})
    far = world(maintenance_on="tpu-1", scheduled=at(3600))
    st, events = compute_status(j, far, None, at(0))
    assert st.slices[1].maintenance is None and st.checkpoint_request is None
    assert next_notice_in(j.spec, far, at(0)) == pytest.approx(3000)
    near = world(maintenance_on="tpu-1", scheduled=at(700))
    st, events = compute_status(j, near, st, at(101))
    assert st.slices[1].maintenance is not None
    assert st.slices[1].maintenance.signal == Reason.SCHEDULED_MAINTENANCE
    request = st.checkpoint_request
    assert request is not None and request.id == 1 and request.slices == [1]
    assert request.phase == "Requested" and request.pause and request.reason == "Maintenance"
    cond = next(c for c in st.conditions if c.type == C.MAINTENANCE_PENDING)
    assert cond.status == "True" and "tpu-1" in cond.message
    assert {e.reason for e in events} >= {Reason.MAINTENANCE_SCHEDULED,
                                          Reason.CHECKPOINT_REQUESTED}


def test_the_acknowledged_request_moves_the_slice_without_counting_a_failure() -> None:
    j = job()
    observed = world(maintenance_on="tpu-1", ongoing=True)
    st, _ = compute_status(j, observed, None, at(0))
    assert st.checkpoint_request is not None and st.checkpoint_request.phase == "Requested"
    # The trainer saved step 200 and holds.
    ack = {"id": 1, "step": 200, "committedAt": iso(at(3)), "paused": True}
    st = with_report(st, training(200, at(3), checkpointAck=ack))
    st, events = compute_status(j, observed, st, at(4))
    s = st.slices[1]
    assert st.checkpoint_request is not None and st.checkpoint_request.phase == "Moving"
    assert s.replacement is not None and s.replacement.action == "Move"
    assert s.replacement.job_uid == worker_job_uid(1) and s.moves == 1 and s.restarts == 0
    assert Reason.SLICE_MOVING in {e.reason for e in events}
    plan = plan_replacements("ns", "article", j.spec, st, observed, at(4))
    assert [type(a) for a in plan.actions] == [QuarantinePool, DeleteWorkerJob]
    assert plan.actions[0].reason == Reason.MAINTENANCE  # type: ignore[union-attr]
    # The Job is deleted: its pods terminate. A move, not a failure.
    pods = healthy_pods()
    pods[HOSTS:2 * HOSTS] = [WorkerPod(1, h).deleting(at(5), 0).build() for h in range(HOSTS)]
    st, _ = compute_status(j, world(pods, maintenance_on="tpu-1", ongoing=True), st, at(5))
    assert st.slices[1].state == "Down" and st.slices[1].restarts == 0
    assert st.counters.slice_failures == 0
    # Recreated on the spare: Ready, released.
    pods[HOSTS:2 * HOSTS] = [WorkerPod(1, h).recreated(at(6), 1, node=f"tpu-3-{h}").build()
                             for h in range(HOSTS)]
    st, events = compute_status(j, world(pods, maintenance_on="tpu-1", ongoing=True,
                                         jobs_gen={1: 1}), st, at(8))
    s = st.slices[1]
    assert s.state == "Ready" and s.pool == "tpu-3" and s.replacement is None
    assert s.maintenance is None and s.restarts == 0 and s.moves == 1
    assert s.last_replacement is not None and s.last_replacement.action == "Move"
    assert st.checkpoint_request is not None and st.checkpoint_request.phase == "Released"


def test_no_answer_by_the_deadline_moves_anyway() -> None:
    j = job(maintenance={"checkpointTimeoutSeconds": 30})
    observed = world(maintenance_on="tpu-1", ongoing=True)
    st, _ = compute_status(j, observed, None, at(0))
    st, events = compute_status(j, observed, st, at(29))
    assert st.checkpoint_request.phase == "Requested"  # type: ignore[union-attr]
    st, events = compute_status(j, observed, st, at(31))
    assert st.checkpoint_request.phase == "Expired"  # type: ignore[union-attr]
    assert Reason.CHECKPOINT_REQUEST_TIMED_OUT in {e.reason for e in events}
    assert st.slices[1].replacement.action == "Move"  # type: ignore[union-attr]


def test_without_a_spare_the_trainer_checkpoints_and_the_slice_stays() -> None:
    j = job()
    observed = world(maintenance_on="tpu-1", ongoing=True, spares=0)
    st, _ = compute_status(j, observed, None, at(0))
    assert st.checkpoint_request is not None and not st.checkpoint_request.pause
    ack = {"id": 1, "step": 50, "committedAt": iso(at(2))}
    st = with_report(st, training(50, at(2), checkpointAck=ack))
    st, events = compute_status(j, observed, st, at(3))
    assert st.checkpoint_request is not None and st.checkpoint_request.phase == "Released"
    assert st.slices[1].replacement is None
    said = next(e.message for e in events if e.reason == Reason.CHECKPOINT_ACKNOWLEDGED)
    assert said == ("checkpoint request 1: the trainer saved step 50; slice 1 will not move "
                    "(no healthy spare node pool): the trainer goes on, and the maintenance "
                    "will take it as a failure")
    # Not asked again for the same notice.
    st, events = compute_status(j, observed, st, at(60))
    assert st.checkpoint_request.id == 1 and events == []  # type: ignore[union-attr]


def test_maintenance_can_be_turned_off() -> None:
    j = job(maintenance={"enabled": False})
    st, _ = compute_status(j, world(maintenance_on="tpu-1", ongoing=True), None, at(0))
    assert st.slices[1].maintenance is None and st.checkpoint_request is None


# --- goodput -----------------------------------------------------------------------------------


def test_goodput_from_the_trainers_counters_and_the_operators_timeline() -> None:
    j = etj().uid("uid-1").generation(1).build()
    j.metadata.__pydantic_extra__ = {"creationTimestamp": iso(at(0))}
    st, _ = compute_status(j, world(), None, at(10))
    assert st.goodput is not None and st.goodput.since == at(0)
    counters = {"productiveSeconds": 60.0, "medianStepSeconds": 0.5,
                "badputSeconds": {"waitingForSlices": 5.0, "restore": 1.0, "recompile": 2.0,
                                  "recomputedSteps": 3.0, "checkpointing": 4.0,
                                  "startup": 10.0}}
    st = with_report(st, training(120, at(100), goodput=counters))
    st, _ = compute_status(j, world(), st, at(101))
    g = st.goodput
    assert g is not None and g.observed_at == at(100) and g.wall_seconds == 100.0
    assert g.productive_seconds == 60.0 and g.ratio == 0.6
    assert g.badput_seconds is not None and g.badput_seconds.other == pytest.approx(15.0)
    # A slice down for 7 s in the operator's timeline.
    pods = healthy_pods()
    pods[2] = WorkerPod(0, 2).failed(at(110)).build()
    st, _ = compute_status(j, world(pods), st, at(111))
    assert st.goodput.slice_down_since == at(110)  # type: ignore[union-attr]
    st, _ = compute_status(j, world(), st, at(117))
    assert st.goodput.slice_down_seconds == pytest.approx(7.0)  # type: ignore[union-attr]
    assert st.goodput.slice_down_since is None  # type: ignore[union-attr]


def test_goodput_does_not_move_without_news() -> None:
    """No clock tick changes the status: a resync writes nothing."""
    j = job()
    st, _ = compute_status(j, world(), None, at(10))
    again, _ = compute_status(j, world(), st, at(40))
    assert again.goodput == st.goodput


def test_a_slice_still_under_a_replacement_is_not_moved_and_the_ack_says_so() -> None:
    """A spare exists but slice 1 carries a replacement record: it is not moved (a move
    would race the replacement). The acknowledgement says it and why, not only
    "holds": the trainer is released, and the maintenance will take the slice."""
    j = job()
    observed = world(maintenance_on="tpu-1", ongoing=True)
    st, _ = compute_status(j, observed, None, at(0))
    assert st.checkpoint_request is not None and st.checkpoint_request.pause
    # Recorded a moment ago, its Job (still the current one) not yet deleted.
    record = SliceReplacement(action="Replace", reason=Reason.HOST_LOST,
                              job_uid=worker_job_uid(1), requested_at=at(1))
    slices = [s.model_copy(update={"replacement": record}) if s.index == 1 else s
              for s in st.slices]
    ack = {"id": 1, "step": 50, "committedAt": iso(at(2)), "paused": True}
    st = with_report(st.model_copy(update={"slices": slices}),
                     training(50, at(2), checkpointAck=ack))
    st, events = compute_status(j, observed, st, at(3))
    said = next(e.message for e in events if e.reason == Reason.CHECKPOINT_ACKNOWLEDGED)
    assert said.startswith("checkpoint request 1: the trainer saved step 50; slice 1 will "
                           "not move (slice 1 is ")
    assert "with a replacement under way" in said and " holds" not in said
    assert st.checkpoint_request is not None and st.checkpoint_request.phase == "Released"
