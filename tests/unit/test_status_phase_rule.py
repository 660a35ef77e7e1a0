"""The stall rule uses the phase (issue 60): where status.training.activity says what the
trainer is doing, each phase is held to its own deadline (rule Phase); where it does not,
today's rule judges (rule Steps), and the condition says which did. The step deadline is
learned from the trainer's step times, never from when reports arrive.

The MaxText-like job is the issue's: the progress sidecar reports every 5 s, 40 steps of
0.12 s per report, and MaxText evaluates for minutes with no train step."""
from __future__ import annotations

from typing import Any

import pytest

from elastic_api import progress_rules as rule
from elastic_api.conditions import Reason
from elastic_api.models import ElasticTrainingJob, TrainingReport
from elastic_api.phases import FIRST_FLOOR_SECONDS, STOPPED_GRACE_SECONDS
from elastic_operator.core.progressing import next_progress_look_in
from elastic_operator.core.stall_rule import deadline_of
from tests.builders import activity, foreign_job, phase_record
from tests.builders import at as s
from tests.support.progress_run import Run, job_with, progressing, training

EVERY, STEPS_PER_REPORT, STEP_SECONDS = 5.0, 40, 0.12
TRAIN = "train_step at train.py:412"
EVAL = "eval_step, called from train_loop at train.py:520"
BLOCKED = "block_until_ready, called from train_step at train.py:412"


def maxtext(**elastic: Any) -> ElasticTrainingJob:
    job = foreign_job(progress=True)
    if not elastic:
        return job
    spec = job.spec.model_copy(update={"elastic": job.spec.elastic.model_copy(update={
        "progress_deadline_seconds": elastic["progressDeadlineSeconds"]})})
    return job.model_copy(update={"spec": spec})


def sidecar(t: float, step: int, act: dict[str, Any] | None,
            phases: list[dict[str, Any]] | None = None) -> TrainingReport:
    """What the progress sidecar reports at t: the newest step, MaxText's step time, and
    the phase it sampled (None: it could not sample the process)."""
    more: dict[str, Any] = {"stepSeconds": STEP_SECONDS}
    if act is not None:
        more["activity"] = act
    if phases:
        more["phases"] = phases
    return training(s(t), step, **more)


def trains(run: Run, start: float, end: float, step: int, *, sampled: bool = True,
           since: float | None = None) -> int:
    """Reports every 5 s from `start` to `end`, 40 steps each; the last step reported."""
    t = start
    while t <= end:
        step += STEPS_PER_REPORT
        act = activity("TrainStep", since if since is not None else start, last=t,
                       frame=TRAIN) if sampled else None
        run.look(t, sidecar(t, step, act))
        t += EVERY
    return step


def evaluates(run: Run, start: float, end: float, step: int, *, began: float | None = None,
              heartbeat_until: float | None = None,
              phases: list[dict[str, Any]] | None = None) -> None:
    """MaxText evaluating since `began` (default `start`; no train step), its running_eval
    lines a heartbeat until `heartbeat_until` (default: throughout); a look every 5 s from
    `start` to `end`."""
    t, began = start, start if began is None else began
    while t <= end:
        last = min(t, heartbeat_until if heartbeat_until is not None else t)
        run.look(t, sidecar(t, step, activity("Evaluation", began, last=last, frame=EVAL),
                            phases))
        t += EVERY


def training_run(job: ElasticTrainingJob | None = None, *, sampled: bool = True
                 ) -> tuple[Run, int]:
    """Initializing at 0 s, then training from 10 s to 300 s."""
    run = Run(job or maxtext())
    run.look(0, training(s(0), 0, state="Initializing"))
    return run, trains(run, 10, 300, 0, sampled=sampled)


# --- what is learned ------------------------------------------------------------------------


