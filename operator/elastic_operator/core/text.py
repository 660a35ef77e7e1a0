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



def duration(seconds: float) -> str:
    """`20 s`, `5 min`, `90 min`, `2 h`: whole units, rounded."""
    if seconds < 120:
        return f"{max(0, round(seconds))} s"
    if seconds < 3 * 3600 and round(seconds / 60) * 60 != 3600 * round(seconds / 3600):
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.3g} h"
