"""What a checkpoint scan changes in status.checkpoint."""
from __future__ import annotations

from elastic_api.models import CheckpointStatus


def keep_last_known(
    previous: CheckpointStatus | None, scanned: CheckpointStatus,
) -> CheckpointStatus:
    """A failed scan keeps the steps last seen in the same directory (so one GCS hiccup
    does not blank the status) and adds the error; a good scan replaces everything."""
    if scanned.error is None or previous is None or previous.directory != scanned.directory:
        return scanned
    return scanned.model_copy(update={
        "latest_committed_step": previous.latest_committed_step,
        "incomplete_steps": list(previous.incomplete_steps),
        "abandoned_steps": list(previous.abandoned_steps),
    })


def same_checkpoint_result(a: CheckpointStatus | None, b: CheckpointStatus | None) -> bool:
    """Two scans found the same thing (whenever they ran)."""
    return a is not None and b is not None and \
        a.model_copy(update={"observed_at": b.observed_at}) == b


def checkpoint_status(known: CheckpointStatus | None,
                      scanned: CheckpointStatus | None) -> CheckpointStatus | None:
    """status.checkpoint after a scan (None: no scan finished since the last reconcile).

    A failed scan keeps the last good steps (docs/operations.md). A scan that found what
    the status already says changes nothing, its time included: a status write per job
    per scan would only load the API server (and wake every watcher of the job)."""
    if scanned is None:
        return known
    merged = keep_last_known(known, scanned)
    return known if same_checkpoint_result(known, merged) else merged
