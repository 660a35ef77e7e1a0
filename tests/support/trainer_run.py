"""What the trainer tests' `run_trainer` fixture (tests/trainer/conftest.py) returns: one
`etj train` run in a subprocess, its exit code, summary, log and checkpoint directory."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class TrainerRun:
    returncode: int
    summary: dict[str, Any]
    log: str
    checkpoint_dir: Path

    def events(self, kind: str = "slice_down") -> list[dict[str, Any]]:
        return [e for e in self.summary["elastic_events"] if e["kind"] == kind]


RunTrainer = Callable[..., TrainerRun]
