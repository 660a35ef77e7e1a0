"""The operator's own progress tracking (core/progressing.py): condition Progressing in the
Deployment convention, its Warning Event once per stall, the learned deadline kept in
status.progress across an operator restart, the trainer restart for a stall nothing is
blamed for (spec.elastic.onStall), slow steps (Degraded SlowSteps), and no false alarm
through anything that holds steps on purpose (table below)."""
from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest

from elastic_api import progress_rules as rule
from elastic_api.conditions import ConditionType as C
from elastic_api.conditions import Reason
from elastic_api.models import CheckpointRequest, CheckpointStatus
from elastic_operator.core.plan import RestartTrainer
from elastic_operator.core.progressing import next_progress_look_in, plan_trainer_restart
from elastic_operator.core.setter import get_condition
from elastic_operator.core.status_events import StatusEvent, event_name
from tests.builders import (
    WorkerPod,
    foreign_job,
    head_pod,
    main_running,
    observe,
    observed_jobset,
)
from tests.builders import at as s
from tests.support.progress_run import (
    HEAD,
    Run,
    job_with,
    pods,
    progressing,
    started_run,
    training,
)

# --- a frozen trainer ------------------------------------------------------------------------


def test_steps_advancing_then_a_frozen_trainer_is_stalled_once_after_the_deadline() -> None:
    run, last = started_run()
    status = run.status
    assert progressing(status)[:2] == ("True", Reason.STEPS_ADVANCING)
    assert status.progress is not None and status.progress.deadline_seconds == rule.FLOOR_SECONDS
    assert status.progress.gaps[-1] == 5.0
    # Frozen at 100 s: no report any more (SIGSTOP). Still True before the deadline...
    assert progressing(run.look(159))[0] == "True"
    assert next_progress_look_in(run.job.spec, run.status.progress, s(159)) == 1.0
    # ...False after it, with the step, for how long, and what it looks like.
    run.events = []
    st, reason, message = progressing(run.look(161))
    assert (st, reason) == ("False", Reason.PROGRESS_DEADLINE_EXCEEDED)
    assert f"training stopped at step {last}" in message and "no new step for 61 s" in message
    assert "a frozen trainer: it has reported nothing since" in message
    assert "its main container runs" in message
    assert run.reasons() == [Reason.PROGRESS_DEADLINE_EXCEEDED, Reason.TRAINER_RESTARTING]
    # onStall Recover (the default): the head pod to delete is recorded first.
    restart = run.status.progress.restart
    assert restart is not None and restart.pod_uid == "head-uid-1" and restart.step == last
    assert plan_trainer_restart("ns", "article", run.status.progress, pods()) == RestartTrainer(
        "ns", "article-pathways-head-0", "head-job-uid", HEAD.name, "head-uid-1", last)
    # Once per stall, also across an operator restart.
    run.events = []
    run.restart_operator()
    assert progressing(run.look(200))[:2] == ("False", Reason.PROGRESS_DEADLINE_EXCEEDED)
    assert run.reasons() == [] and run.status.progress.restart == restart
    assert "restarting the trainer (head pod" in progressing(run.status)[2]
    # The pod going: nothing left to do.
    going = replace(HEAD, deletion_timestamp=s(201))
    assert plan_trainer_restart("ns", "article", run.status.progress, pods(going)) is None


def test_the_new_trainer_process_is_counted_and_waited_for() -> None:
    run, last = started_run()
    run.look(161)
    new_head = replace(head_pod(main=main_running(s(170)), name="article-pathways-head-0-1"),
                       uid="head-uid-2", job_uid="head-job-uid")
    run.events = []
    restarted = training(s(175), last - 3, state="Initializing", processId=8,
                         processStartedAt=s(170).isoformat())
    status = run.look(175, restarted, observe(pods(new_head)))
    assert status.counters.trainer_restarts == 1
    assert run.reasons() == [Reason.TRAINER_RESTARTED]
    assert progressing(status)[:2] == ("Unknown", Reason.WAITING_FOR_FIRST_STEP)
    # A start longer than any deadline is no stall (the process has made no step yet).
    assert progressing(run.look(900))[0] == "Unknown"
    status = run.look(905, training(s(905), last - 2, processId=8,
                                    processStartedAt=s(170).isoformat()),
                      observe(pods(new_head)))
    assert progressing(status)[:2] == ("True", Reason.STEPS_ADVANCING)
    assert status.progress.restart is not None  # kept: the latest restart
    assert plan_trainer_restart("ns", "article", status.progress, pods(new_head)) is None


