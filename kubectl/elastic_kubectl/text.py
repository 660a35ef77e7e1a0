"""Pure: the small words of the terminal views (ages, durations, rows that fit 80 columns)."""
from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

WIDTH = 80


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 timestamp of the API (naive: UTC), or None."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def duration(seconds: float | None) -> str:
    """`0.4 s`, `9.9 s`, `2m05s`, `3h12m`, `2d4h`; `-` for None."""
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600}h"


def age(at: datetime | None, now: datetime) -> str:
    """How long ago, kubectl's way: `12s`, `3m`, `2h5m`, `4d`."""
    if at is None:
        return "-"
    whole = max(0, int((now - at).total_seconds()))
    if whole < 120:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m"
    if whole < 86400:
        hours, minutes = whole // 3600, whole % 3600 // 60
        return f"{hours}h{minutes}m" if minutes and hours < 10 else f"{hours}h"
    return f"{whole // 86400}d"


def clock(at: datetime | None) -> str:
    """`14:05:31` in UTC (the API's zone, so that it matches `kubectl get events`)."""
    return "-" if at is None else at.astimezone(UTC).strftime("%H:%M:%S")


def stamp(at: datetime | None) -> str | None:
    """RFC 3339 for -o json."""
    return None if at is None else at.astimezone(UTC).isoformat().replace("+00:00", "Z")


_SINCE = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def parse_since(text: str) -> timedelta:
    """`90s`, `5m`, `1h`, `2h30m`, `1d` (kubectl logs --since's words)."""
    match = _SINCE.match(text.strip())
    if not text.strip() or match is None or not any(match.groups()):
        raise ValueError(f"--since {text!r}: use a duration such as 30s, 5m, 1h or 2h30m")
    days, hours, minutes, secs = (int(g or 0) for g in match.groups())
    return timedelta(days=days, hours=hours, minutes=minutes, seconds=secs)


def plural(count: int, noun: str) -> str:
    """`1 step`, `2 steps`."""
    return f"{count} {noun if count == 1 else noun + 's'}"


def wrap(text: str, indent: str = "", first: str | None = None, width: int = WIDTH) -> list[str]:
    """`text` in lines of at most `width`, the first after `first` (default `indent`)."""
    return textwrap.wrap(text, width=width, initial_indent=indent if first is None else first,
                         subsequent_indent=indent, break_long_words=True,
                         break_on_hyphens=False) or [(indent if first is None else first)]


def table(headers: Sequence[str], rows: Sequence[Sequence[str]],
          flexible: int | Sequence[int], width: int = WIDTH,
          keep_end: Sequence[int] = ()) -> list[str]:
    """Left-aligned columns two spaces apart; the `flexible` columns, in their order, are
    cut (with `…`) down to their header's width so that every line fits `width`. A
    column in `keep_end` keeps its end (`…16x16-199`: pool names differ at their end)."""
    cols = len(headers)
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(cols)]
    for i in [flexible] if isinstance(flexible, int) else flexible:
        over = sum(widths) + 2 * (cols - 1) - width
        if over > 0:
            widths[i] = max(len(headers[i]), widths[i] - over)

    def cell(value: str, i: int) -> str:
        value = str(value)
        if len(value) > widths[i]:
            value = "…" + value[len(value) - widths[i] + 1:] if i in keep_end \
                else value[: widths[i] - 1] + "…"
        return value.ljust(widths[i])

    return ["  ".join(cell(r[i], i) for i in range(cols)).rstrip() for r in [headers, *rows]]


# What a terminal acts on rather than shows: C0 and C1 controls and DEL (escape
# sequences: colours, cursor moves, a title, OSC 52 writing the clipboard) and the
# bidirectional overrides (text shown in another order than it reads). Trainer-written
# strings (status.training, Events) reach the view unfiltered (docs/threat-model.md).
_UNSHOWN = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(line: str) -> str:
    """`line` with every control character shown as `?` (a tab as a space; a newline
    too: a string must not make lines of its own)."""
    return _UNSHOWN.sub("?", line.replace("\t", " "))


def field_of(obj: Any, key: str) -> dict[str, Any]:
    """obj[key] if both are JSON objects, else {} (what the API returns is untrusted)."""
    value = obj.get(key) if isinstance(obj, dict) else None
    return value if isinstance(value, dict) else {}
