"""A slice restarted in place, through compute_status and plan_replacements: the record
(RestartInPlace) written before anything, no delete, the slice Ready again on the same
pods, the fall back to recreation at the deadline, and a restart no look saw counted once
from the pods' restart counts."""
from __future__ import annotations

from datetime import datetime
from typing import Any

from elastic_api.conditions import Reason
from elastic_api.models import ElasticTrainingJob, ElasticTrainingJobStatus
from elastic_operator.core.plan import DeleteWorkerJob
from elastic_operator.core.replacement import ReplacementPlan, plan_replacements
from elastic_operator.core.status import compute_status
from elastic_operator.model.objects import Observed, ObservedPod
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
    worker_job,
    worker_job_uid,
)


def job(**recovery: Any) -> ElasticTrainingJob:
    spec: dict[str, Any] = {"recovery": recovery} if recovery else {}
    return etj().uid("uid-1").generation(1).spec(**spec).build()


def world(pods: list[ObservedPod], not_ready: dict[str, datetime] | None = None) -> Observed:
    nodes = nodes_for(spares=1, not_ready=not_ready)
    return observe(pods, nodes=nodes, pools=pools_of(nodes),
                   jobs={i: worker_job(i, 0) for i in range(SLICES)})


def step(j: ElasticTrainingJob, prev: ElasticTrainingJobStatus | None, pods: list[ObservedPod],
         now: datetime, not_ready: dict[str, datetime] | None = None,
         ) -> tuple[ElasticTrainingJobStatus, list[str], ReplacementPlan]:
    observed = world(pods, not_ready)
    st, events = compute_status(j, observed, prev, now)
    return st, [e.reason for e in events], plan_replacements("ns", "article", j.spec, st,
                                                              observed, now)


def with_host(pod: WorkerPod) -> list[ObservedPod]:
    pods = healthy_pods()
    pods[pod.slice_index * HOSTS + pod.host] = pod.build()
    return pods


def running(j: ElasticTrainingJob) -> ElasticTrainingJobStatus:
    st, _, _ = step(j, None, healthy_pods(), at(1))
    return st


def test_a_worker_process_exit_is_restarted_in_place_and_counted_once() -> None:
    j = job()
    exited = WorkerPod(1, 2).container_exited(at(10))
    st1, reasons, plan = step(j, running(j), with_host(exited), at(11))
    s1 = st1.slices[1]
    assert (s1.state, s1.reason, s1.restarts) == ("Down", Reason.CONTAINER_RESTARTING, 1)
    assert s1.replacement is not None and s1.replacement.action == "RestartInPlace"
    assert s1.replacement.job_uid == worker_job_uid(1) and s1.replacement.blame == "Job"
    assert Reason.SLICE_RESTARTING_IN_PLACE in reasons
    assert Reason.SLICE_REPLACING not in reasons
    assert plan.actions == ()  # nothing deleted: the kubelet restarts it
    assert plan.wake_after_s == 120.0  # at the deadline, 120 s after the decision
    # The container runs again, not Ready yet: the same failure, nothing planned.
    st2, reasons, plan = step(j, st1, with_host(exited.restarted_in_place(at(12))
                                                .not_ready(at(12))), at(12))
    assert st2.slices[1].state == "Restarting" and st2.slices[1].restarts == 1
    assert plan.actions == ()
    # Ready again on the same pod: restarted in place, once.
    back = exited.restarted_in_place(at(13))
    st3, reasons, plan = step(j, st2, with_host(back), at(13))
    s3 = st3.slices[1]
    assert (s3.state, s3.restarts, s3.replacement) == ("Ready", 1, None)
    assert s3.last_replacement is not None and s3.last_replacement.action == "RestartInPlace"
    assert s3.last_replacement.seconds == 2.0
    assert Reason.SLICE_RESTARTED_IN_PLACE in reasons and Reason.SLICE_REPLACED not in reasons
    assert st3.counters.slice_failures == 1
    st4, reasons, _ = step(j, st3, with_host(back), at(20))
    assert st4.slices[1].restarts == 1 and Reason.SLICE_DOWN not in reasons


def test_not_back_within_the_deadline_it_is_recreated_and_said_once() -> None:
    j = job(inPlaceDeadlineSeconds=30)
    exited = WorkerPod(1, 2).container_exited(at(10))
    st1, _, plan = step(j, running(j), with_host(exited), at(11))
    assert plan.actions == () and plan.wake_after_s == 30.0
    st2, reasons, plan = step(j, st1, with_host(exited), at(41))
    assert st2.slices[1].replacement is not None
    assert st2.slices[1].replacement.action == "Replace"
    assert Reason.IN_PLACE_RESTART_TIMED_OUT in reasons
    assert plan.actions == (DeleteWorkerJob("ns", "article-worker-1", worker_job_uid(1), 1,
                                            Reason.CONTAINER_RESTARTING),)
    st3, reasons, _ = step(j, st2, with_host(exited), at(42))
    assert Reason.IN_PLACE_RESTART_TIMED_OUT not in reasons
    assert st3.slices[1].restarts == 1  # the one failure, recreated now


