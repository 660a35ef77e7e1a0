"""After the status write: act on the slice replacements it records (core/replacement.py),
on a trainer restart it calls for (core/progressing.py) and on a JobSet restart budget it
says spent (core/budget_tracking.py), planned here and written by a follow-up
(model/result.py `FollowUp`, run by the work queue's worker after the reconcile;
replacement_writes.py executes them), the status already recording the intent. A worker
Job handed over for deletion counts as being deleted from then on (the next reconcile may
plan before the DELETE returns: no second one); again not, should the DELETE not go
through. A follow-up that fails is a failed outcome (the work queue retries the job after
its backoff, the one count of failures); one throttled by the node-action limiter asks
when to look at the job again. Either way the next reconcile plans the write again.
"""
from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime
from typing import Any

from elastic_api.models import ElasticTrainingJob, ElasticTrainingJobStatus
from elastic_operator.client.kube import NotLeading
from elastic_operator.core.budget_tracking import plan_end_head
from elastic_operator.core.failure import is_terminal
from elastic_operator.core.maintenance import next_notice_in
from elastic_operator.core.plan import DeleteWorkerJob, ReplacementAction
from elastic_operator.core.pools import DEFAULT_QUARANTINE, QuarantinePolicy
from elastic_operator.core.progressing import next_progress_look_in, plan_trainer_restart
from elastic_operator.core.replacement import needs_jobs, plan_replacements
from elastic_operator.core.trainer_restarts import exit_due_in
from elastic_operator.metrics.metrics import OperatorMetrics
from elastic_operator.model.job_memory import JobKey, JobMemories
from elastic_operator.model.objects import Observed, ObservedJob
from elastic_operator.model.result import FAILED, FollowUp, Result, due_in
from elastic_operator.watch.job_reader import JobReader
from elastic_operator.writes.replacement_writes import ReplacementWrites

logger = logging.getLogger("elastic_operator")


class ReplacementFollowUps:
    def __init__(self, writes: ReplacementWrites, reader: JobReader, metrics: OperatorMetrics,
                 memory: JobMemories, quarantine: QuarantinePolicy = DEFAULT_QUARANTINE,
                 ) -> None:
        self.writes = writes
        self.quarantine = quarantine  # the administrator's policy (core/pools.py)
        self.reader = reader
        self.metrics = metrics
        self.memory = memory

    def act(self, raw: dict[str, Any], job: ElasticTrainingJob,
            status: ElasticTrainingJobStatus, observed: Observed, now: datetime,
            later: list[FollowUp]) -> list[float | None]:
        """Add to `later` (the reconcile's follow-ups) the writes of the replacements and
        trainer restart the status records; the seconds until each thing it waits for
        comes due."""
        jobset = observed.jobset
        namespace = job.metadata.namespace or ""
        key = (namespace, job.metadata.name)
        # The progress deadline comes due (core/progressing.py): woken then, whatever else.
        waits = [next_progress_look_in(job.spec, status.progress, now),
                 exit_due_in(status.progress.restart if status.progress else None, now)]
        if jobset is None or jobset.suspended or is_terminal(status):
            return waits
        remembered = self.memory.of(key)
        restart = plan_trainer_restart(namespace, jobset.name, status.progress,
                                       observed.head_pods)
        with self.memory.lock:  # the pods gone from the cache need no memory of ours
            remembered.restarted_pods &= {p.uid for p in observed.head_pods if p.uid}
            handed = restart is not None and restart.pod_uid in remembered.restarted_pods
            if restart is not None and not handed:
                remembered.restarted_pods.add(restart.pod_uid)  # its deletion is on its way
        if restart is not None and not handed:
            self._hand_over(raw, key, (restart,), now, later)
        end = plan_end_head(namespace, jobset.name, status, observed.head_pods)
        if end is not None:  # the JobSet's restart budget is spent: the job ends
            self._hand_over(raw, key, (end,), now, later)
        if not job.spec.recovery.replace_slices:
            return waits
        if needs_jobs(status):  # read again: a Job deleted since the look is being deleted
            observed = replace(observed, jobs=self.worker_jobs(key, jobset.name, planned=True))
        plan = plan_replacements(namespace, jobset.name, job.spec, status, observed, now,
                                 self.quarantine)
        if plan.actions:
            self._hand_over(raw, key, plan.actions, now, later)
        waits += [plan.wake_after_s, next_notice_in(job.spec, observed, now)]
        request = status.checkpoint_request
        if request is not None and request.phase == "Requested":
            waits.append((request.deadline - now).total_seconds())
        return waits

    def worker_jobs(self, key: JobKey, jobset: str, *, planned: bool) -> dict[int, ObservedJob]:
        """The worker Jobs from the cache; one this process deleted is being deleted,
        whether or not the cache has seen it yet (`planned`: or is about to delete)."""
        jobs = self.reader.worker_jobs(key[0], jobset)
        remembered = self.memory.of(key)
        with self.memory.lock:
            deleting: set[str] = set()
            for marked in (remembered.deleted_jobs, remembered.sent_deletes) if planned \
                    else (remembered.sent_deletes,):
                if marked:
                    marked &= {j.uid for j in jobs.values()}  # the others left the cache
                    deleting |= marked
        if not deleting:
            return jobs
        return {i: replace(j, deleting=True) if j.uid in deleting else j
                for i, j in jobs.items()}

    def _hand_over(self, raw: dict[str, Any], key: JobKey,
                   actions: tuple[ReplacementAction, ...], now: datetime,
                   later: list[FollowUp]) -> None:
        """Hand the writes over as a follow-up. A Job to delete counts as being deleted
        from now on; again not, should the DELETE not go through."""
        # Deleted (or found gone or replaced, which plans the same): never again.
        deleted = {a.uid for a in actions if isinstance(a, DeleteWorkerJob)}
        remembered = self.memory.of(key)
        with self.memory.lock:
            remembered.deleted_jobs.update(deleted)

        def write() -> Result:
            """The writes; when to look at the job again (a throttled one)."""
            try:
                throttled = self.writes.execute(raw, actions, now)
            except Exception as e:
                with self.memory.lock:
                    remembered.deleted_jobs.difference_update(deleted)
                return self._failed(key, e)
            with self.memory.lock:  # answered: deleted, or found gone or replaced
                remembered.sent_deletes.update(deleted)
            return Result(requeue_after=due_in([throttled]))

        later.append(write)

    def _failed(self, key: JobKey, error: Exception) -> Result:
        """A follow-up's write failed: counted and logged as a failed reconcile is; the
        work queue reconciles the job again after its backoff (it plans the write
        again)."""
        if isinstance(error, NotLeading):  # the new leader does what is left
            logger.warning("follow-up of %s/%s stopped: %s", *key, error)
            return Result()
        self.metrics.reconcile_errors.inc()
        logger.error("follow-up of %s/%s failed", *key, exc_info=error)
        return FAILED
