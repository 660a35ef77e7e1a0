"""The progress sidecar's reading of what the trainer does (elastic_trainer.activity): the
contract's precedence over samples and the metrics file (Stopped, context frames,
DeviceWait, an evaluation the file shows, TrainStep), the signs of life inside a phase,
and the phases' durations; and the same without stacks (the metrics file only)."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

from elastic_api.models import TrainingReport
from elastic_api.phases import phase_deadline
from elastic_trainer.activity import ActivityTracker, Sample
from elastic_trainer.metrics_file import EvalRecord, Record, StepRecord
from elastic_trainer.own_activity import Activity
from elastic_trainer.progress_sidecar import pod_identity, progress_report
from elastic_trainer.stacks import Frame, ThreadStack

T0 = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)
TRAIN = "/venv/lib/python3.13/site-packages/maxtext/trainers/pre_train/train.py"
API = "/venv/lib/python3.13/site-packages/jax/_src/api.py"
COMPILER = "/venv/lib/python3.13/site-packages/jax/_src/compiler.py"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def stack(*frames: tuple[str, str, int], active: bool = False) -> ThreadStack:
    return ThreadStack(1, active, tuple(Frame(n, p, p.rsplit("/", 1)[-1], line)
                                        for n, p, line in frames))


LOOP = ("train_loop", TRAIN, 1402)
STEP = ("training_loop_iteration", TRAIN, 870)
BLOCKED = stack(("block_until_ready.<locals>.try_to_block", API, 2791),
                ("block_until_ready", API, 2800), ("train_step", TRAIN, 412), LOOP)
COMPILING = stack(("backend_compile_and_load", COMPILER, 402), ("compile_or_get_cached",
                                                                 COMPILER, 516), STEP, LOOP,
                  active=True)
DISPATCH = stack(STEP, LOOP, active=True)


def train(step: int) -> StepRecord:
    return StepRecord(step, 2.0, 0.1)


def running_eval(index: int, seconds: float = 0.5) -> EvalRecord:
    return EvalRecord(summary=False, eval_step=index, step_seconds=seconds)


def lines(*items: tuple[float, Record]) -> list[tuple[datetime, Record]]:
    return [(at(s), r) for s, r in items]


def test_nothing_before_the_trainer_does_anything_known() -> None:
    tracker = ActivityTracker()
    tracker.see_sample(Sample(at(0), "Running", 1.0, DISPATCH))
    assert tracker.activity() is None and tracker.phases() is None


def test_a_compile_is_named_with_the_frame_and_timed_when_it_ends() -> None:
    tracker = ActivityTracker()
    for s in (0, 2, 4):
        tracker.see_sample(Sample(at(s), "Running", 10.0 + s, COMPILING))
    activity = tracker.activity()
    assert activity is not None
    assert (activity.phase, activity.source, activity.since) == ("Compile", "Sampled", at(0))
    assert activity.last_activity_at == at(4)  # CPU time advanced
    # the innermost compiler frame, as stack_phases names a compile
    assert activity.frame == ("backend_compile_and_load, called from training_loop_iteration "
                              "at train.py:870")
    tracker.see_lines(lines((5, train(0))))
    tracker.see_sample(Sample(at(6), "Running", 17.0, DISPATCH))
    activity = tracker.activity()
    assert activity is not None and activity.phase == "TrainStep"
    (record,) = tracker.phases() or []
    assert (record.phase, record.count, record.last_seconds) == ("Compile", 1, 6.0)


def test_the_sidecar_and_the_bundled_trainer_book_a_phase_alike() -> None:
    """One contract: a compile of 6.0005 s sampled by the sidecar and one the trainer
    timed itself give the same status.training.phases, so the same learned deadline."""
    tracker = ActivityTracker()
    for s in (0, 2, 4):
        tracker.see_sample(Sample(at(s), "Running", 10.0 + s, COMPILING))
    tracker.see_lines(lines((5, train(0))))
    tracker.see_sample(Sample(at(6.0005), "Running", 17.0, DISPATCH))
    own = Activity()
    own.ended("Compile", 6.0005)
    assert tracker.phases() == own.records()
    assert own.longest("Compile") == 6.0  # what the watchdog learns from: as reported
    assert phase_deadline("Compile", own.longest("Compile"), 1.0) == 60.0


def test_one_sample_in_a_phase_is_a_passing_call_not_recorded() -> None:
    tracker = ActivityTracker()
    tracker.see_lines(lines((0, train(0))))
    tracker.see_sample(Sample(at(1), "Running", 1.0, COMPILING))
    tracker.see_sample(Sample(at(3), "Running", 2.0, DISPATCH))
    assert tracker.phases() is None


def test_a_main_thread_that_stays_in_one_device_call_is_device_wait() -> None:
    tracker = ActivityTracker()
    tracker.see_lines(lines((0, train(7))))
    tracker.see_sample(Sample(at(2), "Sleeping", 5.0, BLOCKED))
    first = tracker.activity()
    assert first is not None and first.phase == "TrainStep"  # one sample: a step's wait
    tracker.see_sample(Sample(at(4), "Sleeping", 5.5, BLOCKED))
    activity = tracker.activity()
    assert activity is not None
    assert (activity.phase, activity.since, activity.last_activity_at) == \
        ("DeviceWait", at(2), None)
    assert activity.frame == "block_until_ready, called from train_step at train.py:412"
    assert (activity.process_state, activity.cpu_seconds) == ("Sleeping", 5.5)


def test_a_line_between_two_samples_is_progress_not_one_long_wait() -> None:
    """Steps slower than the samples: the same wait in both, a step done between them."""
    tracker = ActivityTracker()
    tracker.see_lines(lines((0, train(7))))
    tracker.see_sample(Sample(at(2), "Sleeping", 5.0, BLOCKED))
    tracker.see_lines(lines((3, train(8))))
    tracker.see_sample(Sample(at(4), "Sleeping", 5.5, BLOCKED))
    activity = tracker.activity()
    assert activity is not None and activity.phase == "TrainStep"


def test_a_stopped_process_is_stopped_whatever_its_stack() -> None:
    tracker = ActivityTracker()
    tracker.see_lines(lines((0, train(3))))
    tracker.see_sample(Sample(at(1), "Stopped", 9.0, COMPILING))
    activity = tracker.activity()
    assert activity is not None
    assert (activity.phase, activity.source, activity.process_state) == \
        ("Stopped", "Sampled", "Stopped")
    assert activity.frame is not None and "backend_compile_and_load" in activity.frame
    assert activity.last_activity_at is None


def test_stopped_is_seen_without_stacks_too() -> None:
    """No permission to read the stacks: /proc still says the process is stopped."""
    tracker = ActivityTracker()
    tracker.see_lines(lines((0, train(3))))
    tracker.see_sample(Sample(at(1), "Stopped", 9.0, None))
    activity = tracker.activity()
    assert activity is not None and (activity.phase, activity.frame) == ("Stopped", None)


def test_an_evaluation_the_file_shows_is_a_phase_with_a_heartbeat() -> None:
    """MaxText's running_eval lines after the last train line; the evaluation is timed
    from its first line (less that step's time) to the next train line."""
    tracker = ActivityTracker()
    tracker.see_lines(lines((0, train(19)), (10, running_eval(0, seconds=4.0))))
    tracker.see_sample(Sample(at(11), "Running", 3.0, DISPATCH))
    for s in range(12, 160, 2):
        tracker.see_lines(lines((s, running_eval(s))))
        tracker.see_sample(Sample(at(s + 1), "Running", 3.0 + s, DISPATCH))
    activity = tracker.activity()
    assert activity is not None
    assert (activity.phase, activity.source, activity.since) == \
        ("Evaluation", "MetricsFile", at(6))
    assert activity.last_activity_at == at(159)
    summary = EvalRecord(summary=True, eval_step=None, step_seconds=None)
    tracker.see_lines(lines((170, train(20)), (170, summary)))
    tracker.see_sample(Sample(at(171), "Running", 200.0, DISPATCH))
    activity = tracker.activity()
    assert activity is not None and activity.phase == "TrainStep"
    assert [(r.phase, r.count, r.last_seconds) for r in tracker.phases() or []] == \
        [("Evaluation", 1, 164.0)]


def test_without_stacks_the_metrics_file_says_the_phase() -> None:
    tracker = ActivityTracker()
    tracker.see_sample(Sample(at(0)))
    assert tracker.activity() is None
    tracker.see_lines(lines((1, train(0)), (2, train(1))))
    tracker.see_sample(Sample(at(3)))
    activity = tracker.activity()
    assert activity is not None
    assert (activity.phase, activity.source, activity.last_activity_at) == \
        ("TrainStep", "MetricsFile", at(2))
    assert (activity.process_state, activity.cpu_seconds) == (None, None)
    tracker.see_lines(lines((5, running_eval(0)), (7, running_eval(1))))
    tracker.see_sample(Sample(at(8)))
    activity = tracker.activity()
    assert activity is not None
    assert (activity.phase, activity.source, activity.last_activity_at) == \
        ("Evaluation", "MetricsFile", at(7))


def test_a_hung_evaluation_step_is_device_wait() -> None:
    tracker = ActivityTracker()
    tracker.see_lines(lines((0, train(19)), (1, running_eval(0))))
    tracker.see_sample(Sample(at(2), "Sleeping", 1.0, BLOCKED))
    tracker.see_sample(Sample(at(4), "Sleeping", 1.0, BLOCKED))
    activity = tracker.activity()
    assert activity is not None and activity.phase == "DeviceWait"


def test_the_report_carries_activity_and_phases() -> None:
    tracker = ActivityTracker()
    tracker.see_lines(lines((0, train(0))))
    for s in (1, 3):
        tracker.see_sample(Sample(at(s), "Running", float(s), COMPILING))
    tracker.see_sample(Sample(at(5), "Running", 9.0, DISPATCH))
    report = progress_report(pod_identity("p", "uid", T0), train(0), 30, at(5),
                             activity=tracker.activity(), phases=tracker.phases())
    wire = TrainingReport.model_validate(report.model_dump(mode="json")).to_wire()
    assert wire["activity"] == {"phase": "TrainStep", "since": "2026-12-06T09:00:05Z",
                                "lastActivityAt": "2026-12-06T09:00:05Z",
                                "frame": "training_loop_iteration at train.py:870, called "
                                         "from train_loop at train.py:1402",
                                "source": "Sampled", "processState": "Running",
                                "cpuSeconds": 9.0}
    assert wire["phases"] == [{"phase": "Compile", "count": 1, "lastSeconds": 4.0,
                               "longestSeconds": 4.0}]
