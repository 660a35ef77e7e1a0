"""What a trainer is doing, and how long it may do it without news: the phase vocabulary
and each phase's deadline, written once (docs/trainer.md, "Phases").

Three parties apply it: the bundled trainer reports its own phase as it reports its steps
(and its watchdog times each phase by it), the progress sidecar infers the phase of any
trainer from its process (its state, its CPU time, its Python stacks) and from what the
trainer writes (MaxText's metrics file), and the operator's stall rule
(operator core/progressing.py) judges the job by it.

A phase's deadline is learned from the run's own history, measured on the trainer's clock
(`PhaseRecord`: how long each phase took), never from when reports happen to arrive. A
phase not seen yet in this run gets a long first floor, as a first step does: a first
evaluation, save, restore or compile has nothing to learn from, and is the likeliest to be
long (caches cold, a model compiled for the first time).

A phase is what the main thread is doing, read from the outside in: a stopped process is
Stopped whatever its stack; else the innermost frame of a known context names it
(an evaluation, a checkpoint save or restore, a compile, the input pipeline); a train
step's thread that stays in one device call (the same frame in consecutive samples) is
DeviceWait, held to the step deadline, so a hung collective is found without waiting
for the step gaps; anything else inside the loop is TrainStep.
"""
from __future__ import annotations

from typing import Final, Literal, get_args

Phase = Literal[
    "TrainStep",       # a train step dispatched or completing (steps advance)
    "Compile",         # tracing and compiling a step (the first one, after a resize)
    "Evaluation",      # an evaluation loop (MaxText's eval_interval)
    "CheckpointSave",  # a synchronous checkpoint save (or waiting for one to commit)
    "Restore",         # restoring state from a checkpoint or a snapshot
    "DataWait",        # waiting for the input pipeline (a batch not ready)
    "DeviceWait",      # blocked in one device call or collective (block_until_ready, ...)
    "Stopped",         # the process is stopped (SIGSTOP, a debugger), not scheduled at all
]
PHASES: Final[tuple[Phase, ...]] = get_args(Phase)

# Where the phase was read: the trainer said so, the sidecar sampled the process, or the
# trainer's own output showed it (MaxText's running_eval lines).
PhaseSource = Literal["Trainer", "Sampled", "MetricsFile"]

# Phases that belong to training: activity in one of them (a heartbeat inside it) is
# progress, as a step is. DeviceWait and Stopped are not: a thread blocked in one device
# call, or a stopped process, makes no progress however long it waits.
TRAINING_PHASES: Final[frozenset[Phase]] = frozenset(
    {"TrainStep", "Compile", "Evaluation", "CheckpointSave", "Restore", "DataWait"})

# The floor of every learned phase deadline: NVRx's soft timeout, as for steps.
FLOOR_SECONDS: Final = 60.0
# A phase seen before may take this many times its longest so far.
LONGEST_FACTOR: Final = 2.0
# A phase not seen yet in this run (seconds). Compile and Restore: tens of minutes on
# Pathways for a large model; a first evaluation or synchronous save of a large model:
# minutes; an input pipeline refilling from GCS: minutes.
FIRST_FLOOR_SECONDS: Final[dict[Phase, float]] = {
    "Compile": 1800.0,
    "Restore": 1800.0,
    "Evaluation": 900.0,
    "CheckpointSave": 900.0,
    "DataWait": 600.0,
}
# A stopped process makes no progress whatever it was doing; this grace only covers a
# stop that is part of normal work (a profiler's or a debugger's brief attach).
STOPPED_GRACE_SECONDS: Final = 30.0


def phase_deadline(phase: Phase, longest_seconds: float | None, step_deadline: float) -> float:
    """How long `phase` may last without a heartbeat before it is a stall.

    `longest_seconds`: the longest this phase has taken in this run (None: not seen yet);
    `step_deadline`: the deadline learned from the run's step times (elastic_api.progress_rules),
    which TrainStep and a DeviceWait (a step's device call) are held to."""
    if phase == "Stopped":
        return STOPPED_GRACE_SECONDS
    if phase in ("TrainStep", "DeviceWait"):
        return step_deadline
    if longest_seconds is None:
        return FIRST_FLOOR_SECONDS[phase]
    return round(max(FLOOR_SECONDS, LONGEST_FACTOR * longest_seconds), 3)
