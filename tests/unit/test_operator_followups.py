"""A reconcile's follow-ups (model/result.py `FollowUp`: the replacement's writes, the Event
posts) come back in its Result and the work queue's worker that ran it runs them, in
order: a job's follow-ups never overlap nor run out of order, its next reconcile runs
meanwhile, another job is not held up; their outcome counts with the reconcile's (one
failure count, one backoff; the soonest look wins); `drain` waits for them.

Threads synchronise on events with deadlines (no sleeps)."""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest

from elastic_api.kube import Backoff
from elastic_operator.model.result import FAILED, FollowUp, Result, run_follow_ups
from elastic_operator.queue.work_queue import WorkQueue

DEADLINE_S = 10.0
A, B = ("ml", "a"), ("ml", "b")
# Long enough that no retry comes due during a test, unless it asks one.
SLOW = Backoff(base_s=30.0, cap_s=60.0)


class Script:
    """The reconcile the queue runs: for each job, the Results to return, in turn (then
    plain ones); records each run."""

    def __init__(self, results: dict[tuple[str, str], list[Result]]) -> None:
        self.results = results
        self.runs: list[tuple[str, str]] = []
        self.ran = threading.Condition()

    def __call__(self, namespace: str, name: str) -> Result:
        key = (namespace, name)
        with self.ran:
            self.runs.append(key)
            self.ran.notify_all()
        left = self.results.get(key, [])
        return left.pop(0) if left else Result()

    def wait_runs(self, key: tuple[str, str], count: int) -> bool:
        with self.ran:
            return self.ran.wait_for(lambda: self.runs.count(key) >= count, DEADLINE_S)


def piece(done: list[str], name: str, gate: threading.Event | None = None,
          outcome: Result | None = None) -> FollowUp:
    def work() -> Result:
        if gate is not None:
            assert gate.wait(DEADLINE_S), f"{name} was never let through"
        done.append(name)
        return outcome or Result()
    return work


@pytest.fixture
def queue() -> Iterator[Callable[[Script], WorkQueue]]:
    made: list[WorkQueue] = []

    def start(script: Script) -> WorkQueue:
        work_queue = WorkQueue(SLOW, workers=3)
        work_queue.start(script)
        made.append(work_queue)
        return work_queue

    yield start
    for work_queue in made:
        work_queue.stop()


def test_the_next_reconcile_runs_while_the_follow_ups_run_in_order(
        queue: Callable[[Script], WorkQueue]) -> None:
    done: list[str] = []
    let_a1_go = threading.Event()
    script = Script({A: [Result(follow_ups=(piece(done, "a1", let_a1_go), piece(done, "a2"))),
                         Result(follow_ups=(piece(done, "a3"),))],
                     B: [Result(follow_ups=(piece(done, "b1"),))]})
    work_queue = queue(script)
    work_queue.add(*A)
    work_queue.add(*B)
    assert script.wait_runs(B, 1)
    work_queue.add(*A)  # named again while a1 runs: its reconcile does not wait for a1
    assert script.wait_runs(A, 2), "the job's next reconcile waited for its follow-ups"
    assert work_queue.wait_idle(*B, DEADLINE_S)
    assert not work_queue.drain(0.05)  # a1 still runs
    assert "b1" in done and "a1" not in done  # job b waited for no follow-up of job a
    let_a1_go.set()
    assert work_queue.drain(DEADLINE_S)
    assert [d for d in done if d.startswith("a")] == ["a1", "a2", "a3"]  # in order


def test_a_follow_up_that_fails_is_one_failure_of_the_run_and_retried_after_the_backoff(
        queue: Callable[[Script], WorkQueue]) -> None:
    """The reconcile worked, its follow-up failed: the run failed, counted once, and the
    job is retried after the queue's backoff; the next such run counts two (the
    reconcile's success does not reset what its follow-ups failed)."""
    done: list[str] = []
    script = Script({A: [Result(follow_ups=(piece(done, "x", outcome=FAILED),)),
                         Result(follow_ups=(piece(done, "y", outcome=FAILED),)),
                         Result(follow_ups=(piece(done, "z"),))]})
    work_queue = queue(script)
    work_queue.add(*A)
    assert script.wait_runs(A, 1) and work_queue.drain(DEADLINE_S)
    assert work_queue.failures(*A) == 1 and work_queue.retry_pending(*A)
    work_queue.add(*A)
    assert script.wait_runs(A, 2) and work_queue.drain(DEADLINE_S)
    assert work_queue.failures(*A) == 2 and work_queue.retry_pending(*A)
    work_queue.add(*A)
    assert script.wait_runs(A, 3) and work_queue.drain(DEADLINE_S)
    assert work_queue.failures(*A) == 0 and done == ["x", "y", "z"]


def test_a_failed_reconcile_and_its_failed_follow_up_count_once(
        queue: Callable[[Script], WorkQueue]) -> None:
    done: list[str] = []
    script = Script({A: [Result(ok=False, follow_ups=(piece(done, "x", outcome=FAILED),))]})
    work_queue = queue(script)
    work_queue.add(*A)
    assert script.wait_runs(A, 1) and work_queue.drain(DEADLINE_S)
    assert done == ["x"] and work_queue.failures(*A) == 1


def test_the_soonest_look_wins_the_reconciles_or_its_follow_ups(
        queue: Callable[[Script], WorkQueue]) -> None:
    """The reconcile asks for a look in an hour, its follow-up (a throttled write) in a
    moment: the job is reconciled again in a moment."""
    done: list[str] = []
    script = Script({A: [Result(requeue_after=3600.0, follow_ups=(
        piece(done, "throttled", outcome=Result(requeue_after=0.05)),))]})
    work_queue = queue(script)
    work_queue.add(*A)
    assert script.wait_runs(A, 2), "the follow-up's look was not kept"
    assert done == ["throttled"]


def test_a_follow_up_that_raises_stops_none_after_it() -> None:
    done: list[str] = []

    def broken() -> Result:
        raise RuntimeError("a bug")

    outcome = run_follow_ups([broken, piece(done, "after", outcome=Result(requeue_after=2.0))])
    assert done == ["after"] and not outcome.ok and outcome.requeue_after == 2.0
