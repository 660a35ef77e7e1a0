"""Finding and reading the trainer's process in the pod's shared process namespace
(elastic_trainer.trainer_process, sampler): /proc/<pid>/stat read right, the trainer
told from the pause process, the sidecar and its children, and a wrapper's children;
nothing in a machine's own namespace; what cannot be read said once, never raised."""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from elastic_trainer.sampler import LASTING_AFTER, ProcessSampler
from elastic_trainer.stacks import StackUnavailable, ThreadStack
from elastic_trainer.trainer_process import (
    CLOCK_TICKS,
    find_trainer,
    parse_stat,
    read_stat,
)

NOW = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)


def stat_line(pid: int, comm: str, state: str, ppid: int, utime: int = 0, stime: int = 0,
              start: int = 100) -> str:
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
    # utime stime cutime cstime priority nice threads itrealvalue starttime ...
    return (f"{pid} ({comm}) {state} {ppid} {pid} {pid} 0 -1 4194560 1 0 0 0 {utime} {stime}"
            f" 0 0 20 0 1 0 {start} 19730432 3563 18446744073709551615 1 1 0 0 0 0 0\n")


def test_stat_is_read_with_any_command_name() -> None:
    stat = parse_stat(stat_line(42, "python3 (x) y", "T", 7, utime=250, stime=50, start=9))
    assert (stat.pid, stat.command, stat.state, stat.ppid, stat.start_ticks) == \
        (42, "python3 (x) y", "Stopped", 7, 9)
    assert stat.cpu_seconds == 300 / CLOCK_TICKS
    for letter, state in (("R", "Running"), ("S", "Sleeping"), ("D", "DiskSleep"),
                          ("t", "Stopped"), ("Z", "Zombie")):
        assert parse_stat(stat_line(1, "p", letter, 0)).state == state
    with pytest.raises(ValueError):
        parse_stat("42 python3 S")


