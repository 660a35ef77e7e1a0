"""One reconcile of one job: the thin I/O layer around the pure core.

Read the job, its JobSet, its pods and, for a queued job, the JobSet's Kueue Workload
(Observations); plan (core.plan) and execute the plan's actions; read the pods' nodes and
the newest checkpoint scan; compute the status (core.status); write the status once, as a
merge patch that never touches status.training, is conditional on the job's
resourceVersion and carries the change's Events (status.pendingEvents); record the
metrics; act on the slice replacements the status records (replacer.py); post the Events,
under names that make a second copy a no-op. Synchronous up to the status write: the
Scheduler runs it in a worker thread, never two at once for one job. What follows the
write and decides nothing of it (the replacement's writes, the Event posts) is handed to
the follow-up runner (followups.py: in order per job, off the reconcile's thread in the
operator), so that the job's next reconcile, and the next slice failure's status write,
need not wait for it; an Event not yet posted stays in the outbox of every write until it
is. The job is read from the job cache (fresh from the API server after a 409; while our
last status write has not come back through the cache, as that write's response left it).
"""
from __future__ import annotations

import copy
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime
from typing import Any, Protocol, assert_never

from elastic_api.catalog import slice_shape
from elastic_api.clock import SYSTEM_CLOCK, Clock
from elastic_api.conditions import Reason
from elastic_api.kube import Backoff
from elastic_api.models import (
    ElasticTrainingJob,
    ElasticTrainingJobStatus,
    PendingEvent,
    SliceStatus,
)
from elastic_api.names import (
    GROUP,
    KUEUE_PRIORITY_CLASS_LABEL,
    PLURAL,
    WORKLOAD_PRIORITY_CLASS_KIND,
)
from elastic_operator.core.admission import wants_workload
from elastic_operator.core.dispatch import dispatch_status, worker_lost_status
from elastic_operator.core.events import StatusEvent, from_outbox, outbox
from elastic_operator.core.eviction import PodsReadyTimeouts, next_look_in
from elastic_operator.core.failure import is_terminal
from elastic_operator.core.maintenance import next_notice_in
from elastic_operator.core.ownership import owned_by_another
from elastic_operator.core.pacing import progress_interval, progress_only, settled
from elastic_operator.core.parsing import ParsedJob, parse_job, parse_status
from elastic_operator.core.patch import status_patch
from elastic_operator.core.plan import (
    AnnotateDispatchedTo,
    CreateObject,
    DeleteWorkerJob,
    PatchJobSetSuspend,
    Plan,
    ReleaseEvictedWorkload,
    ReplacementAction,
    SetWorkloadActive,
    SetWorkloadCondition,
    plan_dispatch,
    plan_reconcile,
)
from elastic_operator.core.progress import next_progress_look_in, plan_trainer_restart
from elastic_operator.core.replacement import needs_jobs, plan_replacements
from elastic_operator.core.sliceview import worker_pods_by_slice
from elastic_operator.core.startover import Change, pass_change, start_over
from elastic_operator.core.status import (
    compute_status,
    invalid_spec_status,
    name_conflict_status,
)
from elastic_operator.followups import FollowUpRunner, Inline
from elastic_operator.kube import ApiError, Kube, NotLeading
from elastic_operator.metrics import OperatorMetrics, PhaseTimer
from elastic_operator.node_actions import NodeActionLimiter
from elastic_operator.observations import Observations
from elastic_operator.observed import (
    Observed,
    ObservedJob,
    ObservedJobSet,
    ObservedPool,
    ObservedPriorityClass,
    ObservedWorkload,
    jobset_from_dict,
    workload_from_dict,
)
from elastic_operator.render import (
    jobset_name,
    render,
    render_workload,
    workload_name,
    workload_priority_class,
)
from elastic_operator.replacer import Replacer
from elastic_operator.slice_memo import SliceMemo

logger = logging.getLogger("elastic_operator")

# The API server's reason in a condition message: enough to act on, bounded.
MAX_REFUSAL_MESSAGE = 1024
# Reads and writes of one reconcile, tried again at once when the job changed in between.
CONFLICT_ATTEMPTS = 3
# A status change that only moves progress (core/pacing.py) is written at most this often
# per job; every other change at once.
PROGRESS_INTERVAL_S = 1.0
# The versions our last status writes of a job produced, kept to know them late.
OWN_VERSIONS_KEPT = 16
# A follow-up (replacement writes) that failed wakes the job after this backoff.
FOLLOW_UP_BACKOFF = Backoff(base_s=1.0, cap_s=60.0)


class Refused(Exception):
    """The API server refused an object the spec renders to (reported as InvalidSpec)."""


def refusal_message(obj: dict[str, Any], error: ApiError) -> str:
    """Why the job cannot run: the object the API server refused and its reason."""
    reason = error.message.strip().rstrip(".")
    if len(reason) > MAX_REFUSAL_MESSAGE:
        reason = reason[:MAX_REFUSAL_MESSAGE - 3] + "..."
    return (f"the API server refused the {obj.get('kind')} "
            f"{obj.get('metadata', {}).get('name')} rendered from this spec "
            f"(HTTP {error.status}): {reason}")


