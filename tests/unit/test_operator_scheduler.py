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
