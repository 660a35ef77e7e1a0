"""What our own status writes will look like when they come back (Kueue's
pkg/util/expectations, for one kind of write).

The job cache delivers each status write we make as a change of the job: at the version
that write produced it is no news (`wrote`: no reconcile for it). Until it has come back,
the cache holds the job as it was before the write, and a write conditional on that older
version would only be refused: the job is read as the write's response left it instead
(`read_job`, no GET), or fresh from the API server. A version someone else wrote while
our write was on its way is news the reconcile returns (`overwritten`: look again at
once), never a call to the work queue.
"""
from __future__ import annotations

import copy
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime
from typing import Any

from elastic_api.models import ElasticTrainingJobStatus
from elastic_operator.core.parsing import ParsedJob
from elastic_operator.core.provenance import vet_status
from elastic_operator.model.job_memory import JobKey, JobMemories
from elastic_operator.watch.job_reader import JobReader

logger = logging.getLogger("elastic_operator")


class OwnWrites:
    def __init__(self, memory: JobMemories) -> None:
        self.memory = memory

    def wrote(self, namespace: str, name: str, resource_version: str | None) -> bool:
        """The job at this version is exactly what our last status write made of it (the
        write was conditional on the version it changed): reconciling it would find
        nothing new; so is a version an earlier write of ours made, come late (a job
        reconciled back to back writes again before the watch delivers the last one).
        Called for every version the job cache receives; while a write of the job is on
        its way the answer waits for its response (`writing`)."""
        remembered = self.memory.peek((namespace, name))
        if remembered is None:
            return False
        with self.memory.lock:
            if remembered.writing:
                remembered.arrived = resource_version
                return True  # decided when the write returns
            if resource_version is None:
                return False
            if remembered.written != resource_version:
                return resource_version in remembered.own_versions
            remembered.seen = resource_version  # the cache holds our last write now
            return True

    @contextmanager
    def writing(self, namespace: str, name: str) -> Iterator[None]:
        """Around a status write: a version the job cache delivers meanwhile is news
        unless it is the one the write made (then `overwritten` says so, once)."""
        remembered = self.memory.of((namespace, name))
        with self.memory.lock:
            remembered.writing, remembered.arrived = True, None
        try:
            yield
        finally:
            with self.memory.lock:
                arrived, remembered.writing, remembered.arrived = remembered.arrived, False, None
                news = arrived is not None and arrived != remembered.written \
                    and arrived not in remembered.own_versions
                if arrived is not None and not news:
                    remembered.seen = arrived
                if news:  # someone wrote after us: our write's response is old news
                    remembered.written_job = None
                    remembered.overwritten = True

    def overwritten(self, key: JobKey) -> bool:
        """Whether someone else wrote the job while our last status write was on its way
        (asked once, by the reconcile that made it: it looks again at once)."""
        remembered = self.memory.peek(key)
        if remembered is None:
            return False
        with self.memory.lock:
            news, remembered.overwritten = remembered.overwritten, False
            return news

    def remember(self, key: JobKey, base: str | None, written: dict[str, Any] | None) -> None:
        """Our status write changed version `base` into `written`."""
        remembered = self.memory.of(key)
        version = ((written or {}).get("metadata") or {}).get("resourceVersion")
        with self.memory.lock:
            if isinstance(version, str) and written is not None:
                remembered.written = version
                remembered.own_versions.append(version)
            if isinstance(version, str) and written is not None and base:
                remembered.written_job = (base, written)
            else:
                remembered.written_job = None

    def own_status(self, key: JobKey) -> ElasticTrainingJobStatus | None:
        """The status our last status write meant (None: not known)."""
        remembered = self.memory.peek(key)
        with self.memory.lock:
            return remembered.own_status if remembered is not None else None

    def meant(self, key: JobKey, status: ElasticTrainingJobStatus | None) -> None:
        """Our write of the job's status meant this (None: before a write, whose outcome
        is unknown until it returns, and after a write of only part of it)."""
        remembered = self.memory.of(key)
        with self.memory.lock:
            remembered.own_status = status

    def own_records(self, key: JobKey, parsed: ParsedJob, now: datetime,
                    counter: Any) -> ParsedJob:
        """The stored status with what the operator cannot have written set aside
        (core/provenance.py); said once per job and field, in the log and `counter`."""
        vetted = vet_status(parsed.previous, self.own_status(key), now)
        if not vetted.foreign:
            return parsed
        remembered = self.memory.of(key)
        with self.memory.lock:
            new = [f for f in vetted.foreign if f not in remembered.foreign_said]
            remembered.foreign_said.update(new)
        for field_name in new:
            counter.labels(field_name).inc()
            logger.warning("%s/%s: status.%s was written by someone other than the operator; "
                           "not acted on (its own record kept, or the entry dropped)",
                           *key, field_name)
        return replace(parsed, previous=vetted.status)

    def forget_statuses(self) -> None:
        """Becoming leader: another replica may have written every job meanwhile."""
        with self.memory.lock:
            for remembered in self.memory.all():
                remembered.own_status = None

    def job_cache_listed(self) -> None:
        """The job cache listed every job again (a consistent read): it holds every write
        made before, whether or not its version came through the watch."""
        with self.memory.lock:
            for remembered in self.memory.all():
                if remembered.written is not None:
                    remembered.seen = remembered.written

    def read_job(self, reader: JobReader, namespace: str, name: str,
                 fresh: bool) -> dict[str, Any] | None:
        """The job as the cache has it, unless our last status write has not come back
        through the cache yet (a write conditional on that older version would only be
        refused): then, if the cache still holds the version our write changed, as the
        write's response returned it (a job reconciled back to back, one slice failure
        after another, cost a GET each time), else, or when `fresh`, from the API
        server. A write of someone else's after ours is refused (409) like any other
        and read fresh."""
        if not fresh:
            raw = reader.job(namespace, name)
            remembered = self.memory.peek((namespace, name))
            with self.memory.lock:
                written = remembered.written if remembered is not None else None
                if raw is None or remembered is None or written is None \
                        or remembered.seen == written:
                    return raw
                if raw.get("metadata", {}).get("resourceVersion") == written:
                    remembered.seen = written
                    return raw
                base, ours = remembered.written_job or (None, None)
            if ours is not None and base == raw.get("metadata", {}).get("resourceVersion") \
                    and ours.get("metadata", {}).get("resourceVersion") == written:
                return copy.deepcopy(ours)
        return reader.job(namespace, name, fresh=True)
