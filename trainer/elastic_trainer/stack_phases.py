"""Which frame of a trainer's Python stack shows which phase (elastic_api.phases): the
rules the progress sidecar reads a sampled stack by, for JAX, Orbax, grain, tf.data,
MaxText 0.2.5 and the bundled trainer (docs/trainer.md, "Phases").

A stack is read from its innermost frame out, and the first frame a rule knows names the
phase (the innermost context wins: the compile of an evaluation step is Compile, its
input the pipeline's). A stack no context rule knows is left to the caller (activity.py):
a train step, or a wait in one device call when it does not move. The frame is shown as
the issue's operators read it: the function, and where the trainer's own code called
it ("block_until_ready, called from train_step at train.py:412").

Rules match a frame's file by a part of its path (py-spy's short names are not stable
across installs) and its function by name: `save` matches save and save_checkpoint,
a rule with no names matches every function of the file.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from elastic_api.phases import Phase
from elastic_trainer.stacks import Frame, ThreadStack

MAX_FRAME_TEXT: Final = 300  # TrainerActivity.frame


@dataclass(frozen=True)
class Rule:
    phase: Phase | None  # None: a device call (no context of its own)
    path: str  # a part of the file's path, e.g. /jax/_src/compiler.py or /grain/
    names: tuple[str, ...] = ()  # function names (or their `name_...` forms); () any
    contains: str = ""  # or: a function whose name contains this

    def matches(self, frame: Frame) -> bool:
        if self.path not in frame.path:
            return False
        function = frame.function
        if self.contains:
            return self.contains in function
        return not self.names or any(function == n or function.startswith(n + "_")
                                     for n in self.names)


RULES: Final[tuple[Rule, ...]] = (
    # Tracing, lowering and compiling a computation (the first step, after a resize).
    Rule("Compile", "/jax/_src/compiler.py"),
    Rule("Compile", "/jax/_src/interpreters/partial_eval.py", ("trace_to_jaxpr",)),
    Rule("Compile", "/jax/_src/interpreters/pxla.py",
         ("lower_sharding_computation", "_cached_compilation", "from_hlo", "compile")),
    Rule("Compile", "/jax/_src/interpreters/mlir.py", ("lower_jaxpr_to_module",)),
    Rule("Compile", "/jax/_src/stages.py", ("lower", "compile")),
    Rule("Compile", "/jax/_src/pjit.py", ("_pjit_lower", "_trace_for_jit")),
    # Checkpoints: Orbax's, MaxText's and the bundled trainer's save and restore.
    Rule("Restore", "/orbax/checkpoint/", contains="restore"),
    Rule("CheckpointSave", "/orbax/checkpoint/", contains="save"),
    Rule("CheckpointSave", "/orbax/checkpoint/", ("wait_until_finished", "finalize",
                                                  "_finalize")),
    Rule("Restore", "/maxtext/common/checkpointing.py",
         ("load_state_if_possible", "load_params_from_path", "_load_full_state_from_path")),
    Rule("CheckpointSave", "/maxtext/common/checkpointing.py",
         ("save_checkpoint", "maybe_save_checkpoint", "wait_until_finished")),
    Rule("Restore", "/elastic_trainer/restore.py"),
    Rule("Restore", "/elastic_trainer/checkpoint.py", ("restore",)),
    Rule("CheckpointSave", "/elastic_trainer/checkpoint.py",
         ("save", "finish", "wait", "wait_committed", "_wait_in_flight")),
    # Evaluation: MaxText's metric logger accumulating an evaluation's steps.
    Rule("Evaluation", "/maxtext/common/metric_logger.py", contains="eval"),
    # The input pipeline.
    Rule("DataWait", "/grain/"),
    Rule("DataWait", "/tensorflow/python/data/"),
    Rule("DataWait", "/maxtext/input_pipeline/"),
    Rule("DataWait", "/maxtext/common/data_loader.py", ("load_next_batch",)),
    Rule("DataWait", "/elastic_trainer/data.py"),
    Rule("DataWait", "/elastic_trainer/prefetch.py"),
    # Device calls: where a thread waits for the devices (a computation, a collective).
    Rule(None, "/jax/_src/api.py", ("block_until_ready", "device_get")),
    Rule(None, "/jax/_src/array.py", ("block_until_ready", "_value", "__array__",
                                      "__float__", "__int__", "__bool__", "__index__",
                                      "item", "tolist")),
    Rule(None, "/jax/experimental/multihost_utils.py",
         ("sync_global_devices", "process_allgather", "broadcast_one_to_all")),
)
# An evaluation loop in the trainer's own code: eval_step, evaluate, run_eval, ...
EVAL_NAME: Final = re.compile(r"^(eval|evaluate|evaluation)(_|$)|_(eval|evaluate|evaluation)(_|$)")
# The ML stack and the standard library: a frame there is not the trainer's own code.
LIBRARIES: Final = ("/jax/", "/jaxlib/", "/flax/", "/optax/", "/orbax/", "/grain/",
                    "/numpy/", "/etils/", "/tensorstore/", "/tensorflow/", "/absl/", "/chex/",
                    "/ml_dtypes/", "/pathwaysutils/")
STDLIB: Final = re.compile(r"^<frozen |/lib/python3\.\d+/(?!site-packages/|dist-packages/)")


def is_library(frame: Frame) -> bool:
    return any(part in frame.path for part in LIBRARIES) or bool(STDLIB.search(frame.path))


@dataclass(frozen=True)
class Reading:
    """What one sampled stack shows."""

    phase: Phase | None  # the context phase; None: no context rule knows the stack
    frame: str | None  # the frame that shows it, in words
    device_call: bool  # the innermost known frame is a device call


def _rule(frame: Frame) -> Rule | None:
    for rule in RULES:
        if rule.matches(frame):
            return rule
    if not is_library(frame) and EVAL_NAME.search(frame.function):
        return Rule("Evaluation", "")
    return None


def describe(frames: tuple[Frame, ...], index: int) -> str:
    """`frames[index]`, and where the trainer's own code called into it: the nearest
    outer frame that is not a library's ("block_until_ready, called from train_step at
    train.py:412")."""
    shown = frames[index]
    caller = next((f for f in frames[index + 1:] if not is_library(f)), None)
    text = shown.name if is_library(shown) else f"{shown.name} at {shown.location}"
    if caller is not None:
        text += f", called from {caller.name} at {caller.location}"
    return text[:MAX_FRAME_TEXT]


def classify(stack: ThreadStack) -> Reading:
    """The phase a stack shows (module docstring)."""
    frames = stack.frames
    for index, frame in enumerate(frames):
        rule = _rule(frame)
        if rule is None:
            continue
        if rule.phase is None:  # a device call: no context yet; an outer one may have one
            outer = classify(ThreadStack(stack.thread_id, stack.active, frames[index + 1:]))
            if outer.phase is not None:
                return outer
            return Reading(None, describe(frames, index), device_call=True)
        return Reading(rule.phase, describe(frames, index), device_call=False)
    return Reading(None, describe(frames, 0) if frames else None, device_call=False)
