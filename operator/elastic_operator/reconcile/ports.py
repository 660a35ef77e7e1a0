"""The reconciler's collaborators, by what a pass does with them: what it reads
(`Reads`) and what it writes (`Writes`); what it remembers of each job is one
`JobMemories` (model/job_memory.py). app.py builds them (`build_reconciler`), and the
reconciler names the port, not the module behind it.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from elastic_operator.model.server import NEWEST, ServerFeatures
from elastic_operator.reconcile.dispatched import DispatchedReconciler
from elastic_operator.reconcile.own_writes import OwnWrites
from elastic_operator.reconcile.schema_guard import SchemaGuard
from elastic_operator.reconcile.status_writer import StatusWriter
from elastic_operator.watch.job_reader import JobReader
from elastic_operator.watch.job_refusals import JobRefusals
from elastic_operator.writes.executor import ActionExecutor
from elastic_operator.writes.outbox import EventOutbox
from elastic_operator.writes.replacement_followups import ReplacementFollowUps


@dataclass(frozen=True)
class Reads:
    """What a pass reads: the cluster as the caches, indexes and checkpoint scans hold it
    (`reader`), the job as our last status write left it until the job cache has it
    (`own_writes`, which also tells whether someone else wrote during ours), and the
    verdict on the served CRD (`schema`), and what the API server accepts (`server`, the
    operator's one ServerProbe: the same for every job, read once per pass), and whether
    the server refuses a Job JobSet has not created (`refusals`; None: never asked)."""

    reader: JobReader
    own_writes: OwnWrites
    schema: SchemaGuard
    server: Callable[[], ServerFeatures] = lambda: NEWEST
    refusals: JobRefusals | None = None


@dataclass(frozen=True)
class Writes:
    """What a pass writes, in its order: a plan's actions (`executor`), the one status
    write (`writer`), the replacements it records (`replacements`, which also reads the
    worker Jobs), then its Events (`outbox`); a MultiKueue job on the manager cluster
    takes its own path (`dispatched`)."""

    executor: ActionExecutor
    writer: StatusWriter
    replacements: ReplacementFollowUps
    outbox: EventOutbox
    dispatched: DispatchedReconciler
