"""The whole status (`ElasticTrainingJobStatus`): the recovery record, counters, progress
and restarts, the checkpoint listing, Kueue admission, the Event outbox.
"""
from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from elastic_api.models.base import StatusModel
from elastic_api.models.health import Condition, PoolStatus, RestartBudgets, SliceStatus
from elastic_api.models.report import (
    CheckpointRequest,
    Goodput,
    RestoreReport,
    TrainingReport,
)
from elastic_api.models.spec_tpu import MAX_SLICES
from elastic_api.phases import Phase

# Bounds of the operator's lists in status (maxItems in the CRD): a status grown past them
# is refused at admission, whoever writes it. Pools: those the job's slices run on and
# those they failed on within the quarantine window. Events: one status change's, and
# those of earlier changes not posted yet (writes/outbox.py drops the oldest beyond it).
# Samples: progress_rules.SAMPLES kept; checkpoint steps: the newest listed.
MAX_CONDITIONS, MAX_POOLS, MAX_PENDING_EVENTS = 64, 2 * MAX_SLICES, 4 * MAX_SLICES
MAX_PROGRESS_SAMPLES, MAX_LISTED_STEPS = 64, 1000

# Who closed a recovery (status.lastRecovery.closedBy), and what confirmed a recovery the
# operator closed without the trainer (confirmedBy): docs/design/recovery.md.
CLOSED_BY_TRAINER, CLOSED_BY_OPERATOR = "Trainer", "Operator"
CONFIRMED_BY_REPORT, CONFIRMED_BY_CHECKPOINT = "TrainingReport", "Checkpoint"


class RecoveryRecord(StatusModel):
    """The latest recovery (status.lastRecovery): what is known of it, and nothing made
    up. A recovery the operator closed without the trainer (closedBy Operator) has no
    resumedAt, downtimeSeconds, stepsLost, restoredFromStep or restoreSource: nobody
    reported them."""

    detected_at: datetime
    resumed_at: datetime | None = None
    downtime_seconds: float | None = None
    steps_lost: int | None = None
    restored_from_step: int | None = None
    restore_source: str | None = None
    slices: list[int] = Field(default_factory=list, max_length=MAX_SLICES)
    closed_at: datetime | None = Field(
        None, description="When the recovery closed (Trainer: resumedAt; Operator: when "
        "every slice was Ready again).")
    closed_by: Literal["Trainer", "Operator"] | None = Field(
        None, description="Trainer: the trainer's report said training resumed (its elastic "
        "event Resumed, or a step after the failure). Operator: for a trainer that reports "
        "no elastic events, every slice was Ready again with the head's main running since "
        "before the failure (or, main being new, a checkpoint newer than the failure was "
        "listed); training itself was not confirmed by that.")
    confirmed_by: Literal["TrainingReport", "Checkpoint"] | None = Field(
        None, description="After an Operator closure, what showed training going on: a "
        "status.training report of a new step made after the closure, or a committed "
        "checkpoint newer than any step known at the failure, listed after the closure.")
    confirmed_at: datetime | None = Field(
        None, description="The report's observedAt, or the listing's observedAt.")
    confirmed_step: int | None = Field(None, description="The step reported, or committed.")
    # Bookkeeping for the operator: the trainer's elasticEvent.id this recovery is matched
    # to, and the trainer's step when the slice went down (a later step means resumed);
    # the newest checkpoint step listed at the failure (committed or in flight) and the
    # trainer's step at an Operator closure (what a confirmation must go beyond).
    elastic_event_id: int | None = None
    step_at_detection: int | None = None
    checkpoint_step_at_detection: int | None = None
    step_at_closure: int | None = None

    @property
    def open(self) -> bool:
        """Not closed yet (an older operator's closed record has resumedAt only)."""
        return self.resumed_at is None and self.closed_at is None


