"""Wake a file's follower as soon as the file changes (Linux inotify, through libc),
else after a short poll interval where inotify is not there.

MaxText truncates its metrics file at every evaluation's first line, one evaluation step
after writing the last train line: a follower that reads only every second loses the
train lines written in that window. Woken by the write itself, it reads each line
within a millisecond or so of its writing.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import select
import struct
import time
from pathlib import Path
from typing import Final

IN_MODIFY, IN_CLOSE_WRITE, IN_MOVED_FROM = 0x002, 0x008, 0x040
IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x080, 0x100, 0x200
IN_NONBLOCK, IN_CLOEXEC = 0o4000, 0o2000000
EVENTS: Final = IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
EVENT_HEADER: Final = struct.Struct("iIII")  # wd, mask, cookie, len (inotify(7))
# Without inotify: how often the follower looks anyway.
FALLBACK_POLL_SECONDS: Final = 0.05


class FileWatch:
    """`wait(timeout)` returns when `path` was written, created, moved or removed, or
    after `timeout` (at most FALLBACK_POLL_SECONDS where inotify is unavailable)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._fd: int | None = None
        self.why_not = ""  # why inotify is not used ("" when it is)
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
            fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
            if fd < 0:
                raise OSError(ctypes.get_errno(), "inotify_init1")
            if libc.inotify_add_watch(fd, str(self.path.parent).encode(), EVENTS) < 0:
                err = ctypes.get_errno()
                os.close(fd)
                raise OSError(err, f"inotify_add_watch {self.path.parent}")
            self._fd = fd
        except (OSError, AttributeError) as err:
            self.why_not = str(err) or type(err).__name__

    def wait(self, timeout: float) -> bool:
        """True when the file changed (as far as inotify tells)."""
        if self._fd is None:
            time.sleep(max(0.0, min(timeout, FALLBACK_POLL_SECONDS)))
            return True
        ready, _, _ = select.select([self._fd], [], [], max(0.0, timeout))
        return bool(ready) and self._drain()

    def _drain(self) -> bool:
        """Read the pending events; whether one is about our file."""
        assert self._fd is not None
        name = self.path.name.encode()
        ours = False
        try:
            data = os.read(self._fd, 64 * 1024)
        except BlockingIOError:
            return False
        pos = 0
        while pos + EVENT_HEADER.size <= len(data):
            _, _, _, length = EVENT_HEADER.unpack_from(data, pos)
            pos += EVENT_HEADER.size
            ours = ours or data[pos:pos + length].rstrip(b"\0") == name
            pos += length
        return ours

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