def test_the_step_deadline_is_learned_from_the_step_time_not_the_report_cadence() -> None:
    """The issue's run learned 5 s gaps (the sidecar's cadence) while steps took 0.12 s."""
    run, _ = training_run()
    progress = run.status.progress
    assert progress.gaps[-1] == EVERY  # what arrives when
    assert progress.step_seconds[-1] == pytest.approx(EVERY / STEPS_PER_REPORT)  # per step
    learned = rule.MEDIAN_FACTOR * EVERY / STEPS_PER_REPORT
    assert rule.step_deadline(progress.step_seconds) == rule.FLOOR_SECONDS > learned
    # Reports every 8 s: 10 x the gap would be 80 s; 10 x the step time is under the floor.
    slow = Run(maxtext())
    slow.look(0, training(s(0), 0, state="Initializing"))
    step, t = 0, 10.0
    while t <= 300:
        step += 64
        slow.look(t, sidecar(t, step, None))
        t += 8
    assert slow.status.progress.deadline_seconds == rule.FLOOR_SECONDS
    assert max(slow.status.progress.step_seconds) == pytest.approx(0.125)


def test_a_step_time_the_trainer_reports_counts_when_longer_than_the_gap_says() -> None:
    assert rule.step_sample(5.0, 40, 0.12) == 0.125
    assert rule.step_sample(5.0, 40, 0.5) == 0.5
    assert rule.step_sample(5.0, 0, 0.5) is None
    assert rule.step_deadline([20.0] * 8) == 200.0
    assert rule.step_deadline([20.0] * 8, extended=True) == 1000.0
    assert rule.step_deadline([20.0] * 8, spec_seconds=15) == 15.0


def test_the_operators_rule_and_elastic_apis_function_agree_on_one_history() -> None:
    """ONE contract: the bundled trainer's watchdog calls elastic_api.progress_rules with its own
    step times; the operator learns them from status.training. Fed the same history (steps
    of 3 s to 33 s, 1 to 3 per report, with and without stepSeconds), they give the same
    deadlines and verdicts."""
    history = [(10.0, 1, None), (40.0, 2, 12.0), (52.0, 1, None), (85.0, 1, 30.0),
               (94.0, 3, None), (109.0, 2, 7.5), (118.0, 1, None), (145.0, 2, 13.5)]
    run = Run(maxtext())
    run.look(0, training(s(0), 0, state="Initializing"))
    step, samples, last = 0, [], None
    for t, steps, step_seconds in history:
        step += steps
        more = {"stepSeconds": step_seconds} if step_seconds is not None else {}
        run.look(t, training(s(t), step, activity=activity("TrainStep", 10, frame=TRAIN),
                             **more))
        if last is not None:  # the first step after the start teaches nothing (a compile)
            samples.append(rule.step_sample(t - last, steps, step_seconds))
        last = t
    assert run.status.progress.step_seconds == samples
    deadline = rule.step_deadline(samples)
    assert deadline == 120.0  # 10 x the median, 12 s per step
    # A device call blocked from 147 s: the operator and the function, at the same moment.
    blocked = activity("DeviceWait", 147, frame=BLOCKED)
    for t in (200.0, 266.0, 268.0):
        status = run.look(t, training(s(t), step, activity=blocked))
        verdict = rule.judge_phase("DeviceWait", s(147), s(t), step_deadline_seconds=deadline,
                                   last_step_at=s(145))
        assert status.progress.deadline_seconds == verdict.deadline == deadline
        assert (progressing(status)[0] == "False") == verdict.past, t
    assert progressing(status)[0] == "False"


# --- no false alarm through a long phase -----------------------------------------------------


@pytest.mark.parametrize("deadline", [None, 40], ids=["learned", "spec 40 s (make e2e-maxtext)"])
def test_an_evaluation_of_minutes_with_its_heartbeat_keeps_progressing_true(
        deadline: int | None) -> None:
    """The issue's run: MaxText evaluating from step 310 for 150 s+, its running_eval lines
    a heartbeat: True throughout (PhaseInProgress, naming the evaluation), no restart."""
    job = maxtext(progressDeadlineSeconds=deadline) if deadline else maxtext()
    run, step = training_run(job)
    run.events = []
    evaluates(run, 305, 480, step)
    st, reason, message = progressing(run.status)
    assert (st, reason) == ("True", Reason.PHASE_IN_PROGRESS)
    assert message.startswith(f"evaluation for 175 s in {EVAL}, last sign of life 0 s ago, "
                              "within its deadline of 15 min (the first evaluation of this "
                              "run)")
    assert "rule Phase: Evaluation sampled by the progress sidecar" in message
    assert run.status.progress.rule == "Phase" and run.status.progress.phase == "Evaluation"
    assert run.reasons() == [] and run.status.progress.restart is None
    assert run.status.counters.stall_restarts == 0
    # Training again: StepsAdvancing, and the evaluation's gap taught nothing of the step time.
    trains(run, 485, 520, step, since=485)
    assert progressing(run.status)[:2] == ("True", Reason.STEPS_ADVANCING)
    assert max(run.status.progress.step_seconds) < 1
    assert run.reasons() == []


