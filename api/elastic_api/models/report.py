"""The trainer's report (`status.training`, the only part of the status the trainer
writes: goodput, elastic events, cadence, stalls, activity, restores), and the
checkpoint request the operator makes of it.
"""
from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from elastic_api.models.base import Count, StatusModel
from elastic_api.models.spec_tpu import MAX_BUDGET_TIMES, MAX_SLICES
from elastic_api.phases import PHASES, Phase, PhaseSource


class CheckpointRequest(StatusModel):
    """The operator asks the trainer for a checkpoint now (docs/status-contract.md); the
    trainer answers in status.training.checkpointAck."""

    id: int = Field(description="1, 2, ...: the trainer acknowledges this id.")
    reason: Literal["Maintenance", "User"]
    slices: list[int] = Field(default_factory=list, max_length=MAX_SLICES)
    requested_at: datetime
    deadline: datetime = Field(description="Moved anyway (phase Expired) if not "
                               "acknowledged by then.")
    pause: bool = Field(description="Hold (no steps) after the save until phase is Released "
                        "or pauseSeconds passed: steps after the save would be lost.")
    pause_seconds: int = 0
    phase: Literal["Requested", "Acknowledged", "Moving", "Released", "Expired"]


class CheckpointAck(StatusModel):
    """The trainer's answer to status.checkpointRequest."""

    id: Count
    step: Count = Field(description="The step saved (committed) for the request.")
    committed_at: datetime
    paused: bool = Field(False, description="The trainer pauses before the next step.")


class GoodputCounters(StatusModel):
    """Cumulative seconds by cause, continued across trainer processes."""

    waiting_for_slices: float = Field(0.0, ge=0)
    fewer_slices: float = Field(0.0, ge=0, description="Steps on fewer slices than the "
                                "job's: the missing slices' share of their time.")
    startup: float = Field(0.0, ge=0)
    restore: float = Field(0.0, ge=0)
    recompile: float = Field(0.0, ge=0)
    recomputed_steps: float = Field(0.0, ge=0)
    stalled: float = Field(0.0, ge=0, description="A step that hung, until the watchdog "
                           "noticed it (beyond a normal step).")
    slow_slices: float = Field(0.0, ge=0, description="Steps held up by a slow slice: "
                               "their time beyond the fastest slice's part.")
    checkpointing: float = Field(0.0, ge=0)


class TrainerGoodput(StatusModel):
    """The trainer's cumulative accounting of its time (status.training.goodput)."""

    productive_seconds: float = Field(0.0, ge=0, description="Step time of steps whose "
                                      "results were kept (recomputed steps excluded).")
    badput_seconds: GoodputCounters = Field(default_factory=GoodputCounters)
    median_step_seconds: float | None = Field(None, ge=0)


class BadputSeconds(GoodputCounters):
    other: float = Field(0.0, ge=0, description="Wall time no cause accounts for (e.g. "
                         "scheduling before the trainer's first report).")


class Goodput(StatusModel):
    """What failures cost (docs/metrics.md, "Goodput")."""

    since: datetime = Field(description="Job creation.")
    observed_at: datetime = Field(description="The trainer report (or slice transition) "
                                  "these figures are as of.")
    wall_seconds: float
    productive_seconds: float | None = None
    ratio: float | None = Field(None, description="productiveSeconds / wallSeconds.")
    badput_seconds: BadputSeconds | None = None
    slice_down_seconds: float = Field(
        0.0, description="The operator's timeline: time some slice was Down or Restarting "
        "(after it had been Ready).")
    slice_down_since: datetime | None = Field(
        None, description="Open interval of slice_down_seconds (a slice is not Ready now).")




class ElasticEventReport(StatusModel):
    """The trainer's view of its current (or most recent) elastic event."""

    id: Count = Field(description="1 for the first event of the run, then 2, 3, ...")
    phase: Literal["Detected", "WaitingForSlices", "Restoring", "Resumed", "Failed"]
    detected_at: datetime
    error: str | None = Field(None, description="e.g. DATA_LOSS: slice 2 is down")
    failed_step: Count | None = Field(None, description="Last step completed before the failure.")
    slices_down: list[Count] = Field(default_factory=list, max_length=MAX_SLICES)
    restored_from_step: Count | None = None
    restore_source: Literal["snapshot", "checkpoint", "none"] | None = None
    restored_at: datetime | None = None
    resumed_at: datetime | None = Field(
        None, description="When the first step after restore completed.",
    )
    resumed_step: Count | None = None


