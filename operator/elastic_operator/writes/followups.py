"""What follows a reconcile's status write and decides nothing of it (the slice
replacement's writes, the Events), run off the reconcile's thread.

A job's reconciles run one after another (work_queue.py), and a slice failure waits in the
queue for the reconcile in progress: every request a reconcile makes after its status
write delays the next failure's status write, and those requests (a worker Job DELETE,
two or three Event POSTs per slice failure) cost about what the status write does
(docs/benchmarks.md). Here they run in order per job (the Job deleted before the Event
that says so), on a few threads of their own, while the next reconcile goes on.

Each piece of work is safe to run late or not at all: the status written before it
records what it is to do (the replacement record, status.pendingEvents), and the next
reconcile, this replica's or a new leader's, does what is left (level-based). Writes go
through the same fence as the reconciles' (`KubeClient.may_write`): a replica that lost
the Lease sends none. `drain` lets a replica stepping down finish them first.

Each piece returns when to look at its job again (None: no need): a throttled or failed
write is planned again by a later reconcile. The runner passes that on to `requeue` (the
work queue's add_after, as app.py wires it); the work never calls the queue itself.

`Inline` runs each piece at once in the caller's thread (the unit tests').
"""
from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Protocol

from elastic_operator.model.result import Wake

logger = logging.getLogger("elastic_operator")

JobKey = tuple[str, str]  # (namespace, name)
# A piece of work: when to look at its job again (seconds; None: no need).
Work = Callable[[], float | None]
DEFAULT_THREADS = 2


class FollowUpRunner(Protocol):
    def submit(self, job: JobKey, work: Work) -> None:
        """Run `work` after every piece submitted before for the same job."""
        ...


def _pass_on(requeue: Wake | None, job: JobKey, after: float | None) -> None:
    if requeue is not None and after is not None:
        requeue(job[0], job[1], after)


class Inline:
    """Runs each piece at once, in the caller's thread (`requeue`: told when to look at
    the job again; None: nobody to tell)."""

    def __init__(self, requeue: Wake | None = None) -> None:
        self.requeue = requeue

    def submit(self, job: JobKey, work: Work) -> None:
        _pass_on(self.requeue, job, work())


class FollowUps:
    """Per job, a FIFO of work; `threads` workers, never two on one job at once;
    `requeue`: told when to look at a job again once its piece of work ended."""

    def __init__(self, threads: int = DEFAULT_THREADS, requeue: Wake | None = None) -> None:
        self.requeue = requeue
        self._lock = threading.Condition()
        self._pending: dict[JobKey, deque[Work]] = {}
        self._ready: deque[JobKey] = deque()  # jobs with work, none of it running
        self._running: set[JobKey] = set()
        self._stopping = False
        self._threads = [threading.Thread(target=self._loop, name=f"follow-up-{i}",
                                          daemon=True) for i in range(threads)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def submit(self, job: JobKey, work: Work) -> None:
        with self._lock:
            queue = self._pending.setdefault(job, deque())
            queue.append(work)
            if job not in self._running and len(queue) == 1:
                self._ready.append(job)
                self._lock.notify()

    @property
    def depth(self) -> int:
        """Pieces of work waiting or running."""
        with self._lock:
            return sum(len(q) for q in self._pending.values())

    def job_keys(self) -> list[JobKey]:
        """The jobs with work waiting or running (job_stores.py)."""
        with self._lock:
            return list(self._pending)

    def forget_job(self, job: JobKey) -> None:
        """Nothing: a deleted job's work runs out by itself (it finds the job gone)."""

    def drain(self, timeout: float) -> bool:
        """Wait until no work waits or runs; False if some still does."""
        with self._lock:
            return self._lock.wait_for(lambda: not self._pending, timeout)

    def stop(self) -> None:
        """The workers end after the piece they run (what waits is dropped: the status
        records it for whoever leads next)."""
        with self._lock:
            self._stopping = True
            self._lock.notify_all()

    @property
    def alive(self) -> bool:
        return all(t.is_alive() for t in self._threads)

    def _loop(self) -> None:
        while True:
            with self._lock:
                self._lock.wait_for(lambda: self._stopping or bool(self._ready))
                if self._stopping:
                    return
                job = self._ready.popleft()
                work = self._pending[job][0]
                self._running.add(job)
            try:
                _pass_on(self.requeue, job, work())
            except Exception:  # each piece logs its own failures; this is a bug
                logger.exception("follow-up work of %s/%s raised", *job)
            with self._lock:
                self._running.discard(job)
                queue = self._pending[job]
                queue.popleft()
                if queue:
                    self._ready.append(job)  # behind the other jobs: fair
                    self._lock.notify()
                else:
                    del self._pending[job]
                self._lock.notify_all()  # drain
