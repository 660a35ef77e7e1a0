"""Record the stack fixtures of tests/fixtures/stacks/: real `py-spy dump --json
--nonblocking` output of real processes in each phase the progress sidecar reads
(trainer/elastic_trainer/stack_phases.py), for its unit tests.

    python -m hack.record_stacks [--only NAME ...]

Each scenario starts a process (a small JAX script, or the bundled trainer), samples it
with py-spy until its main thread shows the frame the fixture is for, writes that dump
and stops the process. Needs py-spy (the trainer extra) and the right to read the
processes' memory (root, or the same user). The maxtext-*.json fixtures were taken the
same way from real MaxText 0.2.5 on CPU in its root (hack/maxtext-env.sh), run as
tests/fixtures/maxtext-0.2.5/job-local.yaml with steps=40 eval_interval=20 eval_steps=200.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elastic_trainer.stacks import find_py_spy

OUT = Path("tests/fixtures/stacks")
ETJ = [sys.executable, "-m", "elastic_api.etj_cli"]

BLOCK = '''
import jax, jax.numpy as jnp
@jax.jit
def step_fn(x):
    return jax.lax.fori_loop(0, 2000, lambda i, y: jnp.tanh(y @ y), x)
def train_step(x):
    return jax.block_until_ready(step_fn(x))
x = jnp.ones((800, 800))
while True:
    x = train_step(x)
'''
COMPILE = '''
import jax, jax.numpy as jnp
def big(x):
    for i in range(4000):
        x = jnp.sin(x) * (i + 1) + jnp.cos(x[::-1])
    return x
def train_step(x):
    return jax.jit(big)(x)
train_step(jnp.ones((64,))).block_until_ready()
'''
GRAIN = '''
import time, grain
class SlowSource:
    def __len__(self): return 10**6
    def __getitem__(self, i):
        time.sleep(5)
        return i
def train_loop():
    for batch in grain.MapDataset.source(SlowSource()).to_iter_dataset():
        pass
train_loop()
'''


@dataclass(frozen=True)
class Scenario:
    name: str  # the fixture's file name, without .json
    argv: list[str]
    wants: Callable[[list[dict[str, Any]]], bool]  # the main thread's frames
    stop_first: bool = False  # SIGSTOP the process before the dump that is kept
    before: tuple[str, ...] = ()  # a command run to its end first (a checkpoint to restore)


def _has(*names: str) -> Callable[[list[dict[str, Any]]], bool]:
    return lambda frames: any(n in f["name"] for f in frames for n in names)


def _compiling(frames: list[dict[str, Any]]) -> bool:
    return _has("compile", "trace_to_jaxpr", "lower")(frames)


def scenarios(work: Path) -> list[Scenario]:
    py = [sys.executable, "-c"]
    ckpt = str(work / "checkpoints")
    slow_write = ["--simulate-checkpoint-write-seconds", "60"]
    restoring = [*ETJ, "train", "--config", "small", "--steps", "400", "--checkpoint-dir",
                 str(work / "restore"), "--checkpoint-period", "20", "--snapshot-period", "0"]
    bundled = [*ETJ, "train", "--config", "small", "--steps", "400", "--checkpoint-dir", ckpt,
               "--checkpoint-period", "20", "--no-async-checkpoint", "--snapshot-period", "0"]
    return [
        Scenario("jax-block-until-ready", [*py, BLOCK], _has("block_until_ready")),
        Scenario("stopped-in-block-until-ready", [*py, BLOCK], _has("block_until_ready"),
                 stop_first=True),
        Scenario("jax-backend-compile", [*py, COMPILE],
                 lambda fs: _has("backend_compile")(fs) and _has("train_step")(fs)),
        Scenario("jax-trace", [*py, COMPILE], _has("trace_to_jaxpr")),
        Scenario("grain-data-wait", [*py, GRAIN], lambda fs: _has("train_loop")(fs) and any(
            "/grain/" in f["filename"] for f in fs) and not _has("_find_and_load")(fs)),
        Scenario("bundled-compile-in-save", [*bundled, *slow_write],
                 lambda fs: _has("Checkpointer.save")(fs) and _compiling(fs)),
        Scenario("bundled-save", [*bundled, *slow_write],
                 lambda fs: _has("Checkpointer.save")(fs) and not _compiling(fs)),
        Scenario("bundled-trace-in-restore", bundled,
                 lambda fs: _has("Restorer.restore")(fs) and _compiling(fs)),
        Scenario("bundled-restore", restoring,
                 lambda fs: _has("Restorer.restore")(fs) and not _compiling(fs),
                 before=tuple(a if a != "400" else "21" for a in restoring)),
    ]


def _main_frames(dump: list[dict[str, Any]], pid: int) -> list[dict[str, Any]]:
    for thread in dump:
        if thread.get("os_thread_id") == pid:
            return list(thread.get("frames") or [])
    return []


def dump(py_spy: str, pid: int) -> list[dict[str, Any]] | None:
    done = subprocess.run([py_spy, "dump", "--pid", str(pid), "--json", "--nonblocking"],
                          capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        return None
    result: list[dict[str, Any]] = json.loads(done.stdout)
    return result


def record(s: Scenario, py_spy: str, timeout: float) -> bool:
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    if s.before:
        subprocess.run(s.before, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=timeout, check=True)
    proc = subprocess.Popen(s.argv, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            found = dump(py_spy, proc.pid)
            if found and s.wants(_main_frames(found, proc.pid)):
                if s.stop_first:
                    os.kill(proc.pid, signal.SIGSTOP)
                    found = dump(py_spy, proc.pid)
                if found and s.wants(_main_frames(found, proc.pid)):
                    (OUT / f"{s.name}.json").write_text(json.dumps(found, indent=2) + "\n")
                    print(f"{s.name}: recorded (pid {proc.pid})", flush=True)
                    return True
            time.sleep(0.2)
    finally:
        if proc.poll() is None:  # it may have ended first (its phase too short to catch)
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    print(f"{s.name}: not seen within {timeout:.0f}s", flush=True)
    return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args()
    py_spy = find_py_spy()
    if py_spy is None:
        print("py-spy is not installed", file=sys.stderr)
        return 2
    OUT.mkdir(parents=True, exist_ok=True)
    ok = True
    with tempfile.TemporaryDirectory(prefix="record-stacks-") as tmp:
        for s in scenarios(Path(tmp)):
            if args.only is None or s.name in args.only:
                ok = record(s, py_spy, args.timeout) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
