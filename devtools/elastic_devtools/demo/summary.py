"""Pure: the demo's summary (summary.json) from what the trainer and the operator reported;
what it prints at the end is `kubectl etj status`'s (elastic_kubectl)."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from elastic_kubectl.status_view import cadence_text


@dataclass(frozen=True)
class DemoSummary:
    detect_seconds: float | None  # kill -> SliceDown written by the operator
    trainer_detect_seconds: float | None  # kill -> the trainer caught the slice-down error
    resume_seconds: float | None  # kill -> next completed training step
    restore_source: str | None
    restored_from_step: int | None
    failed_step: int | None
    steps_lost: int | None
    process_id_before: int | None
    process_id_after: int | None
    same_process: bool
    jobset_restarts: int
    final_step: int | None
    total_steps: int | None
    final_loss: float | None
    condition_reasons: list[str]
    # The operator's replacement of the slice (status.slices[].lastReplacement).
    replaced_seconds: float | None = None  # failure -> slice Ready again
    moved_from_pool: str | None = None
    moved_to_pool: str | None = None
    # The cadences the trainer had chosen when the host died (status.training).
    snapshot_cadence: str | None = None
    checkpoint_cadence: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def cadence_chosen(report: Any) -> bool:
    """A status.training cadence the trainer has chosen (not still measuring)."""
    return isinstance(report, dict) and report.get("chosenBy") == "Trainer" and \
        report.get("reason") not in (None, "Measuring")


def cadence_lines(training: dict[str, Any]) -> list[str]:
    """What the demo prints about the cadences the trainer chose, and why."""
    lines = []
    for kind, key in (("snapshots", "snapshotCadence"), ("checkpoints", "checkpointCadence")):
        report = training.get(key)
        text = cadence_text(report)
        if text is not None and isinstance(report, dict):
            lines.append(f"{kind}: {text}: {report.get('message') or ''}".rstrip(": "))
    return lines


def summarize(
    *,
    killed_at: float,
    slice_down_at: float | None,
    trainer_summary: dict[str, Any],
    status_before: dict[str, Any],
    status_after: dict[str, Any],
    jobset_restarts: int,
    condition_reasons: list[str],
    replacement: dict[str, Any] | None = None,
) -> DemoSummary:
    """Combine the trainer's summary JSON and the job's status around one killed worker.

    `killed_at` and `slice_down_at` are unix times taken by the demo; everything else
    comes from the trainer (`--summary`) and the ElasticTrainingJob status
    (`replacement`: the slice's lastReplacement).
    """
    events = trainer_summary.get("elastic_events") or []
    event = events[0] if events else {}
    trainer_detected = event.get("detected_at")
    # Steps can still land between the kill and the trainer noticing it (dispatch is
    # asynchronous in the article too), so "resumed" is the first step after detection.
    step_times: list[list[float]] = trainer_summary.get("step_times") or []
    first_step_after = event.get("resumed_at") or next(
        (t for _, t in step_times if trainer_detected is not None and t > trainer_detected), None)
    training_before = status_before.get("training") or {}
    training_after = status_after.get("training") or {}
    pid_before = training_before.get("processId")
    pid_after = training_after.get("processId", trainer_summary.get("process_id"))
    return DemoSummary(
        detect_seconds=None if slice_down_at is None else slice_down_at - killed_at,
        trainer_detect_seconds=None if trainer_detected is None else trainer_detected - killed_at,
        resume_seconds=None if first_step_after is None else first_step_after - killed_at,
        restore_source=event.get("restore_source"),
        restored_from_step=event.get("restored_from_step"),
        failed_step=event.get("failed_step"),
        steps_lost=event.get("steps_lost"),
        process_id_before=pid_before,
        process_id_after=pid_after,
        same_process=pid_before is not None and pid_before == pid_after,
        jobset_restarts=jobset_restarts,
        final_step=trainer_summary.get("final_step"),
        total_steps=training_after.get("totalSteps"),
        final_loss=trainer_summary.get("final_loss"),
        condition_reasons=condition_reasons,
        replaced_seconds=_ready_after(replacement, killed_at),
        moved_from_pool=(replacement or {}).get("fromPool"),
        moved_to_pool=(replacement or {}).get("toPool"),
        snapshot_cadence=cadence_text(training_before.get("snapshotCadence")),
        checkpoint_cadence=cadence_text(training_before.get("checkpointCadence")),
    )


def _ready_after(replacement: dict[str, Any] | None, killed_at: float) -> float | None:
    if not replacement or not replacement.get("readyAt"):
        return None
    ready = datetime.fromisoformat(str(replacement["readyAt"]).replace("Z", "+00:00"))
    return ready.timestamp() - killed_at
