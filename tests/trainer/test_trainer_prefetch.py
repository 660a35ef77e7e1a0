"""Batches made ahead on a background thread: in order, errors at the step they belong to,
and a prefetcher that is closed early stops."""
from __future__ import annotations

import threading

import pytest

from elastic_trainer.prefetch import BatchPrefetcher


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_batches_come_in_step_order(depth: int) -> None:
    made: list[int] = []

    def make(step: int) -> int:
        made.append(step)
        return step * 10

    prefetch = BatchPrefetcher(make, 5, 9, depth)
    assert [prefetch.get(s) for s in range(5, 10)] == [50, 60, 70, 80, 90]
    prefetch.close()
    assert made == [5, 6, 7, 8, 9]
    with pytest.raises(ValueError, match="batch of step 3 asked for, the next one is 10"):
        prefetch.get(3)


def test_an_error_is_raised_by_the_get_of_its_step() -> None:
    def make(step: int) -> int:
        if step == 2:
            raise OSError("shard unreadable")
        return step

    prefetch = BatchPrefetcher(make, 0, 5, depth=2)
    assert prefetch.get(0) == 0 and prefetch.get(1) == 1
    with pytest.raises(OSError, match="shard unreadable"):
        prefetch.get(2)
    prefetch.close()


def test_close_stops_a_prefetcher_that_is_ahead() -> None:
    gate = threading.Event()
    made: list[int] = []

    def make(step: int) -> int:
        made.append(step)
        if step == 3:
            gate.set()
        return step

    prefetch = BatchPrefetcher(make, 0, 10**6, depth=2)
    assert prefetch.get(0) == 0
    assert gate.wait(30)  # it ran ahead until the queue was full
    prefetch.close()
    assert len(made) < 10
