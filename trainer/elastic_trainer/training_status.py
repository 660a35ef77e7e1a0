"""What the trainer reports as `status.training` (docs/status-contract.md), and the record
it is built from: the run's progress, its elastic events, the goodput account, and the
fields the loop's policies set (the checkpoint acknowledgement: checkpoint_requests.py;
a stall, a replacement request, the slices' step times: stalls.py; the last restore:
restore.py; what the training thread is doing: own_activity.py, moved by the watchdog). The
loop and its policies write it; `report` sends it through report.StatusReporter: at once
when urgent, else at most every REPORT_EVERY_SECONDS, or at once (not urgent: the
reporter's interval still holds it) when the training thread has just entered a phase
other than a step, which may block it for long.
"""
from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from elastic_api.models import (
    CheckpointAck,
    RestoreReport,
    SliceReplacementRequest,
    SliceStepTime,
    StallReport,
    TrainingReport,
)
from elastic_trainer.cadence import Cadences
from elastic_trainer.checkpoint import Checkpointer
from elastic_trainer.events import ElasticEvent, RunResult, utc
from elastic_trainer.goodput_tracker import GoodputAccount
from elastic_trainer.own_activity import Activity
from elastic_trainer.report import Metrics, StatusReporter
from elastic_trainer.retry import SliceLossLimit
from elastic_trainer.snapshots import ReplicaSnapshots

log = logging.getLogger("elastic_trainer")

# A progress report (not urgent) is built at most this often: the reporter sends at most
# one per --report-interval anyway, and building one per step is host work in every step.
REPORT_EVERY_SECONDS = 0.5


@dataclass
class Progress:
    step: int = 0  # last completed step (high-water mark of this process)
    loss: float | None = None
    step_seconds: float | None = None
    tokens_per_second: float | None = None
    active_slices: int | None = None
    state: str = "Initializing"
    step_times: list[tuple[int, float]] = field(default_factory=list)
    losses: list[tuple[int, float]] = field(default_factory=list)


