"""The one status write of a reconcile: a merge patch that never touches status.training,
conditional on the job's resourceVersion (a job changed meanwhile is refused, 409, and
computed again: a change is never applied twice), carrying the change's Events in its
outbox (outbox.py) and SchemaCurrent as the served CRD says (schema_guard.py), a
progress-only change paced (pacer.py), and known as our own when it comes back through
the job cache (own_writes.py). The metrics of the change are
recorded right after it, before any of its Events is posted.
"""
from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from elastic_api.clock import Clock
from elastic_api.models import ElasticTrainingJobStatus, PendingEvent
from elastic_operator.client.kube import Kube
from elastic_operator.core.pacing import progress_only, settled
from elastic_operator.core.parsing import parse_status
from elastic_operator.core.patch import status_patch
from elastic_operator.core.status import invalid_spec_status
from elastic_operator.core.status_events import StatusEvent
from elastic_operator.metrics.metrics import OperatorMetrics
from elastic_operator.model.result import FollowUp
from elastic_operator.reconcile.own_writes import OwnWrites
from elastic_operator.reconcile.pacer import ProgressPacer
from elastic_operator.reconcile.schema_guard import SchemaGuard
from elastic_operator.writes.outbox import EventOutbox

logger = logging.getLogger("elastic_operator")


class StatusWriter:
    def __init__(self, kube: Kube, metrics: OperatorMetrics, clock: Clock, *,
                 outbox: EventOutbox, own_writes: OwnWrites, pacer: ProgressPacer,
                 schema: SchemaGuard) -> None:
        self.kube = kube
        self.metrics = metrics
        self.clock = clock
        self.outbox = outbox
        self.own_writes = own_writes
        self.pacer = pacer
        self.schema = schema  # SchemaCurrent, on every write

    def write(self, raw: dict[str, Any], previous: ElasticTrainingJobStatus,
              new: ElasticTrainingJobStatus, events: list[StatusEvent], now: datetime,
              later: list[FollowUp]) -> tuple[list[PendingEvent], float | None]:
        """Write the status with the change's Events in its outbox and record the
        metrics: the outbox written (for `EventOutbox.post` after), and how long a
        progress-only change waits instead (None: written, or nothing to write).
        `later`: the reconcile's follow-ups (the stored outbox's posts go there)."""
        meta = raw.get("metadata", {})
        with self.own_writes.writing(meta.get("namespace", ""), meta.get("name", "")):
            return self._write(raw, previous, new, events, now, later)

    def _write(self, raw: dict[str, Any], previous: ElasticTrainingJobStatus,
               new: ElasticTrainingJobStatus, events: list[StatusEvent], now: datetime,
               later: list[FollowUp]) -> tuple[list[PendingEvent], float | None]:
        meta = raw.get("metadata", {})
        namespace, name = meta.get("namespace", ""), meta.get("name", "")
        key = (namespace, name)
        stored = previous.pending_events or []
        new = self.schema.stamp(raw, previous, new, now)
        # Committed by an earlier write (ours, or of a replica that died after it). One not
        # posted yet (on its way, or refused for now: 429, 5xx) stays in the outbox.
        self.outbox.post(raw, stored, now, later)
        pending = self.outbox.merge(raw, stored, events, new)
        new = new.model_copy(update={"pending_events": pending or None})
        patch = status_patch(previous, new)
        progress = patch is not None and progress_only(previous, new)
        wait = self.pacer.wait(key) if progress else None
        if wait is not None:
            return pending, wait  # none: a progress-only change carries no Events
        written_at = self.clock.now().timestamp()
        if patch is not None:
            # Conditional on the version read: ApiError 409 if the job changed meanwhile
            # (then nothing of this change is posted: it is computed again).
            self.own_writes.meant(key, None)  # until the write's outcome is known
            written = self.kube.patch_job_status(namespace, name, patch,
                                                 meta.get("resourceVersion"))
            self.own_writes.remember(key, meta.get("resourceVersion"), written)
            self.own_writes.meant(key, new)
            self.pacer.wrote(key, progress=progress, settled=settled(new))
            self.metrics.status_writes.labels("progress" if progress else "change").inc()
            written_at = self.clock.now().timestamp()
        self.outbox.written(raw, pending)
        # Metrics before the Events: whoever sees an Event finds its metrics recorded.
        self.metrics.record_status(namespace, name, previous, new)
        self.metrics.record_events(namespace, events, written_at)
        self.metrics.record_decisions(namespace, name, events)
        return pending, None

    def report_invalid_spec(self, raw: dict[str, Any], message: str) -> None:
        """The spec cannot run (InvalidSpec): said once (a resync repeats no warning)."""
        meta = raw.get("metadata", {})
        raw_status = raw.get("status")
        previous, _ = parse_status(raw_status if isinstance(raw_status, dict) else {})
        now = self.clock.now()
        new = self.schema.stamp(raw, previous, invalid_spec_status(
            previous, message, now, meta.get("generation")), now)
        patch = status_patch(previous, new)
        if patch is None:  # already reported: a resync must not repeat the warning
            logger.debug("%s/%s: invalid spec: %s", meta.get("namespace"), meta.get("name"),
                         message)
            return
        self.own_writes.meant((meta.get("namespace", ""), meta.get("name", "")), None)
        self.kube.patch_job_status(meta.get("namespace", ""), meta.get("name", ""), patch,
                                   meta.get("resourceVersion"))
        logger.warning("%s/%s: invalid spec: %s", meta.get("namespace"), meta.get("name"),
                       message)
