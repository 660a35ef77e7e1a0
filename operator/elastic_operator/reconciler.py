"""One reconcile of one job, the thin I/O layer around the pure core: read the job (and
stop there while the served CRD is too old to store its status: schema_guard.py), its
JobSet, its pods and a queued job's Workload; plan (core/plan.py) and execute the plan
(executor.py); observe the rest; compute the status (core/status.py); write it once
(status_writer.py); hand the follow-ups the replacements it records (replacement_followups.py) and
its Events (outbox.py); return the verdict (result.py), with when to look again. A
MultiKueue job's reconcile on the manager cluster is dispatched.py's.

The Scheduler runs it in a worker thread, never two at once for one job; what follows the
write runs off that thread in the operator (followups.py). What this process remembers of
each job is one JobMemory (job_memory.py).
"""
from __future__ import annotations

import logging
import time
from typing import Any, Protocol

from elastic_api.catalog import slice_shape
from elastic_api.clock import SYSTEM_CLOCK, Clock
from elastic_api.conditions import Reason
from elastic_api.models import ElasticTrainingJob, SliceStatus
from elastic_api.names import GROUP, PLURAL
from elastic_operator.core.admission import wants_workload
from elastic_operator.core.eviction import PodsReadyTimeouts, next_look_in
from elastic_operator.core.ownership import owned_by_another
from elastic_operator.core.parsing import ParsedJob, parse_job
from elastic_operator.core.plan import plan_reconcile
from elastic_operator.core.sliceview import worker_pods_by_slice
from elastic_operator.core.startover import pass_change
from elastic_operator.core.status import compute_status, name_conflict_status
from elastic_operator.core.status_events import StatusEvent
from elastic_operator.dispatched import DispatchedReconciler
from elastic_operator.executor import ActionExecutor, Refused
from elastic_operator.followups import FollowUpRunner, Inline
from elastic_operator.job_memory import JobKey, JobMemories, JobMemory
from elastic_operator.job_reader import JobReader
from elastic_operator.kube import ApiError, Kube, NotLeading
from elastic_operator.metrics import OperatorMetrics, PhaseTimer
from elastic_operator.node_actions import NodeActionLimiter
from elastic_operator.objects import (
    Observed,
    ObservedJobSet,
    ObservedPod,
    ObservedPool,
    ObservedWorkload,
)
from elastic_operator.outbox import EventOutbox
from elastic_operator.own_writes import OwnWrites
from elastic_operator.pacer import ProgressPacer
from elastic_operator.reconcile_pass import News, Pass
from elastic_operator.render import jobset_name, render
from elastic_operator.replacement_followups import ReplacementFollowUps
from elastic_operator.replacement_writes import ReplacementWrites
from elastic_operator.result import FAILED, START_OVER, Result, Wake, due_in, soonest
from elastic_operator.schema_guard import SchemaGuard, Verdict, always_current
from elastic_operator.status_writer import StatusWriter

logger = logging.getLogger("elastic_operator")

# Reads and writes of one reconcile, tried again at once when the job changed in between.
CONFLICT_ATTEMPTS = 3


class Marked(Protocol):
    """SliceIndex.mark: told a job's slices as computed; True when a pod change that
    came meanwhile may already have moved one."""

    def __call__(self, job: tuple[str, str], slices: list[SliceStatus], *,
                 exact: bool = True) -> bool: ...


