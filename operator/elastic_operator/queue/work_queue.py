"""The per-job work queue: everything the operator reacts to names a job here, and a
bounded pool of worker threads reconciles the jobs named (client-go's workqueue).

- A job named again while it waits is queued once (a burst of thousands of pod events
  costs one reconcile, which reads the cluster after they happened).
- A job is never reconciled by two workers at once; one named while it is being
  reconciled is reconciled once more right after (it may have missed that change).
- A reconcile that fails is retried on its own, after a capped exponential backoff; any
  run in between (an event) replaces the pending retry, and a success resets the backoff.
- A reconcile returns when to look at the job again (result.py: `requeue_after`, a grace
  period that ends; `paced_after`, for progress only, core/pacing.py); anything else may
  ask the same at any time (`add_after`; `add_paced`, core/wakes.py). The soonest ask
  wins and any run before then replaces it.
- A job named at once (`add`) while a reconcile of it runs is requeued: the queue tells
  that reconcile (`running`), which may start over from its reads rather than finish and
  leave the change to wait for it (the rule is core/startover.py); the queue then covers
  every naming so far (`cover`). app.py wires both; the reconcile never calls the queue.

- What follows a reconcile's status write comes back in its Result (`follow_ups`: the
  replacement's writes, the Event posts) and the worker that ran the reconcile runs it,
  in order, right after. The job is free for its next reconcile meanwhile (a failure
  waits for no DELETE or Event POST of the one before: docs/benchmarks.md, "the scale
  run with the follow-ups"); a job's follow-ups never run two at once, nor out of order
  (a worker holds the job's reconcile until the follow-ups before have ended). Their
  outcome counts with the reconcile's: a failed one is a failed run (one backoff, one
  count), and the soonest look asked, by the reconcile or its follow-ups, wins.

Every method may be called from any thread: the watch-fed caches, the checkpoint
scanner and the resync all name jobs here.

What it remembers of a job beyond the run in flight is in the job's record
(model/job_memory.py `JobMemory.failures`, `.looks`: read and written under the queue's
lock; the record's own lock is taken inside the queue's, never the other way round: no
one holding it calls the queue), and goes with the job. What stays here is the queue's
own ordering: client-go's queue, dirty and processing sets (a job forgotten while queued
or running keeps them until its run ends: kept in the record, a naming after the forget
would find a new record not running, and a second worker would run the job at once), and
the timer's heap of looks, one order by due time across jobs.
"""
from __future__ import annotations

import heapq
import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from elastic_api.kube import Backoff
from elastic_operator.model.job_memory import JobMemories, JobMemory
from elastic_operator.model.result import FAILED, FollowUp, Result, run_follow_ups

logger = logging.getLogger("elastic_operator")

JobKey = tuple[str, str]  # (namespace, name)
# Reconcile one job (in a worker thread): its verdict, and when to look again.
ReconcileFunction = Callable[[str, str], Result]
# A failed reconcile is retried after 1 s, doubling up to 60 s.
RECONCILE_BACKOFF = Backoff(base_s=1.0, cap_s=60.0)
DEFAULT_WORKERS = 8
# Stale entries of the looks' heap allowed beyond twice the most there can be live (one
# of each kind per job).
HEAP_SLACK = 64
KINDS = ("retry", "wake", "paced")


