"""Where a thread of this process is: its Python stack (sys._current_frames) as the
progress sidecar reads another process's with py-spy (stacks.ThreadStack, innermost
first), read by the same rules (stack_phases.classify). One way to name a phase and a
frame for the bundled trainer and any other: a device call is named by the call the
trainer made into JAX and the trainer's frame that made it, e.g. "ArrayImpl.__float__,
called from Trainer._finish_pending at loop.py:310".
"""
from __future__ import annotations

import os
import sys
from types import FrameType

from elastic_trainer.stack_phases import Reading, classify
from elastic_trainer.stacks import Frame, ThreadStack


def _short(path: str) -> str:
    """`path` from its package down, as py-spy shortens it (the longest sys.path entry
    that holds it is cut off)."""
    roots = [p.rstrip(os.sep) + os.sep for p in sys.path if p]
    held = [r for r in roots if path.startswith(r)]
    return path[len(max(held, key=len)):] if held else path


def _frame(frame: FrameType) -> Frame:
    code = frame.f_code
    return Frame(name=code.co_qualname, path=code.co_filename,
                 short=_short(code.co_filename), line=frame.f_lineno or 0)


def thread_stack(thread_id: int) -> ThreadStack | None:
    """Thread `thread_id`'s stack now, innermost first (None: no such thread). Whether it
    waits in the kernel is not known from inside: `active` says it may run."""
    current: FrameType | None = sys._current_frames().get(thread_id)
    if current is None:
        return None
    frames = []
    while current is not None:
        frames.append(_frame(current))
        current = current.f_back
    return ThreadStack(thread_id=thread_id, active=True, frames=tuple(frames))


def where(thread_id: int) -> Reading | None:
    """What thread `thread_id` shows now: its phase, its frame in words, whether it waits
    in a device call (None: no such thread)."""
    stack = thread_stack(thread_id)
    return None if stack is None else classify(stack)
