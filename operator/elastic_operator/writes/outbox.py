"""The Event outbox: a status change's Events go into the status write itself
(status.pendingEvents), and are posted after it, under names that make a second copy a
no-op (core/status_events.py).

One reconcile that dies after the write leaves the Events to the next, its own or a new
leader's, which posts what it has not posted itself (a second copy is refused: 409). Each
write keeps in the outbox every entry not yet posted (one still on its way, or refused by
the API server for now) and clears the rest, whichever change it carries: at most one
more write per change with Events, usually none. The posts are follow-ups
(model/result.py `FollowUp`): they come back in the reconcile's Result and the work
queue's worker runs them after it, in order.
"""
from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from elastic_api.models import ElasticTrainingJobStatus, PendingEvent
from elastic_api.models.status import MAX_PENDING_EVENTS
from elastic_operator.client.kube import ApiError, Kube, NotLeading
from elastic_operator.core.status_events import StatusEvent, from_outbox, outbox
from elastic_operator.metrics.metrics import OperatorMetrics
from elastic_operator.model.job_memory import JobKey, JobMemories, JobMemory
from elastic_operator.model.result import FollowUp, Result

logger = logging.getLogger("elastic_operator")


def _key(raw: dict[str, Any]) -> JobKey:
    meta = raw.get("metadata", {})
    return meta.get("namespace", ""), meta.get("name", "")


class EventOutbox:
    def __init__(self, kube: Kube, metrics: OperatorMetrics, memory: JobMemories) -> None:
        self.kube = kube
        self.metrics = metrics
        self.memory = memory

    def merge(self, raw: dict[str, Any], stored: list[PendingEvent],
              events: list[StatusEvent], new: ElasticTrainingJobStatus) -> list[PendingEvent]:
        """The outbox the next write carries: the entries of the stored one this process
        has not posted (committed by an earlier write, ours or a replica's that died after
        it), then this change's Events."""
        meta = raw.get("metadata", {})
        remembered = self.memory.of(_key(raw))
        with self.memory.lock:
            posted_before = set(remembered.posted)
        pending = outbox(meta.get("name", ""), meta.get("uid") or "", events, new)
        fresh = {e.name for e in pending}
        kept = [*(e for e in stored if e.name not in posted_before | fresh), *pending]
        # Within the schema's bound: the oldest unposted go (the status is the record).
        return kept[-MAX_PENDING_EVENTS:]

    def written(self, raw: dict[str, Any], pending: list[PendingEvent]) -> None:
        """The status holds this outbox now: what was posted of the one it replaced no
        longer matters."""
        remembered = self.memory.of(_key(raw))
        with self.memory.lock:
            remembered.posted &= {e.name for e in pending}

    def post(self, raw: dict[str, Any], entries: list[PendingEvent], now: datetime,
             later: list[FollowUp]) -> None:
        """Add to `later` (the reconcile's follow-ups) the posts of the outbox entries
        this process has neither posted nor handed over yet. One that fails is tried
        again by the next reconcile, which finds it still in the status."""
        key = _key(raw)
        remembered = self.memory.of(key)
        with self.memory.lock:
            todo = [e for e in entries if e.name not in remembered.posted
                    and e.name not in remembered.posting]
            remembered.posting.update(e.name for e in todo)
        if todo:
            later.append(lambda: self._post_now(raw, remembered, todo, now))

    def _post_now(self, raw: dict[str, Any], remembered: JobMemory, entries: list[PendingEvent],
                  now: datetime) -> Result:
        """The posts (best effort, the status is the record): nothing to look at again."""
        namespace, name = _key(raw)
        try:
            for entry in entries:
                try:
                    created: bool | None = self.kube.post_event(raw, from_outbox(entry), now,
                                                                entry.name)
                except ApiError as e:  # best effort: the status is the record
                    logger.warning("could not post event %s on %s/%s: %s", entry.reason,
                                   namespace, name, e)
                    if e.status == 429 or e.status >= 500:
                        continue  # refused for now: it stays in the outbox, tried again
                    created = None  # refused for good: it leaves the outbox
                with self.memory.lock:  # (the job's memory, even if forgotten meanwhile)
                    remembered.posted.add(entry.name)
                if created is None:
                    continue
                if created:
                    logger.info("%s/%s: %s: %s", namespace, name, entry.reason, entry.message)
                else:
                    self.metrics.duplicate_events.inc()
                    logger.info("%s/%s: %s: posted already", namespace, name, entry.reason)
        except NotLeading as e:  # the new leader posts what is left of the outbox
            logger.warning("posting the events of %s/%s stopped: %s", namespace, name, e)
        finally:
            with self.memory.lock:
                remembered.posting.difference_update(e.name for e in entries)
        return Result()
