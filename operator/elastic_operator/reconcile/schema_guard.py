"""What a reconcile does with the verdict on the served CRD (core/schema.py,
schema_watch.py), read at each pass.

Refused (an older CRD that lacks status fields the operator writes: the API server
would drop them from every write): the pass stops right after reading the job. It
creates, deletes and replaces nothing, so a running JobSet and its trainer go on under
their own controllers and a new job waits; and it writes one thing, the SchemaCurrent
condition naming the fix, by a merge patch of status.conditions alone (a field of every
schema) that keeps every other condition as stored. It posts a Warning Event once per
job, directly, under a name that makes a second copy a no-op (not through the status
outbox, which an old schema may prune). When the CRD is upgraded the watch names every
job again, and the next pass serves it.

What the older CRD lacks of a status stored before it was applied, the API server hides
at once (it prunes on read too) and drops at the job's next status write by anyone, the
trainer's reports included; refusing keeps everything the operator would write from then
on, and says so where it is seen.

Otherwise every status write carries SchemaCurrent as the verdict says (`stamp`).
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from elastic_api.clock import Clock
from elastic_api.conditions import ConditionType
from elastic_api.models import ElasticTrainingJobStatus
from elastic_operator.client.kube import ApiError, Kube
from elastic_operator.core.parsing import parse_status
from elastic_operator.core.schema import CURRENT, SchemaVerdict, own_schema, refusal_event
from elastic_operator.core.schema import with_schema_condition as with_condition
from elastic_operator.model.job_memory import JobMemories
from elastic_operator.model.result import Result
from elastic_operator.reconcile.own_writes import OwnWrites

logger = logging.getLogger("elastic_operator")
Verdict = Callable[[], SchemaVerdict]  # SchemaWatch.verdict, read at each pass


def always_current() -> SchemaVerdict:
    """The verdict where nothing watches the CRD (tests): the operator's own schema."""
    return SchemaVerdict(CURRENT, own_schema().revision, own_schema().revision)


class SchemaGuard:
    def __init__(self, kube: Kube, clock: Clock, memory: JobMemories,
                 own_writes: OwnWrites, verdict: Verdict = always_current) -> None:
        self.kube = kube
        self.clock = clock
        self.memory = memory
        self.own_writes = own_writes
        self.verdict = verdict

    def stamp(self, raw: dict[str, Any], previous: ElasticTrainingJobStatus,
              new: ElasticTrainingJobStatus, now: datetime) -> ElasticTrainingJobStatus:
        """`new` (about to be written) with SchemaCurrent as the verdict says."""
        generation = (raw.get("metadata") or {}).get("generation")
        conditions = with_condition(new.conditions, previous.conditions, self.verdict(),
                                    now, generation)
        return new if conditions == new.conditions else new.model_copy(
            update={"conditions": conditions})

    def refuse(self, raw: dict[str, Any], verdict: SchemaVerdict) -> Result:
        """The refused pass: SchemaCurrent written, its Event posted once; nothing else."""
        meta = raw.get("metadata") or {}
        namespace, name = meta.get("namespace", ""), meta.get("name", "")
        stored = raw.get("status") if isinstance(raw.get("status"), dict) else {}
        previous, _ = parse_status(stored)
        now = self.clock.now()
        (condition,) = with_condition([], previous.conditions, verdict, now,
                                      meta.get("generation"))
        others = [c for c in (stored or {}).get("conditions") or []
                  if not (isinstance(c, dict) and c.get("type") == ConditionType.SCHEMA_CURRENT)]
        if condition not in previous.conditions:
            patch = {"status": {"conditions": [*others, condition.to_wire()]}}
            with self.own_writes.writing(namespace, name):
                self.own_writes.meant((namespace, name), None)  # a part of it only
                written = self.kube.patch_job_status(namespace, name, patch,
                                                     meta.get("resourceVersion"))
                self.own_writes.remember((namespace, name), meta.get("resourceVersion"),
                                         written)
        self._warn_once(raw, verdict)
        return Result()  # the CRD's change names the job again

    def _warn_once(self, raw: dict[str, Any], verdict: SchemaVerdict) -> None:
        meta = raw.get("metadata") or {}
        key = (meta.get("namespace", ""), meta.get("name", ""))
        event_name, event = refusal_event(key[1], meta.get("uid") or "", verdict)
        remembered = self.memory.of(key)
        if remembered.schema_warned == event_name:
            return
        try:
            created = self.kube.post_event(raw, event, self.clock.now(), event_name)
        except ApiError as e:  # the condition is the record; tried again next pass
            logger.warning("could not post event %s on %s/%s: %s", event.reason, *key, e)
            return
        remembered.schema_warned = event_name
        if created:
            logger.warning("%s/%s: %s: %s", *key, event.reason, event.message)
