"""One side of the goodput runs on the local control plane (bench/goodput_costs.py,
bench/goodput_check.py): its ElasticTrainingJob, the trainer run as the head pod's `main`
container, and what its log says.

Two sides run at once on one cluster, each on node pools of its own (a node label and
spec.nodeSelector keep them apart):

  ours      this operator with the API's defaults (no count, no period set): a failed
            slice replaced alone, recovered in the trainer's process from its in-memory
            snapshot; a maintenance notice answered with a checkpoint and a move to a
            spare pool; the restart budgets derived from the job's hosts.
  baseline  what plain JobSet does: the worker Jobs' backoffLimit 0 and JobSet's
            failurePolicy (a high maxRestarts, Recreate), so any failure restarts the whole
            JobSet, and the new trainer resumes from the newest committed checkpoint; no
            snapshots, no watchdog, no training on the slices left (minSlices all of
            them), no budget of restarts in the process (maxRetries as high as
            maxRestarts), maintenance notices ignored (replaceSlices false,
            maxSliceRestarts 0: the operator only reports).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.goodput_logs import Logs
from elastic_api.names import (
    GROUP,
    HEAD_REPLICATED_JOB,
    REPLICATED_JOB_LABEL,
    VERSION,
    job_pods_selector,
)
from elastic_devtools.background import BackgroundLoop
from elastic_devtools.localcluster.operator_settings import SETTINGS

NAMESPACE = SETTINGS["bench-goodput"].namespaces[0]
SIDE_LABEL = "bench.elastic.pathways.dev/side"  # + "-ours" / "-baseline" on the nodes
# Plain JobSet's restarts: any failure restarts it (what xpk renders with --max-restarts).
PLAIN_JOBSET_RESTARTS = 10_000
TRAINER_STEPS = 10_000_000  # the run stops the trainer, not its step count
# The global batch: it splits over 3 of the 4 slices' devices, so ours' default minSlices
# trains on the slices left while one is replaced (elastic_api.resize).
BATCH = 24


@dataclass(frozen=True)
class SideSpec:
    name: str  # "ours" or "baseline"
    slices: int
    topology: str
    pools: tuple[str, ...]
    checkpoint_period_steps: int
    step_seconds: float
    workdir: Path
    generation: int = 0  # ours' jobs one after another: goodput-ours-1, -2, ...

    @property
    def ours(self) -> bool:
        return self.name == "ours"

    @property
    def job(self) -> str:
        return f"goodput-{self.name}" + (f"-{self.generation}" if self.generation else "")

    @property
    def node_label(self) -> str:
        return f"{SIDE_LABEL}-{self.name}"

    @property
    def inbox(self) -> Path:
        return self.workdir / "faults"


def job_manifest(side: SideSpec) -> dict[str, Any]:
    args = ["--min-step-seconds", str(side.step_seconds), "--log-every", "1",
            "--fault-inbox", str(side.inbox)]
    spec: dict[str, Any] = {
        "backend": "simulated",
        "tpu": {"type": "v5e", "topology": side.topology, "numSlices": side.slices},
        "checkpoint": {"directory": str(side.workdir / side.job / "checkpoints"),
                       "periodSteps": side.checkpoint_period_steps},
        "trainer": {"image": "trainer:bench", "steps": TRAINER_STEPS, "batch": BATCH,
                    "args": args},
        "nodeSelector": {side.node_label: "true"},
    }
    if not side.ours:  # plain JobSet: every failure restarts it, from the checkpoint
        spec["maxRestarts"] = PLAIN_JOBSET_RESTARTS
        # minSlices: all of them, as a program that cannot train on (the default would
        # train on 3 in its process until the JobSet's restart ends it).
        # maxRetries: a plain JobSet's program has no restarts in its process to spend;
        # with the derived budget (3 an hour for 8 hosts) its trainer, which counts each
        # slice lost before the JobSet's restart ends it, failed the job at the fourth.
        spec["elastic"] = {"maxSliceRestarts": 0, "onStall": "Report",
                           "minSlices": side.slices, "maxRetries": PLAIN_JOBSET_RESTARTS}
        spec["recovery"] = {"replaceSlices": False}
        spec["maintenance"] = {"enabled": False}
        spec["snapshot"] = {"periodSteps": 0}
        args.append("--no-watchdog")
        # A plain JobSet's program keeps JAX's persistent cache (its new process reads it,
        # same devices), not our executable store (issue 80): the baseline as it was.
        args.append("--no-executable-store")
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ElasticTrainingJob",
            "metadata": {"name": side.job, "namespace": NAMESPACE}, "spec": spec}


def trainer_command(manifest: dict[str, Any]) -> list[str]:
    """The command the renderer gives the head's `main` container, with this Python."""
    from elastic_devtools.demo.run import _head_command

    command = _head_command(manifest)
    return [sys.executable, "-m", "elastic_api.etj_cli", *command[1:]]


