"""Which status writes may wait: a change that only moves progress is coalesced (the
reconciler writes at most one per interval per job); every other change is written at
once. Pure.

Progress is what changes host by host while nothing happens that anyone acts on: a
slice's `readyHosts` and its message ("37/64 hosts ready" while Restarting or Pending;
the list of hosts going while a Down slice's Job is torn down), and a condition's
message that quotes them (SliceDown lists each down slice's message). Without pacing, a
slice of 64 hosts coming back costs up to 64 status writes, and at 64 slices x 64 hosts
a status write is the biggest request a reconcile makes.

So is the outbox shrinking (status.pendingEvents: entries dropped once posted, none
added): the Events went out already, and an entry left a second longer costs at most a
second copy refused (409) should another replica take over meanwhile. With the posts run
after the reconcile (its Result's follow-ups), a job reconciled back to back otherwise wrote its
status once more per change with Events, just to clear them.

How often: the first progress write of a recovery may follow the last write after one
interval, each next one after twice as long as the one before, up to `PROGRESS_CAP_S`
(1, 2, 4, 8, 16, 30, 30 ... s with the default interval), until every slice is Ready
again (`settled`), when it starts over. At a fixed one per second, the progress writes
of a recovery grew with its length, not with what happened: on a large job whose pods
came back slowly they outnumbered the transitions themselves (docs/benchmarks.md).
Backing off bounds them to about log2(cap) plus one per cap over a recovery of any
length, while a short one (most of them) still shows its hosts coming back second by
second. The transitions (below) are never held back, and each carries the latest counts.

Everything else matters at once, and is compared here: a slice's state, reason,
restarts, moves, transition time, pool and records (replacement, lastReplacement,
maintenance); a condition's type, status, reason, transition time and generation
(Kubernetes conventions: the message is detail for people); counters, the phase,
slicesReady, lastRecovery, the checkpoint, pools, goodput, the checkpoint request, and
an Event added to the outbox (a change with Events).
"""
from __future__ import annotations

from typing import Any

from elastic_api.models import ElasticTrainingJobStatus
from elastic_operator.core.patch import operator_wire

# The longest a progress-only write waits after the job's last write (above).
PROGRESS_CAP_S = 30.0

# Per slice and per condition: the fields that are progress, not transitions.
SLICE_PROGRESS = frozenset({"readyHosts", "message"})
CONDITION_PROGRESS = frozenset({"message"})


def progress_only(previous: ElasticTrainingJobStatus, new: ElasticTrainingJobStatus) -> bool:
    """True when `new` differs from `previous` only in progress (above): its write may
    wait. False when they are equal (nothing to write) or anything else changed."""
    before, after = operator_wire(previous), operator_wire(new)
    if before == after:
        return False
    if _outbox_names(after) <= _outbox_names(before):  # posted ones dropped, none added
        before, after = _without_outbox(before), _without_outbox(after)
    return _without_progress(before) == _without_progress(after)


def _outbox_names(wire: dict[str, Any]) -> set[str]:
    return {str(e.get("name")) for e in wire.get("pendingEvents") or []
            if isinstance(e, dict)}


def _without_outbox(wire: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in wire.items() if k != "pendingEvents"}


def _without_progress(wire: dict[str, Any]) -> dict[str, Any]:
    out = dict(wire)
    out["slices"] = [_drop(s, SLICE_PROGRESS) for s in wire.get("slices") or []]
    out["conditions"] = [_drop(c, CONDITION_PROGRESS) for c in wire.get("conditions") or []]
    return out


def _drop(item: Any, keys: frozenset[str]) -> Any:
    return {k: v for k, v in item.items() if k not in keys} if isinstance(item, dict) else item


def progress_interval(base_s: float, streak: int) -> float:
    """How long after the job's last write its next progress-only write may go, the
    `streak`-th of this recovery (0: the first): `base_s` doubled per write before it,
    at most PROGRESS_CAP_S (never under `base_s`)."""
    return max(base_s, min(PROGRESS_CAP_S, base_s * 2.0 ** min(streak, 32)))


def settled(status: ElasticTrainingJobStatus) -> bool:
    """No recovery under way: every slice Ready (the next one's progress starts over at
    the base interval)."""
    return bool(status.slices) and all(s.state == "Ready" for s in status.slices or [])
