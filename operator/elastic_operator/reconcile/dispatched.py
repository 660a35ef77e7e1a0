"""The reconcile of a MultiKueue job on the manager cluster (core/dispatch.py): the job
runs in a worker cluster; here only its Workload is made, suspended, told PodsReady and
its quota released after an eviction. The status is written only while MultiKueue has not
dispatched the job: once it has, the status is the worker's copy's, copied back by
MultiKueue (not written, its Events not posted here), unless that worker cannot be
reached (read at each reconcile, so within a resync).
"""
from __future__ import annotations

import logging
from typing import Any

from elastic_api.clock import Clock
from elastic_api.models import ElasticTrainingJob
from elastic_api.names import KUEUE_PRIORITY_CLASS_LABEL, WORKLOAD_PRIORITY_CLASS_KIND
from elastic_operator.core.dispatch import dispatch_status, worker_lost_status
from elastic_operator.core.parsing import ParsedJob
from elastic_operator.core.plan import plan_dispatch
from elastic_operator.model.objects import ObservedPriorityClass
from elastic_operator.model.result import FollowUp, Refused, Result
from elastic_operator.reconcile.status_writer import StatusWriter
from elastic_operator.render import render_workload, workload_name, workload_priority_class
from elastic_operator.watch.job_reader import JobReader
from elastic_operator.writes.executor import ActionExecutor
from elastic_operator.writes.outbox import EventOutbox

logger = logging.getLogger("elastic_operator")


class DispatchedReconciler:
    def __init__(self, reader: JobReader, executor: ActionExecutor,
                 writer: StatusWriter, outbox: EventOutbox, clock: Clock) -> None:
        self.reader = reader
        self.executor = executor
        self.writer = writer
        self.outbox = outbox
        self.clock = clock

    def reconcile(self, raw: dict[str, Any], parsed: ParsedJob,
                  rendered: list[dict[str, Any]], later: list[FollowUp]) -> Result:
        """One reconcile of a dispatched job; `later`: its follow-ups (its Events' posts)."""
        job, previous = parsed.job, parsed.previous
        namespace, name = job.metadata.namespace or "", job.metadata.name
        workload = self.reader.dispatch_workload(namespace, workload_name(job))
        try:
            if workload is None:  # its priority is read for the Workload about to be made
                rendered = [render_workload(job, self._priority(job))]
            plan = plan_dispatch(job, rendered, workload, previous, self.clock.now())
            if plan.why_not:
                logger.debug("%s/%s: %s", namespace, name, plan.why_not)
            _, workload = self.executor.execute(plan, None, workload)
        except Refused as e:
            self.writer.report_invalid_spec(raw, str(e))
            return Result()
        now = self.clock.now()
        status, events = dispatch_status(job, workload, previous, now)
        if status is None and workload is not None and workload.cluster_name is not None:
            cluster = self.reader.worker_cluster(workload.cluster_name)
            status, events = worker_lost_status(job, workload, cluster, previous, now)
        if status is None:
            return Result()
        pending, paced = self.writer.write(raw, previous, status, events, now, later)
        self.outbox.post(raw, pending, now, later)
        return Result(paced_after=paced)

    def _priority(self, job: ElasticTrainingJob) -> ObservedPriorityClass | None:
        """The priority class a MultiKueue job's Workload is ordered by, as read; Refused
        when the job names one that does not exist (Kueue's integration makes no Workload
        for such a job either)."""
        ref = workload_priority_class(job)
        if ref is None:
            return None
        found = self.reader.priority_class(ref)
        if found is None:
            where = f"label {KUEUE_PRIORITY_CLASS_LABEL}" \
                if ref.kind == WORKLOAD_PRIORITY_CLASS_KIND else "spec.priorityClassName"
            raise Refused(f"{where} names {ref.kind} {ref.name!r}, which does not exist: "
                          f"create it, or name one that exists (kubectl get {ref.kind.lower()}"
                          "es)")
        return found
