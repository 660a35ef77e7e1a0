"""What this process remembers of each job between its reconciles, in one place: forgetting
a deleted job is one `pop`.

None of it is the job's truth (the status is): each field saves a request, a write or a
wait, and is lost on a restart like any cache (the new leader reads and writes again).
The reconcile's collaborators each keep their part here (own_writes.py, outbox.py,
pacer.py, replacement_followups.py), and so do the parts beside them: the slice index
(the slices as last computed), the checkpoint scanner (its scans) and the work queue (its
failures and pending looks), each under its own lock, and the metrics (which series a job
has). Follow-ups run after their reconcile,
while the job's next one may run (work_queue.py), and the job cache asks
`OwnWrites.wrote` from its own thread: what they share is read and written under
`lock`. A follow-up holds the JobMemory of the job it was handed for, so one that ends
after the job was forgotten writes to that object, never to a new job of the same name.
"""
from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from elastic_api.models import CheckpointStatus, ElasticTrainingJobStatus
from elastic_operator.model.objects import RefusedJob
from elastic_operator.model.slice_memo import SliceMemo

JobKey = tuple[str, str]  # (namespace, name)
# The versions our last status writes of a job produced, kept to know them late.
OWN_VERSIONS_KEPT = 16


@dataclass
class JobMemory:
    # The uid of the job whose children this process has created or made sure of (the
    # trainer's RBAC may be missing after an operator upgrade).
    children_ensured: str | None = None
    # --- our own status writes (own_writes.py) ---
    # The resourceVersion our last status write produced: the watch event of that
    # version is our own write, no news.
    written: str | None = None
    # ... and the version that write was conditional on, with the job as the write's
    # response returned it: read instead of a GET while the cache still holds that
    # version (dropped when someone else wrote meanwhile).
    written_job: tuple[str, dict[str, Any]] | None = None
    # ... and the versions our last few writes produced: one the job watch delivers late
    # (after our next write went out) is our own still, no news.
    own_versions: deque[str] = field(default_factory=lambda: deque(maxlen=OWN_VERSIONS_KEPT))
    # The last of those versions the job cache has come to hold.
    seen: str | None = None
    # A status write is on its way, and the last version the job cache delivered
    # meanwhile (our write may come back before its response does).
    writing: bool = False
    arrived: str | None = None
    # ... and whether that version was someone else's: the reconcile looks again at once.
    overwritten: bool = False
    # The status our last status write meant (core/provenance.py: the operator's records
    # read back must be these); None: none known (not written since this replica leads,
    # or a write whose outcome is unknown).
    own_status: ElasticTrainingJobStatus | None = None
    # The status fields found written by someone else, said once (reconciler.py).
    foreign_said: set[str] = field(default_factory=set)
    # --- the Event outbox (outbox.py) ---
    # Names of the Events in the stored outbox (status.pendingEvents) this process has
    # posted: not posted again; and those handed to the follow-ups, not posted yet.
    posted: set[str] = field(default_factory=set)
    posting: set[str] = field(default_factory=set)
    # --- pacing (pacer.py) ---
    # Monotonic time of our last status write.
    last_write: float | None = None
    # Progress-only writes since the job's slices were last all Ready (core/pacing.py:
    # each waits longer). Lost on a restart: the new leader starts over at one interval,
    # which costs writes, not correctness.
    progress_streak: int = 0
    # --- replacement follow-ups (replacement_followups.py) ---
    # (A failed follow-up is a failed outcome, counted by the work queue with the
    # reconcile's: one retry backoff.)
    # Uids of worker Jobs this process is deleting (planned, the DELETE maybe still
    # queued): planned as being deleted (no second DELETE).
    deleted_jobs: set[str] = field(default_factory=set)
    # ... and those whose DELETE the API server has answered: seen as being deleted by
    # the status too (their pods' going is the replacement's teardown) before the Job
    # cache says so; never one only planned (a slow DELETE's Job is live: its pod
    # failing is a new failure, core/slices.py).
    sent_deletes: set[str] = field(default_factory=set)
    # Head pods handed to the follow-ups for a trainer restart (core/progressing.py).
    restarted_pods: set[str] = field(default_factory=set)
    # The name of the Warning Event of a refusal (schema_guard.py) posted: once a job.
    schema_warned: str | None = None
    # --- Jobs the JobSet has not created (core/refused_jobs.py, watch/job_refusals.py) ---
    # When each missing Job (by name) was first seen missing; when the last server-side
    # dry run of them was sent, and the refusals it answered (kept until the next).
    missing_since: dict[str, datetime] = field(default_factory=dict)
    dry_run_at: datetime | None = None
    refused: tuple[RefusedJob, ...] = ()
    # What the job's reconciles derived from its slices' pods, for the next one
    # (slice_memo.py: a failure costs a reconcile one slice, not the whole job).
    memo: SliceMemo = field(default_factory=SliceMemo)
    # --- the slice index (watch/slice_index.py) ---
    # Its slices as the job's last reconcile computed them, by index (core/wakes.py
    # `ComputedSlice`; model/ imports no core), None until one did or while not judged.
    # Read and written under the slice index's lock, not `lock`.
    computed: dict[int, Any] | None = None
    # --- metrics (metrics/metrics.py, job_metrics.py) ---
    # The job has per-job series (its counters started at 0), series of its spec, and
    # per-slice series of these slice indices: what forgetting the job removes.
    series: bool = False
    spec_series: bool = False
    slice_series: set[int] | None = None
    # --- the work queue (queue/work_queue.py), under the queue's lock, not `lock` ---
    # Consecutive failed runs (a reconcile, or its follow-ups): the retry's backoff, the
    # one count of them.
    failures: int = 0
    # When its pending looks come due (time.monotonic()), by kind: "retry", "wake",
    # "paced" (the queue's heap orders them across jobs).
    looks: dict[str, float] = field(default_factory=dict)
    # --- checkpoint scans (checkpoints/scanner.py), under the scanner's lock ---
    # Monotonic time the last scan started, the one running, the last one finished.
    scan_started: float | None = None
    scan_running: Future[CheckpointStatus] | None = None
    scan_result: CheckpointStatus | None = None


class JobMemories:
    """Every job's JobMemory, by (namespace, name)."""

    def __init__(self) -> None:
        # Guards the map and the fields more than one thread touches (see above).
        self.lock = threading.RLock()
        self._jobs: dict[JobKey, JobMemory] = {}

    def of(self, key: JobKey) -> JobMemory:
        """The job's memory, made empty the first time."""
        with self.lock:
            memory = self._jobs.get(key)
            if memory is None:
                memory = self._jobs[key] = JobMemory()
            return memory

    def peek(self, key: JobKey) -> JobMemory | None:
        """The job's memory if it has one (asking makes none)."""
        with self.lock:
            return self._jobs.get(key)

    def job_keys(self) -> list[JobKey]:
        with self.lock:
            return list(self._jobs)

    def all(self) -> list[JobMemory]:
        with self.lock:
            return list(self._jobs.values())

    def items(self) -> list[tuple[JobKey, JobMemory]]:
        with self.lock:
            return list(self._jobs.items())

    def forget_job(self, key: JobKey) -> None:
        """The job was deleted: everything remembered of it goes."""
        with self.lock:
            self._jobs.pop(key, None)

    def __len__(self) -> int:
        with self.lock:
            return len(self._jobs)
