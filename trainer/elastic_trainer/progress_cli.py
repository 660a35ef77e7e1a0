"""`etj progress`: status.training for a trainer that does not write it (MaxText).

The renderer runs it as a native sidecar of the head pod when `spec.trainer.progress` is
set (docs/api.md, "Progress of any trainer"). It follows the trainer's metrics file on the
head's /tmp as it is written (`live_metrics.LiveMetrics`) and samples the trainer's
process in the pod's shared process namespace (`sampler.ProcessSampler`: its state, CPU
time and Python stacks), and sends what they say through the same `StatusReporter` as
`etj train` (a merge patch of status.training, rate-limited, never blocking): `state`
Initializing until the first step, then Training with the step, loss and step time of
the newest line; `activity` and `phases`, what the trainer is doing and how long its
phases took (activity.py). Imports no jax: the trainer image runs it next to any
trainer. Its dependencies are imported in `run`, so that `etj` starts fast.
"""
from __future__ import annotations

import argparse
import logging
import os
import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from elastic_trainer.stop_signals import StopSignals

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
                        help="seconds between reads of the file when it is not written (it "
                        "is read as soon as it is)")
    parser.add_argument("--report-interval", type=float, default=5.0,
                        help="at most one status write per this many seconds")
    parser.add_argument("--sample-interval", type=float, default=2.0,
                        help="seconds between samples of the trainer's process; 0: none "
                        "(the metrics file only)")
    parser.add_argument("--trainer-pid", type=int, default=None,
                        help="the trainer's pid (default: found in the pod's shared process "
                        "namespace)")
    parser.add_argument("--py-spy", default=None,
                        help="py-spy to read the trainer's stacks with (default: on PATH)")


class _Counts:
    """Logs what the follower skipped or read again, once per change, with the totals."""

    def __init__(self, follower: MetricsFollower) -> None:
        self.follower = follower
        self.skipped = self.restarts = self.missed = 0

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
        if f.missed > self.missed:
            log.warning("%s: %d train step(s) written before a cut were never read (%d so "
                        "far)", f.path, f.missed - self.missed, f.missed)
            self.missed = f.missed