def test_on_stall_report_restarts_nothing() -> None:
    run, _ = started_run(job_with(onStall="Report"))
    run.events = []
    message = progressing(run.look(161))[2]
    assert run.reasons() == [Reason.PROGRESS_DEADLINE_EXCEEDED]
    assert run.status.progress.restart is None and "onStall is Report" in message


def test_stall_restarts_are_counted_against_their_budget_then_reported_only() -> None:
    """A trainer that stalls again after every restart (a data loader that hangs at the
    same step) is restarted maxStallRestarts times, each counted (and kept across an
    operator restart); the next stall says the budget is spent, posts one
    StallRestartsExhausted Event and deletes no head pod."""
    run, last = started_run(job_with(maxStallRestarts=2))
    t, process = 161.0, 7
    for n in (1, 2):
        run.events = []
        status = run.look(t)
        assert run.reasons() == [Reason.PROGRESS_DEADLINE_EXCEEDED, Reason.TRAINER_RESTARTING]
        assert status.counters.stall_restarts == n
        run.restart_operator()
        assert run.look(t + 1).counters.stall_restarts == n  # once per stall
        # The restarted trainer resumes, makes steps, and stalls again.
        process += 1
        head = replace(head_pod(main=main_running(s(t + 5)), name=f"article-head-{n}"),
                       uid=f"head-uid-{n + 1}", job_uid="head-job-uid")
        for k in range(8):
            at_ = t + 10 + 5 * k
            run.look(at_, training(s(at_), last + k, processId=process,
                                   processStartedAt=s(t + 5).isoformat()),
                     observe(pods(head)))
        t = t + 10 + 5 * 7 + 61
    run.events = []
    status = run.look(t, observed=observe(pods(head)))
    st, reason, message = progressing(status)
    assert (st, reason) == ("False", Reason.PROGRESS_DEADLINE_EXCEEDED)
    assert "stall restart budget is spent (2 restarts, maxStallRestarts 2)" in message
    assert run.reasons() == [Reason.PROGRESS_DEADLINE_EXCEEDED,
                             Reason.STALL_RESTARTS_EXHAUSTED]
    assert status.counters.stall_restarts == 2
    assert plan_trainer_restart("ns", "article", status.progress, pods(head)) is None
    run.events = []
    run.restart_operator()
    run.look(t + 30, observed=observe(pods(head)))
    assert run.reasons() == []  # the Event once per stall


def test_no_stall_restart_budget_reports_the_first_stall_only() -> None:
    run, _ = started_run(job_with(maxStallRestarts=0))
    run.events = []
    status = run.look(161)
    assert run.reasons() == [Reason.PROGRESS_DEADLINE_EXCEEDED,
                             Reason.STALL_RESTARTS_EXHAUSTED]
    assert status.progress.restart is None and status.counters.stall_restarts == 0


def test_a_deadline_in_the_spec_is_taken_as_given() -> None:
    run, _ = started_run(job_with(progressDeadlineSeconds=15))
    assert run.status.progress.deadline_seconds == 15
    assert progressing(run.look(114))[0] == "True"
    assert progressing(run.look(116))[0] == "False"


def test_the_learned_deadline_follows_the_observed_interval_and_survives_a_restart() -> None:
    run = Run(job_with())
    run.look(0, training(s(0), 0, state="Initializing"))
    last = run.steps(10, 410, 20)
    assert run.status.progress.deadline_seconds == 200.0  # 10 x the median gap of 20 s
    run.restart_operator()
    assert progressing(run.look(600))[0] == "True"  # 190 s without a step
    assert progressing(run.look(611))[:2] == ("False", Reason.PROGRESS_DEADLINE_EXCEEDED)
    assert f"step {last}" in progressing(run.status)[2]


# --- what a stall looks like -----------------------------------------------------------------


def test_a_hung_maxtext_is_named_from_the_progress_sidecar() -> None:
    run, _ = started_run(foreign_job(progress=True))
    message = progressing(run.look(161))[2]
    assert "a hung MaxText: the metrics file the progress sidecar follows has had no new " \
        "step" in message


def test_a_slow_slice_is_named_from_the_trainers_watchdog_and_no_trainer_restart() -> None:
    run, last = started_run()
    stall = {"step": last + 1, "phase": "Step", "startedAt": s(100).isoformat(),
             "detectedAt": s(102).isoformat(), "deadlineSeconds": 1.5,
             "suspectSlices": [2], "evidence": "slice 2's part of step did not finish"}
    run.look(102, training(s(102), last, stall=stall))
    run.events = []
    message = progressing(run.look(163))[2]
    assert "a slow slice: the trainer's watchdog reports step" in message
    assert "suspects slice 2: slice 2's part of step did not finish" in message
    assert Reason.TRAINER_RESTARTING not in run.reasons()
    assert run.status.progress.restart is None


