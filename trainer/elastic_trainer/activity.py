"""What the trainer is doing now, from the samples of its process and from what it
writes: the progress sidecar's status.training.activity and .phases
(elastic_api.phases, docs/trainer.md "Phases").

Each sample is read by the contract's precedence: a stopped process is Stopped; else
the innermost context frame of its main thread names the phase (stack_phases.py); else a
main thread whose stack did not move between two samples, with no line written between
them, waiting in a device call (or in the kernel), is DeviceWait since the first of
them; else an evaluation the metrics file shows (running_eval lines after the last train
line) is Evaluation; else, once training has begun, TrainStep. Without a stack (py-spy
missing or refused, the process not found) the same order runs on what there is: the
process's state, then the metrics file.

Signs of life inside a phase (`last_activity_at`): a line of the metrics file, the
process's CPU time advancing, its stack moving; none inside DeviceWait or Stopped. A
phase's durations (`PhaseRecord`) are timed on the sample clock: from the first sample
that saw it to the first that did not, a phase seen in one sample only being a passing
call, not recorded; an evaluation the metrics file shows is timed from its first line
(less that step's own time) to the next train line. Pure: the caller passes the times.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final

from elastic_api.models import PhaseRecord, TrainerActivity
from elastic_api.phases import PHASES, Phase, PhaseSource
from elastic_trainer.metrics_file import EvalRecord, Record, StepRecord
from elastic_trainer.stack_phases import Reading, classify
from elastic_trainer.stacks import ThreadStack
from elastic_trainer.trainer_process import ProcessState

# Phases whose durations are recorded (TrainStep and DeviceWait are held to the step
# deadline, learned from the steps; Stopped is never normal work).
RECORDED: Final[frozenset[Phase]] = frozenset(
    {"Compile", "Evaluation", "CheckpointSave", "Restore", "DataWait"})
MIN_SAMPLES_RECORDED: Final = 2


@dataclass(frozen=True)
class Sample:
    """One look at the trainer's process; None where it could not be read."""

    at: datetime
    state: ProcessState | None = None
    cpu_seconds: float | None = None
    stack: ThreadStack | None = None


class PhaseBook:
    """How long each phase took (status.training.phases)."""

    def __init__(self) -> None:
        self._records: dict[Phase, PhaseRecord] = {}

    def add(self, phase: Phase, seconds: float) -> None:
        seconds = round(max(0.0, seconds), 3)
        old = self._records.get(phase)
        self._records[phase] = PhaseRecord(
            phase=phase, count=(old.count if old else 0) + 1, last_seconds=seconds,
            longest_seconds=max(seconds, old.longest_seconds if old else 0.0))

    def records(self) -> list[PhaseRecord] | None:
        found = [self._records[p] for p in PHASES if p in self._records]
        return found or None


@dataclass
class EvalWatch:
    """The evaluation the metrics file shows: from its first running_eval line to the
    next train line (MaxText writes no train line while it evaluates)."""

    active: bool = False
    seen: bool = False  # an evaluation was shown at least once
    since: datetime | None = None
    last_line_at: datetime | None = None
    last_train_at: datetime | None = None
    ended: list[float] = field(default_factory=list)  # durations not yet booked

    def see(self, record: Record, at: datetime) -> None:
        if isinstance(record, StepRecord):
            if self.active and self.since is not None:
                self.ended.append((at - self.since).total_seconds())
            self.active, self.last_train_at = False, at
        elif isinstance(record, EvalRecord) and not record.summary:
            if not self.active:
                started = at - timedelta(seconds=record.step_seconds or 0.0)
                if self.last_train_at is not None:
                    started = max(started, self.last_train_at)
                self.active, self.seen, self.since = True, True, started
            self.last_line_at = at


@dataclass
class _Episode:
    """The phase now, since when, and its newest sign of life."""

    phase: Phase
    source: PhaseSource
    since: datetime
    last_activity: datetime | None
    frame: str | None
    samples: int = 1