class Counters(StatusModel):
    """Monotonic counters: the operator takes max(previous, observed) so they never go back."""

    slice_failures: int = 0
    elastic_events: int = 0
    jobset_restarts: int = Field(0, alias="jobSetRestarts")
    trainer_restarts: int = Field(
        0, description="Times a new trainer process replaced the one that was reporting.")
    stall_restarts: int = Field(
        0, description="Times the operator restarted a stalled trainer (spec.elastic.onStall "
        "Recover), against spec.elastic.maxStallRestarts.")
    preemptions: int = Field(
        0, description="Times Kueue preempted the job (evicted it to admit another); none "
        "counts as a slice failure or a JobSet restart.")
    evictions: int = Field(
        0, description="Times Kueue evicted the job for another reason of its own "
        "(PodsReadyTimeout, NodeFailures, a stopped queue, ...; not preemptions, not "
        "deactivations); none counts as a slice failure, a JobSet restart or a trainer "
        "restart. The last one's reason: status.admission.lastEvictionReason.")


class TrainerRestart(StatusModel):
    """The operator restarting the trainer after a stall (spec.elastic.onStall Recover):
    in place (the process asked to exit, its pod restarts main), or the head pod it
    deletes; written before it acts."""

    requested_at: datetime
    step: int | None = Field(None, description="The step the trainer was stalled at.")
    pod_name: str
    pod_uid: str
    reason: str = Field(description="ProgressDeadlineExceeded.")
    in_place: bool = Field(False, description="The trainer process is asked to exit and its "
                           "pod restarts main in place (pathways-rm, pathways-proxy and the "
                           "workers kept); false: the head pod is deleted (the trainer did "
                           "not exit in time, or main does not restart in place).")
    process_started_at: datetime | None = Field(
        None, description="status.training.processStartedAt of the process asked to exit (it "
        "recognizes itself by it).")
    main_restarts: int | None = Field(None, ge=0, description="main's restartCount when asked: "
                                      "a higher one says it restarted.")


class ProgressStatus(StatusModel):
    """The operator's own view of training progress (condition Progressing), from the
    steps in status.training: what it has learned of the job's step interval, kept here so
    that a restarted operator keeps it."""

    step: int | None = Field(None, description="The newest step seen.")
    since: datetime = Field(description="When the operator first saw that step, or when "
                            "its clock started again (a hold ended, a new trainer process).")
    process_started_at: datetime | None = Field(
        None, description="status.training.processStartedAt of the process seen.")
    advanced: bool = Field(False, description="That process has made a step since the "
                           "clock started (before: still starting, never stalled).")
    first_step: bool = Field(False, description="Waiting for the first step after a hold "
                             "(a recovery, a pause, a resume: a recompile may come first).")
    held: str | None = Field(None, description="Why the clock is held (the job is "
                             "suspended, queued, recovering, paused for maintenance, ...).")
    gaps: list[float] = Field(default_factory=list, max_length=MAX_PROGRESS_SAMPLES,
                              description="Seconds between the "
                              "newest step changes the operator saw (newest last).")
    step_gaps: list[float] = Field(default_factory=list, max_length=MAX_PROGRESS_SAMPLES,
                                   description="The gaps that measure "
                                   "the step time (every slice active; newest last).")
    step_counts: list[int] = Field(default_factory=list, max_length=MAX_PROGRESS_SAMPLES,
                                   description="The steps each of "
                                   "stepGaps spans.")
    longest_gap_seconds: float | None = None
    step_seconds: list[float] = Field(
        default_factory=list, max_length=MAX_PROGRESS_SAMPLES,
        description="Seconds per step at the newest step changes "
        "(newest last), what the step deadline is learned from: the gap over the steps it "
        "spans, or the trainer's stepSeconds when longer; none from a gap with offStep.")
    off_step: bool = Field(False, description="The trainer was seen in a phase a step's "
                           "time does not include (an evaluation, a save, a compile, a "
                           "restore) since the newest step: the next gap is not a step's.")
    baseline_step_seconds: float | None = Field(
        None, description="The job's own best seconds per step (the lowest over the "
        "newest stepGaps seen).")
    slow_since: datetime | None = Field(None, description="Since when steps run slower "
                                        "than the baseline by the SlowSteps factor.")
    deadline_seconds: float | None = Field(None, description="The deadline in force: under "
                                           "rule Phase the phase's, under Steps the progress "
                                           "deadline (spec, or learned).")
    rule: Literal["Phase", "Steps"] | None = Field(
        None, description="The rule that judged at the newest look: Phase (the trainer's "
        "phase is known, status.training.activity: each phase held to its own deadline) or "
        "Steps (it is not: no new step for the progress deadline).")
    phase: Phase | None = Field(None, description="The phase rule Phase watched.")
    phase_since: datetime | None = Field(
        None, description="The newest sign of life the phase rule saw (the phase's start, "
        "its heartbeat, or the newest step): what its deadline counts from.")
    stalled_at: datetime | None = Field(None, description="When the deadline passed.")
    restart: TrainerRestart | None = Field(None, description="The operator's restart of "
                                           "the trainer for the latest stall.")


