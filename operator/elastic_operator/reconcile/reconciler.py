"""One reconcile of one job, the thin I/O layer around the pure core, as the steps of a
pass in the order they run:

1. read the job (own_writes.py: as our last status write left it, until the job cache
   has it), and stop there while the served CRD is too old to store its status
   (schema_guard.py); parse it and render what it owns (render.py);
2. read its JobSet, its pods and a queued job's Workload (job_reader.py), plan
   (core/plan.py) and execute the plan (executor.py); a MultiKueue job on the manager
   cluster is dispatched.py's from here;
3. observe the rest: the pods' nodes, the checkpoint scan, the worker Jobs, the pools;
4. compute the status (core/status.py), and tell the slice index each slice as computed;
5. write it once (status_writer.py), carrying its Events (outbox.py);
6. plan the follow-ups: the writes of the replacements it records
   (replacement_followups.py), then its Events' posts (outbox.py);
7. return the verdict (result.py): when to look again, and the follow-ups, which the
   work queue's worker runs after it.

It asks the work queue nothing and changes nothing in it: its caller tells it whether the
job was requeued while it runs (`requeued`, for a pass that may start over:
reconcile_pass.py), and everything it wants of the queue is in its Result: a look again
(a grace period, a deadline, a paced write, someone else's write during its own:
`OwnWrites.overwritten`), or, for a pass cut short, the rest of the reconcile
(`Result.again`). Its collaborators come in ports (ports.py): what it reads (`Reads`),
what it writes (`Writes`), what it remembers of each job (`JobMemories`,
model/job_memory.py); app.py builds them and wires the reconciler to the queue
(`queued_reconcile`).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any, Protocol

from elastic_api.clock import Clock
from elastic_api.models import ElasticTrainingJob, SliceStatus
from elastic_operator.client.kube import ApiError, NotLeading, job_gone
from elastic_operator.core.admission import wants_workload
from elastic_operator.core.eviction import PodsReadyTimeouts, next_look_in
from elastic_operator.core.ownership import owned_by_another
from elastic_operator.core.parsing import ParsedJob, parse_job
from elastic_operator.core.plan import plan_reconcile
from elastic_operator.core.status import compute_status, name_conflict_status
from elastic_operator.metrics.metrics import OperatorMetrics, PhaseTimer
from elastic_operator.model.job_memory import JobKey, JobMemories, JobMemory
from elastic_operator.model.objects import Observed, ObservedJobSet, ObservedPod, ObservedWorkload
from elastic_operator.model.result import (
    AT_ONCE,
    FAILED,
    FollowUp,
    Refused,
    Result,
    due_in,
    soonest,
)
from elastic_operator.reconcile.ports import Reads, Writes
from elastic_operator.reconcile.reconcile_pass import START_OVER, Pass, Requeued, Run, StartOver
from elastic_operator.render import jobset_name, render

logger = logging.getLogger("elastic_operator")

# Reads and writes of one reconcile, tried again at once when the job changed in between.
CONFLICT_ATTEMPTS = 3


class RecordComputed(Protocol):
    """SliceIndex.record_computed: told a job's slices as computed; True when a pod change that
    came meanwhile may already have moved one."""

    def __call__(self, job: tuple[str, str], slices: list[SliceStatus], *,
                 exact: bool = True) -> bool: ...


@dataclass
class Reconciler:
    """Its collaborators, each built by app.py (`build_reconciler`)."""

    reads: Reads  # the cluster, our last status write, the served CRD's verdict
    writes: Writes  # the plan's actions, the status, the replacements, the Events
    memory: JobMemories  # what the reconciles remember of each job
    metrics: OperatorMetrics
    clock: Clock
    pods_ready: PodsReadyTimeouts  # Kueue's, as we are told
    recheck_after_s: float  # a slice a pod change may have moved: looked at again then
    record_computed: RecordComputed | None = None  # the slice index (None: nothing to tell)

    def reconcile(self, namespace: str, name: str, requeued: Requeued | None = None) -> Result:
        """One reconcile: its verdict (failed ones are logged and counted). `requeued`:
        whether the job was requeued since, as the caller tells it (None: never starts
        over)."""
        return self._timed(namespace, name, requeued,
                           Run(self.clock.monotonic()))

    def _timed(self, namespace: str, name: str, requeued: Requeued | None, run: Run) -> Result:
        result = FAILED
        try:
            result = self._verdict(namespace, name, requeued, run)
        finally:
            if result.again is None:  # ended (else when `again` ends)
                self.metrics.reconcile_duration.observe(self.clock.monotonic() - run.started)
                self.metrics.reconcile_cpu.observe(run.cpu_used())
        return result

    def _verdict(self, namespace: str, name: str, requeued: Requeued | None, run: Run) -> Result:
        try:
            result = self._reconcile_fresh(namespace, name, requeued, run)
        except NotLeading as e:  # the new leader does what is left
            logger.warning("reconcile of %s/%s stopped: %s", namespace, name, e)
            result = Result()
        except ApiError as e:
            if job_gone(e):
                # The job or its namespace went away while we looked: nothing to do.
                logger.debug("reconcile of %s/%s: %s", namespace, name, e)
                result = Result()
            elif e.is_conflict:  # a busy job (a trainer reporting fast): contention, no bug
                self.metrics.reconcile_errors.inc()
                logger.warning("reconcile of %s/%s: the job changed at each of %d tries; "
                               "again after the retry backoff", namespace, name,
                               CONFLICT_ATTEMPTS)
                result = FAILED
            else:
                result = self._failed(namespace, name)
        except Exception:
            result = self._failed(namespace, name)
        if isinstance(result, StartOver):  # cut short: the rest of it for the caller
            self.metrics.reconciles_started_over.inc()
            return Result(again=lambda: self._timed(namespace, name, None, run))
        # Someone else wrote the job while our status write was on its way: look again.
        if self.reads.own_writes.overwritten((namespace, name)):
            result = replace(result, requeue_after=soonest(result.requeue_after, AT_ONCE))
        return replace(result, follow_ups=tuple(run.later))

    def _failed(self, namespace: str, name: str) -> Result:
        self.metrics.reconcile_errors.inc()
        logger.exception("reconcile of %s/%s failed", namespace, name)
        return FAILED

    def _reconcile_fresh(self, namespace: str, name: str, requeued: Requeued | None,
                         run: Run) -> Result | StartOver:
        """_pass, again from a fresh read when the job changed between our read and our
        status write (the trainer reported, or another replica wrote): the write is
        conditional on the version read, so a change is never applied twice."""
        while True:
            try:
                return self._pass(namespace, name, run, requeued)
            except ApiError as e:
                if not e.is_conflict or run.attempt == CONFLICT_ATTEMPTS:
                    raise
                run.attempt += 1
                logger.debug("%s/%s changed while we reconciled it; again", namespace, name)

    def _pass(self, namespace: str, name: str, run: Run,
              requeued: Requeued | None) -> Result | StartOver:
        key, fresh, later = (namespace, name), run.attempt > 1, run.later
        step = Pass(PhaseTimer(self.metrics.reconcile_phase, self.clock.monotonic), requeued)
        # 1. The job.
        reader, writes = self.reads.reader, self.writes
        raw = self.reads.own_writes.read_job(reader, namespace, name, fresh)
        if raw is None or raw.get("metadata", {}).get("deletionTimestamp"):
            return Result()
        verdict = self.reads.schema.verdict()
        if verdict.refuses:  # an older CRD would prune what we write (schema_guard.py)
            return self.reads.schema.refuse(raw, verdict)
        try:  # the server's features: one answer for the whole pass
            parsed = self._parse(key, raw)
            rendered = render(parsed.job, server := self.reads.server())
        except ValueError as e:  # parse_job's InvalidJobSpec, or a spec render cannot take
            writes.writer.report_invalid_spec(raw, str(e))
            return Result()
        if step.done("read"):
            return START_OVER
        # 2. Its objects, and the plan.
        job, remembered = parsed.job, self.memory.of(key)
        if job.spec.multikueue:  # it runs in a worker cluster; here, only its Workload
            return writes.dispatched.reconcile(raw, parsed, rendered, later)
        jobset = reader.jobset(namespace, jobset_name(job))
        if jobset is not None and owned_by_another(job, jobset):
            return self._report_name_conflict(raw, parsed, jobset, later)
        pods = reader.pods(namespace, name)
        # After the pods (JobReader.workload): pods going because Kueue took the job back
        # come with a Workload that says so.
        workload = reader.workload(namespace, jobset.uid or "") \
            if jobset is not None and wants_workload(job, jobset, parsed.previous) else None
        plan = plan_reconcile(job, rendered, jobset, parsed.previous, workload=workload,
                              ensure_children=remembered.children_ensured != (
                                  job.metadata.uid or ""))
        if plan.why_not:
            logger.debug("%s/%s: %s", namespace, name, plan.why_not)
        try:
            jobset, workload = writes.executor.execute(plan, jobset, workload)
        except Refused as e:
            writes.writer.report_invalid_spec(raw, str(e))
            return Result()
        if plan.why_not is None:
            remembered.children_ensured = job.metadata.uid or ""
        if step.done("plan"):
            return START_OVER
        # 3. The rest of what the status is computed from.
        observed, refusal_look = self._refused(key, rendered[-1], replace(self._observe(
            key, job, jobset, pods, workload, remembered), server=server))  # rendered by
        if step.done("observe"):
            return START_OVER
        # 4. The status.
        now = self.clock.now()
        new_status, events = compute_status(job, observed, parsed.previous, now,
                                            report_problem=parsed.report_problem,
                                            pods_ready=self.pods_ready,
                                            # the administrator's, as the plan applies it
                                            quarantine=self.writes.replacements.quarantine)
        reader.note_failures(namespace, name, job.metadata.uid or "", new_status.pools)
        recheck = self._recheck(key, job, new_status.slices or [])
        self.metrics.record_spec(namespace, name, job.spec, new_status.training)
        if step.computed("status", parsed.previous, new_status, events):
            return START_OVER
        # 5. The status first: it records what the replacement is about to do, and carries
        # the change's Events. 6. Then the replacement (the slice back at once matters more
        # than telling of it), then the Events (whoever sees one finds both done): the
        # follow-ups, run in that order after the reconcile.
        pending, paced = writes.writer.write(raw, parsed.previous, new_status, events, now,
                                             later)
        self.metrics.record_reaction(namespace, events, observed, reader.pod_seen_at,
                                     self.clock.now().timestamp())
        step.mark("write")
        try:
            waits = writes.replacements.act(raw, job, new_status, observed, now, later)
        finally:
            writes.outbox.post(raw, pending, now, later)
        step.mark("replace")
        # 7. When to look again (Kueue's deadline; a missing Job's dry run).
        waits += [next_look_in(new_status.admission, self.pods_ready, now), refusal_look]
        return Result(requeue_after=soonest(recheck, due_in(waits)), paced_after=paced)

    def _parse(self, key: JobKey, raw: dict[str, Any]) -> ParsedJob:
        """The job, its status records vetted against our own writes (provenance.py);
        ValueError (InvalidJobSpec) for a spec parse_job cannot take."""
        parsed = parse_job(raw)
        if not parsed.job.spec.multikueue:  # else its status is MultiKueue's copy
            parsed = self.reads.own_writes.own_records(
                key, parsed, self.clock.now(), self.metrics.foreign_status)
        return parsed

    def _observe(self, key: JobKey, job: ElasticTrainingJob, jobset: ObservedJobSet | None,
                 pods: tuple[ObservedPod, ...], workload: ObservedWorkload | None,
                 remembered: JobMemory) -> Observed:
        """Everything the status is computed from, read after the plan's writes."""
        return Observed(
            jobset=jobset, pods=pods,
            nodes=self.reads.reader.nodes({p.node_name for p in pods if p.node_name}),
            checkpoint=self.reads.reader.checkpoint(*key, job.spec.checkpoint.directory),
            # After the pods: their Jobs' own counts of failed pods (core/counting.py),
            # and whether a Job under replacement is being deleted yet.
            jobs=self.writes.replacements.worker_jobs(key, jobset.name, planned=False)
            if jobset is not None else {},
            workload=workload, pools=self.reads.reader.pools_of(job), memo=remembered.memo)

    def _refused(self, key: JobKey, jobset: dict[str, Any], observed: Observed
                 ) -> tuple[Observed, float | None]:
        """With the Jobs JobSet has not created that the API server refuses (a dry run of
        them, watch/job_refusals.py), and when to look at the missing ones again."""
        if self.reads.refusals is None or observed.jobset is None:
            return observed, None
        refused, look = self.reads.refusals.look(key, jobset, observed, self.clock.now())
        return replace(observed, refused_jobs=refused), look

    def _recheck(self, key: JobKey, job: ElasticTrainingJob,
                 slices: list[SliceStatus]) -> float | None:
        """Tell the slice index the slices as computed; a pod change judged meanwhile
        against the slices before may have moved one: the job again at the interval."""
        if self.record_computed is None or not self.record_computed(
                key, slices, exact=job.spec.tpu.topology_aware is None):
            return None
        self.metrics.count_wake("recheck")
        return self.recheck_after_s

    def _report_name_conflict(self, raw: dict[str, Any], parsed: ParsedJob,
                              jobset: ObservedJobSet, later: list[FollowUp]) -> Result:
        """The JobSet of the job's name is another object's (core/status.py
        `name_conflict_status`): say so, read nothing of it; its deletion wakes the job."""
        namespace, name = parsed.job.metadata.namespace or "", parsed.job.metadata.name
        now = self.clock.now()
        status = name_conflict_status(parsed.job, jobset, parsed.previous, now)
        logger.debug("%s/%s: JobSet %s is owned by another object", namespace, name,
                     jobset.name)
        _, paced = self.writes.writer.write(raw, parsed.previous, status, [], now, later)
        return Result(paced_after=paced)