class ActivityTracker:
    """Feed it the metrics file's lines (`see_lines`) and the samples (`see_sample`), in
    time order; it says the activity and the phases' durations."""

    def __init__(self) -> None:
        self.book = PhaseBook()
        self.eval = EvalWatch()
        self.train_seen = False
        self._episode: _Episode | None = None
        self._sample: Sample | None = None
        self._key: tuple[object, ...] | None = None
        self._key_since: datetime | None = None
        self._lines_since_sample = 0
        self._last_line_at: datetime | None = None

    def see_lines(self, lines: list[tuple[datetime, Record]]) -> None:
        for at, record in lines:
            self.eval.see(record, at)
            self.train_seen = self.train_seen or isinstance(record, StepRecord)
            self._lines_since_sample += 1
            self._last_line_at = at
            if self._episode is not None and self._episode.phase not in ("Stopped",
                                                                         "DeviceWait"):
                self._episode.last_activity = at
        for seconds in self.eval.ended:
            self.book.add("Evaluation", seconds)
        self.eval.ended.clear()

    def see_sample(self, sample: Sample) -> None:
        reading = classify(sample.stack) if sample.stack is not None else None
        key = sample.stack.key if sample.stack is not None else None
        still = key is not None and key == self._key and self._lines_since_sample == 0
        if not still:
            self._key, self._key_since = key, sample.at
        decided = self._decide(sample, reading, still)
        self._enter(decided, sample, reading, alive=self._alive(sample, still))
        self._sample, self._lines_since_sample = sample, 0

    def _alive(self, sample: Sample, still: bool) -> bool:
        """A sign of life since the last sample: the stack moved, or CPU time was used."""
        previous = self._sample
        cpu_used = previous is not None and previous.cpu_seconds is not None and \
            sample.cpu_seconds is not None and sample.cpu_seconds > previous.cpu_seconds
        moved = sample.stack is not None and not still
        return cpu_used or moved

    def _decide(self, sample: Sample, reading: Reading | None,
                still: bool) -> tuple[Phase, PhaseSource] | None:
        if sample.state == "Stopped":
            return "Stopped", "Sampled"
        if reading is not None and reading.phase is not None:
            return reading.phase, "Sampled"
        waiting = reading is not None and sample.stack is not None and \
            (reading.device_call or not sample.stack.active)
        if still and waiting and (self.train_seen or self.eval.active):
            return "DeviceWait", "Sampled"
        if self.eval.active:
            return "Evaluation", "MetricsFile"
        if self.train_seen:
            return "TrainStep", "Sampled" if reading is not None else "MetricsFile"
        return None

    def _since(self, phase: Phase, at: datetime) -> datetime:
        if phase == "DeviceWait" and self._key_since is not None:
            return self._key_since
        if phase == "Evaluation" and self.eval.active and self.eval.since is not None:
            return self.eval.since
        return at

    def _enter(self, decided: tuple[Phase, PhaseSource] | None, sample: Sample,
               reading: Reading | None, alive: bool) -> None:
        now = self._episode
        frame = reading.frame if reading is not None else None
        if decided is not None and now is not None and now.phase == decided[0]:
            now.samples += 1
            now.source, now.frame = decided[1], frame or now.frame
            if alive and now.phase not in ("Stopped", "DeviceWait"):
                now.last_activity = sample.at
            return
        if now is not None:
            self._close(now, sample.at)
        if decided is None:
            self._episode = None
            return
        phase, source = decided
        since = self._since(phase, sample.at)
        # A phase the file shows lives by its lines; one a sample shows, by that sample.
        last = self._last_line_at if source == "MetricsFile" else sample.at
        quiet = phase in ("Stopped", "DeviceWait")
        self._episode = _Episode(phase, source, since, None if quiet else last, frame)

    def _close(self, episode: _Episode, at: datetime) -> None:
        """Book the episode that ends at `at` (an evaluation the file timed is booked
        from the file)."""
        if episode.phase not in RECORDED or episode.samples < MIN_SAMPLES_RECORDED:
            return
        if episode.phase == "Evaluation" and self.eval.seen:
            return
        self.book.add(episode.phase, (at - episode.since).total_seconds())

    def activity(self) -> TrainerActivity | None:
        episode, sample = self._episode, self._sample
        if episode is None:
            return None
        return TrainerActivity(
            phase=episode.phase, since=episode.since, last_activity_at=episode.last_activity,
            frame=episode.frame, source=episode.source,
            process_state=sample.state if sample is not None else None,
            cpu_seconds=sample.cpu_seconds if sample is not None else None)

    def phases(self) -> list[PhaseRecord] | None:
        return self.book.records()