def test_a_restart_in_place_no_look_saw_is_counted_once_from_the_restart_counts() -> None:
    j = job()
    st0 = running(j)
    assert st0.slices[1].counted is not None and st0.slices[1].counted.container_restarts == 0
    again = WorkerPod(1, 0).restarted_in_place(at(10))  # restarted and Ready between looks
    st1, reasons, plan = step(j, st0, with_host(again), at(11))
    s1 = st1.slices[1]
    assert (s1.state, s1.reason, s1.restarts) == ("Down", Reason.CONTAINER_RESTARTING, 1)
    assert s1.replacement is not None and s1.replacement.action == "RestartInPlace"
    assert Reason.SLICE_DOWN in reasons and plan.actions == ()
    st2, reasons, _ = step(j, st1, with_host(again), at(12))
    assert (st2.slices[1].state, st2.slices[1].restarts) == ("Ready", 1)
    assert Reason.SLICE_RESTARTED_IN_PLACE in reasons
    st3, reasons, _ = step(j, st2, with_host(again), at(13))
    assert st3.slices[1].restarts == 1 and Reason.SLICE_DOWN not in reasons


def test_a_record_without_restart_counts_counts_none_of_the_past() -> None:
    """A status an older operator wrote has no containerRestarts: the restarts its pods
    already made are not counted again after an upgrade."""
    j = job()
    st0 = running(j)
    old = [s.model_copy(update={"counted": s.counted.model_copy(
        update={"container_restarts": None}) if s.counted else None}) for s in st0.slices]
    st0 = st0.model_copy(update={"slices": old})
    many = WorkerPod(1, 0).restarted_in_place(at(10), times=3)
    st1, reasons, _ = step(j, st0, with_host(many), at(11))
    assert st1.slices[1].restarts == 0 and Reason.SLICE_DOWN not in reasons
    assert st1.slices[1].counted is not None
    assert st1.slices[1].counted.container_restarts == 3


def test_a_hardware_exit_code_recreates_the_slice_on_a_spare() -> None:
    j = job(hardwareExitCodes=[42], quarantineAfterFailures=1)
    exited = WorkerPod(1, 2).container_exited(at(10), exit_code=42)
    st1, reasons, plan = step(j, running(j), with_host(exited), at(11))
    record = st1.slices[1].replacement
    assert record is not None and record.action == "Replace" and record.blame == "Reported"
    assert Reason.SLICE_REPLACING in reasons
    assert DeleteWorkerJob("ns", "article-worker-1", worker_job_uid(1), 1,
                           Reason.CONTAINER_RESTARTING) in plan.actions


def test_restart_in_place_off_recreates() -> None:
    j = job(restartInPlace=False)
    st1, _, plan = step(j, running(j), with_host(WorkerPod(1, 2).container_exited(at(10))),
                        at(11))
    assert st1.slices[1].replacement is not None
    assert st1.slices[1].replacement.action == "Replace"
    assert [type(a) for a in plan.actions] == [DeleteWorkerJob]


def test_a_node_that_goes_not_ready_while_its_pod_restarts_recreates_at_once() -> None:
    """Nothing is left to wait for: the evidence now calls for recreation, without the
    deadline, and the failure is still the one (the slice never came back); a container
    that runs again, not Ready yet, is waited for."""
    j = job()
    exited = WorkerPod(1, 2).container_exited(at(10))
    st1, _, _ = step(j, running(j), with_host(exited), at(11))
    st2, reasons, plan = step(j, st1, with_host(exited), at(13),
                              not_ready={"tpu-1-2": at(13)})
    record = st2.slices[1].replacement
    assert record is not None and record.action == "Replace" and record.blame == "Node"
    assert record.reason == Reason.NODE_NOT_READY and record.requested_at == at(13)
    assert reasons == [Reason.SLICE_REPLACING] and st2.slices[1].restarts == 1
    # A node that reports Ready=False may come back: its grace first (nodeNotReadySeconds).
    assert plan.actions == () and plan.wake_after_s == 5.0
    _, _, plan = step(j, st2, with_host(exited), at(18), not_ready={"tpu-1-2": at(13)})
    assert DeleteWorkerJob("ns", "article-worker-1", worker_job_uid(1), 1,
                           Reason.NODE_NOT_READY) in plan.actions


def test_a_container_running_again_not_ready_yet_is_waited_for() -> None:
    j = job()
    exited = WorkerPod(1, 2).container_exited(at(10))
    st1, _, _ = step(j, running(j), with_host(exited), at(11))
    running_again = exited.restarted_in_place(at(12)).not_ready(at(12))
    st2, reasons, plan = step(j, st1, with_host(running_again), at(30))
    assert st2.slices[1].replacement is not None
    assert st2.slices[1].replacement.action == "RestartInPlace" and plan.actions == ()
    assert reasons == []
