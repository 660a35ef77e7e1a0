"""The per-job work queue: reconciles of one job never overlap, a burst of events is
coalesced, and a failed reconcile is retried on its own with capped exponential backoff."""
from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest

from elastic_operator.scheduler import Backoff, Scheduler

DEADLINE_S = 10.0


class CountingReconciler:
    """Stands in for Reconciler.reconcile: records calls, checks for overlap; fails the
    first `failures` calls of each job; blocks until `release` while `hold` is set."""

    def __init__(self, failures: int = 0, hold: bool = False) -> None:
        self.calls: list[tuple[str, str]] = []
        self.active: dict[tuple[str, str], int] = {}
        self.overlap = False
        self.lock = threading.Lock()
        self.release = threading.Event()
        if not hold:
            self.release.set()
        self.failures_left = failures

    def reconcile(self, namespace: str, name: str) -> bool:
        key = (namespace, name)
        with self.lock:
            self.active[key] = self.active.get(key, 0) + 1
            self.overlap |= self.active[key] > 1
            self.calls.append(key)
        self.release.wait(DEADLINE_S)
        with self.lock:
            self.active[key] -= 1
            if self.failures_left > 0:
                self.failures_left -= 1
                return False
        return True


async def until(predicate: Callable[[], bool], what: str) -> None:
    """Poll the event loop until predicate() holds (a deadline, never a fixed sleep)."""
    deadline = time.monotonic() + DEADLINE_S
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        await asyncio.sleep(0.005)


def test_burst_is_coalesced_and_serialized() -> None:
    async def scenario() -> CountingReconciler:
        rec = CountingReconciler(hold=True)
        scheduler = Scheduler(rec.reconcile)
        first = asyncio.create_task(scheduler.trigger("ns", "a"))
        await until(lambda: ("ns", "a") in rec.calls, "the first reconcile running")
        burst = [asyncio.create_task(scheduler.trigger("ns", "a")) for _ in range(20)]
        other = asyncio.create_task(scheduler.trigger("ns", "b"))  # another job: not blocked
        await until(lambda: ("ns", "b") in rec.calls, "the other job's reconcile running")
        rec.release.set()
        await asyncio.gather(first, *burst, other)
        return rec

    rec = asyncio.run(scenario())
    assert not rec.overlap
    # One running when the burst came, plus one that covers the whole burst.
    assert rec.calls.count(("ns", "a")) == 2
    assert rec.calls.count(("ns", "b")) == 1


def test_a_failed_reconcile_is_retried_on_its_own_until_it_succeeds() -> None:
    async def scenario() -> tuple[CountingReconciler, Scheduler]:
        rec = CountingReconciler(failures=3)
        scheduler = Scheduler(rec.reconcile, Backoff(base_s=0.01, cap_s=0.02))
        await scheduler.trigger("ns", "a")  # one event, and nothing else
        assert scheduler.failures("ns", "a") == 1 and scheduler.retry_pending("ns", "a")
        await until(lambda: len(rec.calls) == 4 and scheduler.failures("ns", "a") == 0,
                    "three retries, the last succeeding")
        return rec, scheduler

    rec, scheduler = asyncio.run(scenario())
    assert rec.calls == [("ns", "a")] * 4 and not rec.overlap
    assert not scheduler.retry_pending("ns", "a")  # a success ends the retries


def test_an_event_runs_a_failed_job_at_once_and_replaces_its_pending_retry() -> None:
    async def scenario() -> tuple[CountingReconciler, Scheduler]:
        rec = CountingReconciler(failures=1)
        scheduler = Scheduler(rec.reconcile, Backoff(base_s=3600, cap_s=3600))
        await scheduler.trigger("ns", "a")
        assert scheduler.retry_pending("ns", "a")  # in an hour
        await scheduler.trigger("ns", "a")  # an event: now, not in an hour
        assert not scheduler.retry_pending("ns", "a") and scheduler.failures("ns", "a") == 0
        return rec, scheduler

    rec, _ = asyncio.run(scenario())
    assert rec.calls == [("ns", "a")] * 2


