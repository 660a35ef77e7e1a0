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


def plural(count: int, noun: str, plural_form: str | None = None) -> str:
    """`1 step`, `2 steps`, `0 steps`."""
    return f"{count} {noun if count == 1 else plural_form or noun + 's'}"

