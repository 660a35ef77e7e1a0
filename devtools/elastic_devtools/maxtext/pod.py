"""A head pod's shared process namespace on this machine, for the scenario of `etj maxtext
e2e`: the renderer gives the head pod `shareProcessNamespace` when it has the progress
sidecar, so that the sidecar sees `main`'s processes and no others.

`PodProcesses` starts a process namespace of its own whose PID 1 stands for the pod's
pause process (`unshare --pid --fork --mount-proc`, root only), and `enter(argv)` is the
command that runs argv inside it: MaxText (through its root, whose /proc is then this
namespace's) and the sidecar, as `main` and `progress` are. `kill()` ends every process
in it at once (its PID 1 going, the kernel kills the rest), as a kubelet ends a deleted
pod's containers.

`enter` is `python .../pod.py PID -- argv` (this file; stdlib only, whatever the
environment), not nsenter: nsenter
waits for its child with WUNTRACED and, when the child stops, stops itself and
continues the child once it is continued, which a scenario that stops MaxText (SIGSTOP
to its process group) and continues it cannot have. This one joins the namespaces,
forks the command, passes it SIGTERM and SIGINT, and exits as it exits.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

CLONE_NEWNS, CLONE_NEWPID = 0x00020000, 0x20000000


class PodProcesses:
    def __init__(self) -> None:
        self._holder: subprocess.Popen[bytes] | None = None
        self.init_pid: int | None = None  # PID 1 inside, as this machine numbers it

    def __enter__(self) -> PodProcesses:
        return self.start()

    def start(self) -> PodProcesses:
        self._holder = subprocess.Popen(
            ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", "--",
             "sleep", "infinity"], stdin=subprocess.DEVNULL, start_new_session=True)
        children = Path(f"/proc/{self._holder.pid}/task/{self._holder.pid}/children")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            text = children.read_text().split() if children.exists() else []
            if text:
                self.init_pid = int(text[0])
                return self
            time.sleep(0.02)
        self.kill()
        raise RuntimeError("the pod's process namespace did not start (unshare --pid)")

    def enter(self, argv: list[str]) -> list[str]:
        """`argv`, run in the pod's process (and mount) namespace."""
        if self.init_pid is None:
            raise RuntimeError("the pod's process namespace is not running")
        return [sys.executable, __file__, str(self.init_pid), "--", *argv]

    def kill(self) -> None:
        """Every process of the pod, at once (SIGKILL)."""
        if self.init_pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.init_pid, signal.SIGKILL)
        if self._holder is not None and self._holder.poll() is None:
            self._holder.kill()
        if self._holder is not None:
            self._holder.wait(timeout=30)
        self.init_pid = None

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.kill()


def _join(init_pid: int) -> None:
    """This process's children in init_pid's process namespace, and it in its mounts."""
    libc = ctypes.CDLL(None, use_errno=True)
    for name, flag in (("pid", CLONE_NEWPID), ("mnt", CLONE_NEWNS)):
        fd = os.open(f"/proc/{init_pid}/ns/{name}", os.O_RDONLY)
        try:
            if libc.setns(fd, flag) != 0:
                raise OSError(ctypes.get_errno(), f"setns {name} of pid {init_pid}")
        finally:
            os.close(fd)


def main(args: list[str]) -> int:
    init_pid, sep, *argv = args
    if sep != "--" or not argv:
        print("usage: python pod.py PID -- COMMAND...",
              file=sys.stderr)
        return 2
    _join(int(init_pid))
    child = os.fork()
    if child == 0:
        try:
            os.execvp(argv[0], argv)
        finally:
            os._exit(127)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, _: os.kill(child, signum))
    _, status = os.waitpid(child, 0)
    if os.WIFSIGNALED(status):  # end as it ended
        signum = os.WTERMSIG(status)
        if signum not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