@dataclass
class Process:
    pod_uid: str
    proc: subprocess.Popen[bytes]
    started_at: float
    ended_at: float | None = None


@dataclass
class HeadContainer(BackgroundLoop):
    """Plays the kubelet for the head pod's `main` (kwok runs no container): `etj train`
    runs while the job's newest head pod is Running and is killed once that pod is
    gone, terminating or failed (a JobSet restart deletes it)."""

    THREAD_NAME = "goodput-head"
    core: Any
    job: str
    command: list[str]
    env: dict[str, str]
    logdir: Path
    logs: Logs
    on_start: Any = None  # called with no argument after each trainer process starts
    processes: list[Process] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            try:
                self._step()
            except Exception as err:  # the API server busy: next round
                print(f"[goodput] {self.job}: head: {type(err).__name__}: {err}"[:300],
                      file=sys.stderr, flush=True)

    def _head(self) -> Any:
        pods = self.core.list_namespaced_pod(
            NAMESPACE, label_selector=f"{job_pods_selector(self.job)},"
            f"{REPLICATED_JOB_LABEL}={HEAD_REPLICATED_JOB}").items
        live = [p for p in pods if p.metadata.deletion_timestamp is None
                and p.status is not None and p.status.phase == "Running"]
        return max(live, key=lambda p: p.metadata.creation_timestamp, default=None)

    def _step(self) -> None:
        head = self._head()
        uid = head.metadata.uid if head is not None else None
        started = False
        with self._lock:
            current = self.processes[-1] if self.processes else None
            if current is not None and current.ended_at is None and current.pod_uid != uid:
                self._end(current)
            if uid is not None and all(p.pod_uid != uid for p in self.processes):
                self._begin(uid)
                started = True
        if started and self.on_start is not None:
            self.on_start()

    def _begin(self, uid: str) -> None:
        path = self.logdir / f"trainer-{len(self.processes)}.log"
        self.logs.add(path)
        with path.open("wb") as log:
            proc = subprocess.Popen(self.command, env=self.env, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        self.processes.append(Process(uid, proc, time.time()))

    def _end(self, process: Process) -> None:
        if process.proc.poll() is None:
            os.killpg(process.proc.pid, signal.SIGKILL)
            process.proc.wait(timeout=30)
        process.ended_at = time.time()

    def crash(self) -> float:
        """The training program crashes: its process is killed now. Returns when."""
        with self._lock:
            current = self.processes[-1] if self.processes else None
            if current is None or current.ended_at is not None:
                return time.time()
            self._end(current)
            assert current.ended_at is not None
            return current.ended_at

    def current_pod(self) -> str | None:
        """The Running head pod's name (the one the trainer plays the `main` of)."""
        head = self._head()
        return str(head.metadata.name) if head is not None else None

    def kill_times(self) -> list[float]:
        return [p.ended_at for p in self.processes if p.ended_at is not None]

    def stop(self) -> None:
        super().stop()
        with self._lock:
            for process in self.processes:
                if process.ended_at is None:
                    self._end(process)
