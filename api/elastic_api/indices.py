"""Slice (or host) indices as a person reads them: the operator's messages and `kubectl
etj` name many slices the same way, so a job of 199 slices reads alike in both."""
from __future__ import annotations

from collections.abc import Iterable


def ranges(indices: Iterable[int]) -> str:
    """`0-41, 43, 45, 46, 48-197`: sorted, a run of three or more as its ends."""
    items = sorted(set(indices))
    parts: list[str] = []
    start = 0
    for i in range(1, len(items) + 1):
        if i < len(items) and items[i] == items[i - 1] + 1:
            continue
        run = items[start:i]
        parts += [f"{run[0]}-{run[-1]}"] if len(run) >= 3 else [str(v) for v in run]
        start = i
    return ", ".join(parts)
