"""What a run records: elastic events, the run's result and its JSON summary."""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np

from elastic_api.models import ElasticEventReport, TrainerGoodput
from elastic_api.restores import steps_lost


def utc(ts: float | None) -> datetime | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC)


@dataclass
class ElasticEvent:
    id: int
    kind: str  # "slice_down" or "scale_up"
    error: str
    failed_step: int
    slices_down: list[int]
    detected_at: float
    fault_at: float | None
    phase: str = "Detected"
    restored_from_step: int | None = None
    restore_source: str | None = None
    restore_seconds: float | None = None
    restored_at: float | None = None
    resumed_at: float | None = None
    resumed_step: int | None = None
    active_slices_after: int | None = None
    wait_seconds: float | None = None  # waiting for slices before the restore
    slices_back_at: float | None = None  # when the slices needed were healthy again
    standby_swap: bool = False  # a standby slice took a lost one's place (standby.py)

    @property
    def steps_lost(self) -> int | None:
        return steps_lost(self.failed_step, self.restored_from_step)  # as the operator

    def summary(self) -> dict[str, Any]:
        detect = None if self.fault_at is None else max(0.0, self.detected_at - self.fault_at)
        resume = None if self.resumed_at is None else self.resumed_at - self.detected_at
        return {
            "id": self.id, "kind": self.kind, "error": self.error,
            "failed_step": self.failed_step, "restored_from_step": self.restored_from_step,
            "restore_source": self.restore_source, "slices_down": self.slices_down,
            "detect_seconds": detect, "wait_seconds": self.wait_seconds,
            "restore_seconds": self.restore_seconds,
            "resume_seconds": resume, "steps_lost": self.steps_lost,
            "resumed_step": self.resumed_step, "active_slices_after": self.active_slices_after,
            "detected_at": self.detected_at, "resumed_at": self.resumed_at,
            "fault_at": self.fault_at, "slices_back_at": self.slices_back_at,
            "standby_swap": self.standby_swap,
        }

    def log_line(self) -> str:
        """One line for the log once training resumed after the event."""
        s = self.summary()
        if self.kind == "scale_up":
            return (f"elastic event {self.id}: scale up to {self.active_slices_after or 0} "
                    f"slices at step {self.failed_step}; snapshot restored in "
                    f"{self.restore_seconds or 0.0:.2f}s; resumed at step {self.resumed_step} "
                    f"after {s['resume_seconds']:.1f}s; 0 steps lost")
        slices = ", ".join(str(i) for i in self.slices_down) or "?"
        noun = "slices" if len(self.slices_down) > 1 else "slice"
        detect = ("" if s["detect_seconds"] is None
                  else f", detected after {s['detect_seconds']:.1f}s")
        return (f"elastic event {self.id}: {noun} {slices} down at step {self.failed_step} "
                f"({self.error.split(':')[0]}{detect}); restored step "
                f"{self.restored_from_step} from {self.restore_source} in "
                f"{self.restore_seconds or 0.0:.1f}s; resumed at step {self.resumed_step} "
                f"after {s['resume_seconds']:.1f}s; {self.steps_lost} steps lost"
                f"{'; a standby slice swapped in' if self.standby_swap else ''}")

    def report(self) -> ElasticEventReport:
        return ElasticEventReport(
            id=self.id, phase=self.phase,
            detected_at=utc(self.detected_at),
            error=self.error, failed_step=self.failed_step, slices_down=self.slices_down,
            restored_from_step=self.restored_from_step,
            restore_source=self.restore_source,
            restored_at=utc(self.restored_at), resumed_at=utc(self.resumed_at),
            resumed_step=self.resumed_step,
        )


@dataclass
class RunResult:
    final_step: int
    final_loss: float | None
    params_digest: str
    step_times: list[tuple[int, float]]
    losses: list[tuple[int, float]]
    events: list[ElasticEvent]
    checkpoint_write_failures: int
    failure: BaseException | None = None
    elastic_events_total: int = 0  # with an earlier process's (LoopOptions.prior_events)
    started_from: tuple[int, str] | None = None
    goodput: TrainerGoodput | None = None
    process_started_at: float | None = None
    finished_at: float | None = None  # when the goodput account was closed
    # The watchdog's stalls and the replacement requests, as reported (JSON).
    stalls: list[dict[str, Any]] = field(default_factory=list)
    slice_replacements: list[dict[str, Any]] = field(default_factory=list)
    slice_step_times: list[dict[str, Any]] | None = None  # the last reported
    phases: list[dict[str, Any]] = field(default_factory=list)  # how long each phase took
    eval_losses: list[tuple[int, float]] = field(default_factory=list)  # (step, loss)


def summary_dict(result: RunResult, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "params_digest": result.params_digest,
        "final_step": result.final_step,
        "final_loss": result.final_loss,
        "process_id": os.getpid(),
        "host_name": socket.gethostname(),
        "step_times": [[s, t] for s, t in result.step_times],
        "losses": [[s, float(np.float64(v))] for s, v in result.losses],
        "elastic_events": [e.summary() for e in result.events],
        "elastic_events_total": result.elastic_events_total,
        "started_from": (None if result.started_from is None else
                         {"step": result.started_from[0], "source": result.started_from[1]}),
        "checkpoint_write_failures": result.checkpoint_write_failures,
        "goodput": (None if result.goodput is None
                    else result.goodput.model_dump(by_alias=True, mode="json")),
        "process_started_at": result.process_started_at,
        "finished_at": result.finished_at,
        "stalls": result.stalls, "slice_replacements": result.slice_replacements,
        "slice_step_times": result.slice_step_times, "phases": result.phases,
        "eval_losses": [[s, float(np.float64(v))] for s, v in result.eval_losses],
        "status": "Failed" if result.failure else "Succeeded",
        "reason": getattr(result.failure, "reason", None) if result.failure else None,
        "message": str(result.failure) if result.failure else None,
    }
    out.update(extra or {})
    return out
