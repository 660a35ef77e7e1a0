"""What a checkpoint scan, and the trainer's report of its restore, change in
status.checkpoint, and the condition CheckpointRootAllowed that the scanner's
refusal of a root makes (with its Warning Event, once)."""
from __future__ import annotations

from elastic_api.conditions import ConditionType, Reason
from elastic_api.models import (
    CheckpointStatus,
    Condition,
    ElasticTrainingJobStatus,
    RestoreReport,
    TrainingReport,
)
from elastic_operator.core.setter import ConditionSetter, get_condition
from elastic_operator.core.status_events import StatusEvent


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
    """The trainer's newest restore: the one its report names, as the report reaches the
    core (core/reported.py: elastic_api.forward already refused an older one of the same
    process, and took a new process's whatever its clock says); the one known while the
    report names none (a new process that has not restored yet)."""
    return reported if reported is not None else known


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


def root_allowed_condition(setter: ConditionSetter,
                           checkpoint: CheckpointStatus | None) -> Condition:
    """Whether the operator may list spec.checkpoint.directory, from status.checkpoint as
    this reconcile writes it (level-based: a refusal is kept until a scan is allowed).
    Any other listing error (a directory not written yet, a 403) leaves it True: that is
    status.checkpoint.error's to say, and passes; this is the operator's configuration."""
    type_ = ConditionType.CHECKPOINT_ROOT_ALLOWED
    if checkpoint is None or checkpoint.observed_at is None:  # lastRestore alone: no listing
        return setter.unknown(type_, Reason.NOT_LISTED_YET,
                              "no listing of spec.checkpoint.directory has finished yet")
    if checkpoint.reason == Reason.CHECKPOINT_ROOT_NOT_ALLOWED:
        return setter.false(type_, Reason.CHECKPOINT_ROOT_NOT_ALLOWED,
                            f"{checkpoint.error}. Until then the status shows no checkpoint "
                            "of this job: recoveries are reported without one")
    return setter.true(type_, Reason.ROOT_ALLOWED, "spec.checkpoint.directory is under a "
                       "checkpoint root the operator may list for this namespace")


def root_refused_events(previous: ElasticTrainingJobStatus,
                        condition: Condition) -> list[StatusEvent]:
    """A Warning Event when the root is first refused (not again on every scan, nor after
    an operator restart: the stored condition says it was told)."""
    before = get_condition(previous, ConditionType.CHECKPOINT_ROOT_ALLOWED)
    refused = (condition.status == "False"
               and condition.reason == Reason.CHECKPOINT_ROOT_NOT_ALLOWED)
    if not refused or (before is not None and before.status == "False"
                       and before.reason == condition.reason):
        return []
    return [StatusEvent(Reason.CHECKPOINT_ROOT_NOT_ALLOWED, condition.message, "Warning")]
