"""`etj progress`: status.training for a trainer that does not write it (MaxText).

The renderer runs it as a native sidecar of the head pod when `spec.trainer.progress` is
set (docs/api.md, "Progress of any trainer"). It follows the trainer's metrics file on the
head's /tmp (`metrics_file.MetricsFollower`) and sends what it says through the same
`StatusReporter` as `etj train` (a merge patch of status.training, rate-limited, never
blocking): `state` Initializing until the first step, then Training with the step, loss
and step time of the newest line. Imports no jax: the trainer image runs it next to any
trainer. Its dependencies are imported in `run`, so that `etj` starts fast.
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from elastic_trainer.metrics_file import MetricsFollower, StepRecord

log = logging.getLogger("etj.progress")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--metrics-file", required=True,
                        help="the JSON-lines file the trainer writes (MaxText's metrics_file)")
    parser.add_argument("--format", choices=["maxtext"], default="maxtext",
                        help="the file's format (MaxText's metrics_file)")
    parser.add_argument("--state-file", default="/tmp/.etj-progress.json",
                        help="where the trainer process's identity is kept across restarts")
    parser.add_argument("--total-steps", type=int, default=None,
                        help="steps the run does (MaxText's steps), for status.training")
    parser.add_argument("--checkpoint-directory", default=None,
                        help="spec.checkpoint.directory: the restored step's bytes (local)")
    parser.add_argument("--job", default=None,
                        help="NAMESPACE/NAME (default: env ETJ_JOB_NAMESPACE, ETJ_JOB_NAME)")
    parser.add_argument("--poll-interval", type=float, default=1.0,
                        help="seconds between reads of the file")
    parser.add_argument("--report-interval", type=float, default=5.0,
                        help="at most one status write per this many seconds")


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
    from elastic_trainer.metrics_file import MetricsFollower
    from elastic_trainer.progress import RestoreWatch, load_identity, progress_report
    from elastic_trainer.report import StatusReporter, job_from_args

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
    started = datetime.now(UTC)
    identity = load_identity(Path(args.state_file), pod_name, pod_uid, started)
    restore = RestoreWatch(identity, identity.started_at == started, args.checkpoint_directory)
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
        restored = restore.see(records, datetime.now(UTC))
        if records:
            newest = records[-1]
            reporter.update(progress_report(identity, newest, args.total_steps,
                                            datetime.now(UTC), restored))
        if stopping:
            break
    if newest is not None:  # the newest state, sent at once
        reporter.update(progress_report(identity, newest, args.total_steps, datetime.now(UTC),
                                        restore.report), urgent=True)
    reporter.close(timeout=5.0)
    follower.close()
    log.info("stopped at step %s (%d line(s) skipped, %d ignored, file read again %d "
             "time(s); %d status write(s), %d failed)",
             newest.step if newest else "-", follower.skipped, follower.ignored,
             follower.restarts, reporter.sent, reporter.failed)
    return 0
