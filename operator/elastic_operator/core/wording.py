"""Small wording helpers shared by the messages of conditions and Events."""
from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from elastic_api.indices import ranges


def fmt_slices(indices: Iterable[int]) -> str:
    """`slice 2`, `slices 0, 2` or `slices 0-195, 197` (a run of three or more by its
    ends: a job of 199 slices down is `slices 0-198`)."""
    items = sorted(indices)
    return f"{'slice' if len(items) == 1 else 'slices'} {ranges(items)}"


def first_of(said: list[str], most: int, rest: str) -> str:
    """`a; b; and 3 more <rest>`: the first `most` things said, then how many more (a
    message of a job of many slices, or of a slice of many hosts, stays short)."""
    if len(said) <= most:
        return "; ".join(said)
    return "; ".join(said[:most]) + f"; and {len(said) - most} more {rest}"


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
