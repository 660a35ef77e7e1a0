"""bench/load.py's controller (how many CPU burners for a target load average) and
bench/writes.py's diff of two statuses (what a status write carried). Pure functions,
but for where a burner runs (a session of its own) and what runs ahead of the burners
(`favour`); the load they make is the benchmark's to measure."""
from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys
from pathlib import Path

from bench.load import burn, burners_for, favour, runnable_now
from bench.writes import WriteLog, changed, progress_only, slice_transitions
from elastic_devtools.localcluster.faults import wait_for


def test_burners_fill_what_others_leave_below_the_target() -> None:
    # Load 4 of which 0 ours: 6 wanted, at most 2 more per period.
    assert burners_for(10, 4.0, 0.0, current=0) == 2
    assert burners_for(10, 4.0, 0.0, current=5) == 6
    # Our own burners are not "others": load 10 with 6 of ours is on target.
    assert burners_for(10, 10.0, 6.0, current=6) == 6


def test_no_burners_when_others_alone_exceed_the_target() -> None:
    assert burners_for(10, 19.0, 0.0, current=0) == 0
    assert burners_for(10, 19.0, 4.0, current=4) == 2  # down by at most 2 per period
    assert burners_for(0, 1.0, 0.0, current=0) == 0


def test_never_more_burners_than_the_target() -> None:
    assert burners_for(3, 0.0, 0.0, current=3, step=10) == 3


def test_the_runnable_threads_are_read_now_less_the_reader() -> None:
    # /proc/loadavg: the 1, 5, 15-minute averages, then runnable/threads and the last pid.
    assert runnable_now("9.52 6.94 5.55 13/1204 88211\n") == 12
    assert runnable_now("0.00 0.00 0.00 1/90 7\n") == 0
    assert runnable_now() >= 0  # this machine's, the reader excluded


def slice_(index: int, state: str, ready: int, reason: str = "AllHostsReady",
           message: str | None = None) -> dict[str, object]:
    return {"index": index, "state": state, "readyHosts": ready, "reason": reason,
            "message": message}


def test_a_ready_hosts_change_is_progress_a_state_change_is_not() -> None:
    before = {"slices": [slice_(0, "Restarting", 1, "ReplacementPodsNotReady", "1/4")]}
    more = {"slices": [slice_(0, "Restarting", 2, "ReplacementPodsNotReady", "2/4")]}
    ready = {"slices": [slice_(0, "Ready", 4)], "slicesReady": 3}
    assert changed(before, more) == {"slices.readyHosts", "slices.message"}
    assert progress_only(changed(before, more))
    assert changed(more, ready) == {"slices.state", "slices.readyHosts", "slices.reason",
                                    "slices.message", "slicesReady"}
    assert not progress_only(changed(more, ready))
    assert slice_transitions(more, ready) == [
        "Restarting/ReplacementPodsNotReady -> Ready/AllHostsReady"]


def test_conditions_and_the_outbox_are_labelled_by_what_changed() -> None:
    cond = {"type": "SliceDown", "status": "True", "reason": "PodFailed", "message": "a"}
    before = {"conditions": [cond], "pendingEvents": [{"name": "e1"}, {"name": "e2"}]}
    after = {"conditions": [{**cond, "message": "b"}], "pendingEvents": [{"name": "e2"}]}
    labels = changed(before, after)
    assert labels == {"conditions.SliceDown.message", "pendingEvents.cleared"}
    assert progress_only(labels)
    added = {**after, "pendingEvents": [{"name": "e2"}, {"name": "e3"}]}
    assert "pendingEvents" in changed(after, added)
    assert not progress_only(changed(after, added))


def test_the_log_counts_writes_per_slice_event_in_a_window() -> None:
    log = WriteLog()
    log.see("j", {"slices": [slice_(0, "Ready", 4)]}, 1.0)  # the first version: no write
    log.see("j", {"slices": [slice_(0, "Down", 3, "PodFailed")]}, 2.0)
    log.see("j", {"slices": [slice_(0, "Down", 2, "PodFailed")]}, 3.0)
    log.see("j", {"slices": [slice_(0, "Down", 2, "PodFailed")]}, 3.5)  # no change
    log.see("j", {"slices": [slice_(0, "Ready", 4)]}, 9.0)
    summary = log.summary(0.0, 5.0, events=1)
    assert (summary["writes"], summary["ready_hosts_only_per_slice_event"],
            summary["others_per_slice_event"]) == (2, 1.0, 1.0)
    assert summary["slice_transitions_per_slice_event"] == {
        "Ready/AllHostsReady -> Down/PodFailed": 1.0}
    assert log.summary(0.0, 10.0, events=1)["per_slice_event"] == 3.0


def test_a_burner_is_a_session_of_its_own_and_stops_when_told() -> None:
    # Autogroup scheduling shares the CPU between sessions first: a burner in the
    # benchmark's session would load only the benchmark and the operator.
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    proc = ctx.Process(target=burn, args=(stop,), daemon=True)
    proc.start()
    try:
        wait_for(lambda: os.getsid(proc.pid) == proc.pid, 30.0, "the burner's own session")
        assert os.getsid(proc.pid) != os.getsid(0)
    finally:
        stop.set()
        proc.join(timeout=30)
    assert proc.exitcode == 0


def test_favour_sets_a_process_s_autogroup_and_every_thread() -> None:
    # nice 5, not the benchmark's -10: lowering a priority needs no privilege.
    code = "import threading, time; threading.Thread(target=time.sleep, args=(60,)).start(); " \
           "time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    tasks = Path(f"/proc/{proc.pid}/task")
    try:
        wait_for(lambda: len(list(tasks.glob("*"))) == 2, 30.0, "the child's two threads")
        assert favour({"child": proc.pid}, nice=5) == {"child": 2}
        assert {os.getpriority(os.PRIO_PROCESS, int(t.name)) for t in tasks.glob("*")} == {5}
        autogroup = Path(f"/proc/{proc.pid}/autogroup")
        if autogroup.exists():  # a kernel with autogroup scheduling
            assert autogroup.read_text().split()[-1] == "5"
    finally:
        proc.kill()
        proc.wait(timeout=30)