def test_a_hung_step_nothing_is_blamed_for_restarts_the_trainer() -> None:
    run, last = started_run()
    stall = {"step": last + 1, "phase": "Step", "startedAt": s(100).isoformat(),
             "detectedAt": s(102).isoformat(), "deadlineSeconds": 1.5}
    run.look(102, training(s(102), last, stall=stall))
    message = progressing(run.look(163))[2]
    assert "a hung step: the trainer's watchdog reports" in message
    assert "can blame no slice" in message
    assert run.status.progress.restart is not None


# --- no false alarms -------------------------------------------------------------------------


def _held_until(run: Run, last: int, t_end: float, **look: Any) -> None:
    """No step from 100 s to t_end; the hold (look's arguments) in force meanwhile."""
    for t in range(105, int(t_end) + 1, 15):
        run.look(t, **look)


PAUSE = CheckpointRequest(id=1, reason="Maintenance", slices=[0], requested_at=s(100),
                          deadline=s(400), pause=True, pause_seconds=600, phase="Acknowledged")
# (case, what holds, why the condition says, what ends it)
HOLDS: list[tuple[str, dict[str, Any], str, dict[str, Any]]] = [
    ("suspended", {"observed": observe(pods(), observed_jobset().suspended().build())},
     "the job is suspended", {}),
    ("a slice already down (a recovery in progress)",
     {"observed": observe([WorkerPod(0, 0).failed(s(101)).build(), *pods()[1:]])},
     "slice 0 not Ready", {"step": 1}),
    ("a maintenance pause", {"checkpoint_request": PAUSE},
     "the trainer holds for maintenance",
     {"checkpoint_request": PAUSE.model_copy(update={"phase": "Released"})}),
    ("a restore (the trainer recovering)", {"report": "Recovering"},
     "the trainer reports Recovering", {}),
]


@pytest.mark.parametrize(("case", "look", "why", "end"), HOLDS, ids=[h[0] for h in HOLDS])
def test_no_stall_while_steps_are_held(case: str, look: dict[str, Any], why: str,
                                       end: dict[str, Any]) -> None:
    run, last = started_run()
    if look.get("report") == "Recovering":
        look = {"report": training(s(101), last, state="Recovering")}
    run.events = []
    _held_until(run, last, 600, **look)
    st, reason, message = progressing(run.status)
    assert (st, reason) == ("Unknown", Reason.PROGRESS_HELD) and why in message, case
    assert Reason.PROGRESS_DEADLINE_EXCEEDED not in run.reasons()
    # The hold ends: the clock starts then, and the first step may take the longer
    # (first-step) deadline: a recompile after a resize, a restore, a resume.
    end = dict(end)
    run.look(601, training(s(601), last + end.pop("step", 0)), observe(pods()), **end)
    assert progressing(run.status)[0] == "True", case
    first_step = rule.FLOOR_SECONDS * rule.EXTENDED_FACTOR
    assert progressing(run.look(600 + first_step - 1))[0] == "True", case
    assert progressing(run.look(601 + first_step + 1))[0] == "False", case


def test_no_stall_while_kueue_holds_the_job() -> None:
    from tests.kueue_builders import queued_job, workload
    run = Run(queued_job())
    run.look(0, training(s(0), 0, state="Initializing"),
             observe(pods(), workload=workload().admitted(s(0)).build()))
    admitted = observe(pods(), workload=workload().admitted(s(0)).build())
    step = 1
    for t in range(10, 101, 5):
        run.look(t, training(s(t), step), admitted)
        step += 1
    evicted = observe([], observed_jobset(queued_job()).suspended().build(),
                      workload=workload().preempted(s(101)).build())
    for t in range(105, 700, 30):
        run.look(t, observed=evicted)
    assert progressing(run.status)[:2] == ("Unknown", Reason.PROGRESS_HELD)
    assert "Kueue holds the job" in progressing(run.status)[2]
    assert Reason.PROGRESS_DEADLINE_EXCEEDED not in run.reasons()


def test_a_job_not_yet_started_or_initializing_is_never_stalled() -> None:
    run = Run(job_with())
    run.look(0)  # no report at all
    assert progressing(run.status)[:2] == ("Unknown", Reason.WAITING_FOR_FIRST_STEP)
    run.look(10, training(s(10), 0, state="Initializing"))
    run.look(5000)
    assert progressing(run.status)[:2] == ("Unknown", Reason.WAITING_FOR_FIRST_STEP)
    assert run.reasons() == []