def test_a_deleted_job_forgets_its_pending_retry() -> None:
    async def scenario() -> Scheduler:
        rec = CountingReconciler(failures=1)
        scheduler = Scheduler(rec.reconcile, Backoff(base_s=3600, cap_s=3600))
        await scheduler.trigger("ns", "a")
        scheduler.forget("ns", "a")
        return scheduler

    scheduler = asyncio.run(scenario())
    assert not scheduler.retry_pending("ns", "a") and scheduler.failures("ns", "a") == 0


@pytest.mark.parametrize(("failures", "delay"), [
    (0, 1.0), (1, 1.0), (2, 2.0), (3, 4.0), (6, 32.0), (7, 60.0), (50, 60.0), (10**6, 60.0)])
def test_backoff_doubles_up_to_its_cap(failures: int, delay: float) -> None:
    assert Backoff(base_s=1.0, cap_s=60.0).delay(failures) == delay


def test_jobs_named_from_other_threads_are_reconciled_once_each() -> None:
    """trigger_soon from watch threads: a burst of thousands of calls for a few jobs
    reaches the loop as one trigger per job (and calls made before the loop is attached
    are kept, not lost)."""
    async def scenario() -> CountingReconciler:
        rec = CountingReconciler(hold=True)
        scheduler = Scheduler(rec.reconcile)
        scheduler.trigger_soon("ns", "early")
        scheduler.attach(asyncio.get_running_loop())
        await until(lambda: ("ns", "early") in rec.calls, "the early job reconciled")

        def burst() -> None:
            for i in range(3000):
                scheduler.trigger_soon("ns", f"job-{i % 3}")

        threads = [threading.Thread(target=burst) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        rec.release.set()
        await until(lambda: len(rec.calls) >= 4, "the three jobs reconciled")
        await asyncio.sleep(0.05)  # nothing more is coming
        return rec

    rec = asyncio.run(scenario())
    assert sorted(rec.calls) == [("ns", "early"), ("ns", "job-0"), ("ns", "job-1"),
                                 ("ns", "job-2")]


def test_a_reconcile_can_ask_to_run_again_later_from_its_thread() -> None:
    """A grace period that ends (a node NotReady for nodeNotReadySeconds) wakes the job."""
    async def scenario() -> tuple[list[float], Scheduler]:
        times: list[float] = []
        scheduler: Scheduler

        def reconcile(namespace: str, name: str) -> bool:
            times.append(time.monotonic())
            if len(times) == 1:  # from the worker thread, as the Reconciler does
                scheduler.trigger_later(namespace, name, 0.2)
                scheduler.trigger_later(namespace, name, 30.0)  # a later ask: the sooner wins
            return True

        scheduler = Scheduler(reconcile)
        await scheduler.trigger("ns", "a")
        await until(lambda: len(times) == 2, "the woken reconcile")
        assert not scheduler.wake_pending("ns", "a")
        return times, scheduler

    times, _ = asyncio.run(scenario())
    assert times[1] - times[0] >= 0.2


def test_an_event_before_the_wake_replaces_it() -> None:
    async def scenario() -> list[tuple[str, str]]:
        calls: list[tuple[str, str]] = []
        scheduler: Scheduler

        def reconcile(namespace: str, name: str) -> bool:
            calls.append((namespace, name))
            if len(calls) == 1:
                scheduler.trigger_later(namespace, name, 3600)
            return True

        scheduler = Scheduler(reconcile)
        await scheduler.trigger("ns", "a")
        await until(lambda: scheduler.wake_pending("ns", "a"), "the wake registered")
        await scheduler.trigger("ns", "a")  # an event covers it
        assert not scheduler.wake_pending("ns", "a")
        return calls

    assert asyncio.run(scenario()) == [("ns", "a")] * 2
