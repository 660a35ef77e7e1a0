"""The per-job work queue on the operator's event loop.

Reconciles of one job never overlap; events that arrive while one waits are coalesced
into it (it reads the cluster after they happened). A reconcile that fails is retried
on its own, after a capped exponential backoff, not only at the next event or resync;
any event in between runs it at once (and the pending retry is dropped). A reconcile may
also ask to run again after some seconds (`trigger_later`: a grace period that ends); any
run before then replaces that wake-up.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

logger = logging.getLogger("elastic_operator")

JobKey = tuple[str, str]  # (namespace, name)
# Reconcile one job (in a worker thread); False: it failed and should be retried.
ReconcileFunction = Callable[[str, str], bool]


@dataclass(frozen=True)
class Backoff:
    """base_s, 2 base_s, 4 base_s, ... at most cap_s, by consecutive failures."""

    base_s: float = 1.0
    cap_s: float = 60.0

    def delay(self, failures: int) -> float:
        exponent = min(max(failures - 1, 0), 62)  # 2**62 s: already far beyond any cap
        return float(min(self.cap_s, self.base_s * 2 ** exponent))


class Scheduler:
    def __init__(self, reconcile: ReconcileFunction, backoff: Backoff | None = None) -> None:
        self._reconcile = reconcile
        self.backoff = backoff or Backoff()
        self._locks: dict[JobKey, asyncio.Lock] = {}
        self._waiting: set[JobKey] = set()
        self._failures: dict[JobKey, int] = {}
        self._retries: dict[JobKey, asyncio.TimerHandle] = {}
        self._retry_tasks: set[asyncio.Task[None]] = set()
        self._wakes: dict[JobKey, tuple[float, asyncio.TimerHandle]] = {}
        # Jobs named by other threads (watch-fed caches, checkpoint scans), handed to the
        # event loop in batches.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._soon: set[JobKey] = set()
        self._soon_lock = threading.Lock()

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """The event loop that `trigger_soon` hands jobs to (what came before is run now)."""
        self._loop = loop
        loop.call_soon_threadsafe(self._run_soon)

    def trigger_soon(self, namespace: str, name: str) -> None:
        """From any thread: reconcile the job soon. A burst of calls (thousands of pod
        events) costs the event loop one wake-up and one trigger per job."""
        with self._soon_lock:
            first = not self._soon
            self._soon.add((namespace, name))
        loop = self._loop
        if first and loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._run_soon)

    def _run_soon(self) -> None:
        with self._soon_lock:
            keys, self._soon = self._soon, set()
        for key in sorted(keys):
            self._spawn(key)

    async def trigger(self, namespace: str, name: str) -> None:
        """Reconcile the job soon: now, or right after the reconcile running for it."""
        key = (namespace, name)
        self._loop = asyncio.get_running_loop()
        if key in self._waiting:
            return  # a reconcile that has not started yet will see this change too
        self._waiting.add(key)
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            self._waiting.discard(key)
            self._cancel_retry(key)  # this run covers it
            self._cancel_wake(key)
            ok = await asyncio.to_thread(self._reconcile, namespace, name)
            if ok:
                self._failures.pop(key, None)
            else:
                self._schedule_retry(key)

    def trigger_later(self, namespace: str, name: str, delay_s: float) -> None:
        """Reconcile the job in `delay_s` seconds (or sooner, if already asked); safe to
        call from a reconcile's worker thread."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        loop.call_soon_threadsafe(self._wake_at, (namespace, name), delay_s)

    def wake_pending(self, namespace: str, name: str) -> bool:
        return (namespace, name) in self._wakes

    def _wake_at(self, key: JobKey, delay_s: float) -> None:
        loop = asyncio.get_running_loop()
        due = loop.time() + delay_s
        current = self._wakes.get(key)
        if current is not None:
            if current[0] <= due:
                return
            current[1].cancel()
        self._wakes[key] = (due, loop.call_later(delay_s, self._woken, key))

    def _woken(self, key: JobKey) -> None:
        self._wakes.pop(key, None)
        self._spawn(key)

    def _cancel_wake(self, key: JobKey) -> None:
        entry = self._wakes.pop(key, None)
        if entry is not None:
            entry[1].cancel()

    def knows(self, namespace: str, name: str) -> bool:
        """Whether this job was ever triggered (and not forgotten since): every job is, by
        its own watch, before anything else about it matters."""
        return (namespace, name) in self._locks

    def retry_pending(self, namespace: str, name: str) -> bool:
        return (namespace, name) in self._retries

    def failures(self, namespace: str, name: str) -> int:
        """Consecutive failed reconciles of the job (0 after a success)."""
        return self._failures.get((namespace, name), 0)

    def forget(self, namespace: str, name: str) -> None:
        key = (namespace, name)
        self._cancel_retry(key)
        self._cancel_wake(key)
        self._failures.pop(key, None)
        self._locks.pop(key, None)

    def _schedule_retry(self, key: JobKey) -> None:
        failures = self._failures[key] = self._failures.get(key, 0) + 1
        delay = self.backoff.delay(failures)
        logger.info("reconcile of %s/%s failed %d time(s) in a row; retrying in %.1f s",
                    *key, failures, delay)
        loop = asyncio.get_running_loop()
        self._retries[key] = loop.call_later(delay, self._retry, key)

    def _retry(self, key: JobKey) -> None:
        self._retries.pop(key, None)
        self._spawn(key)

    def _spawn(self, key: JobKey) -> None:
        task = asyncio.ensure_future(self.trigger(*key))
        self._retry_tasks.add(task)  # a reference, or the task may be collected mid-run
        task.add_done_callback(self._retry_tasks.discard)

    def _cancel_retry(self, key: JobKey) -> None:
        handle = self._retries.pop(key, None)
        if handle is not None:
            handle.cancel()
