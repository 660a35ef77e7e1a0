"""The checkpoint-scan scheduler, with a synchronous executor: scans run at most once per
interval, off the reconcile's result path, and only news wakes a reconcile."""
from __future__ import annotations

import threading
from datetime import datetime
from pathlib import Path

from elastic_api.models import CheckpointStatus
from elastic_operator.checkpoints.scanner import CheckpointScanner
from tests.builders import at
from tests.support.clock import FakeClock
from tests.support.executors import Synchronous

KEY = ("ns", "job")



def scanner(results: list[CheckpointStatus], clock: FakeClock,
            woken: list[tuple[str, str]]) -> CheckpointScanner:
    """Each scan returns the next of `results`."""
    def scan(directory: str, now: datetime) -> CheckpointStatus:
        return results.pop(0)

    s = CheckpointScanner(interval_s=30, scan=scan, executor=Synchronous(),
                          clock=clock)
    s.on_result(lambda ns, name: woken.append((ns, name)))
    return s


def found(step: int, when: float) -> CheckpointStatus:
    return CheckpointStatus(directory="gs://b/c", latest_committed_step=step,
                            observed_at=at(when))


def test_a_scan_is_published_by_the_next_reconcile_and_runs_once_per_interval() -> None:
    clock, woken = FakeClock(ticks=0.0), []
    results = [found(100, 0), found(200, 40)]
    s = scanner(results, clock, woken)
    assert s.latest(KEY, "gs://b/c") is None  # started (and, here, finished)
    assert woken == [KEY]  # the news wakes a reconcile
    assert s.latest(KEY, "gs://b/c") == found(100, 0)
    clock.ticks = 29.0
    assert s.latest(KEY, "gs://b/c") is None and len(results) == 1  # not due yet
    clock.ticks = 30.0
    assert s.latest(KEY, "gs://b/c") is None and results == []  # due: the next scan
    assert s.latest(KEY, "gs://b/c") == found(200, 40)


def test_a_scan_that_found_nothing_new_wakes_no_reconcile() -> None:
    clock, woken = FakeClock(ticks=0.0), []
    s = scanner([found(100, 0), found(100, 30), found(200, 60)], clock, woken)
    s.latest(KEY, "gs://b/c")
    assert woken == [KEY]  # the first result is news
    clock.ticks = 30.0
    s.latest(KEY, "gs://b/c")
    assert woken == [KEY]  # the same listing, later: nothing to publish
    clock.ticks = 60.0
    s.latest(KEY, "gs://b/c")
    assert woken == [KEY] * 2


def test_a_scan_done_before_its_callback_is_registered_does_not_deadlock(
        tmp_path: Path) -> None:
    """The callback runs where the scan finished (here: inside latest()) and takes the
    scanner's lock: latest() must not hold it then."""
    woken: list[tuple[str, str]] = []
    s = CheckpointScanner(executor=Synchronous())  # the real scan of a local directory
    s.on_result(lambda ns, name: woken.append((ns, name)))
    scan = threading.Thread(target=s.latest, args=(KEY, str(tmp_path)), daemon=True)
    scan.start()
    scan.join(timeout=10)
    assert not scan.is_alive(), "latest() deadlocked on its own lock"
    assert woken == [KEY]
    result = s.latest(KEY, str(tmp_path))
    assert result is not None and result.error is None and result.directory == str(tmp_path)


def test_a_forgotten_job_starts_over() -> None:
    clock, woken = FakeClock(ticks=0.0), []
    s = scanner([found(100, 0), found(100, 1)], clock, woken)
    s.latest(KEY, "gs://b/c")
    s.forget_job(KEY)
    assert s.latest(KEY, "gs://b/c") is None  # the old result is gone; a new scan started
    assert woken == [KEY] * 2  # after forget, the first result is news again
