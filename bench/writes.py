"""What each status write of a job changed, as the benchmark's own job watch sees it: one
watch event per write, each diffed against the version before it. The operator's metric
says how many writes it made and whether it paced them; this says what they carried, so a
figure like "9 writes per slice event" can be traced to the fields behind it.

A write's labels: a top-level status field ("counters", "phase", "pendingEvents", ...),
"slices.FIELD" for a field of any slice, "conditions.TYPE.FIELD" for a condition's.
A write is "readyHosts only" when it changed nothing but ready-host counts and the
messages quoting them (core/pacing.py's progress), and the outbox only shrinking.
"""
from __future__ import annotations

from collections import Counter
from typing import Any

PROGRESS = frozenset({"slices.readyHosts", "slices.message"})
FIRST_KEPT = 16


def changed(before: dict[str, Any], after: dict[str, Any]) -> set[str]:
    """The labels of what differs between two statuses (wire dicts)."""
    out: set[str] = set()
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key), after.get(key)
        if old == new:
            continue
        if key == "slices":
            out |= _by_item(old, new, "index", "slices", with_id=False)
        elif key == "conditions":
            out |= _by_item(old, new, "type", "conditions", with_id=True)
        elif key == "pendingEvents" and _names(new) < _names(old):
            out.add("pendingEvents.cleared")
        else:
            out.add(key)
    return out


def _names(entries: Any) -> set[str]:
    return {str(e.get("name")) for e in entries or [] if isinstance(e, dict)}


def _by_item(old: Any, new: Any, key: str, prefix: str, with_id: bool) -> set[str]:
    olds = {i.get(key): i for i in old or [] if isinstance(i, dict)}
    news = {i.get(key): i for i in new or [] if isinstance(i, dict)}
    out: set[str] = set()
    for ident in set(olds) | set(news):
        a, b = olds.get(ident), news.get(ident)
        head = f"{prefix}.{ident}" if with_id else prefix
        if a is None or b is None:
            out.add(f"{head}.added" if a is None else f"{head}.removed")
            continue
        out |= {f"{head}.{f}" for f in set(a) | set(b) if a.get(f) != b.get(f)}
    return out


def slice_transitions(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """Each slice whose state or reason changed: 'STATE/REASON -> STATE/REASON'."""
    olds = {s.get("index"): s for s in before.get("slices") or [] if isinstance(s, dict)}
    out = []
    for new in after.get("slices") or []:
        old = olds.get(new.get("index"))
        if isinstance(old, dict) and (old.get("state"), old.get("reason")) != (
                new.get("state"), new.get("reason")):
            out.append(f"{old.get('state')}/{old.get('reason')} -> "
                       f"{new.get('state')}/{new.get('reason')}")
    return out


def progress_only(labels: set[str]) -> bool:
    """Only ready hosts and the messages quoting them (and an outbox only shrinking)."""
    rest = {label for label in labels if label not in PROGRESS
            and label != "pendingEvents.cleared" and not label.endswith(".message")}
    return bool(labels) and not rest


class WriteLog:
    """Per job, the previous status seen and every write's labels with its time."""

    def __init__(self) -> None:
        self.last: dict[str, dict[str, Any]] = {}
        self.writes: list[tuple[float, set[str]]] = []
        self.transitions: list[tuple[float, str]] = []  # "Down/PodFailed -> Restarting/..."

    def see(self, job: str, status: dict[str, Any], at: float) -> None:
        before = self.last.get(job)
        self.last[job] = status
        if before is not None and before != status:
            self.writes.append((at, changed(before, status)))
            self.transitions += [(at, t) for t in slice_transitions(before, status)]

    def summary(self, start: float, end: float, events: int) -> dict[str, Any]:
        """Writes in [start, end] per slice event: in all, readyHosts only, and how many
        carried each label (a write counts once per label it carries)."""
        inside = [labels for at, labels in self.writes if start <= at <= end]
        per = max(1, events)
        labels = Counter(label for ls in inside for label in ls)
        return {
            "writes": len(inside),
            "per_slice_event": round(len(inside) / per, 2),
            "ready_hosts_only_per_slice_event": round(
                sum(1 for ls in inside if progress_only(ls)) / per, 2),
            "others_per_slice_event": round(
                sum(1 for ls in inside if not progress_only(ls)) / per, 2),
            "by_label_per_slice_event": {k: round(v / per, 2)
                                         for k, v in labels.most_common()},
            "slice_transitions_per_slice_event": {
                k: round(v / per, 2) for k, v in Counter(
                    t for at, t in self.transitions if start <= at <= end).most_common()},
            # The first few, in order: what one slice event's writes look like.
            "first": [sorted(ls) for ls in inside[:FIRST_KEPT]],
        }
