"""A restore's report (status.training.lastRestore), written once: the bundled trainer
times its own restore; for a trainer that reports nothing (MaxText) the progress sidecar
measures what it can see (docs/trainer.md, "Restore speed").

What the sidecar can see of MaxText 0.2.5: when its pod's process started (the sidecar is
a native sidecar: it starts just before `main`, and keeps that time in its state file),
and the train lines of the metrics file. A new process whose first train line is step
N > 0 resumed from a checkpoint: MaxText restores step N-1 and writes its first line for
the step after it (recorded: "restoring from this run's directory step 25", first line
step 26). Orbax times the restore itself (its `'event_type': 'restore'` line,
`checkpoint_manager_duration_secs`), but on main's stdout, which the sidecar cannot read.
So the sidecar's seconds are from the process's start to the moment it read that first
line, less the line's own step time: the restore plus everything before the first step
(Python's start, imports, MaxText's config and mesh, the compile). An upper bound on the
restore, named so (`measuredBy: ProgressSidecar`).
"""
from __future__ import annotations

from datetime import datetime

from elastic_api.checkpoints import GIB
from elastic_api.models import RestoreReport

TRAINER = "Trainer"
PROGRESS_SIDECAR = "ProgressSidecar"


def gib_per_second(nbytes: int | None, seconds: float) -> float | None:
    """bytes / 2^30 / seconds (None: the bytes are unknown or no time passed)."""
    if nbytes is None or seconds <= 0:
        return None
    return nbytes / GIB / seconds


def restore_report(*, source: str, step: int, nbytes: int | None, seconds: float,
                   restored_at: datetime, measured_by: str) -> RestoreReport:
    """status.training.lastRestore, its speed computed by the one rule."""
    # The speed from the seconds as written: the status's own figures agree (a 30 ms
    # restore rounded to 0.1 ms moves its speed by up to 0.2 %).
    seconds = round(max(0.0, seconds), 4)
    return RestoreReport(source=source, step=step, bytes=nbytes, seconds=seconds,
                         gib_per_second=gib_per_second(nbytes, seconds),
                         restored_at=restored_at, measured_by=measured_by)


def restored_step(first_step: int) -> int | None:
    """The checkpoint step a new MaxText process restored, from its first train line
    (None: it started from step 0, nothing restored)."""
    return first_step - 1 if first_step > 0 else None


def sidecar_restore(*, started_at: datetime, first_step: int,
                    first_step_seconds: float | None, seen_at: datetime,
                    nbytes: int | None) -> RestoreReport | None:
    """The restore a new process did, as the progress sidecar measures it (None: the
    process started from scratch). `started_at`: the process's start; `seen_at`: when the
    sidecar read its first train line (`first_step`, `first_step_seconds` its time)."""
    step = restored_step(first_step)
    if step is None:
        return None
    seconds = (seen_at - started_at).total_seconds() - (first_step_seconds or 0.0)
    return restore_report(source="checkpoint", step=step, nbytes=nbytes, seconds=seconds,
                          restored_at=seen_at, measured_by=PROGRESS_SIDECAR)


def steps_lost(failed_step: int | None, restored_from_step: int | None) -> int | None:
    """The steps an elastic event redid: from the step restored to the step that failed;
    None unless both are known. Never negative: with a snapshot every step the copy
    restored may be of the step whose loss was not read yet (done, its copy published
    before the loss), one newer than the failed step: nothing was lost. The operator's
    recovery record and the trainer's event summary both count it so."""
    if failed_step is None or restored_from_step is None:
        return None
    return max(0, failed_step - restored_from_step)
