"""Per-job reconciles never overlap, and a burst of events is coalesced."""
from __future__ import annotations

import asyncio
import threading
from typing import Any

from elastic_operator.handlers import Scheduler


class CountingReconciler:
    """Stands in for handlers.Reconciler: records calls and checks for overlap."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.active: dict[tuple[str, str], int] = {}
        self.overlap = False
        self.lock = threading.Lock()
        self.release = threading.Event()
        self.kube: Any = None

    def reconcile(self, namespace: str, name: str) -> None:
        key = (namespace, name)
        with self.lock:
            self.active[key] = self.active.get(key, 0) + 1
            self.overlap |= self.active[key] > 1
            self.calls.append(key)
        self.release.wait(5)
        with self.lock:
            self.active[key] -= 1

    def forget(self, namespace: str, name: str) -> None:
        pass


def test_burst_is_coalesced_and_serialized() -> None:
    async def scenario() -> CountingReconciler:
        rec = CountingReconciler()
        scheduler = Scheduler(rec)  # type: ignore[arg-type]
        first = asyncio.create_task(scheduler.trigger("ns", "a"))
        await asyncio.sleep(0.05)  # the first reconcile is running (blocked)
        burst = [asyncio.create_task(scheduler.trigger("ns", "a")) for _ in range(20)]
        other = asyncio.create_task(scheduler.trigger("ns", "b"))  # another job: not blocked
        await asyncio.sleep(0.05)
        assert ("ns", "b") in rec.calls
        rec.release.set()
        await asyncio.gather(first, *burst, other)
        return rec

    rec = asyncio.run(scenario())
    assert not rec.overlap
    # One running when the burst came, plus one that covers the whole burst.
    assert rec.calls.count(("ns", "a")) == 2
    assert rec.calls.count(("ns", "b")) == 1


def test_a_checkpoint_scan_that_found_nothing_new_wakes_no_reconcile() -> None:
    from concurrent.futures import Future
    from datetime import UTC, datetime

    from prometheus_client import CollectorRegistry

    from elastic_api.models import CheckpointStatus
    from elastic_operator.handlers import Reconciler
    from elastic_operator.kube import Kube
    from elastic_operator.metrics import OperatorMetrics

    reconciler = Reconciler(Kube(None), OperatorMetrics(CollectorRegistry()))
    woken: list[tuple[str, str]] = []
    reconciler.on_scan_done = lambda ns, name: woken.append((ns, name))

    def finish(step: int, minute: int) -> None:
        future: Future[CheckpointStatus | None] = Future()
        future.set_result(CheckpointStatus(
            directory="gs://b/c", latest_committed_step=step,
            observed_at=datetime(2026, 11, 29, 12, minute, tzinfo=UTC)))
        reconciler._scan_done("ns", "job", future)

    finish(100, 0)
    assert woken == [("ns", "job")]  # the first result is news
    finish(100, 1)
    assert woken == [("ns", "job")]  # the same listing, later: nothing to publish
    finish(200, 2)
    assert woken == [("ns", "job")] * 2
