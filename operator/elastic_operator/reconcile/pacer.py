"""The progress pacer: a status change that only moves progress (core/pacing.py) is
written at most once per progress interval per job, the interval doubled for each
progress write of the same recovery before it (capped); every other change at once.

The reconcile that ends the wait (woken then, or sooner by an event) computes the status
again and writes the latest: level-based, nothing but the intermediate counts is skipped.
"""
from __future__ import annotations

from elastic_api.clock import Clock
from elastic_operator.core.pacing import progress_interval
from elastic_operator.metrics.metrics import OperatorMetrics
from elastic_operator.model.job_memory import JobKey, JobMemories

# A progress-only change is written at most this often per job (doubling from there).
PROGRESS_INTERVAL_S = 1.0


class ProgressPacer:
    def __init__(self, memory: JobMemories, metrics: OperatorMetrics, clock: Clock,
                 interval_s: float = PROGRESS_INTERVAL_S) -> None:
        self.memory = memory
        self.metrics = metrics
        self.clock = clock
        self.interval_s = interval_s

    def wait(self, key: JobKey) -> float | None:
        """How long a progress-only write of the job waits (counted as deferred); None: it
        goes now (none within the job's progress interval of its last write)."""
        remembered = self.memory.peek(key)
        if remembered is None or remembered.last_write is None or self.interval_s <= 0:
            return None
        interval = progress_interval(self.interval_s, remembered.progress_streak)
        wait = remembered.last_write + interval - self.clock.monotonic()
        if wait <= 0:
            return None
        self.metrics.status_writes_deferred.inc()
        return wait

    def wrote(self, key: JobKey, *, progress: bool, settled: bool) -> None:
        """A status write of the job went out (`progress`: a progress-only one; `settled`:
        its slices all Ready, which ends the streak)."""
        remembered = self.memory.of(key)
        remembered.last_write = self.clock.monotonic()
        remembered.progress_streak = 0 if settled else remembered.progress_streak + int(progress)

    def next_write_in(self, namespace: str, name: str) -> float:
        """How soon the job's next progress-only write may go: at least one interval, so
        that the changes of that interval go in one reconcile."""
        remembered = self.memory.peek((namespace, name))
        if remembered is None or remembered.last_write is None:
            return self.interval_s
        interval = progress_interval(self.interval_s, remembered.progress_streak)
        return max(self.interval_s, remembered.last_write + interval - self.clock.monotonic())