class HandledSliceReplacement(StatusModel):
    """The trainer's slice replacement request (status.training.sliceReplacement) the
    operator last handled: each is acted on once per (processId, processStartedAt, id)."""

    process_id: int | None = None
    process_started_at: datetime | None = None
    id: int
    handled_at: datetime
    replaced: list[int] = Field(default_factory=list, max_length=MAX_SLICES,
                                description="The slices replaced.")
    message: str | None = Field(None, description="What was done, and why not for a slice "
                                "left alone.")


class TrainerProcess(StatusModel):
    """The trainer process the operator last saw reporting (status.training's identity),
    kept by the operator so that a replacement process is noticed and counted."""

    process_id: int | None = None
    host_name: str | None = None
    started_at: datetime | None = None


class CheckpointStatus(StatusModel):
    """What the operator's last listing of spec.checkpoint.directory found, by the commit
    rule both the operator and the bundled trainer apply (elastic_api/checkpoints.py)."""

    directory: str | None = None
    latest_committed_step: int | None = Field(
        None, description="The newest committed step: a directory named by the step in "
        "ASCII digits (no leading zero) holding commit_success.txt, which Orbax writes "
        "last, on gs:// and on a filesystem. The step the bundled trainer restores.")
    incomplete_steps: list[int] = Field(
        default_factory=list, max_length=MAX_LISTED_STEPS,
        description="Uncommitted steps newer than "
        "latestCommittedStep (a step directory without commit_success.txt, or a "
        "<step>.orbax-checkpoint-tmp* directory): saves that may still be in flight.")
    abandoned_steps: list[int] = Field(
        default_factory=list, max_length=MAX_LISTED_STEPS,
        description="Uncommitted steps not newer than "
        "latestCommittedStep: left by saves that never finished (Orbax removes such a "
        "directory only if the same step is saved again). Never restored; safe to delete.")
    observed_at: datetime | None = Field(
        None, description="When a listing of the directory first showed this result (it "
        "is listed every --checkpoint-scan-seconds; only changes are written).")
    error: str | None = Field(
        None, description="Why the directory could not be listed, or why it holds no "
        "step (e.g. MaxText's run directory, one level above its checkpoints/).")
    reason: str | None = Field(
        None, description="Why `error` is set, as one word, where it is the operator's "
        "own configuration: CheckpointRootNotAllowed, the directory is outside the roots "
        "`etj operator --checkpoint-roots` (chart value checkpointRoots) allows for the "
        "job's namespace, and is never listed (condition CheckpointRootAllowed False).")
    latest_committed_bytes: int | None = Field(
        None, ge=0, description="The size of latestCommittedStep: the bytes of the regular "
        "files under its directory, from the same listing (no object is read; a sparse "
        "file counts its length). What a restore of it reads.")
    latest_committed_files: int | None = Field(
        None, ge=0, description="The regular files under latestCommittedStep's directory.")
    last_restore: RestoreReport | None = Field(
        None, description="The restore the trainer last reported "
        "(status.training.lastRestore), kept by the operator across trainer processes.")