# Wake a job's reconcile after some seconds (a grace period that ends); thread-safe.
Wake = Callable[[str, str, float], None]


class Marked(Protocol):
    """SliceIndex.mark: told a job's slices as computed; True when a pod change that
    came meanwhile may already have moved one."""

    def __call__(self, job: tuple[str, str], slices: list[SliceStatus], *,
                 exact: bool = True) -> bool: ...


class WorkQueue(Protocol):
    """The work queue (scheduler.py), as a reconcile uses it: to be woken later, and
    what it says of the job's running reconcile."""

    def add_after(self, namespace: str, name: str, delay_s: float) -> None: ...

    def add_paced(self, namespace: str, name: str, delay_s: float) -> None: ...

    def running(self, namespace: str, name: str) -> tuple[bool, bool]:
        """(named at once since the run started, the run started for progress only)"""
        ...

    def cover(self, namespace: str, name: str) -> None:
        """The run starts over from its reads: every naming so far is seen by it."""
        ...


class StartOver(Exception):
    """This pass of a reconcile is cut short for news (core/startover.py)."""


class Pass:
    """One pass of a reconcile of a job: times its phases and, at the end of each one
    before its status write, starts over if the job's news says so (core/startover.py;
    `queue` None: never)."""

    def __init__(self, timer: PhaseTimer, key: tuple[str, str],
                 queue: WorkQueue | None) -> None:
        self.timer, self.key, self.queue = timer, key, queue

    def mark(self, phase: str) -> None:
        self.timer.mark(phase)

    def done(self, phase: str, change: Callable[[], Change] | None = None) -> None:
        """End `phase`; `change`: what the pass would write (asked only on news)."""
        self.timer.mark(phase)
        if self.queue is None:
            return
        news, run_paced = self.queue.running(*self.key)
        if news and start_over(news=news, run_paced=run_paced,
                               change=None if change is None else change()):
            self.queue.cover(*self.key)
            raise StartOver(f"{self.key[0]}/{self.key[1]}: news during its {phase} phase")


