"""The checkpoint-scan scheduler: lists each job's checkpoint directory off the reconcile
path (listing a bucket must never delay slice detection), at most once per interval.

A reconcile asks `latest()`: the newest finished scan (or None) and, when one is due,
the next scan starts on the executor. A finished scan that found something new calls
back (`on_result`) so that it is published at once, not at the next resync. The
executor is injectable: tests pass one that runs the scan synchronously. What it keeps
of a job's scans (the last started, the one running, the last result) is the job's record
(model/job_memory.py), forgotten with it.

With `roots` (checkpoints/roots.py), a directory outside the roots allowed for the job's
namespace is not listed: the scan's result is the refusal, naming the field (reason
CheckpointRootNotAllowed: the job's condition CheckpointRootAllowed). A local path
is checked again once its links are resolved, in the scan thread (a link under an
allowed root may point anywhere).
"""
from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from datetime import datetime

from elastic_api.clock import SYSTEM_CLOCK, Clock
from elastic_api.conditions import Reason
from elastic_api.models import CheckpointStatus
from elastic_operator.checkpoints import listing
from elastic_operator.checkpoints.roots import CheckpointRoots
from elastic_operator.core.checkpoint_status import same_checkpoint_result
from elastic_operator.model.job_memory import JobKey, JobMemories, JobMemory

logger = logging.getLogger("elastic_operator")

ScanFunction = Callable[[str, datetime], CheckpointStatus]
ResultCallback = Callable[[str, str], object]


def scan_directory(directory: str, now: datetime) -> CheckpointStatus:
    """List gs://... or a local path (never raises: a failure is the status's error)."""
    return listing.scan_checkpoints(directory, now=now)


class CheckpointScanner:
    def __init__(
        self, *, interval_s: float = 30.0, scan: ScanFunction = scan_directory,
        executor: Executor | None = None,
        clock: Clock = SYSTEM_CLOCK,
        roots: CheckpointRoots | None = None,
        memory: JobMemories | None = None,
    ) -> None:
        self.interval_s = interval_s
        self._scan = scan
        self.roots = roots  # None: every directory is listed
        self._executor = executor or ThreadPoolExecutor(max_workers=2,
                                                        thread_name_prefix="ckpt-scan")
        self._clock = clock
        self._on_result: ResultCallback | None = None
        # Each job's scans are its record's (JobMemory.scan_*), read and written under
        # this lock; the record is looked up before it is taken, never under it.
        self._memory = memory if memory is not None else JobMemories()
        self._lock = threading.Lock()

    def on_result(self, callback: ResultCallback) -> None:
        """Call `callback(namespace, name)` (from a scan thread) when a scan finds news."""
        self._on_result = callback

    def latest(self, key: JobKey, directory: str) -> CheckpointStatus | None:
        """The newest finished scan (or None); starts the next one when due."""
        started: Future[CheckpointStatus] | None = None
        remembered = self._memory.of(key)
        with self._lock:
            result = self._collect(key, remembered)
            last = remembered.scan_started
            due = last is None or self._clock.monotonic() - last >= self.interval_s
            if remembered.scan_running is None and due:
                remembered.scan_started = self._clock.monotonic()
                started = self._executor.submit(self._bounded_scan, key[0], directory,
                                                self._clock.now())
                remembered.scan_running = started
        # Outside the lock: a scan that has already finished (a bad URL fails at once, or
        # a synchronous executor) runs the callback right here, and the callback locks.
        if started is not None:
            started.add_done_callback(lambda f: self._finished(key, f))
        return result

    def _bounded_scan(self, namespace: str, directory: str,
                      now: datetime) -> CheckpointStatus:
        """The scan, or the refusal of a directory outside the namespace's roots."""
        if self.roots is not None:
            refused = self.roots.refusal(namespace, directory)
            if refused is None and os.path.isabs(directory):
                try:
                    real = os.path.realpath(directory)
                except (ValueError, OSError):  # a NUL byte: no listing can take it either
                    return self._scan(directory, now)
                refused = self.roots.refusal(namespace, real)
                if refused is not None:
                    refused = refused.replace(f"{real} is", f"{directory} is {real}, "
                                              "which is", 1)
            if refused is not None:
                return CheckpointStatus(directory=directory, observed_at=now, error=refused,
                                        reason=Reason.CHECKPOINT_ROOT_NOT_ALLOWED)
        return self._scan(directory, now)

    def _collect(self, key: JobKey, remembered: JobMemory) -> CheckpointStatus | None:
        running = remembered.scan_running
        if running is None or not running.done():
            return None
        remembered.scan_running = None
        try:
            return running.result()
        except Exception:  # the scanner promises not to raise; never let it hurt
            logger.exception("checkpoint scan of %s/%s failed", *key)
            return None

    def _finished(self, key: JobKey, future: Future[CheckpointStatus]) -> None:
        """Publish a finished scan now, unless it found what the previous one did: that
        reconcile would change nothing."""
        try:
            result: CheckpointStatus | None = future.result()
        except Exception:  # reported by the reconcile that collects it
            result = None
        remembered = self._memory.peek(key)  # the job's record now, as the key's was
        with self._lock:
            if remembered is None or remembered.scan_started is None:
                return  # forgotten meanwhile: the job was deleted
            before = remembered.scan_result
            remembered.scan_result = result
        if not same_checkpoint_result(before, result) and self._on_result is not None:
            self._on_result(*key)

    def job_keys(self) -> set[JobKey]:
        """The jobs it holds anything for (job_stores.py)."""
        records = self._memory.items()
        with self._lock:
            return {key for key, remembered in records if remembered.scan_started is not None
                    or remembered.scan_running is not None
                    or remembered.scan_result is not None}

    def forget_job(self, key: JobKey) -> None:
        """The job was deleted: its scans go (and so does its record, with them)."""
        remembered = self._memory.peek(key)
        if remembered is None:
            return
        with self._lock:
            remembered.scan_started = remembered.scan_running = remembered.scan_result = None

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
