"""What a checkpoint scan, and the trainer's report of its restore, change in
status.checkpoint."""
from __future__ import annotations

from elastic_api.models import CheckpointStatus, RestoreReport, TrainingReport

# What a scan found, as opposed to what the operator carries (lastRestore).
_SCANNED_STEPS = ("latest_committed_step", "incomplete_steps", "abandoned_steps",
                  "latest_committed_bytes", "latest_committed_files")


def keep_last_known(
    previous: CheckpointStatus | None, scanned: CheckpointStatus,
) -> CheckpointStatus:
    """A failed scan keeps the steps (and the newest one's size) last seen in the same
    directory (so one GCS hiccup does not blank the status) and adds the error; a good
    scan replaces everything it lists."""
    if scanned.error is None or previous is None or previous.directory != scanned.directory:
        return scanned
    return scanned.model_copy(update={
        "latest_committed_step": previous.latest_committed_step,
        "incomplete_steps": list(previous.incomplete_steps),
        "abandoned_steps": list(previous.abandoned_steps),
        "latest_committed_bytes": previous.latest_committed_bytes,
        "latest_committed_files": previous.latest_committed_files,
    })


def same_checkpoint_result(a: CheckpointStatus | None, b: CheckpointStatus | None) -> bool:
    """Two scans found the same thing (whenever they ran)."""
    return a is not None and b is not None and \
        a.model_copy(update={"observed_at": b.observed_at}) == b


def newest_restore(known: RestoreReport | None,
                   reported: RestoreReport | None) -> RestoreReport | None:
    """The trainer's newest restore: the one it reports now, unless the status already
    holds a later one (a new process that has not restored yet reports none)."""
    if reported is None:
        return known
    if known is not None and known.restored_at > reported.restored_at:
        return known
    return reported


def checkpoint_status(known: CheckpointStatus | None,
                      scanned: CheckpointStatus | None,
                      report: TrainingReport | None = None) -> CheckpointStatus | None:
    """status.checkpoint after a scan (None: no scan finished since the last reconcile),
    with the trainer's last restore (status.training.lastRestore) carried in.

    A failed scan keeps the last good steps (docs/operations.md). A scan that found what
    the status already says changes nothing, its time included: a status write per job
    per scan would only load the API server (and wake every watcher of the job)."""
    restore = newest_restore(known.last_restore if known else None,
                             report.last_restore if report else None)
    if scanned is None:
        merged = known
    else:
        merged = keep_last_known(known, scanned)
        if same_checkpoint_result(known, merged.model_copy(
                update={"last_restore": known.last_restore if known else None})):
            merged = known
    if merged is None:
        return CheckpointStatus(last_restore=restore) if restore is not None else None
    if merged.last_restore == restore:
        return merged
    return merged.model_copy(update={"last_restore": restore})