class _Sidecar:
    """The loop's state: what was read, what the trainer does, what was reported."""

    def __init__(self, args: argparse.Namespace, job: tuple[str, str]) -> None:
        from elastic_trainer.activity import ActivityTracker
        from elastic_trainer.file_watch import FALLBACK_POLL_SECONDS
        from elastic_trainer.live_metrics import LiveMetrics
        from elastic_trainer.metrics_file import MetricsFollower
        from elastic_trainer.progress_sidecar import RestoreWatch, load_identity
        from elastic_trainer.report import StatusReporter
        from elastic_trainer.sampler import ProcessSampler
        from elastic_trainer.stacks import StackReader

        self.args = args
        pod_name = os.environ.get("ETJ_POD_NAME") or socket.gethostname()
        pod_uid = os.environ.get("ETJ_POD_UID") or f"{pod_name}/{os.getpid()}"
        started = datetime.now(UTC)
        self.identity = load_identity(Path(args.state_file), pod_name, pod_uid, started)
        self.restore = RestoreWatch(self.identity, self.identity.started_at == started,
                                    args.checkpoint_directory)
        self.reporter = StatusReporter(*job, interval=args.report_interval)
        follower = MetricsFollower(args.metrics_file)
        self.counts = _Counts(follower)
        self.live = LiveMetrics(follower, idle_seconds=args.poll_interval).start()
        self.tracker = ActivityTracker()
        self.sampler = ProcessSampler(StackReader(args.py_spy), args.trainer_pid) \
            if args.sample_interval > 0 else None
        self.next_sample = 0.0
        self.newest: StepRecord | None = None
        self.seen = _seen_before(job, self.identity.started_at)
        self.held: tuple[str, ...] = ()
        if self.live.watch.why_not:
            log.info("reading %s every %.2fs: no inotify (%s)", args.metrics_file,
                     FALLBACK_POLL_SECONDS, self.live.watch.why_not)

    def tick(self, monotonic: float, urgent: bool = False) -> None:
        from elastic_trainer.activity import Sample
        from elastic_trainer.metrics_file import StepRecord

        lines = self.live.drain()
        self.counts.log_changes()
        records = [r for _, r in lines if isinstance(r, StepRecord)]
        first_at = next((at for at, r in lines if isinstance(r, StepRecord)), None)
        now = datetime.now(UTC)
        self.restore.see(records, first_at or now)
        self.tracker.see_lines(lines)
        if monotonic >= self.next_sample:
            self.next_sample = monotonic + self.args.sample_interval
            self.tracker.see_sample(self.sampler.sample(now) if self.sampler is not None
                                    else Sample(now))
        if records:
            self.newest = records[-1]
        self.reporter.update(self.report(now), urgent=urgent)

    def report(self, now: datetime) -> Any:
        """The newest report, with every figure that went back unexplained held
        (elastic_api.forward: a restarted sidecar finds no train line in a file cut at an
        evaluation's first line, a file rotated, ...)."""
        from elastic_api.forward import Seen, forward
        from elastic_trainer.progress_sidecar import progress_report

        result = forward(self.seen, progress_report(
            self.identity, self.newest, self.args.total_steps, now, self.restore.report,
            self.tracker.activity(), self.tracker.phases()))
        if result.held != self.held and {"step", "state"} & set(result.held):
            log.info("holding step %d, state %s as reported before (what was read since "
                     "gives no newer step: a restarted sidecar, a cut or rotated metrics "
                     "file); held: %s", result.report.step, result.report.state,
                     ", ".join(result.held))
        self.held = result.held
        self.seen = Seen.after(self.seen, result)
        return result.report

    def finish(self) -> None:
        import time

        self.live.close()
        self.tick(time.monotonic(), urgent=True)  # the newest state, sent at once
        self.reporter.close(timeout=5.0)
        f = self.live.follower
        log.info("stopped at step %s (%d line(s) skipped, %d ignored, %d train step(s) "
                 "missed, file read again %d time(s); %d sample(s), %d without a stack; "
                 "%d status write(s), %d failed)", self.newest.step if self.newest else "-",
                 f.skipped, f.ignored, f.missed, f.restarts,
                 self.sampler.samples if self.sampler else 0,
                 self.sampler.stack_failures if self.sampler else 0,
                 self.reporter.sent, self.reporter.failed)


def _seen_before(job: tuple[str, str], started_at: datetime) -> Any:
    """What status.training held when this sidecar started (elastic_api.forward.Seen; None:
    nothing yet): a sidecar restarted beside the same trainer process goes on from it."""
    from elastic_api.forward import Seen
    from elastic_trainer.report import read_stored_report

    stored = read_stored_report(*job)
    if stored is None:
        return None
    if stored.process_started_at == started_at:
        log.info("going on from what this process reported before: step %d (%s)",
                 stored.step, stored.state)
    return Seen.of(stored)


def run(args: argparse.Namespace) -> int:
    import time

    from elastic_trainer.report import job_from_args

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    job = job_from_args(args.job)
    if job is None:
        log.error("no job: give --job NAMESPACE/NAME or set ETJ_JOB_NAMESPACE and ETJ_JOB_NAME")
        return 2
    stop = StopSignals()  # before the sidecar's threads, which inherit the block
    sidecar = _Sidecar(args, job)
    log.info("following %s for %s/%s (trainer %s, pid %d, started %s); sampling the "
             "trainer's process every %ss", args.metrics_file, *job,
             sidecar.identity.host_name, sidecar.identity.process_id,
             sidecar.identity.started_at.isoformat(), args.sample_interval or "- (off)")
    sidecar.reporter.update(sidecar.report(datetime.now(UTC)), urgent=True)
    while not stop.wait(args.poll_interval):
        sidecar.tick(time.monotonic())
    sidecar.finish()
    return 0
