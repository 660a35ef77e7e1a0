"""What the trainer tests' `run_trainer` fixture (tests/trainer/conftest.py) returns: one
`etj train` run in a subprocess, its exit code, summary, log and checkpoint directory; and
the integration tests' trainer: `etj train` run against a job as its head pod's main
container would run it (TrainerProcesses), beside an undisturbed Reference run."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elastic_api.models import TrainingReport


@dataclass
class TrainerRun:
    returncode: int
    summary: dict[str, Any]
    log: str
    checkpoint_dir: Path

    def events(self, kind: str = "slice_down") -> list[dict[str, Any]]:
        return [e for e in self.summary["elastic_events"] if e["kind"] == kind]


RunTrainer = Callable[..., TrainerRun]


# --- `etj train` as the head pod's main container runs it -------------------------------
# (kwok runs no container: the integration tests run the trainer beside the cluster)


def head_command(manifest: dict[str, Any]) -> list[str]:
    """The `etj train` command the renderer gives the head's `main` container, run with
    this interpreter (the venv's), whatever `etj` is on PATH."""
    from elastic_devtools.demo.run import _head_command

    command = _head_command(manifest)
    assert command[0] == "etj", command
    return [sys.executable, "-m", "elastic_api.etj_cli", *command[1:]]


def with_flag(command: list[str], flag: str, value: str) -> list[str]:
    out = list(command)
    out[out.index(flag) + 1] = value
    return out


class TrainerProcesses:
    """The trainer (`etj train`, as the head pod's main container runs it) as a child
    process, one after another: `start` after `kill` or `stop` plays the head container
    restarting, or a new head pod. Logs trainer-<n>.log, summary trainer.json."""

    def __init__(self, command: list[str], env: dict[str, str], tmp_path: Path) -> None:
        self.command, self.env, self.tmp_path = command, env, tmp_path
        self.summary = tmp_path / "trainer.json"
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = 0

    @property
    def log(self) -> Path:
        return self.tmp_path / f"trainer-{self.started}.log"

    def start(self) -> None:
        self.started += 1
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [*self.command, "--summary", str(self.summary)], env=self.env, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True)

    def kill(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def poll(self) -> int | None:
        assert self.proc is not None
        return self.proc.poll()

    def pause(self) -> None:
        """SIGSTOP: the process holds its step until `resume` (what a test waits for
        cannot be outrun by a fast machine's steps)."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGCONT)

    def write_failures(self) -> int:
        """Failed checkpoint writes the current process has logged: cut by a slice loss
        (an elastic event) or failed otherwise."""
        text = self.log.read_text(errors="replace")
        return text.count("was cut by a slice loss") + text.count("checkpoint write failed")

    def resumed_after_slice_loss(self) -> int:
        """Slice losses the current process has resumed from: the line it logs once
        training resumed (elastic_trainer.events), after any write the loss cut."""
        text = self.log.read_text(errors="replace")
        return len(re.findall(r"elastic event \d+: slices? [\d, ]+ down at step", text))

    def stop(self) -> None:
        """SIGTERM (as the kubelet stops a container), SIGKILL if it lingers."""
        from elastic_devtools.demo.run import _stop

        if self.proc is not None:
            _stop(self.proc)


class Reference:
    """The same `etj train` run undisturbed, beside the cluster (slices on a schedule
    that never fails, its own checkpoint directory), started at once: what a disturbed
    run must end with (reference.json, reference.log). `env` is added to its environment
    (another release's sources on PYTHONPATH: tests/support/upgrade.py)."""

    def __init__(self, command: list[str], tmp_path: Path,
                 env: dict[str, str] | None = None) -> None:
        self.command = with_flag(with_flag(command, "--slice-health", "schedule"),
                                 "--checkpoint-dir", str(tmp_path / "reference-checkpoints"))
        self.env = {**{k: v for k, v in os.environ.items()
                       if not k.startswith("ETJ_JOB") and k != "KUBECONFIG"}, **(env or {})}
        self.log = tmp_path / "reference.log"
        self._summary = tmp_path / "reference.json"
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [*self.command, "--summary", str(self._summary)], env=self.env, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True)

    def wait(self, timeout: float) -> None:
        self.proc.wait(timeout=timeout)

    def summary(self) -> dict[str, Any]:
        assert self.proc.returncode == 0, f"reference run failed (log: {self.log})"
        result: dict[str, Any] = json.loads(self._summary.read_text())
        return result

    def stop(self) -> None:
        from elastic_devtools.demo.run import _stop

        _stop(self.proc)


class Reports:
    """The status reports a trainer sends, as its StatusReporter (thread-safe: the
    reporter's and the watchdog's threads send too)."""

    def __init__(self) -> None:
        self.sent: list[tuple[TrainingReport, bool]] = []
        self._lock = threading.Lock()

    def update(self, report: TrainingReport, urgent: bool = False) -> None:
        with self._lock:
            self.sent.append((report, urgent))

    def reports(self) -> list[TrainingReport]:
        with self._lock:
            return [r for r, _ in self.sent]

    def in_phase(self, phase: str) -> list[TrainingReport]:
        return [r for r in self.reports() if r.activity and r.activity.phase == phase]


def run_to_end(trainer: Any, steps: int) -> Any:
    """Run an in-process Trainer to its end, its backend closed whatever happens; the
    RunResult, asserted to have trained every step without failing."""
    try:
        result = trainer.run()
    finally:
        trainer.backend.close()
    assert result.failure is None, result.failure
    assert result.final_step == steps
    return result