def fake_proc(root: Path, processes: dict[int, tuple[str, int, list[str]]], me: int,
              start: dict[int, int] | None = None) -> str:
    """A /proc with `pid: (state, ppid, argv)`; `me` is self."""
    for pid, (state, ppid, argv) in processes.items():
        d = root / str(pid)
        d.mkdir(parents=True)
        (d / "stat").write_text(stat_line(pid, os.path.basename(argv[0]) if argv else "k",
                                          state, ppid, start=(start or {}).get(pid, 100 + pid)))
        (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    return str(root)


POD = {
    1: ("S", 0, ["/pause"]),
    7: ("S", 0, ["/opt/etj/bin/python3", "/opt/etj/bin/etj", "progress"]),  # the sidecar
    8: ("S", 7, ["/opt/etj/bin/py-spy", "dump", "--pid", "12"]),  # its child
    11: ("S", 0, ["/bin/bash", "-c", "python3 -m maxtext.trainers.pre_train.train"]),
    12: ("R", 11, ["python3", "-m", "maxtext.trainers.pre_train.train", "steps=10"]),
    13: ("S", 12, ["python3", "-c", "from multiprocessing.spawn import spawn_main"]),
    20: ("S", 0, ["/usr/pathways/bin/server", "--server_port=29001"]),
}


def test_the_trainer_is_mains_top_python_process(tmp_path: Path) -> None:
    """Not the pause process, not the sidecar or its py-spy, not a worker the trainer
    forked, not a non-Python sidecar: MaxText, under its bash wrapper."""
    assert find_trainer(fake_proc(tmp_path, POD, me=7), me=7) == 12


def test_of_two_trainers_the_oldest(tmp_path: Path) -> None:
    processes = {**POD, 30: ("S", 0, ["python3", "late.py"])}
    proc = fake_proc(tmp_path, processes, me=7, start={12: 500, 30: 400})
    assert find_trainer(proc, me=7) == 30


@pytest.mark.parametrize("processes", [
    {1: ("S", 0, ["/pause"]), 7: ("S", 0, ["python3", "-m", "etj", "progress"])},  # no main
    {1: ("S", 0, ["/pause"]), 7: ("S", 0, ["etj"]), 12: ("Z", 0, ["python3"])},  # a zombie
])
def test_no_trainer_in_sight(tmp_path: Path, processes: dict[int, tuple[str, int, list[str]]]
                             ) -> None:
    assert find_trainer(fake_proc(tmp_path, processes, me=7), me=7) is None


def test_in_the_machines_own_namespace_nothing_is_the_trainer(tmp_path: Path) -> None:
    """Started from a shell on a machine: its ancestry ends at init, PID 1."""
    machine = {**POD, 1: ("S", 0, ["/sbin/init"]), 5: ("S", 1, ["bash"]),
               7: ("S", 5, ["python3", "-m", "elastic_api.etj_cli", "progress"])}
    assert find_trainer(fake_proc(tmp_path, machine, me=7), me=7) is None


def test_a_pod_that_shares_nothing_shows_no_trainer(tmp_path: Path) -> None:
    """Without shareProcessNamespace the sidecar is its container's PID 1, alone."""
    alone = {1: ("S", 0, ["python3", "-m", "elastic_api.etj_cli", "progress"])}
    assert find_trainer(fake_proc(tmp_path, alone, me=1), me=1) is None


class Reader:
    """A stand-in for py-spy: stacks, or a reason."""

    def __init__(self, error: StackUnavailable | None = None) -> None:
        self.error, self.calls = error, 0

    def dump(self, pid: int) -> ThreadStack | None:
        self.calls += 1
        if self.error is not None:
            raise self.error
        return ThreadStack(pid, True, ())


def test_the_sampler_reads_state_cpu_and_stack(tmp_path: Path) -> None:
    sampler = ProcessSampler(Reader(), proc=fake_proc(tmp_path, POD, me=7), me=7)  # type: ignore[arg-type]
    sample = sampler.sample(NOW)
    assert (sampler.pid, sample.state, sample.cpu_seconds) == (12, "Running", 0.0)
    assert sample.stack is not None and sample.stack.thread_id == 12


def test_a_refusal_is_said_once_and_not_tried_again(tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    reader = Reader(StackUnavailable("permission denied: ...", lasting=True))
    sampler = ProcessSampler(reader, proc=fake_proc(tmp_path, POD, me=7), me=7)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="etj.progress"):
        samples = [sampler.sample(NOW) for _ in range(LASTING_AFTER + 2)]
    assert [s.state for s in samples] == ["Running"] * len(samples)  # state and CPU go on
    assert all(s.stack is None for s in samples)
    assert reader.calls == LASTING_AFTER  # then not tried again
    assert sum("cannot read the trainer's stacks" in r.message and "permission denied"
               in r.message for r in caplog.records) == 1


class Outcomes(Reader):
    """A reader whose dumps succeed or fail in the order given."""

    def __init__(self, *outcomes: StackUnavailable | None) -> None:
        super().__init__()
        self.outcomes = list(outcomes)

    def dump(self, pid: int) -> ThreadStack | None:
        self.error = self.outcomes.pop(0) if self.outcomes else None
        return super().dump(pid)


def test_a_process_once_read_is_read_again_after_no_interpreter_is_found(
        tmp_path: Path) -> None:
    """py-spy's "no interpreter found" comes and goes on a busy process (MaxText under
    load): once a stack was read, it is a torn read, and the sidecar keeps sampling."""
    gone = StackUnavailable("not a Python process (no interpreter found in it)", lasting=True)
    reader = Outcomes(None, *[gone] * (LASTING_AFTER + 1), None)
    sampler = ProcessSampler(reader, proc=fake_proc(tmp_path, POD, me=7), me=7)  # type: ignore[arg-type]
    samples = [sampler.sample(NOW) for _ in range(LASTING_AFTER + 3)]
    assert [s.stack is not None for s in samples] == \
        [True, *[False] * (LASTING_AFTER + 1), True]


def test_no_trainer_is_an_empty_sample_said_once(tmp_path: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    proc = fake_proc(tmp_path, {1: ("S", 0, ["/pause"]), 7: ("S", 0, ["python3", "etj"])},
                     me=7)
    sampler = ProcessSampler(Reader(), proc=proc, me=7)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="etj.progress"):
        assert sampler.sample(NOW).state is None and sampler.sample(NOW).stack is None
    assert sum("no trainer process" in r.message for r in caplog.records) == 1


def test_a_real_stopped_process_reads_stopped() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        os.kill(proc.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while (stat := read_stat(proc.pid)) is not None and stat.state != "Stopped":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert stat is not None and stat.state == "Stopped"
        sampler = ProcessSampler(None, pid=proc.pid)
        sample = sampler.sample(NOW)
        assert (sample.state, sample.stack) == ("Stopped", None)
    finally:
        proc.kill()
        proc.wait()
    assert read_stat(proc.pid) is None
