"""The trainer's Python stacks, read from outside with py-spy (`py-spy dump --json
--nonblocking`): the main thread's frames, innermost first.

`--nonblocking` reads the process's memory (process_vm_readv) without attaching to it,
so the trainer is never paused, not even for the sample; a stack read while the trainer
runs may be torn, which one sample in many can afford. Reading another process's memory
needs ptrace's read-and-attach permission: the same user as the trainer (where the
node's Yama ptrace_scope is 0), or CAP_SYS_PTRACE in effect (docs/operations.md, "What
the progress sidecar samples"). Whatever py-spy cannot do is a `StackUnavailable` with
the reason in words, never an exception out of here.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

PY_SPY: Final = "py-spy"
DUMP_TIMEOUT_SECONDS: Final = 10.0


@dataclass(frozen=True)
class Frame:
    name: str  # the function, qualified (`Trainer._dispatch`, `<module>`)
    path: str  # the file as the process has it (/opt/.../jax/_src/api.py)
    short: str  # from the package down (jax/_src/api.py), as py-spy shortens it
    line: int

    @property
    def function(self) -> str:
        """The function's own name, without its class or enclosing functions."""
        return self.name.rsplit(".", 1)[-1]

    @property
    def location(self) -> str:
        return f"{self.short.rsplit('/', 1)[-1]}:{self.line}"


@dataclass(frozen=True)
class ThreadStack:
    """One thread's stack at the sample."""

    thread_id: int  # the OS thread id (the pid for the main thread)
    active: bool  # py-spy: running, not waiting in the kernel
    frames: tuple[Frame, ...]  # innermost first

    @property
    def key(self) -> tuple[tuple[str, str, int], ...]:
        """What two samples share when the thread has not moved."""
        return tuple((f.name, f.path, f.line) for f in self.frames)


class StackUnavailable(RuntimeError):
    """The stack could not be read; the message says why (for the log, once). `lasting`:
    trying again will not help (no py-spy, no permission, not Python)."""

    def __init__(self, message: str, lasting: bool = False) -> None:
        super().__init__(message)
        self.lasting = lasting


def _frame(raw: dict[str, Any]) -> Frame:
    path = str(raw.get("filename") or "?")
    return Frame(name=str(raw.get("name") or "?"), path=path,
                 short=str(raw.get("short_filename") or path), line=int(raw.get("line") or 0))


def main_thread(dump: Any, pid: int) -> ThreadStack | None:
    """The main thread of a `py-spy dump --json` (its OS thread id is the pid; py-spy
    names it MainThread only when it can read the threading module's names)."""
    if not isinstance(dump, list):
        raise StackUnavailable("py-spy printed no list of threads")
    threads = [t for t in dump if isinstance(t, dict)]
    chosen = next((t for t in threads if t.get("os_thread_id") == pid), None) or \
        next((t for t in threads if t.get("thread_name") == "MainThread"), None)
    if chosen is None:
        return None
    frames = tuple(_frame(f) for f in chosen.get("frames") or [] if isinstance(f, dict))
    return ThreadStack(thread_id=int(chosen.get("os_thread_id") or pid),
                       active=bool(chosen.get("active")), frames=frames)


def find_py_spy() -> str | None:
    """py-spy on PATH, else beside this Python (a venv's bin)."""
    found = shutil.which(PY_SPY)
    if found:
        return found
    beside = Path(sys.executable).parent / PY_SPY
    return str(beside) if beside.is_file() else None


def _failure(stderr: str, code: int) -> StackUnavailable:
    text = " ".join(stderr.split())
    if "Permission Denied" in text or "Operation not permitted" in text:
        return StackUnavailable("permission denied: reading another process's memory needs "
                                "the same user as the trainer, or CAP_SYS_PTRACE in effect",
                                lasting=True)
    if "Failed to find python version" in text or "python interpreter" in text.lower():
        return StackUnavailable("not a Python process (no interpreter found in it)",
                                lasting=True)
    return StackUnavailable(f"py-spy exited {code}: {text[:200]}")


class StackReader:
    """`py-spy dump` of one process, as a child process of the sidecar."""

    def __init__(self, binary: str | None = None,
                 timeout: float = DUMP_TIMEOUT_SECONDS) -> None:
        self.binary = binary or find_py_spy()
        self.timeout = timeout

    def dump(self, pid: int) -> ThreadStack | None:
        """The main thread's stack (None: py-spy saw no main thread)."""
        if self.binary is None:
            raise StackUnavailable("py-spy is not installed (not on PATH)", lasting=True)
        argv = [self.binary, "dump", "--pid", str(pid), "--json", "--nonblocking"]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout,
                                  stdin=subprocess.DEVNULL, check=False)
        except subprocess.TimeoutExpired:
            raise StackUnavailable(f"py-spy took over {self.timeout:.0f}s") from None
        except OSError as err:
            raise StackUnavailable(f"py-spy could not run: {err}", lasting=True) from None
        if done.returncode != 0:
            raise _failure(done.stderr, done.returncode)
        try:
            return main_thread(json.loads(done.stdout), pid)
        except (ValueError, TypeError) as err:
            raise StackUnavailable(f"py-spy printed no JSON: {err}") from None
