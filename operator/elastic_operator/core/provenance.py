"""Whether the operator's records read back from a job's status are its own (issue 78).

The operator keeps its state in the status it writes (replacement records, pool failures,
the Event outbox, restart counts) and reads it back. The chart's status policy lets no
one else write it (docs/threat-model.md, "Status writers"); this is the defence on a
cluster without that policy. A record the operator cannot have written is not acted on:

- with its memory (the status this process last wrote of the job, while it leads and
  since a write whose outcome it knows), every field but `training` must read back as it
  was written; one that does not is taken from that memory;
- without it (a restart, a new leader), only what it can check alone: no pool failure
  dated after `now` (it dates its own by its clock; CLOCK_SKEW allows a replica's), and
  no outbox entry of a reason it never posts.

Pure: the caller says what was found, once (reconcile/reconciler.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from elastic_api.conditions import Reason
from elastic_api.models import ElasticTrainingJobStatus

# How far a replica's clock may run ahead of this one's: a failure dated later is forged.
CLOCK_SKEW = timedelta(seconds=60)
_OWN_REASONS = frozenset(v for k, v in vars(Reason).items()
                         if k.isupper() and isinstance(v, str))
_OPERATORS = tuple(name for name in ElasticTrainingJobStatus.model_fields
                   if name != "training")


@dataclass(frozen=True)
class Vetted:
    """The status to act on, and the fields (as status spells them) found not ours."""

    status: ElasticTrainingJobStatus
    foreign: tuple[str, ...] = ()


def _alias(name: str) -> str:
    return ElasticTrainingJobStatus.model_fields[name].alias or name


def vet_status(read: ElasticTrainingJobStatus, own: ElasticTrainingJobStatus | None,
               now: datetime) -> Vetted:
    """`read` with what the operator cannot have written replaced by what it did write
    (`own`, this process's memory; None: none) or dropped."""
    update: dict[str, object] = {}
    foreign: list[str] = []
    if own is not None:
        for name in _OPERATORS:
            if getattr(read, name) != getattr(own, name):
                update[name] = getattr(own, name)
                foreign.append(_alias(name))
        read = read.model_copy(update=update)
        update = {}
    latest = now + CLOCK_SKEW
    pools = [p.model_copy(update={"failures": [f for f in p.failures if f.at <= latest]})
             for p in read.pools]
    if pools != read.pools:
        update["pools"] = pools
    events = read.pending_events
    if events and any(e.reason not in _OWN_REASONS for e in events):
        update["pending_events"] = [e for e in events if e.reason in _OWN_REASONS] or None
    foreign += [_alias(name) for name in update if _alias(name) not in foreign]
    return Vetted(read.model_copy(update=update) if update else read, tuple(foreign))