class CadenceReport(StatusModel):
    """How often the trainer keeps one kind of copy of the state (snapshot or checkpoint),
    and why (docs/trainer.md, "Cadence")."""

    period_steps: Count = Field(description="Steps between two copies; 0 = off.")
    chosen_by: Literal["User", "Trainer"] = Field(
        description="User: spec (or the flag) gave the period; Trainer: chosen from measured "
        "costs.")
    # A string, not an enum: a newer trainer may give a reason this schema does not know.
    reason: str = Field(
        max_length=64,
        description="UserSet, Off, Measuring (warming up: probe copies), WithinBudget (the "
        "shortest period within the budget), CopySlowed (lengthened: the copy got "
        "slower against the step), MemoryPressure (lengthened: little free host memory), YoungDaly "
        "(shortened toward sqrt(2 x cost x mean time between failures)).")
    message: str | None = None
    cost_seconds: float | None = Field(None, ge=0, description="What one copy costs (median "
                                       "of the newest measurements).")
    step_seconds: float | None = Field(None, ge=0, description="A step without a copy "
                                       "(median of the newest).")
    overhead_percent: float | None = Field(None, ge=0, description="costSeconds / (periodSteps"
                                           " x stepSeconds), in percent.")
    budget_percent: float | None = Field(None, ge=0, description="The budget the period was "
                                         "chosen within.")


class StallReport(StatusModel):
    """The trainer's watchdog (docs/trainer.md, "Watchdog"): the step in flight has run
    past the deadline learned from the run's own step times. Absent while steps complete."""

    step: Count = Field(description="The step that has not completed (the last completed + 1).")
    phase: Literal["Step", "FirstStep", "Checkpoint", "Restore"] = Field(
        description="What was in flight: a step, the first step after a compile or resize, "
        "a checkpoint save or a restore (each has its own, longer deadline).")
    started_at: datetime = Field(description="When that step (or save, or restore) started.")
    detected_at: datetime
    deadline_seconds: float = Field(ge=0, description="The deadline it ran past.")
    suspect_slices: list[Count] = Field(
        default_factory=list, max_length=MAX_SLICES,
        description="Slices the evidence blames; empty: nothing could be blamed (the "
        "operator restarts the trainer after its own progress deadline).")
    evidence: str | None = Field(
        None, max_length=512,
        description="What the blame rests on, e.g. slice 2's part of step 53 did not finish "
        "while slices 0, 1 and 3 finished theirs in 0.11 s.")


class SliceReplacementRequest(StatusModel):
    """The trainer asks the operator to replace slices its own evidence blames, whose pods
    stay Ready (a hung or slow slice): the operator recreates each one's worker Job once
    per (processId, id), counted as a slice failure."""

    id: Count = Field(description="1 for the process's first request, then 2, 3, ...")
    slices: list[Count] = Field(min_length=1, max_length=MAX_SLICES)
    # A string, not an enum: a newer trainer may give a reason this schema does not know.
    reason: str = Field(max_length=64, description="SliceHung or SliceSlow.")
    requested_at: datetime
    message: str | None = Field(None, max_length=512)


class TrainerActivity(StatusModel):
    """What the trainer's main thread is doing now (elastic_api.phases): reported by the
    trainer itself, or inferred by the progress sidecar from its process (state, CPU
    time, Python stacks) and from what it writes (docs/trainer.md, "Phases")."""

    phase: Phase = Field(description="TrainStep, Compile, Evaluation, CheckpointSave, "
                         "Restore, DataWait, DeviceWait (blocked in one device call) or "
                         "Stopped (the process is stopped).")
    since: datetime = Field(description="When the trainer entered this phase (its own clock, "
                            "or the first sample that saw it).")
    last_activity_at: datetime | None = Field(
        None, description="The newest sign of life inside the phase: an evaluation step's "
        "line, the process's CPU time advancing, the trainer's own heartbeat.")
    frame: str | None = Field(
        None, max_length=300, description="The frame that shows the phase, e.g. "
        "block_until_ready, called from train_step at train.py:412.")
    source: PhaseSource = Field(description="Trainer (reported), Sampled (the sidecar read "
                                "the process) or MetricsFile (the trainer's output).")
    process_state: Literal["Running", "Sleeping", "DiskSleep", "Stopped", "Zombie"] | None = \
        Field(None, description="The process's state at the sample (Sampled only).")
    cpu_seconds: float | None = Field(None, ge=0, description="The process's CPU time at the "
                                      "sample (Sampled only).")


