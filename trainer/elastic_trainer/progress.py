"""`etj progress`: status.training for a trainer that does not write it (MaxText).

The renderer runs it as a native sidecar of the head pod when `spec.trainer.progress` is
set (docs/api.md, "Progress of any trainer"). It follows the trainer's metrics file on the
head's /tmp (`metrics_file.MetricsFollower`) and sends what it says through the same
`StatusReporter` as `etj train` (a merge patch of status.training, rate-limited, never
blocking): `state` Initializing until the first step, then Training with the step, loss
and step time of the newest line.

The trainer process is known by its pod: `hostName` is the pod's name, `processId` a
number from the pod's uid, `processStartedAt` when this sidecar first started in the pod.
The three are kept in a state file on the same /tmp, so a restart of the sidecar reports
the same process, and a new pod (a JobSet restart) a new one (the operator's
TrainerRestarted). Imports no jax: the trainer image runs it next to any trainer.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import signal
import socket
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from elastic_api.models import TrainingReport
from elastic_trainer.metrics_file import MetricsFollower, StepRecord
from elastic_trainer.report import StatusReporter, job_from_args

log = logging.getLogger("etj.progress")
# A number from the uid that the API server reads exactly (status.training.processId).
PROCESS_ID_HEX_DIGITS = 13


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--metrics-file", required=True,
                        help="the JSON-lines file the trainer writes (MaxText's metrics_file)")
    parser.add_argument("--format", choices=["maxtext"], default="maxtext",
                        help="the file's format (MaxText's metrics_file)")
    parser.add_argument("--state-file", default="/tmp/.etj-progress.json",
                        help="where the trainer process's identity is kept across restarts")
    parser.add_argument("--total-steps", type=int, default=None,
                        help="steps the run does (MaxText's steps), for status.training")
    parser.add_argument("--job", default=None,
                        help="NAMESPACE/NAME (default: env ETJ_JOB_NAMESPACE, ETJ_JOB_NAME)")
    parser.add_argument("--poll-interval", type=float, default=1.0,
                        help="seconds between reads of the file")
    parser.add_argument("--report-interval", type=float, default=5.0,
                        help="at most one status write per this many seconds")


@dataclass(frozen=True)
class Identity:
    """The trainer process as status.training names it."""

    process_id: int
    host_name: str
    started_at: datetime


def pod_identity(pod_name: str, pod_uid: str, now: datetime) -> Identity:
    digest = hashlib.sha256(pod_uid.encode()).hexdigest()[:PROCESS_ID_HEX_DIGITS]
    return Identity(process_id=int(digest, 16), host_name=pod_name, started_at=now)


def load_identity(state_file: Path, pod_name: str, pod_uid: str, now: datetime) -> Identity:
    """The identity kept in `state_file` for this pod, else a new one (written there).
    A state file that cannot be read or written is no reason to stop: then a restart of
    the sidecar reports a new process."""
    try:
        kept = json.loads(state_file.read_text())
        if kept.get("podUid") == pod_uid and kept.get("hostName") == pod_name:
            started = datetime.fromisoformat(kept["startedAt"])
            if started.tzinfo is not None:
                return Identity(int(kept["processId"]), pod_name, started)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    identity = pod_identity(pod_name, pod_uid, now)
    record = {"podUid": pod_uid, "hostName": pod_name, "processId": identity.process_id,
              "startedAt": identity.started_at.isoformat()}
    try:
        tmp = state_file.with_name(state_file.name + ".tmp")
        tmp.write_text(json.dumps(record))
        tmp.replace(state_file)
    except OSError as err:
        log.warning("cannot keep the trainer's identity in %s: %s", state_file, err)
    return identity


def progress_report(identity: Identity, record: StepRecord | None, total_steps: int | None,
                    now: datetime) -> TrainingReport:
    """status.training for the newest record (None: no step yet)."""
    common: dict[str, Any] = {
        "observed_at": now, "total_steps": total_steps, "process_id": identity.process_id,
        "host_name": identity.host_name, "process_started_at": identity.started_at,
    }
    if record is None:
        return TrainingReport(state="Initializing", **common)
    return TrainingReport(state="Training", step=record.step, loss=record.loss,
                          step_seconds=record.step_seconds, **common)


class _Counts:
    """Logs what the follower skipped or read again, once per change, with the totals."""

    def __init__(self, follower: MetricsFollower) -> None:
        self.follower = follower
        self.skipped = self.restarts = 0

    def log_changes(self) -> None:
        f = self.follower
        if f.skipped > self.skipped:
            log.warning("%s: skipped %d line(s) that are not metrics lines (%d so far; the "
                        "last: %s)", f.path, f.skipped - self.skipped, f.skipped,
                        f.last_problem)
            self.skipped = f.skipped
        if f.restarts > self.restarts:
            log.warning("%s was replaced or cut: reading it from its start (%d time(s) so "
                        "far)", f.path, f.restarts)
            self.restarts = f.restarts


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    job = job_from_args(args.job)
    if job is None:
        log.error("no job: give --job NAMESPACE/NAME or set ETJ_JOB_NAMESPACE and ETJ_JOB_NAME")
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    pod_name = os.environ.get("ETJ_POD_NAME") or socket.gethostname()
    pod_uid = os.environ.get("ETJ_POD_UID") or f"{pod_name}/{os.getpid()}"
    identity = load_identity(Path(args.state_file), pod_name, pod_uid, datetime.now(UTC))
    reporter = StatusReporter(*job, interval=args.report_interval)
    follower = MetricsFollower(args.metrics_file)
    counts = _Counts(follower)
    log.info("following %s for %s/%s (trainer %s, pid %d, started %s)", args.metrics_file,
             *job, identity.host_name, identity.process_id, identity.started_at.isoformat())
    newest: StepRecord | None = None
    reporter.update(progress_report(identity, None, args.total_steps, datetime.now(UTC)),
                    urgent=True)
    while True:
        stopping = stop.wait(args.poll_interval)
        records = follower.poll()
        counts.log_changes()
        if records:
            newest = records[-1]
            reporter.update(progress_report(identity, newest, args.total_steps,
                                            datetime.now(UTC)))
        if stopping:
            break
    if newest is not None:  # the newest state, sent at once
        reporter.update(progress_report(identity, newest, args.total_steps, datetime.now(UTC)),
                        urgent=True)
    reporter.close(timeout=5.0)
    follower.close()
    log.info("stopped at step %s (%d line(s) skipped, %d ignored, file read again %d "
             "time(s); %d status write(s), %d failed)",
             newest.step if newest else "-", follower.skipped, follower.ignored,
             follower.restarts, reporter.sent, reporter.failed)
    return 0