def test_the_same_evaluation_without_the_phase_is_todays_false_alarm() -> None:
    """A sidecar that cannot sample: today's rule judges, and says so."""
    run, step = training_run(sampled=False)
    assert run.status.progress.rule == "Steps"
    assert "(rule Steps: the trainer's phase is not reported)" in progressing(run.status)[2]
    t = 305.0
    while t <= 370:
        run.look(t, sidecar(t, step, None))
        t += EVERY
    st, reason, message = progressing(run.status)
    assert (st, reason) == ("False", Reason.PROGRESS_DEADLINE_EXCEEDED)
    assert message.startswith("no new step for 70 s (progress deadline 60 s; rule Steps: "
                              "the trainer's phase is not reported): training stopped at "
                              f"step {step}; a hung MaxText")


def test_a_report_without_the_phase_after_an_evaluation_counts_its_last_sign_of_life() -> None:
    """The sidecar missing one sample after minutes of evaluation: the steps rule counts
    from the evaluation's newest heartbeat, not from the step before it."""
    run, step = training_run()
    evaluates(run, 305, 460, step)
    run.look(465, sidecar(465, step, None))
    assert progressing(run.status)[0] == "True" and run.status.progress.rule == "Steps"
    assert next_progress_look_in(run.job.spec, run.status.progress, s(465)) == 55.0


def test_a_long_synchronous_save_and_a_first_compile_after_a_resize_are_no_stall() -> None:
    """The bundled trainer reporting its own phase: a 3-minute save with no heartbeat, and
    a 20-minute compile after a hold."""
    run = Run(job_with())
    run.look(0, training(s(0), 0, state="Initializing"))
    step = run.steps(10, 100, 5)
    save = activity("CheckpointSave", 101, source="Trainer", frame="save at checkpoint.py:88")
    for t in range(105, 290, 15):
        run.look(t, training(s(t), step, activity=save))
    st, reason, message = progressing(run.status)
    assert (st, reason) == ("True", Reason.PHASE_IN_PROGRESS)
    assert "checkpoint save for 184 s in save at checkpoint.py:88, last sign of life 184 s " \
        "ago, within its deadline of 15 min (the first checkpoint save of this run)" in message
    assert "rule Phase: CheckpointSave reported by the trainer" in message
    # A hold (a resize), then its recompile: the first compile of the new mesh.
    run.look(300, training(s(300), step, state="Recovering"))
    compiling = activity("Compile", 301, source="Trainer")
    for t in range(305, 1500, 60):
        run.look(t, training(s(t), step, activity=compiling))
    assert progressing(run.status)[:2] == ("True", Reason.PHASE_IN_PROGRESS)
    assert run.status.progress.deadline_seconds == FIRST_FLOOR_SECONDS["Compile"]
    assert Reason.PROGRESS_DEADLINE_EXCEEDED not in run.reasons()


# --- stalls the phase names ------------------------------------------------------------------


def test_an_evaluation_that_stops_its_heartbeat_is_stalled_past_its_deadline() -> None:
    """A second evaluation whose lines stop: held to 2 x the longest one so far (150 s),
    counted from its newest line; then restarted (onStall Recover)."""
    run, step = training_run()
    record = [phase_record("Evaluation", 150.0)]
    run.events = []
    evaluates(run, 305, 600, step, heartbeat_until=320, phases=record)
    assert progressing(run.status)[0] == "True"  # 280 s without a line, deadline 300 s
    evaluates(run, 605, 625, step, began=305, heartbeat_until=320, phases=record)
    st, reason, message = progressing(run.status)
    assert (st, reason) == ("False", Reason.PROGRESS_DEADLINE_EXCEEDED)
    assert message.startswith(f"evaluation running for 320 s in {EVAL}, no sign of life for "
                              "305 s, past its deadline of 300 s (the longest evaluation so "
                              "far took 150 s; rule Phase: Evaluation sampled by the "
                              f"progress sidecar): training stopped at step {step}")
    assert run.reasons() == [Reason.PROGRESS_DEADLINE_EXCEEDED, Reason.TRAINER_RESTARTING]
    assert run.status.counters.stall_restarts == 1