class PhaseRecord(StatusModel):
    """How long one phase has taken in this run, on the trainer's clock: the history each
    phase's deadline is learned from (elastic_api.phases.phase_deadline)."""

    phase: Phase
    count: Count = Field(description="Times the phase ended.")
    last_seconds: float = Field(ge=0, description="How long it took the last time.")
    longest_seconds: float = Field(ge=0, description="The longest it took.")


class SliceStepTime(StatusModel):
    """One slice's part of the recent steps, where the backend can time each part (the
    simulated backend can; the Pathways client sees one program, docs/trainer.md). Slow,
    not stalled: a slice at `relative` >= elastic_api.stragglers.SLOW_SLICE_FACTOR is a
    straggler (elastic_api.stragglers.slow_slices, the rule both sides apply)."""

    slice: Count
    seconds: float = Field(ge=0, description="The median of its part over the last steps "
                           "measured on this mesh.")
    relative: float = Field(ge=0, description="seconds over the fastest slice's (1 for the "
                            "fastest).")


class RestoreReport(StatusModel):
    """The restore the trainer last did (status.training.lastRestore; the operator carries
    it into status.checkpoint.lastRestore)."""

    # A string, not an enum: a newer trainer may restore from a source this schema does
    # not know.
    source: str = Field(max_length=64, description="checkpoint (from checkpoint.directory) "
                        "or snapshot (from the surviving slices' memory).")
    step: Count = Field(description="The step restored.")
    bytes: Count | None = Field(
        None, description="What the restore read: the committed step's files as listed "
        "(elastic_api.checkpoints.step_size, the operator's rule too); for a snapshot, the "
        "state's bytes.")
    seconds: float = Field(ge=0, description="From the start of the restore to the state "
                           "on the devices.")
    gib_per_second: float | None = Field(None, ge=0, alias="gibPerSecond",
                                         description="bytes / 2^30 / seconds.")
    restored_at: datetime
    # Who timed it, and so what `seconds` includes (elastic_api.restores).
    measured_by: str | None = Field(
        None, max_length=64, description="Trainer: the trainer timed its own restore. "
        "ProgressSidecar: a trainer that reports nothing (MaxText), timed by the progress "
        "sidecar from the process's start to its first step after the restore, less that "
        "step's own time: an upper bound that includes the process's start-up and compile.")


class TrainingReport(StatusModel):
    """Written by the trainer through the status subresource; read by the operator."""

    observed_at: datetime
    state: Literal["Initializing", "Training", "Recovering", "Succeeded", "Failed"]
    reason: str | None = Field(None, description="CamelCase reason when Failed.")
    message: str | None = None
    step: Count = 0
    total_steps: Count | None = None
    loss: float | None = None
    step_seconds: float | None = Field(None, ge=0, description="Wall time of the last "
                                       "completed step.")
    tokens_per_second: float | None = None
    attempt: Count = Field(0, description="Elastic attempt: 0, then +1 per elastic event.")
    active_slices: Count | None = None
    last_committed_checkpoint_step: Count | None = None
    last_snapshot_step: Count | None = None
    elastic_events_total: Count = 0
    retries_remaining: Count | None = None
    retry_times: list[datetime] | None = Field(
        None, max_length=MAX_BUDGET_TIMES,
        description="When the slice losses --max-retries counts now came (within "
        "--retry-window-seconds), oldest first: a trainer process that replaces this one "
        "goes on counting from them.")
    process_id: Count | None = None
    host_name: str | None = None
    process_started_at: datetime | None = None
    elastic_event: ElasticEventReport | None = None
    checkpoint_ack: CheckpointAck | None = None
    goodput: TrainerGoodput | None = None
    snapshot_cadence: CadenceReport | None = None
    checkpoint_cadence: CadenceReport | None = None
    activity: TrainerActivity | None = Field(
        None, description="What the trainer is doing now (elastic_api.phases).")
    phases: list[PhaseRecord] | None = Field(
        None, max_length=len(PHASES), description="How long each phase has taken in this "
        "run, one entry per phase: what each phase's deadline is learned from.")
    stall: StallReport | None = Field(
        None, description="Set while the step in flight is past the watchdog's deadline.")
    slice_replacement: SliceReplacementRequest | None = Field(
        None, description="The trainer's newest request to replace slices it blames.")
    slice_step_times: list[SliceStepTime] | None = Field(
        None, max_length=MAX_SLICES,
        description="Each active slice's part of the recent steps; absent where the "
        "backend cannot time the parts (Pathways).")
    last_restore: RestoreReport | None = Field(
        None, description="The restore this trainer process last did (the newest of its "
        "start and its elastic events).")
