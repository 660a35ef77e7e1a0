"""Pure: a job of many slices in a screen: up to `ROW_PER_SLICE_UP_TO` slices every view
has a row per slice; above, the slices alike (the Ready ones above all) share a line and
the rest are listed, at most `MAX_ROWS` of them."""
from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import TypeVar

# A row per slice while they fit one screen beside the job's own lines (80x24 and more).
ROW_PER_SLICE_UP_TO = 16
MAX_ROWS = ROW_PER_SLICE_UP_TO

T = TypeVar("T")


def grouped(num_slices: int) -> bool:
    """Whether a job of `num_slices` slices is shown grouped."""
    return num_slices > ROW_PER_SLICE_UP_TO


def group_by(items: Iterable[T], key: Callable[[T], Hashable]) -> list[list[T]]:
    """The items with equal keys together, the groups in the order of their first item."""
    out: dict[Hashable, list[T]] = {}
    for item in items:
        out.setdefault(key(item), []).append(item)
    return list(out.values())