class WorkQueue:
    def __init__(self, backoff: Backoff = RECONCILE_BACKOFF, *, workers: int = DEFAULT_WORKERS,
                 on_wait: Callable[[float], None] | None = None,
                 memory: JobMemories | None = None) -> None:
        self.backoff = backoff
        # The jobs' records: each one's failures and pending looks (app.py: the one).
        self._memory = memory if memory is not None else JobMemories()
        self._workers = workers
        # Seconds from a job being named to its reconcile starting (a metric).
        self._on_wait = on_wait or (lambda _s: None)
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)  # something queued, or stopping
        self._timer = threading.Condition(self._lock)  # the soonest delayed add changed
        self._idle = threading.Condition(self._lock)  # a reconcile ended
        self._queue: deque[JobKey] = deque()
        self._dirty: set[JobKey] = set()  # queued, or named again while processing
        self._named_at: dict[JobKey, float] = {}  # when each dirty job was first named
        self._processing: set[JobKey] = set()
        self._following: set[JobKey] = set()  # a worker runs the job's follow-ups
        # Jobs named at once (`add`, a due retry or wake: anything but `add_paced`) since
        # their last run started; and the running jobs whose run was started for
        # progress only (core/startover.py).
        self._urgent: set[JobKey] = set()
        self._run_paced: set[JobKey] = set()
        # The looks (delayed adds) by due time: (due, kind, key); an entry no longer in
        # its job's `looks` (superseded, run, forgotten) is skipped.
        self._due: list[tuple[float, str, JobKey]] = []
        self._stopping = False
        self._threads: list[threading.Thread] = []

    # --- naming jobs ---

    def add(self, namespace: str, name: str) -> None:
        """Reconcile the job soon: now, or right after the reconcile running for it."""
        with self._lock:
            self._add_locked((namespace, name), urgent=True)

    def add_after(self, namespace: str, name: str, delay_s: float) -> None:
        """Reconcile the job in `delay_s` seconds (or sooner, if already asked)."""
        with self._lock:
            self._schedule_locked("wake", (namespace, name), delay_s)

    def add_paced(self, namespace: str, name: str, delay_s: float) -> None:
        """add_after, for progress only: a run it starts may start over if the job is
        requeued at once meanwhile."""
        with self._lock:
            self._schedule_locked("paced", (namespace, name), delay_s)

    def cover(self, namespace: str, name: str) -> None:
        """The job's running reconcile starts over from its reads: it sees every naming
        of the job so far, which therefore runs nothing more after it."""
        key = (namespace, name)
        with self._lock:
            if key not in self._processing:
                return
            if key in self._urgent:
                self._run_paced.discard(key)  # the pass it starts is for the requeue
            self._urgent.discard(key)
            self._dirty.discard(key)
            named_at = self._named_at.pop(key, None)
            self._drop_looks_locked(key)
        if named_at is not None:
            self._on_wait(time.monotonic() - named_at)

    def forget_job(self, key: JobKey) -> None:
        """The job was deleted: drop its pending retry, wake-up and failure count, and
        its superseded entries in the heap of delayed adds (nothing keeps its name)."""
        with self._lock:
            record = self._memory.peek(key)
            if record is not None:  # (the record itself goes with the job-memory store)
                record.looks.clear()
                record.failures = 0
            if any(entry[2] == key for entry in self._due):
                self._due = [entry for entry in self._due if entry[2] != key]
                heapq.heapify(self._due)
                self._timer.notify()

    def job_keys(self) -> set[JobKey]:
        """The jobs it holds anything for (job_stores.py)."""
        with self._lock:
            return (self._dirty | self._processing | self._following | self._urgent
                    | self._run_paced | self._named_at.keys())

    # --- what it knows ---

    def failures(self, namespace: str, name: str) -> int:
        """Consecutive failed reconciles of the job (0 after a success)."""
        with self._lock:
            record = self._memory.peek((namespace, name))
            return 0 if record is None else record.failures

    def retry_pending(self, namespace: str, name: str) -> bool:
        with self._lock:
            return "retry" in self._looks_of((namespace, name))

    def wake_pending(self, namespace: str, name: str) -> bool:
        with self._lock:
            looks = self._looks_of((namespace, name))
            return "wake" in looks or "paced" in looks

    def running(self, namespace: str, name: str) -> tuple[bool, bool]:
        """Of the job's running reconcile: whether the job was named at once since it
        started (requeued), and whether it was started for progress only."""
        key = (namespace, name)
        with self._lock:
            running = key in self._processing
            return running and key in self._urgent, running and key in self._run_paced

    @property
    def depth(self) -> int:
        """Jobs waiting for a worker."""
        with self._lock:
            return len(self._queue)

    def wait_idle(self, namespace: str, name: str, timeout: float) -> bool:
        """Block until the job is neither queued nor being reconciled (False: timed out,
        or stopping)."""
        key = (namespace, name)
        with self._lock:
            return self._idle.wait_for(
                lambda: self._stopping or (key not in self._dirty
                                           and key not in self._processing),
                timeout) and not self._stopping

    def drain(self, timeout: float) -> bool:
        """Block until no reconcile and no follow-up runs (after `stop`: the work a
        replica stepping down still sends while leading); False if some still does."""
        with self._lock:
            return self._idle.wait_for(
                lambda: not self._processing and not self._following, timeout)

    # --- the threads ---

    def start(self, reconcile: ReconcileFunction) -> None:
        """Start the workers, reconciling each job named with `reconcile`, and the timer
        of delayed adds (jobs named before are kept)."""
        self._threads = [threading.Thread(target=self._work_loop, args=(reconcile,),
                                          name=f"reconcile-{i}", daemon=True)
                         for i in range(self._workers)]
        self._threads.append(threading.Thread(target=self._timer_loop, name="requeue-timer",
                                              daemon=True))
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """No reconcile starts from here on (the running ones finish)."""
        with self._lock:
            self._stopping = True
            self._work.notify_all()
            self._timer.notify_all()
            self._idle.notify_all()

    @property
    def alive(self) -> bool:
        return bool(self._threads) and all(t.is_alive() for t in self._threads)

    def _work_loop(self, reconcile: ReconcileFunction) -> None:
        while True:
            with self._lock:
                self._work.wait_for(lambda: self._stopping or bool(self._queue))
                if self._stopping:
                    return
                key = self._queue.popleft()
                self._dirty.discard(key)
                named_at = self._named_at.pop(key, None)
                self._processing.add(key)
                if key not in self._urgent:
                    self._run_paced.add(key)
                self._urgent.discard(key)
                self._drop_looks_locked(key)  # this run covers them
            if named_at is not None:
                self._on_wait(time.monotonic() - named_at)
            result = self._run(reconcile, key)
            work = result.follow_ups
            with self._lock:
                if work:
                    self._follow_up_turn_locked(key)
                self._processing.discard(key)
                self._run_paced.discard(key)
                self._outcome_locked(key, result, settled=not work)
                if result.paced_after is not None:
                    self._schedule_locked("paced", key, result.paced_after)
                if key in self._dirty:  # named while it ran: once more
                    self._queue.append(key)
                    self._work.notify()
                self._idle.notify_all()
            if work:
                self._follow_up(key, result, work)

    def _follow_up(self, key: JobKey, result: Result, work: tuple[FollowUp, ...]) -> None:
        """Run the reconcile's follow-ups (the job free for its next reconcile); their
        outcome counts with the reconcile's."""
        outcome = run_follow_ups(work)
        if not result.ok:  # the run failed already: counted once
            outcome = Result(requeue_after=outcome.requeue_after)
        with self._lock:
            self._following.discard(key)
            self._outcome_locked(key, outcome, settled=result.ok)
            self._idle.notify_all()

    @staticmethod
    def _run(reconcile: ReconcileFunction, key: JobKey) -> Result:
        try:
            return reconcile(*key)
        except Exception:  # the reconciler logs its own failures; this is a bug
            logger.exception("reconcile of %s/%s raised", *key)
            return FAILED

    def _timer_loop(self) -> None:
        with self._lock:
            while not self._stopping:
                now = time.monotonic()
                while self._due and self._due[0][0] <= now:
                    due, kind, key = heapq.heappop(self._due)
                    looks = self._looks_of(key)
                    if looks.get(kind) == due:
                        del looks[kind]
                        self._add_locked(key, urgent=kind != "paced")
                self._timer.wait(self._due[0][0] - now if self._due else None)

    # --- with the lock held ---

    def _add_locked(self, key: JobKey, *, urgent: bool) -> None:
        if urgent:
            self._urgent.add(key)
        if key in self._dirty:
            return  # queued already (or to run again after the running one)
        self._dirty.add(key)
        self._named_at[key] = time.monotonic()
        if key not in self._processing:
            self._queue.append(key)
            self._work.notify()

    def _looks_of(self, key: JobKey) -> dict[str, float]:
        """The job's pending looks (an empty dict, not kept, if it has no record)."""
        record = self._memory.peek(key)
        return {} if record is None else record.looks

    def _drop_looks_locked(self, key: JobKey) -> None:
        record = self._memory.peek(key)
        if record is not None:
            record.looks.clear()

    def _schedule_locked(self, kind: str, key: JobKey, delay_s: float) -> None:
        looks = self._memory.of(key).looks
        due = time.monotonic() + max(0.0, delay_s)
        if kind in looks and looks[kind] <= due:
            return  # a sooner one is pending
        looks[kind] = due
        heapq.heappush(self._due, (due, kind, key))
        if len(self._due) > 2 * len(KINDS) * len(self._memory) + HEAP_SLACK:
            # Superseded and forgotten entries wait in the heap until they come due: a
            # job reconciled every few seconds with an hour-long wake left hundreds.
            self._due = [(d, k, j) for j, record in self._memory.items()
                         for k, d in record.looks.items()]
            heapq.heapify(self._due)
        self._timer.notify()

    def _follow_up_turn_locked(self, key: JobKey) -> None:
        """Wait until the job's follow-ups before have ended (its reconcile still held,
        so that no later one of the job comes between), then take the job's turn."""
        self._idle.wait_for(lambda: key not in self._following)
        self._following.add(key)

    def _outcome_locked(self, key: JobKey, outcome: Result, *, settled: bool) -> None:
        """A reconcile's or its follow-ups' outcome: a failure counted and retried after
        the backoff; a success resets the count once the whole run worked (`settled`: the
        reconcile has no follow-ups, or it worked and these are its follow-ups); its
        look again kept if the soonest."""
        if not outcome.ok:
            self._retry_locked(key)
        elif settled:
            record = self._memory.peek(key)
            if record is not None:
                record.failures = 0
        if outcome.requeue_after is not None:
            self._schedule_locked("wake", key, outcome.requeue_after)

    def _retry_locked(self, key: JobKey) -> None:
        record: JobMemory = self._memory.of(key)
        record.failures += 1
        failures = record.failures
        delay = self.backoff.delay(failures)
        logger.info("reconcile of %s/%s failed %d time(s) in a row; retrying in %.1f s",
                    *key, failures, delay)
        self._schedule_locked("retry", key, delay)
