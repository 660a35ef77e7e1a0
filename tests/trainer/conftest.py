"""Fixtures for the trainer's tests.

End-to-end runs: `etj train` runs in a subprocess (the simulated device count must be in
XLA_FLAGS before jax starts, and a subprocess is also what the head pod runs). All runs of
a session share one persistent compilation cache, so only the first run compiles cold.

In-process tests (snapshots, the Pathways contract) need several CPU devices: this file
asks for IN_PROCESS_DEVICES before any test runs (jax reads XLA_FLAGS when its backend
starts, at the first jax call, not at import); `cpu_devices` checks that it worked.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.trainer_run import RunTrainer, TrainerRun

IN_PROCESS_DEVICES = 8
_FLAG = "--xla_force_host_platform_device_count"
os.environ["XLA_FLAGS"] = " ".join(
    [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith(_FLAG)]
    + [f"{_FLAG}={IN_PROCESS_DEVICES}"])


@pytest.fixture(scope="session")
def cpu_devices() -> list[Any]:
    import jax

    devices = jax.devices()
    if len(devices) < IN_PROCESS_DEVICES:
        pytest.fail(f"jax sees {len(devices)} device(s), not {IN_PROCESS_DEVICES}: something "
                    "started jax's backend before tests/trainer/conftest.py set XLA_FLAGS",
                    pytrace=False)
    return list(devices)


@pytest.fixture(scope="session")
def compilation_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("compilation-cache")


@pytest.fixture(scope="session")
def run_trainer(tmp_path_factory: pytest.TempPathFactory, compilation_cache: Path
                ) -> RunTrainer:
    def run(*args: str, steps: int = 40, checkpoint_period: int = 10, timeout: float = 420,
            env: dict[str, str] | None = None) -> TrainerRun:
        tmp_path = tmp_path_factory.mktemp("run")
        ckpt = tmp_path / "ckpt"
        summary = tmp_path / "summary.json"
        cmd = [
            sys.executable, "-m", "elastic_api.etj_cli", "train", "--config", "tiny",
            "--steps", str(steps), "--batch", "8", "--seed", "0",
            "--simulate-slices", "2", "--devices-per-slice", "2",
            "--checkpoint-dir", str(ckpt), "--checkpoint-period", str(checkpoint_period),
            "--compilation-cache", str(compilation_cache), "--summary", str(summary),
            "--fault-duration", "0.3", "--elastic-timeout", "60", *args,
        ]
        run_env = {k: v for k, v in os.environ.items()
                   if k not in ("ETJ_JOB_NAMESPACE", "ETJ_JOB_NAME", "XLA_FLAGS")}
        run_env.update(env or {})
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env=run_env, check=False)
        log = proc.stdout + proc.stderr
        # Only a usage error (exit code 2, before training) leaves no summary.
        assert summary.exists() or proc.returncode == 2, (
            f"no summary written (rc {proc.returncode}):\n{log[-4000:]}")
        data = json.loads(summary.read_text()) if summary.exists() else {}
        return TrainerRun(proc.returncode, data, log, ckpt)

    return run


@pytest.fixture(scope="session")
def undisturbed(run_trainer: RunTrainer) -> TrainerRun:
    """An undisturbed 40-step run: the reference for bitwise comparisons."""
    run = run_trainer()
    assert run.returncode == 0, run.log[-4000:]
    return run