class TrainingStatus:
    """The run as `status.training` tells it. `checkpointer`, `snapshots`, `cadences` and
    `loss_limit` are read when a report is built; `prior_events` and `checkpoint_ack` come
    from an earlier process of the same job (report.prior_run)."""

    def __init__(self, *, total_steps: int, process_started_at: float,
                 goodput: GoodputAccount, checkpointer: Checkpointer,
                 snapshots: ReplicaSnapshots, cadences: Cadences, loss_limit: SliceLossLimit,
                 reporter: StatusReporter | None = None, metrics: Metrics | None = None,
                 prior_events: int = 0, checkpoint_ack: CheckpointAck | None = None,
                 activity: Activity | None = None) -> None:
        self.total_steps, self.prior_events = total_steps, prior_events
        self.process_started_at, self.goodput = process_started_at, goodput
        self.checkpointer, self.snapshots = checkpointer, snapshots
        self.cadences, self.loss_limit = cadences, loss_limit
        self.reporter, self.metrics = reporter, metrics or Metrics(None)
        self.progress = Progress()
        self.activity = activity or Activity()
        self._reported_changes = -1  # activity.changes when the last report was built
        self.events: list[ElasticEvent] = []
        self.current_event: ElasticEvent | None = None
        self.started_from: tuple[int, str] | None = None  # (step, source) of this process
        self.finished_at: float | None = None
        # Set by the policies; the reports of the run kept for its result.
        self.checkpoint_ack = checkpoint_ack
        self.stall: StallReport | None = None
        self.slice_replacement: SliceReplacementRequest | None = None
        self.slice_step_times: list[SliceStepTime] | None = None
        self.last_restore: RestoreReport | None = None
        self.stalls: list[StallReport] = []
        self.eval_losses: list[tuple[int, float]] = []  # (step, loss) of each evaluation
        self.replacements: list[SliceReplacementRequest] = []
        self._reported_at = -1e9

    # --- the events ------------------------------------------------------------------------

    @property
    def events_total(self) -> int:
        return self.prior_events + len(self.events)

    def next_event_id(self) -> int:
        return self.events_total + 1

    def open_event(self) -> ElasticEvent | None:
        """The event the current attempt recovers from (None once training resumed)."""
        event = self.current_event
        return event if event is not None and event.resumed_at is None else None

    def add_event(self, event: ElasticEvent) -> None:
        self.events.append(event)
        self.current_event = event

    # --- the progress ----------------------------------------------------------------------

    def resumed_from(self, step: int, source: str, seconds: float, slices: int,
                     event: ElasticEvent | None) -> None:
        """An attempt on `slices` slices starts from `step`, restored from `source`."""
        if event is not None:
            event.restored_from_step, event.restore_source = step, source
            event.restore_seconds, event.restored_at = seconds, time.time()
            event.active_slices_after = slices
        elif self.started_from is None:
            self.started_from = (step, source)
        self.progress.active_slices = slices
        # A new process that resumes from a checkpoint starts its count there.
        self.progress.step = max(self.progress.step, step)
        self.progress.state = "Recovering" if event is not None else "Training"

    def step_done(self, step: int, loss: float, seconds: float, now: float,
                  tokens: int) -> bool:
        """`step` (of `tokens` tokens) is done: the progress and the metrics; the open
        event, if any, resumed. Whether that makes the next report urgent."""
        event = self.open_event()
        p = self.progress
        p.step, p.loss, p.step_seconds = step, loss, seconds
        p.tokens_per_second = tokens / seconds if seconds > 0 else None
        p.step_times.append((step, now))
        p.losses.append((step, loss))
        self.metrics.on_step(step, loss, seconds, p.active_slices or 0)
        if event is None:
            return False
        event.resumed_at, event.resumed_step, event.phase = now, step, "Resumed"
        p.state = "Training"
        log.info("%s", event.log_line())
        self.metrics.on_resumed(now - event.detected_at, event.steps_lost or 0)
        return True

    def finish(self) -> None:
        """The run ends: the goodput account is closed."""
        self.finished_at = time.time()
        self.goodput.finish(self.finished_at)

    # --- the report ------------------------------------------------------------------------

    def training_report(self, reason: str | None = None, message: str | None = None
                        ) -> TrainingReport:
        p = self.progress
        return TrainingReport(
            observed_at=datetime.now(UTC), state=p.state,
            reason=reason, message=message, step=p.step, total_steps=self.total_steps,
            loss=p.loss, step_seconds=p.step_seconds, tokens_per_second=p.tokens_per_second,
            attempt=len(self.events),
            active_slices=p.active_slices,
            last_committed_checkpoint_step=self.checkpointer.latest_committed_step_cached(),
            last_snapshot_step=self.snapshots.latest_step(),
            elastic_events_total=self.events_total,
            retries_remaining=self.loss_limit.remaining,
            retry_times=self.loss_limit.recent,
            process_id=os.getpid(), host_name=socket.gethostname(),
            process_started_at=utc(self.process_started_at),
            elastic_event=self.current_event.report() if self.current_event else None,
            checkpoint_ack=self.checkpoint_ack, goodput=self.goodput.report(),
            snapshot_cadence=self.cadences.snapshot.report(),
            checkpoint_cadence=self.cadences.checkpoint.report(),
            stall=self.stall, slice_replacement=self.slice_replacement,
            slice_step_times=self.slice_step_times,
            last_restore=self.last_restore, activity=self.activity.report(),
            phases=self.activity.records(),
        )

    def report(self, urgent: bool = False, reason: str | None = None,
               message: str | None = None) -> None:
        if self.reporter is None:
            return
        now = time.monotonic()
        changes, phase = self.activity.changes, self.activity.phase
        entered = changes != self._reported_changes and phase not in (None, "TrainStep")
        if not urgent and not entered and now - self._reported_at < REPORT_EVERY_SECONDS:
            return
        self._reported_at, self._reported_changes = now, changes
        self.reporter.update(self.training_report(reason, message), urgent=urgent)

    # --- the result ------------------------------------------------------------------------

    def result(self, digest: str, failure: BaseException | None, finished: bool = True
               ) -> RunResult:
        """The run's result; `finished`: the run got to its end (not an unexpected
        error), so the result says when the goodput account was closed."""
        p = self.progress
        return RunResult(
            final_step=p.step, final_loss=p.loss, params_digest=digest,
            step_times=p.step_times, losses=p.losses, events=self.events,
            checkpoint_write_failures=self.checkpointer.write_failures, failure=failure,
            elastic_events_total=self.events_total, started_from=self.started_from,
            goodput=self.goodput.report(), process_started_at=self.process_started_at,
            finished_at=self.finished_at if finished else None,
            eval_losses=self.eval_losses, **self._watched())

    def _watched(self) -> dict[str, Any]:
        """The watchdog's part of the result: stalls, requests, slice times (JSON)."""
        return {
            "stalls": [s.model_dump(by_alias=True, mode="json") for s in self.stalls],
            "slice_replacements": [r.model_dump(by_alias=True, mode="json")
                                   for r in self.replacements],
            "slice_step_times": None if self.slice_step_times is None else
            [t.model_dump(by_alias=True, mode="json") for t in self.slice_step_times],
            "phases": [r.model_dump(by_alias=True, mode="json")
                       for r in self.activity.records() or []],
        }
