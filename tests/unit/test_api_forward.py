"""Figures that only go forward (elastic_api.forward, issue 68): one rule, applied by the
progress sidecar before it writes status.training and by the operator as it reads it.

The concrete cases, then a property test: random report sequences from sources that
restart and mislead (a sidecar restarted mid-evaluation, a cut or rotated metrics file, a
trainer restored within its process, a new trainer process that resumes or starts over,
whose clock disagrees with the last one's, that forgot its goodput) fed to both sides:
the sidecar's chain of reports and the operator's status computation. Both show the same
step at every report, it goes back only at a restore or a new process the report names,
and it is the trainer's true step after every honest report."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from elastic_api.conditions import ConditionType
from elastic_api.forward import Forwarded, Seen, forward, merge_phases
from elastic_api.models import (
    ElasticEventReport,
    ElasticTrainingJobStatus,
    GoodputCounters,
    PhaseRecord,
    RestoreReport,
    TrainerGoodput,
    TrainingReport,
)
from elastic_operator.core.setter import get_condition
from elastic_operator.core.status import compute_status
from tests.builders import T0, article_job, healthy_pods, observe

START = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)


def restore(step: int, at: datetime) -> RestoreReport:
    return RestoreReport(source="checkpoint", step=step, seconds=3.0, restored_at=at)


def report(step: int, state: str = "Training", *, started: datetime = START,
           at: datetime = START, **more: Any) -> TrainingReport:
    return TrainingReport(observed_at=at, state=state, step=step, process_started_at=started,
                          **more)


def goodput(productive: float, **causes: float) -> TrainerGoodput:
    return TrainerGoodput(productive_seconds=productive,
                          badput_seconds=GoodputCounters(**causes))


# --- the cases ------------------------------------------------------------------------------


def test_a_sidecar_restarted_mid_evaluation_keeps_the_step() -> None:
    """The issue's run: step 309, the sidecar restarted while MaxText evaluated; the file,
    cut at the evaluation's first line, holds no train line: the new sidecar reported
    Initializing, step 0, for six minutes."""
    before = report(309, loss=2.5, step_seconds=0.4, last_restore=restore(299, START),
                    phases=[PhaseRecord(phase="Compile", count=1, last_seconds=26.7,
                                        longest_seconds=26.7)])
    restarted = report(0, "Initializing", at=START + timedelta(minutes=1))
    got = forward(Seen.of(before), restarted)
    assert (got.report.step, got.report.state, got.report.loss) == (309, "Training", 2.5)
    assert got.report.last_restore == before.last_restore  # a restore is never lost
    assert got.report.phases == before.phases  # nor the phase history of the process
    assert set(got.held) >= {"step", "state", "lastRestore", "phases"}
    # The next train line after the evaluation moves it on, as any step does.
    assert forward(Seen.of(got.report), report(310)).report.step == 310


def test_a_restore_the_report_names_may_go_back_that_far_and_no_further() -> None:
    seen = Seen.of(report(92, last_restore=restore(40, START)))
    back = report(85, last_restore=restore(84, START + timedelta(seconds=30)))
    assert forward(seen, back).report.step == 85 and forward(seen, back).held == ()
    below = back.model_copy(update={"step": 12})  # below the restore it names: misleading
    assert forward(seen, below).report.step == 92
    # The same restore again names nothing new: no second way back.
    again = Seen.of(forward(seen, back).report)
    assert forward(again, back.model_copy(update={"step": 84})).report.step == 85


def test_a_new_process_keeps_the_step_until_it_shows_where_it_resumed() -> None:
    seen = Seen.of(report(309))
    later = START + timedelta(hours=1)
    starting = report(0, "Initializing", started=later, at=later)
    assert forward(seen, starting).report.step == 309
    resumed = report(301, started=later, at=later, last_restore=restore(300, later))
    assert forward(seen, resumed).report.step == 301
    from_scratch = report(3, started=later, at=later)  # no checkpoint: a run started over
    assert forward(seen, from_scratch).report.step == 3
    # So after its Initializing reports too (the step shown is still the last process's).
    waiting = Seen.after(seen, forward(seen, starting))
    assert waiting.step == 309 and not waiting.stepped
    assert forward(waiting, from_scratch).report.step == 3
    # Once its step moved, it is held like any process's.
    moved = Seen.after(Seen.after(waiting, forward(waiting, from_scratch)),
                       Forwarded(report(4, started=later, at=later)))
    assert forward(moved, report(0, started=later, at=later)).report.step == 4


def test_goodput_goes_back_only_as_a_whole_and_only_with_a_restore() -> None:
    seen = Seen.of(report(50, goodput=goodput(40.0, startup=5.0)))
    forgot = report(51, goodput=goodput(1.0))  # a process that did not carry it on
    assert forward(seen, forgot).report.goodput == goodput(40.0, startup=5.0)
    redone = report(45, last_restore=restore(44, START),
                    goodput=goodput(36.0, startup=5.0, recomputed_steps=4.0, restore=1.0))
    assert forward(seen, redone).report.goodput == redone.goodput
    unexplained = report(51, goodput=goodput(36.0, startup=5.0, recomputed_steps=4.0))
    assert forward(seen, unexplained).report.goodput == seen.goodput


def test_clocks_that_disagree_never_hide_a_newer_restore_nor_move_time_back() -> None:
    ahead = START + timedelta(hours=2)  # the last pod's clock
    seen = Seen.of(report(309, started=ahead, at=ahead, last_restore=restore(299, ahead)))
    behind = START + timedelta(minutes=5)  # the new pod's, two hours behind
    new = report(301, started=behind, at=behind, last_restore=restore(300, behind))
    got = forward(seen, new).report
    assert got.last_restore == new.last_restore  # the newest, though stamped earlier
    assert got.observed_at == seen.observed_at  # the reader's time never goes back
    # Its next restore, within the process, stamped before the last pod's too.
    later = behind + timedelta(minutes=1)
    again = report(310, started=behind, at=later, last_restore=restore(305, later))
    assert forward(Seen.of(got), again).report.last_restore == again.last_restore


def test_counts_and_committed_steps_never_go_back() -> None:
    seen = Seen.of(report(10, elastic_events_total=3, last_committed_checkpoint_step=8,
                          last_snapshot_step=10))
    got = forward(seen, report(11, elastic_events_total=1, last_committed_checkpoint_step=None,
                               last_snapshot_step=5)).report
    assert (got.elastic_events_total, got.last_committed_checkpoint_step,
            got.last_snapshot_step) == (3, 8, 10)


def test_phase_histories_of_one_process_merge() -> None:
    compile_ = PhaseRecord(phase="Compile", count=1, last_seconds=30.0, longest_seconds=30.0)
    evaluation = PhaseRecord(phase="Evaluation", count=2, last_seconds=100.0,
                             longest_seconds=300.0)
    newer = PhaseRecord(phase="Evaluation", count=1, last_seconds=50.0, longest_seconds=50.0)
    assert merge_phases((compile_, evaluation), [newer]) == [
        evaluation, compile_]  # the higher count kept, with the longest
    more = PhaseRecord(phase="Evaluation", count=3, last_seconds=20.0, longest_seconds=20.0)
    assert merge_phases((evaluation,), [more]) == [
        more.model_copy(update={"longest_seconds": 300.0})]


def test_nothing_seen_leaves_the_report_as_it_is() -> None:
    raw = report(0, "Initializing")
    assert forward(None, raw) == Forwarded(raw)


# --- restarting sources, both sides -----------------------------------------------------------


@dataclass
class Trainer:
    """The truth: what the trainer really did, and the reports a restarting, misleading
    source makes of it."""

    step: int = 0
    started: datetime = START
    clock: timedelta = timedelta()  # this process's clock against the reader's
    restore: RestoreReport | None = None
    productive: float = 0.0
    recomputed: float = 0.0
    now: datetime = START
    honest: bool = True  # the last report says what the trainer did
    starting: bool = False  # a new process that has not stepped yet
    moved: int = 0  # the steps this process has reported (a source misleads only after 2)
    reported: int = -1  # the step last reported
    log: list[str] = field(default_factory=list)

    def truth(self) -> TrainingReport:
        self.honest = True
        if not self.starting and self.step != self.reported:
            self.moved, self.reported = self.moved + 1, self.step
        return report(0 if self.starting else self.step,
                      "Initializing" if self.starting else "Training",
                      started=self.started, at=self.now + self.clock,
                      last_restore=self.restore,
                      goodput=goodput(self.productive, recomputed_steps=self.recomputed))

    def move(self, kind: str, n: int) -> TrainingReport:
        self.now += timedelta(seconds=7)
        self.log.append(f"{kind} {n}")
        if kind == "restore" and not self.starting:  # within the process (a lost slice)
            back = min(n, self.step)
            self.step -= back
            moved = min(back * 0.5, self.productive)
            self.productive, self.recomputed = self.productive - moved, self.recomputed + moved
            self.restore = restore(self.step, self.now + self.clock)
            return self.truth()
        if kind == "new process":  # its clock off by hours; an odd n forgot the goodput
            self.started, self.clock = self.now + self.clock, timedelta(hours=n - 3)
            self.restore, self.starting, self.moved, self.reported = None, True, 0, -1
            if n % 2:
                self.productive = self.recomputed = 0.0
            return self.truth()
        if kind == "resume" and self.starting:  # its first step, after a checkpoint or none
            resumed = max(0, self.step - n)
            self.restore = restore(resumed, self.now + self.clock) if resumed else None
            self.step, self.starting = resumed + 1, False
            return self.truth()
        if kind not in MISLEADING or self.moved < 2:
            # Steps. (A source misleads once its process has moved its step: a sidecar
            # restarted mid-run, a file cut after train lines; right after a process's
            # first report, a lower one is taken for the process starting over.)
            self.step, self.starting = self.step + n, False
            self.productive += n * 0.5
            return self.truth()
        # Misleading: a restarted sidecar (nothing read yet), or a line of a cut or
        # rotated file taken at face value (an evaluation's index as the step).
        self.honest = False
        if kind == "sidecar restarted":
            return report(0, "Initializing", started=self.started, at=self.now + self.clock)
        return report(min(n, self.step), started=self.started, at=self.now + self.clock,
                      last_restore=self.restore)


MISLEADING = ("sidecar restarted", "file cut")
MOVES = st.lists(st.tuples(st.sampled_from(
    ["steps", "steps", "steps", "restore", "new process", "resume", "sidecar restarted",
     "file cut"]), st.integers(1, 6)), min_size=1, max_size=25)


def explained(previous: TrainingReport, raw: TrainingReport, sent: TrainingReport,
              shown_by: datetime | None) -> bool:
    """A step shown lower than before: the report names a restore not seen before (and
    the step is not below it), or it comes from a process that trains, other than the
    one whose step was shown (`shown_by`)."""
    restore_ = raw.last_restore
    named = restore_ is not None and restore_ != previous.last_restore \
        and sent.step >= restore_.step
    return named or (raw.process_started_at != shown_by and raw.state != "Initializing")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(MOVES)
# The run: a sidecar restarted in an evaluation, after a restore and before more.
@example([("steps", 6), ("restore", 2), ("steps", 3), ("sidecar restarted", 1),
          ("file cut", 1), ("steps", 1)])
# A new process two hours behind the last one's clock resumes from a checkpoint.
@example([("steps", 6), ("restore", 2), ("new process", 1), ("resume", 1), ("steps", 2)])
def test_restarting_sources_never_move_either_side_back(moves: list[tuple[str, int]]) -> None:
    trainer = Trainer()
    job, pods = article_job(), healthy_pods()
    status = ElasticTrainingJobStatus()
    previous: TrainingReport | None = None
    seen: Seen | None = None
    shown_by: datetime | None = None  # the process whose step is shown
    for kind, n in moves:
        raw = trainer.move(kind, n)
        where = f"after {trainer.log}"
        # The sidecar's side: what it sends.
        result = forward(seen, raw)
        sent, seen = result.report, Seen.after(seen, result)
        # The operator's side: the same report, as if the trainer had written it.
        status, _ = compute_status(job, observe(pods), status.model_copy(
            update={"training": raw}), T0 + (trainer.now - START))
        assert status.progress is not None and status.progress.step == sent.step, where
        assert (status.checkpoint.last_restore if status.checkpoint else None) == \
            sent.last_restore, where
        assert status.goodput is not None
        assert status.goodput.productive_seconds == (
            sent.goodput.productive_seconds if sent.goodput is not None else None), where
        if previous is not None:
            if sent.step < previous.step:
                assert explained(previous, raw, sent, shown_by), \
                    f"the step went back {previous.step} -> {sent.step} {where}"
            if not trainer.honest or trainer.starting:
                assert sent.step == previous.step, f"moved by a misleading report {where}"
            old, new = previous.goodput, sent.goodput
            assert old is None or new is not None, f"the goodput was lost {where}"
            if old is not None and new is not None and \
                    new.productive_seconds < old.productive_seconds:
                assert raw.last_restore not in (None, previous.last_restore), where
            if old is not None and new is not None:
                assert new.badput_seconds.recomputed_steps >= \
                    old.badput_seconds.recomputed_steps, where
        if trainer.honest and not trainer.starting:
            assert sent.step == trainer.step, f"shows {sent.step}, truly {trainer.step} {where}"
        if sent.step == raw.step and raw.state != "Initializing":
            shown_by = raw.process_started_at
        previous = sent


def test_the_operator_names_a_step_it_holds_unless_an_elastic_event_explains_it() -> None:
    job, pods = article_job(), healthy_pods()
    first, _ = compute_status(job, observe(pods), ElasticTrainingJobStatus(
        training=report(300)), T0)
    seen, _ = compute_status(job, observe(pods), first.model_copy(
        update={"training": report(309, at=START + timedelta(seconds=2))}), T0)
    misled, _ = compute_status(job, observe(pods), seen.model_copy(
        update={"training": report(0, at=START + timedelta(seconds=5))}), T0)
    valid = get_condition(misled, ConditionType.TRAINING_REPORT_VALID)
    assert misled.progress is not None and misled.progress.step == 309
    assert valid is not None and valid.status == "False"
    assert "step went back from 309 to 0" in valid.message
    # The trainer's own elastic event restarted it from the initial state (nothing to
    # restore): held until it passes 309 again, but no report misled anyone.
    event = ElasticEventReport(id=1, phase="Resumed", detected_at=START, restored_from_step=0,
                               restore_source="none", resumed_step=1)
    restarted, _ = compute_status(job, observe(pods), seen.model_copy(update={"training": report(
        1, at=START + timedelta(seconds=5), elastic_event=event, elastic_events_total=1)}), T0)
    valid = get_condition(restarted, ConditionType.TRAINING_REPORT_VALID)
    assert restarted.progress is not None and restarted.progress.step == 309
    assert valid is not None and valid.status == "True"
