"""The trainer's process as the progress sidecar sees it: which process it is, and its
state and CPU time, read from /proc (docs/operations.md, "What the progress sidecar
samples").

The sidecar shares the head pod's process namespace (the renderer sets
`shareProcessNamespace`), so it sees the pause process (PID 1), its own processes, and
those of `main` (and, on Pathways, the resource manager's and the proxy's). The trainer
is the oldest Python process there that is neither PID 1 nor the sidecar (nor a child
of it) and whose parent is not one of those Python processes: the process `main` runs,
under whatever wrapper (`bash -c`, a launcher), not a worker it forks. /proc/<pid>/stat and
cmdline are readable by any user, so the state and CPU time need no privilege; the stacks
do (stacks.py).

A sidecar in the machine's own process namespace (not in a pod) would see every process
of the machine: there it finds no trainer unless told its pid. It tells the two apart by
its ancestry: a container's first process has its parent outside the namespace (parent
pid 0) and, in a shared namespace, is not PID 1 (the pause process is); on a machine the
ancestry ends at PID 1, its init.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

ProcessState = Literal["Running", "Sleeping", "DiskSleep", "Stopped", "Zombie"]
# /proc/<pid>/stat's state letter (proc(5)); `t` is a tracing stop (a debugger).
STATES: Final[dict[str, ProcessState]] = {
    "R": "Running", "S": "Sleeping", "I": "Sleeping", "D": "DiskSleep",
    "T": "Stopped", "t": "Stopped", "Z": "Zombie", "X": "Zombie",
}
CLOCK_TICKS: Final = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PROC: Final = "/proc"


@dataclass(frozen=True)
class ProcStat:
    """The fields of /proc/<pid>/stat the sidecar reads."""

    pid: int
    command: str  # the executable's name (comm), at most 15 characters
    state: ProcessState | None
    ppid: int
    cpu_seconds: float  # utime + stime: every thread's CPU time
    start_ticks: int  # when it started, in clock ticks after boot


def parse_stat(text: str) -> ProcStat:
    """/proc/<pid>/stat; ValueError if it is not one. The command is between the first
    '(' and the last ')' (it may hold spaces and parentheses itself)."""
    head, sep, rest = text.rpartition(")")
    pid_text, paren, command = head.partition(" (")
    fields = rest.split()
    if not sep or not paren or len(fields) < 20:
        raise ValueError(f"not a /proc/<pid>/stat line: {text[:60]!r}")
    # After the command: state(3) ppid(4) ... utime(14) stime(15) ... starttime(22).
    return ProcStat(pid=int(pid_text), command=command, state=STATES.get(fields[0]),
                    ppid=int(fields[1]),
                    cpu_seconds=(int(fields[11]) + int(fields[12])) / CLOCK_TICKS,
                    start_ticks=int(fields[19]))


def read_stat(pid: int, proc: str = PROC) -> ProcStat | None:
    """The process's stat, None once it is gone (or unreadable)."""
    try:
        return parse_stat(Path(proc, str(pid), "stat").read_text())
    except (OSError, ValueError):
        return None


def command_line(pid: int, proc: str = PROC) -> list[str]:
    """Its argv ([] for a kernel thread, a zombie, or a process gone)."""
    try:
        raw = Path(proc, str(pid), "cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def is_python(argv: list[str]) -> bool:
    """A Python interpreter's process: argv[0] is python, python3, python3.13, ... (a
    script with a `#!` line runs as its interpreter, so `etj train` is one too)."""
    return bool(argv) and os.path.basename(argv[0]).startswith("python")


def in_a_pods_namespace(proc: str = PROC, me: int | None = None) -> bool:
    """The sidecar runs in a pod's process namespace, not the machine's (module
    docstring): the first of its ancestors whose parent is outside (pid 0) is not PID 1,
    or is the sidecar itself (a pod that does not share its namespace)."""
    me = os.getpid() if me is None else me
    pid = me
    for _ in range(64):
        stat = read_stat(pid, proc)
        if stat is None:
            return False
        if stat.ppid == 0:
            return pid != 1 or pid == me
        pid = stat.ppid
    return False


def _pids(proc: str) -> list[int]:
    try:
        return [int(name) for name in os.listdir(proc) if name.isdigit()]
    except OSError:
        return []


def _ours(me: int, stats: dict[int, ProcStat]) -> set[int]:
    """The sidecar, its ancestors and its children (py-spy): never the trainer."""
    ours = {me}
    pid = me
    while pid in stats and stats[pid].ppid not in ours and stats[pid].ppid > 0:
        pid = stats[pid].ppid
        ours.add(pid)
    changed = True
    while changed:
        grown = {p for p, s in stats.items() if s.ppid in ours} - ours
        ours |= grown
        changed = bool(grown)
    return ours


def find_trainer(proc: str = PROC, me: int | None = None) -> int | None:
    """The trainer's pid among the processes the sidecar sees (module docstring), or
    None: none there yet (main not started), or not in a pod's namespace."""
    me = os.getpid() if me is None else me
    if not in_a_pods_namespace(proc, me):
        return None
    stats = {pid: s for pid in _pids(proc) if (s := read_stat(pid, proc)) is not None}
    ours = _ours(me, stats)
    python = {pid for pid in stats if pid != 1 and pid not in ours
              and stats[pid].state != "Zombie" and is_python(command_line(pid, proc))}
    top = [pid for pid in python if stats[pid].ppid not in python]
    if not top:
        return None
    return min(top, key=lambda pid: (stats[pid].start_ticks, pid))