class Reconciler:
    def __init__(self, kube: Kube, observations: Observations, metrics: OperatorMetrics,
                 clock: Clock = SYSTEM_CLOCK, *,
                 limiter: NodeActionLimiter | None = None, quarantine_pools: bool = True,
                 progress_interval_s: float = PROGRESS_INTERVAL_S,
                 pods_ready: PodsReadyTimeouts | None = None,
                 follow_ups: FollowUpRunner | None = None) -> None:
        self.kube = kube  # the writes
        # What follows a status write (replacement writes, Event posts): at once by
        # default; off the reconcile's thread in the operator (app.py).
        self.follow_ups = follow_ups or Inline()
        self.observations = observations  # the reads
        self.metrics = metrics
        self.clock = clock
        self.pods_ready = pods_ready or PodsReadyTimeouts()  # Kueue's, as we are told
        self.replacer = Replacer(kube, metrics, limiter or NodeActionLimiter(),
                                 quarantine_pools=quarantine_pools)
        self.wake: Wake | None = None  # set by app.py (the Scheduler's add_after)
        # ... and its add_paced (a progress write that waits), and the Scheduler itself
        # (news for a running reconcile: core/startover.py).
        self.wake_paced: Wake | None = None
        self.queue: WorkQueue | None = None
        # Set by app.py (SliceIndex.mark): told each job's slices as computed; True when
        # a pod change that came meanwhile may already have moved one (woken again).
        self.marked: Marked | None = None
        # (namespace, name, uid) of jobs whose children this process has created or made
        # sure of (the trainer's RBAC may be missing after an operator upgrade).
        self._children_ensured: set[tuple[str, str, str]] = set()
        # (namespace, name) -> the resourceVersion our last status write produced: the
        # watch event of that version is our own write, no news (`wrote`).
        self._written: dict[tuple[str, str], str] = {}
        # ... and the version that write was conditional on, with the job as the write's
        # response returned it: read instead of a GET while the cache still holds that
        # version (dropped when someone else wrote meanwhile).
        self._written_job: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}
        # ... and the versions our last few writes produced: one the job watch delivers
        # late (after our next write went out) is our own still, no news.
        self._own_versions: dict[tuple[str, str], deque[str]] = {}
        # (namespace, name) -> names of the Events in the job's stored outbox
        # (status.pendingEvents) that this process has posted: not posted again.
        self._posted: dict[tuple[str, str], set[str]] = {}
        # ... and those handed to the follow-up runner, not posted yet (not handed twice).
        self._posting: dict[tuple[str, str], set[str]] = {}
        # (namespace, name) -> consecutive failed follow-ups (their retry's backoff).
        self._follow_up_failures: dict[tuple[str, str], int] = {}
        # (namespace, name) -> the last of those versions the job cache has come to hold.
        self._seen: dict[tuple[str, str], str] = {}
        # Jobs whose status write is on its way, and the last version the job cache
        # delivered meanwhile (our write may come back before its response does).
        self._writing: dict[tuple[str, str], str | None] = {}
        # (namespace, name) -> monotonic time of our last status write (pacing).
        self.progress_interval_s = progress_interval_s
        self._last_write: dict[tuple[str, str], float] = {}
        # Progress-only writes of each job since its slices were last all Ready
        # (core/pacing.py: each waits longer). Lost on a restart: the new leader starts
        # over at one interval, which costs writes, not correctness.
        self._progress_streak: dict[tuple[str, str], int] = {}
        # (namespace, name) -> uids of worker Jobs this process is deleting (planned, the
        # DELETE maybe still queued): planned as being deleted (no second DELETE).
        self._deleted_jobs: dict[tuple[str, str], set[str]] = {}
        # Head pods handed to the follow-ups for a trainer restart (core/progress.py).
        self._restarted_pods: set[str] = set()
        # ... and those whose DELETE the API server has answered: seen as being deleted
        # by the status too (their pods' going is the replacement's teardown) before the
        # Job cache says so; never one only planned (a slow DELETE's Job is live: its pod
        # failing is a new failure, core/slices.py).
        self._sent_deletes: dict[tuple[str, str], set[str]] = {}
        # What each job's reconciles derived from its slices' pods, for the next one
        # (slice_memo.py: a failure costs a reconcile one slice, not the whole job).
        self._memos: dict[tuple[str, str], SliceMemo] = {}
        self._lock = threading.Lock()

    def use_queue(self, queue: WorkQueue) -> None:
        """Wake jobs through `queue` and ask it of their running reconciles (app.py)."""
        self.wake, self.wake_paced, self.queue = queue.add_after, queue.add_paced, queue

    def reconcile(self, namespace: str, name: str) -> bool:
        """One reconcile; False if it failed (logged and counted) and should be retried."""
        started, cpu = self.clock.monotonic(), time.thread_time()
        try:
            self._reconcile_fresh(namespace, name)
            return True
        except NotLeading as e:  # the new leader does what is left
            logger.warning("reconcile of %s/%s stopped: %s", namespace, name, e)
            return True
        except ApiError as e:
            if e.is_not_found(GROUP, PLURAL) or e.namespace_terminating:
                # The job or its namespace went away while we looked: nothing to do.
                logger.debug("reconcile of %s/%s: %s", namespace, name, e)
                return True
            self._failed(namespace, name)
        except Exception:
            self._failed(namespace, name)
        finally:
            self.metrics.reconcile_duration.observe(self.clock.monotonic() - started)
            self.metrics.reconcile_cpu.observe(time.thread_time() - cpu)
        return False

    def _failed(self, namespace: str, name: str) -> None:
        self.metrics.reconcile_errors.inc()
        logger.exception("reconcile of %s/%s failed", namespace, name)

    def forget(self, namespace: str, name: str) -> None:
        self._children_ensured = {k for k in self._children_ensured
                                  if (k[0], k[1]) != (namespace, name)}
        self._written.pop((namespace, name), None)
        self._written_job.pop((namespace, name), None)
        self._own_versions.pop((namespace, name), None)
        self._posted.pop((namespace, name), None)
        self._posting.pop((namespace, name), None)
        self._follow_up_failures.pop((namespace, name), None)
        self._seen.pop((namespace, name), None)
        self._last_write.pop((namespace, name), None)
        self._progress_streak.pop((namespace, name), None)
        self._deleted_jobs.pop((namespace, name), None)
        self._sent_deletes.pop((namespace, name), None)
        self._memos.pop((namespace, name), None)

    def wrote(self, namespace: str, name: str, resource_version: str | None) -> bool:
        """The job at this version is exactly what our last status write made of it (the
        write was conditional on the version it changed): reconciling it would find
        nothing new; so is a version an earlier write of ours made, come late (a job
        reconciled back to back writes again before the watch delivers the last one).
        Called for every version the job cache receives; while a write of the job is on
        its way the answer waits for its response (`_writing_status`)."""
        key = (namespace, name)
        with self._lock:
            if key in self._writing:
                self._writing[key] = resource_version
                return True  # decided when the write returns
            if resource_version is None:
                return False
            if self._written.get(key) != resource_version:
                return resource_version in self._own_versions.get(key, ())
            self._seen[key] = resource_version  # the cache holds our last write now
            return True

    @contextmanager
    def _writing_status(self, namespace: str, name: str) -> Iterator[None]:
        """Around a status write: a version the job cache delivers meanwhile is news
        unless it is the one the write made (then the job is woken, once)."""
        key = (namespace, name)
        with self._lock:
            self._writing[key] = None
        try:
            yield
        finally:
            with self._lock:
                arrived = self._writing.pop(key, None)
                news = arrived is not None and arrived != self._written.get(key) \
                    and arrived not in self._own_versions.get(key, ())
                if arrived is not None and not news:
                    self._seen[key] = arrived
                if news:  # someone wrote after us: our write's response is old news
                    self._written_job.pop(key, None)
            if news and self.wake is not None:
                self.wake(namespace, name, 0.0)

    def job_cache_listed(self) -> None:
        """The job cache listed every job again (a consistent read): it holds every write
        made before, whether or not its version came through the watch."""
        self._seen.update(self._written)

    def _read_job(self, namespace: str, name: str, fresh: bool) -> dict[str, Any] | None:
        """The job as the cache has it, unless our last status write has not come back
        through the cache yet (a write conditional on that older version would only be
        refused): then, if the cache still holds the version our write changed, as the
        write's response returned it (a job reconciled back to back, one slice failure
        after another, cost a GET each time), else, or when `fresh`, from the API
        server. A write of someone else's after ours is refused (409) like any other
        and read fresh."""
        key = (namespace, name)
        if not fresh:
            raw = self.observations.job(namespace, name)
            written = self._written.get(key)
            if raw is None or written is None or self._seen.get(key) == written:
                return raw
            if raw.get("metadata", {}).get("resourceVersion") == written:
                self._seen[key] = written
                return raw
            base, ours = self._written_job.get(key, (None, None))
            if ours is not None and base == raw.get("metadata", {}).get("resourceVersion") \
                    and ours.get("metadata", {}).get("resourceVersion") == written:
                return copy.deepcopy(ours)
        return self.observations.job(namespace, name, fresh=True)

    def _reconcile_fresh(self, namespace: str, name: str) -> None:
        """_reconcile, again from a fresh read when the job changed between our read and
        our status write (the trainer reported, or another replica wrote): the write is
        conditional on the version read, so a change is never applied twice. A pass cut
        short for news (core/startover.py) starts over once, from the caches."""
        attempt, may_start_over = 1, self.queue is not None
        while True:
            try:
                self._reconcile(namespace, name, fresh=attempt > 1,
                                may_start_over=may_start_over)
                return
            except StartOver:
                may_start_over = False
                self.metrics.reconciles_started_over.inc()
            except ApiError as e:
                if not e.is_conflict or attempt == CONFLICT_ATTEMPTS:
                    raise
                attempt += 1
                logger.debug("%s/%s changed while we reconciled it; again", namespace, name)

    def _reconcile(self, namespace: str, name: str, fresh: bool = False,
                   may_start_over: bool = False) -> None:
        step = Pass(PhaseTimer(self.metrics.reconcile_phase, self.clock.monotonic),
                    (namespace, name), self.queue if may_start_over else None)
        raw = self._read_job(namespace, name, fresh)
        if raw is None or raw.get("metadata", {}).get("deletionTimestamp"):
            return
        try:
            parsed = parse_job(raw)
            rendered = render(parsed.job)
        except ValueError as e:  # parse_job's InvalidJobSpec, or a spec render cannot take
            self._report_invalid_spec(raw, str(e))
            return
        step.done("read")
        job = parsed.job
        if job.spec.multikueue:  # it runs in a worker cluster; here, only its Workload
            self._reconcile_dispatched(raw, parsed, rendered)
            return
        children = (namespace, name, job.metadata.uid or "")
        jobset = self.observations.jobset(namespace, jobset_name(job))
        if jobset is not None and owned_by_another(job, jobset):
            self._report_name_conflict(raw, parsed, jobset)
            return
        pods = self.observations.pods(namespace, name)
        # After the pods (Observations.workload): pods going because Kueue took the job
        # back come with a Workload that says so.
        workload = self.observations.workload(namespace, jobset.uid or "") \
            if jobset is not None and wants_workload(job, jobset, parsed.previous) else None
        plan = plan_reconcile(job, rendered, jobset, parsed.previous, workload=workload,
                              ensure_children=children not in self._children_ensured)
        if plan.why_not:
            logger.debug("%s/%s: %s", namespace, name, plan.why_not)
        try:
            jobset, workload = self._execute(plan, jobset, workload)
        except Refused as e:
            self._report_invalid_spec(raw, str(e))
            return
        if plan.why_not is None:
            self._children_ensured.add(children)
        step.done("plan")
        observed = Observed(
            jobset=jobset, pods=pods,
            nodes=self.observations.nodes({p.node_name for p in pods if p.node_name}),
            checkpoint=self.observations.checkpoint(namespace, name,
                                                    job.spec.checkpoint.directory),
            # After the pods: their Jobs' own counts of failed pods (core/counting.py),
            # and whether a Job under replacement is being deleted yet.
            jobs=self._worker_jobs((namespace, name), jobset.name, planned=False)
            if jobset is not None else {},
            workload=workload, pools=self._pools(job),
            memo=self._memos.setdefault((namespace, name), SliceMemo()))
        step.done("observe")
        now = self.clock.now()
        new_status, events = compute_status(job, observed, parsed.previous, now,
                                            report_problem=parsed.report_problem,
                                            pods_ready=self.pods_ready)
        self.observations.note_failures(namespace, name, job.metadata.uid or "",
                                        new_status.pools)
        self._mark((namespace, name), job, new_status)
        self.metrics.record_spec(namespace, name, job.spec, new_status.training)
        step.done("status", lambda: pass_change(parsed.previous, new_status, events))
        # The status first: it records what the replacement is about to do, and carries
        # the change's Events. Then the replacement (the slice back at once matters more
        # than telling of it), then the Events (whoever sees one finds both done).
        with self._writing_status(namespace, name):
            pending = self._write_status(raw, parsed.previous, new_status, events, now)
        self._record_reaction(namespace, events, observed)
        step.mark("write")
        try:
            self._replace(raw, job, new_status, observed, now)
        finally:
            self._post_events(raw, pending, now)
        step.mark("replace")
        warn_in = next_look_in(new_status.admission, self.pods_ready, now)
        if warn_in is not None and self.wake is not None:  # Kueue's deadline draws near
            self.wake(namespace, name, warn_in + 0.1)

    def _reconcile_dispatched(self, raw: dict[str, Any], parsed: ParsedJob,
                              rendered: list[dict[str, Any]]) -> None:
        """A MultiKueue job on the manager cluster (core/dispatch.py): its Workload (made,
        suspended, told PodsReady, its quota released after an eviction), and the status
        only while MultiKueue has not dispatched it (once it has, the status is the
        worker's copy's, copied back by MultiKueue: not written, its Events not posted
        here, unless that worker cannot be reached: read at each reconcile, so within a
        resync)."""
        job, previous = parsed.job, parsed.previous
        namespace, name = job.metadata.namespace or "", job.metadata.name
        workload = self.observations.dispatch_workload(namespace, workload_name(job))
        if workload is None:  # its priority is read for the Workload about to be made
            try:
                rendered = [render_workload(job, self._priority(job))]
            except Refused as e:
                self._report_invalid_spec(raw, str(e))
                return
        plan = plan_dispatch(job, rendered, workload, previous, self.clock.now())
        if plan.why_not:
            logger.debug("%s/%s: %s", namespace, name, plan.why_not)
        try:
            _, workload = self._execute(plan, None, workload)
        except Refused as e:
            self._report_invalid_spec(raw, str(e))
            return
        now = self.clock.now()
        status, events = dispatch_status(job, workload, previous, now)
        if status is None and workload is not None and workload.cluster_name is not None:
            cluster = self.observations.worker_cluster(workload.cluster_name)
            status, events = worker_lost_status(job, workload, cluster, previous, now)
        if status is None:
            return
        with self._writing_status(namespace, name):
            pending = self._write_status(raw, previous, status, events, now)
        self._post_events(raw, pending, now)

    def _priority(self, job: ElasticTrainingJob) -> ObservedPriorityClass | None:
        """The priority class a MultiKueue job's Workload is ordered by, as read; Refused
        when the job names one that does not exist (Kueue's integration makes no Workload
        for such a job either)."""
        ref = workload_priority_class(job)
        if ref is None:
            return None
        found = self.observations.priority_class(ref)
        if found is None:
            where = f"label {KUEUE_PRIORITY_CLASS_LABEL}" \
                if ref.kind == WORKLOAD_PRIORITY_CLASS_KIND else "spec.priorityClassName"
            raise Refused(f"{where} names {ref.kind} {ref.name!r}, which does not exist: "
                          f"create it, or name one that exists (kubectl get {ref.kind.lower()}"
                          "es)")
        return found

    def _pools(self, job: ElasticTrainingJob) -> tuple[ObservedPool, ...]:
        """The node pools of the job's TPU shape (none when it is not placed on TPUs)."""
        if job.spec.placement != "TPU" and job.spec.backend != "pathways":
            return ()
        shape = slice_shape(job.spec.tpu.type, job.spec.tpu.topology)
        return self.observations.pools(job.metadata.namespace or "", job.metadata.name,
                                       shape.family.accelerator_label, shape.topology)

    def _replace(self, raw: dict[str, Any], job: ElasticTrainingJob,
                 status: ElasticTrainingJobStatus, observed: Observed, now: datetime) -> None:
        """Act on the replacement records the status now carries (core/replacement.py):
        planned here, written by a follow-up (the status already records the intent)."""
        jobset = observed.jobset
        namespace = job.metadata.namespace or ""
        key = (namespace, job.metadata.name)
        # The progress deadline comes due (core/progress.py): woken then, whatever else.
        self._wake_after(key, [next_progress_look_in(job.spec, status.progress, now)])
        if jobset is None or jobset.suspended or is_terminal(status):
            return
        restart = plan_trainer_restart(namespace, jobset.name, status.progress,
                                       observed.head_pods)
        if restart is not None and restart.pod_uid not in self._restarted_pods:
            self._restarted_pods.add(restart.pod_uid)  # its deletion is on its way
            self._act(raw, key, (restart,), now)
        if not job.spec.recovery.replace_slices:
            return
        if needs_jobs(status):  # read again: a Job deleted since the look is being deleted
            observed = replace(observed, jobs=self._worker_jobs(key, jobset.name, planned=True))
        plan = plan_replacements(namespace, jobset.name, job.spec, status, observed, now)
        if plan.actions:
            self._act(raw, key, plan.actions, now)
        waits = [plan.wake_after_s, next_notice_in(job.spec, observed, now)]
        request = status.checkpoint_request
        if request is not None and request.phase == "Requested":
            waits.append((request.deadline - now).total_seconds())
        self._wake_after(key, waits)

    def _act(self, raw: dict[str, Any], key: tuple[str, str],
             actions: tuple[ReplacementAction, ...], now: datetime) -> None:
        """Hand the replacement's writes to the follow-up runner. A Job to delete counts
        as being deleted from now on (the next reconcile may plan before the DELETE
        returns: no second one); again not, should the DELETE not go through."""
        # Deleted (or found gone or replaced, which plans the same): never again.
        deleted = {a.uid for a in actions if isinstance(a, DeleteWorkerJob)}
        with self._lock:
            self._deleted_jobs.setdefault(key, set()).update(deleted)

        def write() -> None:
            try:
                throttled = self.replacer.execute(raw, actions, now)
            except Exception as e:
                with self._lock:
                    self._deleted_jobs.get(key, set()).difference_update(deleted)
                self._follow_up_failed(key, e)
                return
            with self._lock:  # answered: deleted, or found gone or replaced
                self._sent_deletes.setdefault(key, set()).update(deleted)
            self._follow_up_failures.pop(key, None)
            self._wake_after(key, [throttled])

        self.follow_ups.submit(key, write)

    def _follow_up_failed(self, key: tuple[str, str], error: Exception) -> None:
        """A follow-up's write failed: counted and logged as a failed reconcile would
        be, and the job reconciled again after a backoff (it plans the write again)."""
        if isinstance(error, NotLeading):  # the new leader does what is left
            logger.warning("follow-up of %s/%s stopped: %s", *key, error)
            return
        self.metrics.reconcile_errors.inc()
        logger.error("follow-up of %s/%s failed", *key, exc_info=error)
        failures = self._follow_up_failures[key] = self._follow_up_failures.get(key, 0) + 1
        self._wake_after(key, [FOLLOW_UP_BACKOFF.delay(failures)])

    def _wake_after(self, key: tuple[str, str], waits: list[float | None]) -> None:
        due = [w for w in waits if w is not None]
        if due and self.wake is not None:
            # A little after the due time: the check compares against the clock then.
            self.wake(key[0], key[1], max(0.0, min(due)) + 0.1)

    def _worker_jobs(self, key: tuple[str, str], jobset: str, *,
                     planned: bool) -> dict[int, ObservedJob]:
        """The worker Jobs from the cache; one this process deleted is being deleted,
        whether or not the cache has seen it yet (`planned`: or is about to delete)."""
        jobs = self.observations.worker_jobs(key[0], jobset)
        with self._lock:
            deleting: set[str] = set()
            for marks in (self._deleted_jobs, self._sent_deletes) if planned \
                    else (self._sent_deletes,):
                marked = marks.get(key)
                if marked:
                    marked &= {j.uid for j in jobs.values()}  # the others left the cache
                    deleting |= marked
        if not deleting:
            return jobs
        return {i: replace(j, deleting=True) if j.uid in deleting else j
                for i, j in jobs.items()}

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
            seen = [self.observations.pod_seen_at(namespace, p.name)
                    for p in by_slice.get(index, []) if p.failed or p.terminating]
            known = [t for t in seen if t is not None]
            if known:
                self.metrics.reaction.observe(max(0.0, written - min(known)))

    def _execute(self, plan: Plan, jobset: ObservedJobSet | None,
                 workload: ObservedWorkload | None,
                 ) -> tuple[ObservedJobSet | None, ObservedWorkload | None]:
        """Run the plan's actions in order; the JobSet and the Workload as the last
        writes returned them."""
        for action in plan.actions:
            match action:
                case CreateObject() if action.kind == "Workload":
                    workload = self._create_workload(action) or workload
                case CreateObject():
                    jobset = self._create(action) or jobset
                case PatchJobSetSuspend():
                    patched = self.kube.patch_jobset_suspend(action.namespace, action.jobset,
                                                             action.suspend)
                    logger.info("%s JobSet %s/%s", "suspended" if action.suspend else "resumed",
                                action.namespace, action.jobset)
                    jobset = jobset_from_dict(patched)
                case SetWorkloadActive():
                    patched = self.kube.patch_workload_active(
                        action.namespace, action.workload, action.active,
                        action.suspended_after_worker_lost)
                    logger.info("%s Workload %s/%s%s", "reactivated" if action.active
                                else "deactivated", action.namespace, action.workload,
                                "" if action.suspended_after_worker_lost is None else
                                " (its worker cluster was lost; redispatch not allowed)")
                    workload = workload_from_dict(patched)
                case ReleaseEvictedWorkload():
                    patched = self.kube.patch_workload_status(action.namespace,
                                                              action.workload,
                                                              list(action.ops))
                    logger.info("Workload %s/%s: evicted, its quota released (the job "
                                "runs in no pod here)", action.namespace, action.workload)
                    workload = workload_from_dict(patched)
                case AnnotateDispatchedTo():
                    self.kube.annotate_dispatched_to(action.namespace, action.name,
                                                     action.cluster)
                    logger.info("%s/%s: dispatched to %s", action.namespace, action.name,
                                action.cluster or "no cluster (taken back)")
                case SetWorkloadCondition():
                    patched = self.kube.apply_workload_condition(
                        action.namespace, action.workload, action.condition)
                    logger.info("Workload %s/%s: %s %s (%s)", action.namespace,
                                action.workload, action.condition["type"],
                                action.condition["status"], action.condition["reason"])
                    workload = workload_from_dict(patched)
                case _:
                    assert_never(action)
        return jobset, workload

    def _create_workload(self, action: CreateObject) -> ObservedWorkload | None:
        """Create a MultiKueue job's Workload; the Workload as it now is."""
        created = self._created(action)
        if created is not None:
            return workload_from_dict(created)
        meta = action.obj.get("metadata", {})
        return self.observations.dispatch_workload(meta.get("namespace", ""),
                                                   meta.get("name", ""))

    def _create(self, action: CreateObject) -> ObservedJobSet | None:
        """Create one object; for a JobSet, the JobSet as it now is."""
        meta = action.obj.get("metadata", {})
        created = self._created(action)
        if action.kind != "JobSet":
            return None
        if created is not None:
            return jobset_from_dict(created)
        return self.observations.jobset(meta.get("namespace", ""), meta.get("name", ""))

    def _created(self, action: CreateObject) -> dict[str, Any] | None:
        """Create one object: as created, or None if it existed."""
        meta = action.obj.get("metadata", {})
        try:
            created = self.kube.create(action.obj)
        except ApiError as e:
            if not e.refuses_object:
                raise
            # Admitted, yet what it renders to is refused (an int32 overflow, a quantity
            # or name the CRD schema cannot check): say so in the status, once; raising
            # would only repeat the refusal at every resync.
            raise Refused(refusal_message(action.obj, e)) from e
        # "found" is no news (a job whose JobSet is refused retries every resync).
        logger.log(logging.INFO if created is not None else logging.DEBUG, "%s %s %s/%s",
                   "created" if created is not None else "found", action.kind,
                   meta.get("namespace"), meta.get("name"))
        return created

    def _write_status(self, raw: dict[str, Any], previous: ElasticTrainingJobStatus,
                      new: ElasticTrainingJobStatus, events: list[StatusEvent],
                      now: datetime) -> list[PendingEvent]:
        """Write the status with the change's Events in it (status.pendingEvents, the
        outbox) and record the metrics; the outbox written, for `_post_events` after.

        One that dies after the write leaves the Events to the next reconcile, its own or
        a new leader's, which posts what it has not posted itself (a second copy is
        refused: 409). Its write keeps in the outbox every entry not yet posted (one
        still on its way, or refused by the API server) and clears the rest, whichever
        change it carries: at most one more write per change with Events, usually none."""
        meta = raw.get("metadata", {})
        namespace, name = meta.get("namespace", ""), meta.get("name", "")
        key = (namespace, name)
        stored = previous.pending_events or []
        # Committed by an earlier write (ours, or of a replica that died after it). One not
        # posted yet (on its way, or refused for now: 429, 5xx) stays in the outbox.
        self._post_events(raw, stored, now)
        with self._lock:
            posted_before = set(self._posted.get(key, ()))
        pending = outbox(name, meta.get("uid") or "", events, new)
        fresh = {e.name for e in pending}
        pending = [*(e for e in stored if e.name not in posted_before | fresh), *pending]
        new = new.model_copy(update={"pending_events": pending or None})
        patch = status_patch(previous, new)
        progress = patch is not None and progress_only(previous, new)
        if progress and self._paced(namespace, name):
            return pending  # none: a progress-only change carries no Events
        written_at = self.clock.now().timestamp()
        if patch is not None:
            # Conditional on the version read: ApiError 409 if the job changed meanwhile
            # (then nothing of this change is posted: it is computed again).
            written = self.kube.patch_job_status(namespace, name, patch,
                                                 meta.get("resourceVersion"))
            self._remember_write(key, meta.get("resourceVersion"), written)
            self._last_write[key] = self.clock.monotonic()
            streak = self._progress_streak.get(key, 0)
            self._progress_streak[key] = 0 if settled(new) else streak + int(progress)
            self.metrics.status_writes.labels("progress" if progress else "change").inc()
            written_at = self.clock.now().timestamp()
        # The status holds this outbox now: what was posted of the one it replaced no
        # longer matters.
        with self._lock:
            posted = self._posted.setdefault(key, set())
            posted &= {e.name for e in pending}
        # Metrics before the Events: whoever sees an Event finds its metrics recorded.
        self.metrics.record_status(namespace, name, previous, new)
        self.metrics.record_events(namespace, events, written_at)
        self.metrics.record_decisions(namespace, name, events)
        return pending

    def _mark(self, key: tuple[str, str], job: ElasticTrainingJob,
              status: ElasticTrainingJobStatus) -> None:
        """Tell the slice index the slices as computed; a pod change judged meanwhile
        against the slices before may have moved one: the job again at the interval."""
        if self.marked is not None and self.wake is not None and self.marked(
                key, status.slices or [], exact=job.spec.tpu.topology_aware is None):
            self.metrics.count_wake("recheck")
            self.wake(key[0], key[1], self.progress_interval_s)

    def progress_due_in(self, namespace: str, name: str) -> float:
        """How soon the job's next progress-only write may go (`_paced`): at least one
        interval, so that the changes of that interval go in one reconcile."""
        key = (namespace, name)
        last = self._last_write.get(key)
        if last is None:
            return self.progress_interval_s
        interval = progress_interval(self.progress_interval_s,
                                     self._progress_streak.get(key, 0))
        return max(self.progress_interval_s, last + interval - self.clock.monotonic())

    def _paced(self, namespace: str, name: str) -> bool:
        """Whether a progress-only write (core/pacing.py) waits: one within the job's
        progress interval of its last write does (`progress_interval_s`, doubled for each
        progress write of this recovery before it, capped). The reconcile that ends the
        wait (woken then, or sooner by an event) computes the status again and writes
        the latest: level-based, nothing but the intermediate counts is skipped."""
        key = (namespace, name)
        last = self._last_write.get(key)
        if last is None or self.progress_interval_s <= 0:
            return False
        interval = progress_interval(self.progress_interval_s,
                                     self._progress_streak.get(key, 0))
        wait = last + interval - self.clock.monotonic()
        if wait <= 0:
            return False
        self.metrics.status_writes_deferred.inc()
        wake = self.wake_paced or self.wake
        if wake is not None:
            wake(namespace, name, wait)
        return True

    def _remember_write(self, key: tuple[str, str], base: str | None,
                        written: dict[str, Any] | None) -> None:
        """Our status write changed version `base` into `written`."""
        version = ((written or {}).get("metadata") or {}).get("resourceVersion")
        if isinstance(version, str) and written is not None:
            with self._lock:
                self._written[key] = version
                self._own_versions.setdefault(key, deque(maxlen=OWN_VERSIONS_KEPT)).append(
                    version)
        if isinstance(version, str) and written is not None and base:
            self._written_job[key] = (base, written)
        else:
            self._written_job.pop(key, None)

    def _post_events(self, raw: dict[str, Any], entries: list[PendingEvent],
                     now: datetime) -> None:
        """Hand the follow-up runner the outbox entries this process has neither posted
        nor handed it yet. One that fails is tried again by the next reconcile, which
        finds it still in the status."""
        meta = raw.get("metadata", {})
        key = (meta.get("namespace", ""), meta.get("name", ""))
        with self._lock:
            posted = self._posted.setdefault(key, set())
            posting = self._posting.setdefault(key, set())
            todo = [e for e in entries if e.name not in posted and e.name not in posting]
            posting.update(e.name for e in todo)
        if todo:
            self.follow_ups.submit(key, lambda: self._post_now(raw, key, todo, now))

    def _post_now(self, raw: dict[str, Any], key: tuple[str, str],
                  entries: list[PendingEvent], now: datetime) -> None:
        namespace, name = key
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
                with self._lock:
                    posted = self._posted.get(key)
                    if posted is not None:  # (None: the job was forgotten meanwhile)
                        posted.add(entry.name)
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
            with self._lock:
                self._posting.get(key, set()).difference_update(e.name for e in entries)

    def _report_name_conflict(self, raw: dict[str, Any], parsed: ParsedJob,
                              jobset: ObservedJobSet) -> None:
        """The JobSet of the job's name is another object's (core/status.py
        `name_conflict_status`): say so, read nothing of it; its deletion wakes the job."""
        namespace, name = parsed.job.metadata.namespace or "", parsed.job.metadata.name
        now = self.clock.now()
        status = name_conflict_status(parsed.job, jobset, parsed.previous, now)
        logger.debug("%s/%s: JobSet %s is owned by another object", namespace, name,
                     jobset.name)
        with self._writing_status(namespace, name):
            self._write_status(raw, parsed.previous, status, [], now)

    def _report_invalid_spec(self, raw: dict[str, Any], message: str) -> None:
        meta = raw.get("metadata", {})
        raw_status = raw.get("status")
        previous, _ = parse_status(raw_status if isinstance(raw_status, dict) else {})
        new = invalid_spec_status(previous, message, self.clock.now(), meta.get("generation"))
        patch = status_patch(previous, new)
        if patch is None:  # already reported: a resync must not repeat the warning
            logger.debug("%s/%s: invalid spec: %s", meta.get("namespace"), meta.get("name"),
                         message)
            return
        self.kube.patch_job_status(meta.get("namespace", ""), meta.get("name", ""), patch,
                                   meta.get("resourceVersion"))
        logger.warning("%s/%s: invalid spec: %s", meta.get("namespace"), meta.get("name"),
                       message)