class AdmissionStatus(StatusModel):
    """Where a queued job (Kueue) stands with its queue; the `Admitted` condition says it
    in words. Absent on jobs that no queue admits."""

    workload: str | None = Field(None, description="The Workload Kueue made for the JobSet.")
    queue_name: str | None = Field(None, description="The LocalQueue it waits in.")
    cluster_queue: str | None = Field(None, description="The ClusterQueue that admitted it.")
    admitted_at: datetime | None = Field(
        None, description="When Kueue last admitted it (the Workload's Admitted condition).")
    evicted_at: datetime | None = Field(
        None, description="When Kueue last evicted it (preempted, deactivated, ...).")
    workload_preemptions: int = Field(
        0, description="Preemptions Kueue counted on this Workload (its schedulingStats), "
        "as last seen: what counters.preemptions has taken into account.")
    workload_evictions: int = Field(
        0, description="Other evictions Kueue counted on this Workload (schedulingStats), "
        "as last seen: what counters.evictions has taken into account.")
    last_eviction_reason: str | None = Field(
        None, description="Kueue's reason for the last eviction (Preempted, "
        "PodsReadyTimeout, NodeFailures, ...).")
    pods_ready_deadline: datetime | None = Field(
        None, description="When Kueue's waitForPodsReady evicts the job unless all its "
        "pods are Ready by then (condition EvictionPending); absent while they are.")
    eviction_warned: datetime | None = Field(
        None, description="The podsReadyDeadline the Warning Event EvictionPending was "
        "posted for (once, half-way to it).")
    requeue_at: datetime | None = Field(
        None, description="After a PodsReadyTimeout eviction: not readmitted before this "
        "(Kueue's requeuing backoff).")
    worker_cluster: str | None = Field(
        None, description="A MultiKueue job, on the manager cluster: the worker cluster "
        "it ran in, while that cluster cannot be reached and once it is lost (written by "
        "the manager; the worker's status, copied here otherwise, does not know it).")


# An Event's message as the operator posts it, and as its outbox keeps it.
MAX_EVENT_MESSAGE = 1024


class PendingEvent(StatusModel):
    """A Kubernetes Event of a status change, kept in the status write that carries the
    change and posted after it (the operator's outbox)."""

    name: str = Field(description="The Event's name, derived from the change: the API "
                      "server refuses a second copy.")
    reason: str
    type: Literal["Normal", "Warning"] = "Normal"
    message: str = Field("", max_length=MAX_EVENT_MESSAGE)


class ElasticTrainingJobStatus(StatusModel):
    observed_generation: int | None = None
    phase: str | None = Field(None, description="Short status for `kubectl get`.")
    jobset_name: str | None = Field(None, alias="jobSetName")
    slices_desired: int | None = None
    slices_ready: int | None = None
    slices: list[SliceStatus] = Field(default_factory=list, max_length=MAX_SLICES)
    conditions: list[Condition] = Field(default_factory=list, max_length=MAX_CONDITIONS)
    counters: Counters = Field(default_factory=Counters)
    admission: AdmissionStatus | None = None
    last_recovery: RecoveryRecord | None = None
    checkpoint: CheckpointStatus | None = None
    trainer_process: TrainerProcess | None = None
    pools: list[PoolStatus] = Field(default_factory=list, max_length=MAX_POOLS)
    spare_pools: int | None = Field(None, description="Healthy, unused, unquarantined node "
                                    "pools of the job's TPU shape.")
    checkpoint_request: CheckpointRequest | None = None
    goodput: Goodput | None = None
    progress: ProgressStatus | None = None
    handled_slice_replacement: HandledSliceReplacement | None = None
    budgets: RestartBudgets | None = None
    pending_events: list[PendingEvent] | None = Field(
        None, max_length=MAX_PENDING_EVENTS,
        description="The Events of the latest status change, written with it and "
        "posted after the write; the next reconcile (this replica's or a new leader's) "
        "posts those not known to be posted (a second copy is refused) and drops them. "
        "Absent when there are none.")
    training: TrainingReport | None = None
