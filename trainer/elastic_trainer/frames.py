"""Where a thread is, read from its Python stack (sys._current_frames): the call it is in
and who called it, e.g. "block_until_ready, called from train_step at train.py:412".

A thread whose innermost frames are JAX's (jax, jaxlib) waits in the runtime: a device
call (reading a result, block_until_ready, a transfer, a collective behind them), unless
one of those frames compiles (a compile is no wait on the device). Named by the call the
trainer made into JAX (the outermost of those frames) and the trainer's frame that made it.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from types import FrameType

# Packages whose frames are the runtime's, not the trainer's.
RUNTIME_PACKAGES = ("jax", "jaxlib")
# JAX's frames that only wrap the call the trainer made (a jitted function's), skipped
# when naming it.
WRAPPERS = frozenset({"reraise_with_filtered_traceback", "wrapper", "cache_miss"})


@dataclass(frozen=True)
class Where:
    call: str  # the function the thread is in (for a device call: the one JAX was called at)
    caller: str | None  # "train_step at train.py:412": the frame that called it
    device_call: bool

    def describe(self) -> str:
        return self.call if self.caller is None else f"{self.call}, called from {self.caller}"


def _roots() -> tuple[str, ...]:
    roots = []
    for name in RUNTIME_PACKAGES:
        module = sys.modules.get(name)
        path = getattr(module, "__file__", None)
        if path:
            roots.append(os.path.dirname(path) + os.sep)
    return tuple(roots)


def _at(frame: FrameType) -> str:
    code = frame.f_code
    return f"{code.co_name} at {os.path.basename(code.co_filename)}:{frame.f_lineno}"


def where(thread_id: int) -> Where | None:
    """Where thread `thread_id` is now (None: no such thread)."""
    frame = sys._current_frames().get(thread_id)
    if frame is None:
        return None
    roots = _roots()
    runtime: list[FrameType] = []  # the innermost run of runtime frames, innermost first
    current: FrameType | None = frame
    while current is not None and current.f_code.co_filename.startswith(roots or ("\0",)):
        runtime.append(current)
        current = current.f_back
    if not runtime:
        return Where(_at(frame), None if frame.f_back is None else _at(frame.f_back), False)
    compiling = any("compile" in f.f_code.co_name for f in runtime)
    named = [f.f_code.co_name for f in reversed(runtime) if f.f_code.co_name not in WRAPPERS]
    return Where(named[0] if named else runtime[-1].f_code.co_name,
                 None if current is None else _at(current), not compiling)
