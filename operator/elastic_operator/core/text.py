"""Small wording helpers shared by the messages of conditions and Events."""
from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime


def fmt_slices(indices: Iterable[int]) -> str:
    """`slice 2` or `slices 0, 2`."""
    items = sorted(indices)
    noun = "slice" if len(items) == 1 else "slices"
    return f"{noun} {', '.join(str(i) for i in items)}"


def iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")
