"""Reading a trainer's Python stacks (elastic_trainer.stacks, stack_phases): real `py-spy
dump --json --nonblocking` output of real processes (tests/fixtures/stacks, recorded by
hack/record_stacks.py; the maxtext-* ones from real MaxText 0.2.5 on CPU), each read to
the phase and the frame the contract says, innermost context first."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from elastic_trainer.stack_phases import classify, is_library
from elastic_trainer.stacks import Frame, StackReader, StackUnavailable, ThreadStack, main_thread

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "stacks"


def load(name: str) -> ThreadStack:
    dump: list[dict[str, Any]] = json.loads((FIXTURES / f"{name}.json").read_text())
    stack = main_thread(dump, dump[0]["pid"])
    assert stack is not None
    return stack


@pytest.mark.parametrize(("fixture", "phase", "frame"), [
    # MaxText 0.2.5: its evaluation, a synchronous save (in Orbax, and waiting for the
    # state), its ahead-of-time compile of the train step, a train step's dispatch.
    ("maxtext-evaluation", "Evaluation",
     "MetricLogger._accumulate_eval_metrics at metric_logger.py:523, called from "
     "MetricLogger._flush_one_buffered_entry at metric_logger.py:504"),
    ("maxtext-save", "CheckpointSave",
     "Checkpointer.save_checkpointables, called from save_checkpoint at checkpointing.py:1359"),
    ("maxtext-save-block-until-ready", "CheckpointSave",
     "save_checkpoint at checkpointing.py:1313, called from maybe_save_checkpoint at "
     "checkpointing.py:1242"),
    ("maxtext-compile", "Compile",
     "backend_compile_and_load, called from train_loop at train.py:1257"),
    ("maxtext-train-step", None, "tree_flatten, called from training_loop_iteration at "
     "train.py:925"),
    # JAX: compiling and tracing a jitted train step, waiting for a computation.
    ("jax-backend-compile", "Compile", "backend_compile_and_load, called from train_step at "),
    ("jax-trace", "Compile", "trace_to_jaxpr, called from train_step at <string>:8"),
    ("jax-block-until-ready", None, "block_until_ready, called from train_step at <string>:7"),
    # The input pipeline (grain) and the bundled trainer's checkpoints; a compile inside
    # a save or a restore is Compile (the innermost context).
    ("grain-data-wait", "DataWait",
     "PrefetchDatasetIterator.__next__, called from train_loop at <string>:9"),
    ("bundled-save", "CheckpointSave",
     "Checkpointer.save, called from Checkpointer.save at checkpoint.py:300"),
    ("bundled-restore", "Restore", ""),
    ("bundled-compile-in-save", "Compile",
     "backend_compile_and_load, called from Checkpointer.save at checkpoint.py:300"),
    ("bundled-trace-in-restore", "Compile",
     "trace_to_jaxpr_dynamic, called from Trainer._restore at loop.py:481"),
])
def test_a_real_stack_is_read_to_its_phase_and_frame(fixture: str, phase: str | None,
                                                     frame: str) -> None:
    reading = classify(load(fixture))
    assert reading.phase == phase
    assert reading.frame is not None and reading.frame.startswith(frame)


def test_a_wait_for_the_devices_is_a_device_call_even_when_stopped() -> None:
    """The device call is no context of its own: the sidecar makes it DeviceWait when it
    does not move; a stopped process (its /proc state) reads the same."""
    for name in ("jax-block-until-ready", "stopped-in-block-until-ready"):
        stack = load(name)
        assert not stack.active
        assert classify(stack).device_call
    assert not classify(load("maxtext-train-step")).device_call


def test_a_device_call_inside_a_context_is_that_context() -> None:
    """MaxText waits for the state (block_until_ready) inside its save: CheckpointSave."""
    reading = classify(load("maxtext-save-block-until-ready"))
    assert (reading.phase, reading.device_call) == ("CheckpointSave", False)


def test_the_main_thread_is_the_one_whose_id_is_the_pid() -> None:
    dump = json.loads((FIXTURES / "maxtext-save.json").read_text())
    assert len(dump) > 1  # Orbax's threads too
    stack = main_thread(dump, dump[0]["pid"])
    assert stack is not None and stack.thread_id == dump[0]["pid"]
    assert main_thread([], 1) is None
    with pytest.raises(StackUnavailable):
        main_thread({"not": "a list"}, 1)


def _frame(path: str, name: str = "f") -> Frame:
    return Frame(name, path, path.rsplit("/", 1)[-1], 1)


@pytest.mark.parametrize(("path", "library"), [
    ("/venv/lib/python3.13/site-packages/jax/_src/api.py", True),
    ("/usr/lib/python3.13/threading.py", True),
    ("<frozen runpy>", True),
    ("/venv/lib/python3.13/site-packages/maxtext/trainers/pre_train/train.py", False),
    ("/opt/etj/lib/python3.11/site-packages/elastic_trainer/loop.py", False),
    ("<string>", False),
])
def test_the_trainers_own_code_is_told_from_the_libraries(path: str, library: bool) -> None:
    assert is_library(_frame(path)) is library


def test_an_evaluation_in_any_trainers_code_is_named_by_its_function() -> None:
    loop = _frame("/app/train.py", "train_loop")
    for name in ("evaluate", "run_eval", "eval_step", "Trainer._evaluation_loop"):
        stack = ThreadStack(1, True, (_frame("/app/train.py", name), loop))
        assert classify(stack).phase == "Evaluation", name
    jax = _frame("/venv/lib/python3.13/site-packages/jax/_src/api.py", "eval_shape")
    assert classify(ThreadStack(1, True, (jax, loop))).phase is None


def test_a_missing_py_spy_and_a_refusal_are_reasons_not_exceptions(tmp_path: Path) -> None:
    with pytest.raises(StackUnavailable, match="not installed") as missing:
        StackReader(binary=None).__class__.dump(
            type("R", (), {"binary": None, "timeout": 1.0})(), 1)  # type: ignore[arg-type]
    assert missing.value.lasting
    fake = tmp_path / "py-spy"
    fake.write_text("#!/bin/sh\necho 'Permission Denied: Try running again with elevated "
                    "permissions' >&2\nexit 1\n")
    fake.chmod(0o755)
    with pytest.raises(StackUnavailable, match="permission denied") as refused:
        StackReader(str(fake)).dump(1)
    assert refused.value.lasting
    fake.write_text("#!/bin/sh\necho 'Error: something transient' >&2\nexit 1\n")
    with pytest.raises(StackUnavailable, match="transient") as transient:
        StackReader(str(fake)).dump(1)
    assert not transient.value.lasting


def test_py_spy_reads_a_live_python_process() -> None:
    """The real thing, where py-spy is installed (the trainer extra): a sleeping child."""
    reader = StackReader()
    if reader.binary is None:
        pytest.skip("py-spy is not installed")
    code = "import time\ndef train_step():\n    time.sleep(60)\ntrain_step()\n"
    proc = subprocess.Popen(["python3", "-c", code])
    try:
        for _ in range(100):
            try:
                stack = reader.dump(proc.pid)
            except StackUnavailable:
                stack = None
            if stack is not None and any(f.name == "train_step" for f in stack.frames):
                break
        assert stack is not None and stack.frames[0].function in ("sleep", "train_step")
    finally:
        proc.kill()
        proc.wait()
