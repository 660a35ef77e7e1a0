"""followups.FollowUps: what follows a status write runs in order per job, off the
caller's thread; one job's slow work holds up neither the caller nor another job; a
piece that raises does not stop the ones after it; `drain` waits for all of it.

Threads synchronise on events with deadlines (no sleeps)."""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest

from elastic_operator.writes.followups import FollowUps, Inline

DEADLINE_S = 10.0
A, B = ("ml", "a"), ("ml", "b")


@pytest.fixture
def runner() -> Iterator[FollowUps]:
    follow_ups = FollowUps(threads=2)
    follow_ups.start()
    yield follow_ups
    follow_ups.stop()


def recorder(done: list[str], name: str, gate: threading.Event | None = None
             ) -> Callable[[], None]:
    def work() -> None:
        if gate is not None:
            assert gate.wait(DEADLINE_S), f"{name} was never let through"
        done.append(name)
    return work


def test_a_jobs_work_runs_in_order_while_another_jobs_goes_on(runner: FollowUps) -> None:
    done: list[str] = []
    let_a1_go = threading.Event()
    runner.submit(A, recorder(done, "a1", let_a1_go))  # slow: a worker blocks in it
    runner.submit(A, recorder(done, "a2"))
    runner.submit(B, recorder(done, "b1"))  # the other worker is free for it
    b_done = threading.Event()
    runner.submit(B, lambda: b_done.set())
    assert b_done.wait(DEADLINE_S), "job b waited for job a"
    assert done == ["b1"] and runner.depth >= 2  # a1 running, a2 behind it
    let_a1_go.set()
    assert runner.drain(DEADLINE_S)
    assert done == ["b1", "a1", "a2"] and runner.depth == 0


def test_submit_returns_before_the_work_runs(runner: FollowUps) -> None:
    gate = threading.Event()
    done: list[str] = []
    runner.submit(A, recorder(done, "a1", gate))
    assert done == []  # the caller goes on
    gate.set()
    assert runner.drain(DEADLINE_S) and done == ["a1"]


def test_work_that_raises_does_not_stop_what_follows(runner: FollowUps) -> None:
    done: list[str] = []

    def broken() -> None:
        raise RuntimeError("a bug")

    runner.submit(A, broken)
    runner.submit(A, recorder(done, "a2"))
    assert runner.drain(DEADLINE_S) and done == ["a2"] and runner.alive


def test_drain_says_when_work_is_still_running(runner: FollowUps) -> None:
    gate = threading.Event()
    runner.submit(A, recorder([], "a1", gate))
    assert not runner.drain(0.05)
    gate.set()
    assert runner.drain(DEADLINE_S)


def test_inline_runs_the_work_at_once() -> None:
    done: list[str] = []
    Inline().submit(A, recorder(done, "a1"))
    assert done == ["a1"]
