"""The per-job work queue: reconciles of one job never overlap, a burst of events is
coalesced, a change during a reconcile runs it once more, a failed reconcile is retried on
its own with capped exponential backoff, delayed adds wake a job, and the worker pool is
bounded. Every wait polls a condition with a deadline."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from elastic_api.kube import Backoff
from elastic_operator.model.result import FAILED, Result
from elastic_operator.queue.work_queue import RECONCILE_BACKOFF, ReconcileFunction, WorkQueue

DEADLINE_S = 10.0


class CountingReconciler:
    """Stands in for Reconciler.reconcile: records calls, checks for overlap; fails the
    first `failures` calls of each job; blocks until `release` while `hold` is set."""

    def __init__(self, failures: int = 0, hold: bool = False) -> None:
        self.calls: list[tuple[str, str]] = []
        self.active: dict[tuple[str, str], int] = {}
        self.running = 0
        self.most_running = 0
        self.overlap = False
        self.lock = threading.Lock()
        self.release = threading.Event()
        if not hold:
            self.release.set()
        self.failures_left = failures

    def reconcile(self, namespace: str, name: str) -> Result:
        key = (namespace, name)
        with self.lock:
            self.active[key] = self.active.get(key, 0) + 1
            self.overlap |= self.active[key] > 1
            self.running += 1
            self.most_running = max(self.most_running, self.running)
            self.calls.append(key)
        self.release.wait(DEADLINE_S)
        with self.lock:
            self.active[key] -= 1
            self.running -= 1
            if self.failures_left > 0:
                self.failures_left -= 1
                return FAILED
        return Result()


def until(predicate: Callable[[], bool], what: str) -> None:
    """Poll until predicate() holds (a deadline, never a fixed sleep)."""
    deadline = time.monotonic() + DEADLINE_S
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.005)


@pytest.fixture
def started() -> Iterator[Callable[..., WorkQueue]]:
    """WorkQueue(...) started, and stopped after the test."""
    made: list[WorkQueue] = []

    def make(reconcile: ReconcileFunction, backoff: Backoff = RECONCILE_BACKOFF,
             workers: int = 4) -> WorkQueue:
        work_queue = WorkQueue(backoff, workers=workers)
        work_queue.start(reconcile)
        made.append(work_queue)
        return work_queue

    yield make
    for work_queue in made:
        work_queue.stop()


def test_burst_is_coalesced_and_serialized(started: Callable[..., WorkQueue]) -> None:
    rec = CountingReconciler(hold=True)
    work_queue = started(rec.reconcile)
    work_queue.add("ns", "a")
    until(lambda: ("ns", "a") in rec.calls, "the first reconcile running")
    for _ in range(20):
        work_queue.add("ns", "a")
    work_queue.add("ns", "b")  # another job: not blocked
    until(lambda: ("ns", "b") in rec.calls, "the other job's reconcile running")
    rec.release.set()
    until(lambda: rec.calls.count(("ns", "a")) == 2, "the run that covers the burst")
    assert work_queue.wait_idle("ns", "a", DEADLINE_S) and work_queue.wait_idle("ns", "b", 1)
    assert not rec.overlap
    # One running when the burst came, plus one that covers the whole burst.
    assert rec.calls.count(("ns", "a")) == 2
    assert rec.calls.count(("ns", "b")) == 1


def test_a_failed_reconcile_is_retried_on_its_own_until_it_succeeds(
        started: Callable[..., WorkQueue]) -> None:
    rec = CountingReconciler(failures=3)
    work_queue = started(rec.reconcile, Backoff(base_s=0.01, cap_s=0.02))
    work_queue.add("ns", "a")  # one event, and nothing else
    until(lambda: len(rec.calls) == 4 and work_queue.failures("ns", "a") == 0,
          "three retries, the last succeeding")
    assert work_queue.wait_idle("ns", "a", DEADLINE_S)
    assert rec.calls == [("ns", "a")] * 4 and not rec.overlap
    assert not work_queue.retry_pending("ns", "a")  # a success ends the retries


def test_a_failure_schedules_its_retry_after_the_backoff(
        started: Callable[..., WorkQueue]) -> None:
    rec = CountingReconciler(failures=1)
    work_queue = started(rec.reconcile, Backoff(base_s=3600, cap_s=3600))
    work_queue.add("ns", "a")
    until(lambda: work_queue.failures("ns", "a") == 1, "the failure counted")
    assert work_queue.retry_pending("ns", "a") and rec.calls == [("ns", "a")]  # in an hour


def test_an_event_runs_a_failed_job_at_once_and_replaces_its_pending_retry(
        started: Callable[..., WorkQueue]) -> None:
    rec = CountingReconciler(failures=1)
    work_queue = started(rec.reconcile, Backoff(base_s=3600, cap_s=3600))
    work_queue.add("ns", "a")
    until(lambda: work_queue.retry_pending("ns", "a"), "the retry in an hour")
    work_queue.add("ns", "a")  # an event: now, not in an hour
    until(lambda: work_queue.failures("ns", "a") == 0, "the event's reconcile succeeding")
    assert not work_queue.retry_pending("ns", "a")
    assert rec.calls == [("ns", "a")] * 2


def test_a_deleted_job_forgets_its_pending_retry(started: Callable[..., WorkQueue]) -> None:
    rec = CountingReconciler(failures=1)
    work_queue = started(rec.reconcile, Backoff(base_s=3600, cap_s=3600))
    work_queue.add("ns", "a")
    until(lambda: work_queue.retry_pending("ns", "a"), "the retry in an hour")
    work_queue.forget_job(("ns", "a"))
    assert not work_queue.retry_pending("ns", "a") and work_queue.failures("ns", "a") == 0


@pytest.mark.parametrize(("failures", "delay"), [
    (0, 1.0), (1, 1.0), (2, 2.0), (3, 4.0), (6, 32.0), (7, 60.0), (50, 60.0), (10**6, 60.0)])
def test_backoff_doubles_up_to_its_cap(failures: int, delay: float) -> None:
    assert Backoff(base_s=1.0, cap_s=60.0).delay(failures) == delay
    assert RECONCILE_BACKOFF.delay(failures) == delay  # the operator's: 1 s to 60 s


def test_jobs_named_from_other_threads_are_reconciled_once_each() -> None:
    """add from watch threads: a burst of thousands of calls for a few jobs that wait for
    a worker reaches the reconciler as one reconcile per job (and jobs named before the
    workers start are kept, not lost)."""
    rec = CountingReconciler(hold=True)
    work_queue = WorkQueue(workers=1)  # "early" holds the only worker
    work_queue.add("ns", "early")
    work_queue.start(rec.reconcile)
    try:
        until(lambda: ("ns", "early") in rec.calls, "the early job reconciled")

        def burst() -> None:
            for i in range(3000):
                work_queue.add("ns", f"job-{i % 3}")

        threads = [threading.Thread(target=burst) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert work_queue.depth == 3
        rec.release.set()
        for job in ("early", "job-0", "job-1", "job-2"):
            assert work_queue.wait_idle("ns", job, DEADLINE_S)
    finally:
        work_queue.stop()
    assert sorted(rec.calls) == [("ns", "early"), ("ns", "job-0"), ("ns", "job-1"),
                                 ("ns", "job-2")]


def test_the_worker_pool_is_bounded(started: Callable[..., WorkQueue]) -> None:
    rec = CountingReconciler(hold=True)
    work_queue = started(rec.reconcile, workers=2)
    for i in range(6):
        work_queue.add("ns", f"job-{i}")
    until(lambda: rec.running == 2, "two reconciles running")
    assert work_queue.depth == 4  # the others wait for a worker
    rec.release.set()
    for i in range(6):
        assert work_queue.wait_idle("ns", f"job-{i}", DEADLINE_S)
    assert rec.most_running == 2 and len(rec.calls) == 6


def test_a_reconcile_can_ask_to_run_again_later_from_its_thread(
        started: Callable[..., WorkQueue]) -> None:
    """A grace period that ends (a node NotReady for nodeNotReadySeconds) wakes the job."""
    times: list[float] = []
    work_queue: WorkQueue

    def reconcile(namespace: str, name: str) -> Result:
        times.append(time.monotonic())
        if len(times) == 1:  # from the worker thread, as the Reconciler's follow-ups may
            work_queue.add_after(namespace, name, 0.2)
            work_queue.add_after(namespace, name, 30.0)  # a later ask: the sooner wins
        return Result()

    work_queue = started(reconcile)
    work_queue.add("ns", "a")
    until(lambda: len(times) == 2, "the woken reconcile")
    assert not work_queue.wake_pending("ns", "a")
    assert times[1] - times[0] >= 0.2


def test_an_event_before_the_wake_replaces_it(started: Callable[..., WorkQueue]) -> None:
    calls: list[tuple[str, str]] = []
    work_queue: WorkQueue

    def reconcile(namespace: str, name: str) -> Result:
        calls.append((namespace, name))
        if len(calls) == 1:
            work_queue.add_after(namespace, name, 3600)
        return Result()

    work_queue = started(reconcile)
    work_queue.add("ns", "a")
    until(lambda: work_queue.wake_pending("ns", "a"), "the wake registered")
    work_queue.add("ns", "a")  # an event covers it
    until(lambda: len(calls) == 2, "the event's reconcile")
    assert work_queue.wait_idle("ns", "a", DEADLINE_S)
    assert not work_queue.wake_pending("ns", "a")
    assert calls == [("ns", "a")] * 2


def test_a_reconcile_returns_when_to_look_again_and_the_soonest_ask_wins(
        started: Callable[..., WorkQueue]) -> None:
    """Its Result's requeue_after (a grace period that ends) wakes the job, unless an ask
    already pending is sooner; a later one does not put it off."""
    times: list[float] = []
    work_queue: WorkQueue

    def reconcile(namespace: str, name: str) -> Result:
        times.append(time.monotonic())
        if len(times) == 1:
            work_queue.add_after(namespace, name, 30.0)  # asked meanwhile: later
            return Result(requeue_after=0.2)
        return Result()

    work_queue = started(reconcile)
    work_queue.add("ns", "a")
    until(lambda: len(times) == 2, "the woken reconcile")
    assert not work_queue.wake_pending("ns", "a")
    assert times[1] - times[0] >= 0.2


def test_a_result_paced_after_runs_the_job_again_for_progress_only(
        started: Callable[..., WorkQueue]) -> None:
    runs: list[tuple[bool, bool]] = []
    work_queue: WorkQueue

    def reconcile(namespace: str, name: str) -> Result:
        runs.append(work_queue.running(namespace, name))
        return Result(paced_after=0.05) if len(runs) == 1 else Result()

    work_queue = started(reconcile)
    work_queue.add("ns", "a")
    until(lambda: len(runs) == 2, "the paced run")
    assert runs == [(False, False), (False, True)]  # the second, for progress only
    assert work_queue.wait_idle("ns", "a", DEADLINE_S) and not work_queue.wake_pending("ns", "a")


def test_a_failed_result_is_retried_and_its_requeue_kept(
        started: Callable[..., WorkQueue]) -> None:
    """ok False: retried after the backoff; a look it asks sooner still wakes it."""
    calls: list[float] = []

    def reconcile(namespace: str, name: str) -> Result:
        calls.append(time.monotonic())
        return Result(ok=False, requeue_after=0.05) if len(calls) == 1 else Result()

    work_queue = started(reconcile, Backoff(base_s=3600, cap_s=3600))
    work_queue.add("ns", "a")
    until(lambda: len(calls) == 2, "the requeue, before the retry in an hour")
    until(lambda: work_queue.failures("ns", "a") == 0, "the success counted")
    assert not work_queue.retry_pending("ns", "a")


def test_a_reconcile_that_raises_is_retried_and_stop_ends_the_workers() -> None:
    calls: list[int] = []

    def reconcile(namespace: str, name: str) -> Result:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a bug")
        return Result()

    work_queue = WorkQueue(Backoff(base_s=0.01, cap_s=0.01), workers=2)
    work_queue.start(reconcile)
    work_queue.add("ns", "a")
    until(lambda: len(calls) == 2 and work_queue.failures("ns", "a") == 0, "the retry")
    assert work_queue.alive
    work_queue.stop()
    until(lambda: not work_queue.alive, "the workers ending")
    assert not work_queue.wait_idle("ns", "a", 0.1)  # stopping: nothing to wait for


# --- news for a running reconcile (core/startover.py) -------------------------------------


def test_a_job_named_at_once_during_a_paced_run_is_news_to_that_run(
        started: Callable[..., WorkQueue]) -> None:
    """A run started by a paced wake hears of an immediate naming; a run started by an
    immediate naming is not paced, and hears of the next one too."""
    rec = CountingReconciler(hold=True)
    work_queue = started(rec.reconcile)
    work_queue.add_paced("ns", "a", 0.0)
    until(lambda: rec.calls == [("ns", "a")], "the paced run started")
    assert work_queue.running("ns", "a") == (False, True)
    work_queue.add_paced("ns", "a", 0.0)  # progress again: no news
    until(lambda: not work_queue.wake_pending("ns", "a"), "the paced wake due")
    assert work_queue.running("ns", "a") == (False, True)
    work_queue.add("ns", "a")
    assert work_queue.running("ns", "a") == (True, True)
    rec.release.set()
    until(lambda: len(rec.calls) == 2, "the run after it, for the naming")
    assert work_queue.wait_idle("ns", "a", DEADLINE_S)
    assert work_queue.running("ns", "a") == (False, False)  # nothing runs


def test_a_run_started_at_once_or_by_a_due_wake_is_not_paced(
        started: Callable[..., WorkQueue]) -> None:
    rec = CountingReconciler(hold=True)
    work_queue = started(rec.reconcile)
    work_queue.add_after("ns", "a", 0.0)  # a grace period ending: may be a failure
    until(lambda: rec.calls == [("ns", "a")], "the woken run started")
    assert work_queue.running("ns", "a") == (False, False)
    work_queue.add("ns", "a")
    assert work_queue.running("ns", "a") == (True, False)
    rec.release.set()
    assert work_queue.wait_idle("ns", "a", DEADLINE_S)


def test_a_run_that_starts_over_covers_every_naming_so_far(
        started: Callable[..., WorkQueue]) -> None:
    """cover(): the running reconcile starts over from its reads, so the namings before
    run nothing more after it; its new pass is for news (not paced any more)."""
    waits: list[float] = []
    rec = CountingReconciler(hold=True)
    work_queue = WorkQueue(workers=2, on_wait=waits.append)
    work_queue.start(rec.reconcile)
    try:
        work_queue.add_paced("ns", "a", 0.0)
        until(lambda: rec.calls == [("ns", "a")], "the paced run started")
        work_queue.add("ns", "a")
        work_queue.cover("ns", "a")
        assert work_queue.running("ns", "a") == (False, False)
        assert len(waits) == 2  # the naming's wait ended as the run started over
        rec.release.set()
        assert work_queue.wait_idle("ns", "a", DEADLINE_S)
        assert rec.calls == [("ns", "a")]  # no run after it
        work_queue.add("ns", "a")  # a later naming runs as ever
        until(lambda: len(rec.calls) == 2, "the next naming's run")
    finally:
        work_queue.stop()


def test_cover_without_a_running_reconcile_changes_nothing(
        started: Callable[..., WorkQueue]) -> None:
    rec = CountingReconciler(hold=True)
    work_queue = started(rec.reconcile, workers=1)
    work_queue.add("ns", "b")
    until(lambda: rec.calls == [("ns", "b")], "the one worker busy")
    work_queue.add("ns", "a")  # queued, not running
    work_queue.cover("ns", "a")
    rec.release.set()
    until(lambda: rec.calls.count(("ns", "a")) == 1, "the queued job still runs")
