"""Component processes: each runs in its own session (so its process group can be killed
as a whole, and it outlives the `etj cluster up` that started it), with a pid file
recording the pid and the binary, so a recycled pid is never mistaken for ours."""
from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

# Popen objects of the processes this Python process started, so they can be reaped.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


@dataclass(frozen=True)
class PidRecord:
    component: str
    pid: int
    binary: str


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the parent dies (Linux prctl
    PR_SET_PDEATHSIG), so a killed test run leaves no cluster behind."""
    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_pdeathsig = 1
    libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)


def start(component: str, argv: list[str], pid_file: Path, log_file: Path, cwd: Path,
          die_with_parent: bool = False) -> PidRecord:
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as log:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            cwd=cwd, start_new_session=True,
            preexec_fn=_die_with_parent if die_with_parent else None,
        )
    _CHILDREN[proc.pid] = proc
    pid_file.write_text(f"{proc.pid}\n{argv[0]}\n")
    return PidRecord(component, proc.pid, argv[0])


def read_pid_file(component: str, pid_file: Path) -> PidRecord | None:
    try:
        lines = pid_file.read_text().splitlines()
        return PidRecord(component, int(lines[0]), lines[1])
    except (OSError, ValueError, IndexError):
        return None


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Fields after the parenthesised command name: state is first, pgrp third.
    return raw[raw.rindex(")") + 2:].split()


def _reap(pid: int) -> None:
    child = _CHILDREN.get(pid)
    if child is not None and child.poll() is not None:
        del _CHILDREN[pid]


def is_alive(record: PidRecord) -> bool:
    """Running (not a zombie) and still the binary we started."""
    _reap(record.pid)
    fields = _stat_fields(record.pid)
    if fields is None or fields[0] in ("Z", "X"):
        return False
    try:
        cmdline = Path(f"/proc/{record.pid}/cmdline").read_bytes()
    except OSError:
        return False
    # Empty for a moment right after exec, before the new image is set up.
    return not cmdline or cmdline.split(b"\0", 1)[0].decode() == record.binary


def live_groups() -> set[int]:
    """Process groups that have at least one live (non-zombie) member."""
    groups = set()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields and fields[0] not in ("Z", "X"):
                groups.add(int(fields[2]))
    return groups


def rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def stop_all(records: list[PidRecord], grace: float = 5.0) -> None:
    """SIGTERM every component's process group at once, SIGKILL what is left after
    `grace` seconds, and return once no member of any of those groups is alive. Only
    groups whose leader is still our binary are signalled (pids get recycled)."""
    groups = {r.pid for r in records if is_alive(r)}
    for pgid in groups:
        _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    killed = False
    while True:
        for pgid in groups:
            _reap(pgid)
        remaining = groups & live_groups()
        if not remaining:
            return
        if time.monotonic() > deadline:
            if killed:
                raise RuntimeError(f"process groups {sorted(remaining)} survived SIGKILL")
            for pgid in remaining:
                _signal_group(pgid, signal.SIGKILL)
            killed = True
            deadline = time.monotonic() + 5.0
        time.sleep(0.05)