class Reconciler:
    def __init__(self, kube: Kube, reader: JobReader, metrics: OperatorMetrics,
                 clock: Clock = SYSTEM_CLOCK, *, memory: JobMemories, own_writes: OwnWrites,
                 pacer: ProgressPacer, wake: Wake, news: News | None = None,
                 marked: Marked | None = None, limiter: NodeActionLimiter | None = None,
                 quarantine_pools: bool = True, pods_ready: PodsReadyTimeouts | None = None,
                 follow_ups: FollowUpRunner | None = None,
                 schema: Verdict = always_current) -> None:
        """`wake`: the work queue's add_after, for what ends after a reconcile returned;
        `news`: the work queue, for a running pass (None: never starts over); `marked`:
        the slice index; `follow_ups`: what runs after the write (default: inline);
        `schema`: the verdict on the served CRD (schema_watch.py), read at each pass."""
        self.kube = kube  # the writes
        self.reader = reader  # the reads
        self.metrics = metrics
        self.clock = clock
        self.memory, self.own_writes, self.pacer = memory, own_writes, pacer
        self.news, self.marked = news, marked
        self.pods_ready = pods_ready or PodsReadyTimeouts()  # Kueue's, as we are told
        follow_ups = follow_ups or Inline()
        self.outbox = EventOutbox(kube, metrics, memory, follow_ups)
        self.schema = SchemaGuard(kube, clock, memory, own_writes, schema)
        self.writer = StatusWriter(kube, metrics, clock, outbox=self.outbox,
                                   own_writes=own_writes, pacer=pacer, schema=self.schema)
        self.executor = ActionExecutor(kube, reader)
        self.replacements = ReplacementFollowUps(
            ReplacementWrites(kube, metrics, limiter or NodeActionLimiter(),
                     quarantine_pools=quarantine_pools),
            reader, metrics, memory, follow_ups, wake)
        self.dispatched = DispatchedReconciler(reader, self.executor, self.writer,
                                               self.outbox, clock)

    def reconcile(self, namespace: str, name: str) -> Result:
        """One reconcile: its verdict (failed ones are logged and counted)."""
        started, cpu = self.clock.monotonic(), time.thread_time()
        try:
            return self._reconcile_fresh(namespace, name)
        except NotLeading as e:  # the new leader does what is left
            logger.warning("reconcile of %s/%s stopped: %s", namespace, name, e)
            return Result()
        except ApiError as e:
            if e.is_not_found(GROUP, PLURAL) or e.namespace_terminating:
                # The job or its namespace went away while we looked: nothing to do.
                logger.debug("reconcile of %s/%s: %s", namespace, name, e)
                return Result()
            if e.is_conflict:  # a busy job (a trainer reporting fast): contention, no bug
                self.metrics.reconcile_errors.inc()
                logger.warning("reconcile of %s/%s: the job changed at each of %d tries; "
                               "again after the retry backoff", namespace, name,
                               CONFLICT_ATTEMPTS)
                return FAILED
            self._failed(namespace, name)
        except Exception:
            self._failed(namespace, name)
        finally:
            self.metrics.reconcile_duration.observe(self.clock.monotonic() - started)
            self.metrics.reconcile_cpu.observe(time.thread_time() - cpu)
        return FAILED

    def _failed(self, namespace: str, name: str) -> None:
        self.metrics.reconcile_errors.inc()
        logger.exception("reconcile of %s/%s failed", namespace, name)

    def forget(self, namespace: str, name: str) -> None:
        """The job was deleted: everything remembered of it goes."""
        self.memory.forget((namespace, name))

    def _reconcile_fresh(self, namespace: str, name: str) -> Result:
        """_reconcile, again from a fresh read when the job changed between our read and
        our status write (the trainer reported, or another replica wrote): the write is
        conditional on the version read, so a change is never applied twice. A pass cut
        short for news (core/startover.py) starts over once, from the caches."""
        attempt, news = 1, self.news
        while True:
            try:
                result = self._reconcile(namespace, name, fresh=attempt > 1, news=news)
            except ApiError as e:
                if not e.is_conflict or attempt == CONFLICT_ATTEMPTS:
                    raise
                attempt += 1
                logger.debug("%s/%s changed while we reconciled it; again", namespace, name)
                continue
            if not result.start_over:
                return result
            news = None
            self.metrics.reconciles_started_over.inc()

    def _reconcile(self, namespace: str, name: str, fresh: bool = False,
                   news: News | None = None) -> Result:
        key = (namespace, name)
        step = Pass(PhaseTimer(self.metrics.reconcile_phase, self.clock.monotonic), key, news)
        raw = self.own_writes.read_job(self.reader, namespace, name, fresh)
        if raw is None or raw.get("metadata", {}).get("deletionTimestamp"):
            return Result()
        verdict = self.schema.verdict()
        if verdict.refuses:  # an older CRD would prune what we write (schema_guard.py)
            return self.schema.refuse(raw, verdict)
        try:
            parsed = parse_job(raw)
            rendered = render(parsed.job)
        except ValueError as e:  # parse_job's InvalidJobSpec, or a spec render cannot take
            self.writer.report_invalid_spec(raw, str(e))
            return Result()
        if step.done("read"):
            return START_OVER
        job, mine = parsed.job, self.memory.of(key)
        if job.spec.multikueue:  # it runs in a worker cluster; here, only its Workload
            return self.dispatched.reconcile(raw, parsed, rendered)
        jobset = self.reader.jobset(namespace, jobset_name(job))
        if jobset is not None and owned_by_another(job, jobset):
            return self._report_name_conflict(raw, parsed, jobset)
        pods = self.reader.pods(namespace, name)
        # After the pods (JobReader.workload): pods going because Kueue took the job
        # back come with a Workload that says so.
        workload = self.reader.workload(namespace, jobset.uid or "") \
            if jobset is not None and wants_workload(job, jobset, parsed.previous) else None
        plan = plan_reconcile(job, rendered, jobset, parsed.previous, workload=workload,
                              ensure_children=mine.children_ensured != (job.metadata.uid or ""))
        if plan.why_not:
            logger.debug("%s/%s: %s", namespace, name, plan.why_not)
        try:
            jobset, workload = self.executor.execute(plan, jobset, workload)
        except Refused as e:
            self.writer.report_invalid_spec(raw, str(e))
            return Result()
        if plan.why_not is None:
            mine.children_ensured = job.metadata.uid or ""
        if step.done("plan"):
            return START_OVER
        observed = self._observe(key, job, jobset, pods, workload, mine)
        if step.done("observe"):
            return START_OVER
        now = self.clock.now()
        new_status, events = compute_status(job, observed, parsed.previous, now,
                                            report_problem=parsed.report_problem,
                                            pods_ready=self.pods_ready)
        self.reader.note_failures(namespace, name, job.metadata.uid or "",
                                        new_status.pools)
        recheck = self._recheck(key, job, new_status.slices or [])
        self.metrics.record_spec(namespace, name, job.spec, new_status.training)
        if step.done("status", lambda: pass_change(parsed.previous, new_status, events)):
            return START_OVER
        # The status first: it records what the replacement is about to do, and carries
        # the change's Events. Then the replacement (the slice back at once matters more
        # than telling of it), then the Events (whoever sees one finds both done).
        pending, paced = self.writer.write(raw, parsed.previous, new_status, events, now)
        self._record_reaction(namespace, events, observed)
        step.mark("write")
        try:
            waits = self.replacements.act(raw, job, new_status, observed, now)
        finally:
            self.outbox.post(raw, pending, now)
        step.mark("replace")
        waits.append(next_look_in(new_status.admission, self.pods_ready, now))  # Kueue's
        return Result(requeue_after=soonest(recheck, due_in(waits)), paced_after=paced)

    def _observe(self, key: JobKey, job: ElasticTrainingJob, jobset: ObservedJobSet | None,
                 pods: tuple[ObservedPod, ...], workload: ObservedWorkload | None,
                 mine: JobMemory) -> Observed:
        """Everything the status is computed from, read after the plan's writes."""
        return Observed(
            jobset=jobset, pods=pods,
            nodes=self.reader.nodes({p.node_name for p in pods if p.node_name}),
            checkpoint=self.reader.checkpoint(*key, job.spec.checkpoint.directory),
            # After the pods: their Jobs' own counts of failed pods (core/counting.py),
            # and whether a Job under replacement is being deleted yet.
            jobs=self.replacements.worker_jobs(key, jobset.name, planned=False)
            if jobset is not None else {},
            workload=workload, pools=self._pools(job), memo=mine.memo)

    def _recheck(self, key: JobKey, job: ElasticTrainingJob,
                 slices: list[SliceStatus]) -> float | None:
        """Tell the slice index the slices as computed; a pod change judged meanwhile
        against the slices before may have moved one: the job again at the interval."""
        if self.marked is None or not self.marked(
                key, slices, exact=job.spec.tpu.topology_aware is None):
            return None
        self.metrics.count_wake("recheck")
        return self.pacer.interval_s

    def _pools(self, job: ElasticTrainingJob) -> tuple[ObservedPool, ...]:
        """The node pools of the job's TPU shape (none when it is not placed on TPUs)."""
        if job.spec.placement != "TPU" and job.spec.backend != "pathways":
            return ()
        shape = slice_shape(job.spec.tpu.type, job.spec.tpu.topology)
        return self.reader.pools(job.metadata.namespace or "", job.metadata.name,
                                       shape.family.accelerator_label, shape.topology)

    def _record_reaction(self, namespace: str, events: list[StatusEvent],
                         observed: Observed) -> None:
        """etj_slice_down_reaction_seconds: from the pod cache receiving a slice's first
        failed (or deleted) pod to its SliceDown written, for each slice that went down.
        (A pod changed again since then was received later: it can only shorten it.)"""
        down = [e.slice_index for e in events
                if e.reason == Reason.SLICE_DOWN and e.slice_index is not None]
        if not down:
            return
        written = self.clock.now().timestamp()
        by_slice = worker_pods_by_slice(observed)
        for index in down:
            seen = [self.reader.pod_seen_at(namespace, p.name)
                    for p in by_slice.get(index, []) if p.failed or p.terminating]
            known = [t for t in seen if t is not None]
            if known:
                self.metrics.reaction.observe(max(0.0, written - min(known)))

    def _report_name_conflict(self, raw: dict[str, Any], parsed: ParsedJob,
                              jobset: ObservedJobSet) -> Result:
        """The JobSet of the job's name is another object's (core/status.py
        `name_conflict_status`): say so, read nothing of it; its deletion wakes the job."""
        namespace, name = parsed.job.metadata.namespace or "", parsed.job.metadata.name
        now = self.clock.now()
        status = name_conflict_status(parsed.job, jobset, parsed.previous, now)
        logger.debug("%s/%s: JobSet %s is owned by another object", namespace, name,
                     jobset.name)
        _, paced = self.writer.write(raw, parsed.previous, status, [], now)
        return Result(paced_after=paced)
