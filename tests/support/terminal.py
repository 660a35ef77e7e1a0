"""A real terminal for a test: a tmux session of a fixed size on a server of its own,
commands typed in with send-keys and the screen read back with capture-pane, as a person
would see it (hack/install-tmux.sh installs tmux; `make test` runs it)."""
from __future__ import annotations

import shutil
import subprocess
import time
import uuid
from collections.abc import Mapping
from pathlib import Path


class Terminal:
    def __init__(self, work: Path, env: Mapping[str, str], width: int = 80,
                 height: int = 50) -> None:
        tmux = shutil.which("tmux")
        assert tmux, "tmux is not on PATH: make tmux (hack/install-tmux.sh) installs it"
        self.tmux = tmux
        self.socket = str(work / f"tmux-{uuid.uuid4().hex[:8]}.sock")
        self.width, self.height = width, height
        self.count = 0
        # The environment on the shell's command line: tmux's own (-e, the global one)
        # does not reach a session's first process on every tmux version.
        self._run("new-session", "-d", "-s", "etj", "-x", str(width), "-y", str(height),
                  "env", *[f"{k}={v}" for k, v in env.items()], "PS1=$ ", "bash",
                  "--noprofile", "--norc")
        self._run("set-option", "-t", "etj", "history-limit", "5000")

    def _run(self, *args: str) -> str:
        done = subprocess.run([self.tmux, "-S", self.socket, *args], capture_output=True,
                              text=True, timeout=30, check=True)
        return done.stdout

    def screen(self, joined: bool = True) -> list[str]:
        """Every line of the pane and its history; `joined`: a line the terminal wrapped is
        one line again (so a line wider than the terminal shows as such)."""
        out = self._run("capture-pane", "-p", "-t", "etj", "-S", "-", *(["-J"] if joined
                                                                       else []))
        return out.rstrip("\n").split("\n")

    def type(self, command: str) -> None:
        self._run("send-keys", "-t", "etj", "-l", command)
        self._run("send-keys", "-t", "etj", "Enter")

    def interrupt(self) -> None:
        self._run("send-keys", "-t", "etj", "C-c")

    def wait_for(self, text: str, timeout: float) -> list[str]:
        """The screen once `text` is on it (TimeoutError with the screen if it is not)."""
        deadline = time.monotonic() + timeout
        while True:
            lines = self.screen()
            if any(text in line for line in lines):
                return lines
            if time.monotonic() > deadline:
                raise TimeoutError(f"{text!r} not on the screen after {timeout} s:\n"
                                   + "\n".join(lines[-self.height:]))
            time.sleep(0.2)

    def run(self, command: str, timeout: float = 60) -> tuple[int, list[str]]:
        """Clear the screen, type `command`, wait until it ends: its exit status and the
        lines it printed (its screen, history included)."""
        self.count += 1
        end, cleared = f"__etj_done_{self.count}__", f"__etj_cleared_{self.count}__"
        # The screen cleared before the command is typed: typed while `clear` still ran
        # (a loaded machine), the tty echoed it ahead of the prompt, as one line wider
        # than the terminal (test-compat, 2026-12-03, under a soak's load).
        self.type(f"clear; echo {_halves(cleared)}")
        self.wait_for(cleared, timeout)
        self._run("clear-history", "-t", "etj")
        self.type(f"{command}; echo {_halves(end)}$?")
        lines = self.wait_for(end, timeout)
        at = max(i for i, line in enumerate(lines) if line.startswith(end))
        first = max((i for i, line in enumerate(lines[:at]) if line.startswith("$ ")
                     and command[:20] in line), default=-1)
        return int(lines[at][len(end):].strip() or -1), lines[first + 1:at]

    def close(self) -> None:
        subprocess.run([self.tmux, "-S", self.socket, "kill-server"], capture_output=True,
                       timeout=30, check=False)


def _halves(mark: str) -> str:
    """`mark` quoted in two halves for echo: the command line typed is not the mark
    itself, so only the echo's output matches it."""
    return f"\"{mark[:6]}\"'{mark[6:]}'"
