"""Process handling that `down` relies on, with ordinary processes (no cluster)."""
from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from elastic_devtools.localcluster import procs


def _which(name: str) -> str:
    path = shutil.which(name)
    assert path is not None
    return path


def _bash() -> str:
    return _which("bash")


def _wait_exec(pid: int) -> None:
    """Until the new image is in place (cmdline is empty for a moment after exec)."""
    deadline = time.monotonic() + 5
    while not Path(f"/proc/{pid}/cmdline").read_bytes():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_stop_all_kills_the_whole_group(tmp_path: Path) -> None:
    # A component that forks a child: both must be gone after stop_all.
    record = procs.start(
        "demo", [_bash(), "-c", "sleep 300 & trap '' TERM; sleep 300; wait"],
        tmp_path / "run/demo.pid", tmp_path / "logs/demo.log", tmp_path)
    assert procs.is_alive(record)
    assert procs.read_pid_file("demo", tmp_path / "run/demo.pid") == record
    assert record.pid in procs.live_groups()
    procs.stop_all([record], grace=0.5)  # bash ignores TERM: SIGKILL must follow
    assert not procs.is_alive(record)
    assert record.pid not in procs.live_groups()


def test_a_recycled_pid_is_not_ours(tmp_path: Path) -> None:
    record = procs.start("demo", [_which("sleep"), "300"],
                         tmp_path / "p", tmp_path / "l", tmp_path)
    _wait_exec(record.pid)
    impostor = procs.PidRecord("demo", record.pid, "/usr/bin/something-else")
    assert not procs.is_alive(impostor)
    procs.stop_all([impostor])  # not ours: left alone
    assert procs.is_alive(record)
    procs.stop_all([record])
    assert not procs.is_alive(record)


def test_rss_is_reported(tmp_path: Path) -> None:
    record = procs.start("demo", [_which("sleep"), "300"],
                         tmp_path / "p", tmp_path / "l", tmp_path)
    try:
        assert procs.rss_bytes(record.pid) > 0
    finally:
        procs.stop_all([record])
    assert procs.rss_bytes(record.pid) == 0


@pytest.mark.parametrize("die_with_parent", [True, False])
def test_die_with_parent(tmp_path: Path, die_with_parent: bool) -> None:
    """A component started with die_with_parent goes when its starter is killed; one
    started without it (as `etj cluster up` does) outlives it."""
    script = (
        "import os, sys\n"
        "from pathlib import Path\n"
        "from elastic_devtools.localcluster import procs\n"
        f"r = procs.start('demo', [{_which('sleep')!r}, '300'], Path(sys.argv[1]) / 'p',\n"
        f"               Path(sys.argv[1]) / 'l', Path(sys.argv[1]), {die_with_parent})\n"
        "print(r.pid, flush=True)\n"
        "os._exit(0)\n"
    )
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path)], check=True,
                         capture_output=True, text=True).stdout
    record = procs.PidRecord("demo", int(out), _which("sleep"))
    try:
        deadline = time.monotonic() + 5
        if die_with_parent:
            while procs.is_alive(record):
                assert time.monotonic() < deadline, "child outlived its parent"
                time.sleep(0.05)
        else:
            time.sleep(0.5)  # give a wrong SIGKILL the chance to land before we look
            assert procs.is_alive(record)
    finally:
        procs.stop_all([record])