def test_no_stall_through_the_jobs_own_checkpoint_saves() -> None:
    """A save every 10 steps makes a gap of 40 s: learned (2 x the longest gap)."""
    run = Run(job_with())
    run.look(0, training(s(0), 0, state="Initializing"))
    t, step = 10.0, 1
    while t < 1000:
        run.look(t, training(s(t), step))
        t += 40 if step % 10 == 0 else 5
        step += 1
    assert run.status.progress.deadline_seconds == 80.0
    assert Reason.PROGRESS_DEADLINE_EXCEEDED not in run.reasons()


def test_a_first_long_save_in_flight_gets_the_longer_deadline() -> None:
    run, last = started_run()
    saving = CheckpointStatus(directory="gs://b/ckpt", latest_committed_step=None,
                              incomplete_steps=[last], observed_at=s(101))
    run.status = run.status.model_copy(update={"checkpoint": saving})
    assert progressing(run.look(250, observed=observe(pods(), checkpoint=None)))[0] == "True"
    assert run.status.progress.deadline_seconds == rule.FLOOR_SECONDS * rule.EXTENDED_FACTOR


def test_a_machine_at_load_10_raises_no_alarm() -> None:
    """Reports late and steps jittering (2 to 15 s apart, one 55 s hiccup): the deadline
    has the floor and learns the median; the steps are never slow for long."""
    rng = random.Random(10)
    run = Run(job_with())
    run.look(0, training(s(0), 0, state="Initializing"))
    t, step = 10.0, 1
    while t < 1500:
        run.look(t, training(s(t), step))
        t += 55 if step == 60 else rng.uniform(2, 15)
        step += rng.choice((1, 1, 2))
    assert Reason.PROGRESS_DEADLINE_EXCEEDED not in run.reasons()
    assert Reason.SLOW_STEPS not in run.reasons()
    assert progressing(run.status)[0] == "True"


# --- slow steps ------------------------------------------------------------------------------


def test_sustained_slow_steps_make_degraded_slow_steps_with_the_factor() -> None:
    run = Run(job_with())
    run.look(0, training(s(0), 0, state="Initializing"))
    step = run.steps(10, 200, 5, step_every=50)  # 0.1 s per step
    # 2.5 times slower from 200 s: 20 steps per 5 s, slice 1 the straggler.
    times = [{"slice": i, "seconds": 0.25 if i == 1 else 0.1, "relative": 2.5 if i == 1
              else 1.0} for i in range(3)]
    t = 205.0
    while t < 400:
        step += 20
        run.look(t, training(s(t), step, sliceStepTimes=times))
        t += 5
    degraded = get_condition(run.status, C.DEGRADED)
    assert degraded is not None and (degraded.status, degraded.reason) == ("True",
                                                                           Reason.SLOW_STEPS)
    assert "steps take 2.5x the job's own best (0.25 s against 0.1 s per step)" in \
        degraded.message
    assert "slice 1's part takes 2.5x the fastest slice's" in degraded.message
    assert run.reasons().count(Reason.SLOW_STEPS) == 1
    assert progressing(run.status)[0] == "True"  # slow is no stall
    # Back to speed: Degraded False again.
    while t < 600:
        step += 50
        run.look(t, training(s(t), step))
        t += 5
    assert get_condition(run.status, C.DEGRADED).status == "False"


def test_slow_steps_while_training_on_fewer_slices_stay_fewer_slices() -> None:
    run = Run(job_with())
    run.look(0, training(s(0), 0, state="Initializing"))
    step = run.steps(10, 200, 5, step_every=50)
    t = 205.0
    while t < 400:
        step += 10
        run.look(t, training(s(t), step, activeSlices=2))
        t += 5
    degraded = get_condition(run.status, C.DEGRADED)
    assert degraded is not None and degraded.reason == Reason.FEWER_SLICES
    assert Reason.SLOW_STEPS not in run.reasons()


def test_each_progress_event_has_a_name_of_its_own_stall() -> None:
    run, _ = started_run()
    run.look(161)
    stalled = run.status
    event = StatusEvent(reason=Reason.PROGRESS_DEADLINE_EXCEEDED, message="a")
    again = StatusEvent(reason=Reason.PROGRESS_DEADLINE_EXCEEDED, message="b")
    assert event_name("article", "uid-1", event, stalled) == \
        event_name("article", "uid-1", again, stalled)
    run.look(170, training(s(170), 500))
    assert event_name("article", "uid-1", event, run.status) != \
        event_name("article", "uid-1", event, stalled)
