"""What the chaos soak watches all through a run of one job (tests/integration/
test_chaos.py, and per job in the multi-tenant soak): the job's counters, slice restarts,
recoveries and conditions (Sampler), and its checkpoint directory on disk
(CheckpointWatcher)."""
from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from kubernetes import client

from elastic_api import GROUP, PLURAL, VERSION
from elastic_api.conditions import Reason
from elastic_devtools.background import BackgroundLoop
from elastic_devtools.localcluster.faults import wait_for


def condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), {})


def ts(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@dataclass
class Sampler(BackgroundLoop):
    """Samples the job's counters, slice restarts and the JobSet's restarts all through
    the run, to check that nothing ever goes backwards."""

    THREAD_NAME = "chaos-sampler"
    api: client.ApiClient
    ns: str
    job: str
    samples: list[dict[str, int]] = field(default_factory=list)
    latest: dict[str, Any] = field(default_factory=dict)
    recoveries: dict[str, dict[str, Any]] = field(default_factory=dict)  # by detectedAt
    bad_recoveries: list[dict[str, Any]] = field(default_factory=list)
    # When (time.monotonic) a sample showed Progressing False, and Degraded SlowSteps.
    stalled: list[float] = field(default_factory=list)
    slow_steps: list[float] = field(default_factory=list)


    def _run(self) -> None:
        custom = client.CustomObjectsApi(self.api)
        while not self._stop.wait(0.25):
            try:
                job = custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, self.job)
                jobset = custom.get_namespaced_custom_object(
                    "jobset.x-k8s.io", "v1alpha2", self.ns, "jobsets", self.job)
            except Exception:  # not created yet, or the API server busy or restarting
                continue
            status = job.get("status") or {}
            self.latest = status
            if condition(status, "Progressing").get("status") == "False":
                self.stalled.append(time.monotonic())
            if condition(status, "Degraded").get("reason") == Reason.SLOW_STEPS:
                self.slow_steps.append(time.monotonic())
            recovery = status.get("lastRecovery") or {}
            if recovery.get("resumedAt"):
                self.recoveries[recovery["detectedAt"]] = recovery
                if ts(recovery["resumedAt"]) < ts(recovery["detectedAt"]):
                    self.bad_recoveries.append(recovery)  # resumed before it went down
            sample = {f"counters.{k}": int(v) for k, v in (status.get("counters") or {}).items()}
            for s in status.get("slices") or []:
                sample[f"slices[{s['index']}].restarts"] = int(s.get("restarts") or 0)
            sample["jobset.restarts"] = int((jobset.get("status") or {}).get("restarts") or 0)
            self.samples.append(sample)

    def regressions(self) -> list[str]:
        seen: dict[str, tuple[int, int]] = {}
        problems = []
        for i, sample in enumerate(self.samples):
            for key, value in sample.items():
                if key in seen and value < seen[key][1]:
                    problems.append(f"{key} went from {seen[key][1]} (sample {seen[key][0]}) "
                                    f"to {value} (sample {i})")
                seen[key] = (i, max(value, seen.get(key, (i, value))[1]))
        return problems


_STEP_DIR = re.compile(r"^(\d+)$")
_TMP_DIR = re.compile(r"^(\d+)\.orbax-checkpoint-tmp")
COMMIT_MARKER = "commit_success.txt"  # orbax writes it last: the step is committed


@dataclass
class CheckpointWatcher(BackgroundLoop):
    """Watches the checkpoint directory all through the run (every 20 ms): which steps
    are committed and when, which are being written, and whether a committed step ever
    disappears other than by retention or the newest committed step goes backwards."""

    THREAD_NAME = "chaos-checkpoints"
    directory: Path
    keep: int
    committed: dict[int, float] = field(default_factory=dict)  # step -> first seen
    writing: set[int] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)
    _present: set[int] = field(default_factory=set)
    _latest: int = -1
    _lock: threading.Lock = field(default_factory=threading.Lock)


    def _scan(self) -> tuple[set[int], set[int]]:
        committed, writing = set(), set()
        try:
            entries = list(os.scandir(self.directory))
        except FileNotFoundError:
            return committed, writing
        for entry in entries:
            if m := _STEP_DIR.match(entry.name):
                if os.path.exists(os.path.join(entry.path, COMMIT_MARKER)):
                    committed.add(int(m.group(1)))
            elif m := _TMP_DIR.match(entry.name):
                writing.add(int(m.group(1)))
        return committed, writing

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            committed, writing = self._scan()
            if self._present - committed:
                # A listing is not atomic: one taken while orbax renames a new step into
                # place and deletes an old one can miss both. Confirm with a fresh one.
                committed, writing = self._scan()
            now = time.monotonic()
            with self._lock:
                for step in committed - self.committed.keys():
                    self.committed[step] = now
                for step in sorted(self._present - committed):
                    newer = sorted(s for s in committed if s > step)
                    if len(newer) < self.keep:
                        self.problems.append(
                            f"committed step {step} disappeared with only {newer} newer")
                latest = max(committed, default=-1)
                if latest < self._latest:
                    self.problems.append(f"newest committed step went from {self._latest} "
                                         f"to {latest}")
                self._latest = max(self._latest, latest)
                self._present, self.writing = committed, writing

    def latest(self) -> int:
        with self._lock:
            return max(self._present, default=-1)

    def writing_now(self) -> bool:
        with self._lock:
            return bool(self.writing)

    def rescan_writing(self) -> bool:
        """Whether a write is in flight on disk now (a fresh listing, not the last one)."""
        return bool(self._scan()[1])

    def wait_for_write(self, timeout: float) -> int:
        """Block until a checkpoint write is in flight; its step."""
        def in_flight() -> int | None:
            with self._lock:
                return min(self.writing) if self.writing else None
        step: int = wait_for(in_flight, timeout, "a checkpoint write in flight", interval=0.005)
        return step