def test_a_device_call_blocked_past_the_step_deadline_is_named_sooner_than_steps() -> None:
    """After a 150 s evaluation, the steps rule's deadline is 2 x that gap; a main thread
    blocked in one device call is held to the step deadline (60 s) and named with its
    frame, in the condition and the Warning Event."""
    run, step = training_run()
    evaluates(run, 305, 455, step)
    step = trains(run, 460, 600, step, since=460)
    steps_rule = deadline_of(run.job.spec, run.status.progress, saving=False)
    assert steps_rule >= 300.0
    run.events = []
    blocked = activity("DeviceWait", 601, frame=BLOCKED, processState="Sleeping")
    for t in (605, 655, 660):
        run.look(t, sidecar(t, step, blocked))
    assert progressing(run.status)[0] == "True"
    assert "blocked 59 s in " + BLOCKED + ", within the step deadline of 60 s" in \
        progressing(run.status)[2]
    run.look(662, sidecar(662, step, blocked))
    st, reason, message = progressing(run.status)
    assert (st, reason) == ("False", Reason.PROGRESS_DEADLINE_EXCEEDED)
    assert message.startswith(f"blocked 61 s in {BLOCKED}, past the step deadline of 60 s "
                              "(rule Phase: DeviceWait sampled by the progress sidecar): "
                              f"training stopped at step {step}; a hung MaxText")
    warning = run.events[0]
    assert warning.reason == Reason.PROGRESS_DEADLINE_EXCEEDED and BLOCKED in warning.message
    assert run.reasons() == [Reason.PROGRESS_DEADLINE_EXCEEDED, Reason.TRAINER_RESTARTING]


def test_a_stopped_process_is_stalled_after_its_grace() -> None:
    """SIGSTOP: the sidecar samples the process Stopped."""
    run, step = training_run()
    stopped = activity("Stopped", 302, frame=TRAIN, processState="Stopped")
    run.events = []
    run.look(320, sidecar(320, step, stopped))
    st, reason, message = progressing(run.status)
    assert (st, reason) == ("True", Reason.STEPS_ADVANCING)
    assert f"the trainer process is stopped for 18 s in {TRAIN}, within its grace of 30 s" \
        in message
    run.look(302 + STOPPED_GRACE_SECONDS + 15, sidecar(347, step, stopped))
    st, reason, message = progressing(run.status)
    assert (st, reason) == ("False", Reason.PROGRESS_DEADLINE_EXCEEDED)
    assert message.startswith("the trainer process is stopped (SIGSTOP, a debugger?) for "
                              f"45 s in {TRAIN}, past its grace of 30 s (rule Phase: Stopped "
                              "sampled by the progress sidecar): training stopped at step "
                              f"{step}; a hung MaxText: the metrics file the progress sidecar "
                              "follows")
    assert run.reasons() == [Reason.PROGRESS_DEADLINE_EXCEEDED, Reason.TRAINER_RESTARTING]


def test_a_stall_found_by_phase_counts_against_the_stall_restart_budget() -> None:
    run, step = training_run(maxtext())
    run.job = run.job.model_copy(update={"spec": run.job.spec.model_copy(update={
        "elastic": run.job.spec.elastic.model_copy(update={"max_stall_restarts": 0})})})
    run.events = []
    run.look(340, sidecar(340, step, activity("Stopped", 302, processState="Stopped")))
    assert run.reasons() == [Reason.PROGRESS_DEADLINE_EXCEEDED,
                             Reason.STALL_RESTARTS_EXHAUSTED]
    assert run.status.progress.restart is None
