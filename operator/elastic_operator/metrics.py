"""Prometheus metrics of the operator (listed in docs/metrics.md).

Low cardinality: labels are at most `namespace` and `job`. Counters follow the job's
status counters (the delta between the previous and the new status), so a restarted
operator neither double-counts nor loses what the status already recorded.
"""
from __future__ import annotations

import contextlib

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from pydantic.alias_generators import to_camel

from elastic_api.conditions import Reason
from elastic_api.models import BadputSeconds, ElasticTrainingJobStatus
from elastic_operator.core.events import StatusEvent

_LATENCY_BUCKETS = (0.25, 0.5, 1, 2, 3, 5, 10, 15, 20, 30, 45, 60, 120, 300)
_RECOVERY_BUCKETS = (5, 10, 20, 30, 60, 90, 120, 180, 300, 600, 1200, 3600)
_STEPS_BUCKETS = (0, 1, 5, 10, 25, 50, 100, 250, 500, 1000, 5000)
_RECONCILE_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
_JOB_LABELS = ["namespace", "job"]


class OperatorMetrics:
    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self._declare_job_metrics(registry)
        self._declare_operator_metrics(registry)
        self._declare_replacement_metrics(registry)
        self._declare_goodput_metrics(registry)

    def _declare_job_metrics(self, registry: CollectorRegistry) -> None:
        """What happened to the jobs: failures, recoveries, slices."""
        labels = _JOB_LABELS
        self.slice_failures = Counter(
            "etj_slice_failures_total", "Worker slices that went Down.", labels,
            registry=registry)
        self.elastic_events = Counter(
            "etj_elastic_events_total", "Elastic events the trainer reported.", labels,
            registry=registry)
        self.trainer_restarts = Counter(
            "etj_trainer_restarts_total",
            "New trainer processes that replaced a reporting one (head container restarts).",
            labels, registry=registry)
        self.preemptions = Counter(
            "etj_preemptions_total",
            "Times Kueue preempted the job (evicted it to admit another); not slice failures.",
            labels, registry=registry)
        self.detection_latency = Histogram(
            "etj_slice_down_detection_seconds",
            "From a host's failure (container finishedAt, delete request, node NotReady) to "
            "the SliceDown condition being written.", ["namespace"],
            buckets=_LATENCY_BUCKETS, registry=registry)
        self.recovery_duration = Histogram(
            "etj_recovery_duration_seconds",
            "Downtime of a recovery: detection to the first step after the restore.",
            ["namespace"], buckets=_RECOVERY_BUCKETS, registry=registry)
        self.steps_lost = Histogram(
            "etj_recovery_steps_lost", "Training steps lost per recovery.", ["namespace"],
            buckets=_STEPS_BUCKETS, registry=registry)
        self.active_slices = Gauge(
            "etj_active_slices", "Slices the trainer's mesh spans (its last report).", labels,
            registry=registry)
        self.desired_slices = Gauge(
            "etj_desired_slices", "spec.tpu.numSlices.", labels, registry=registry)
        self.ready_slices = Gauge(
            "etj_ready_slices", "Slices whose hosts are all ready.", labels, registry=registry)

    def _declare_operator_metrics(self, registry: CollectorRegistry) -> None:
        """The operator itself: reconciles, leadership, caches."""
        self.reconcile_duration = Histogram(
            "etj_reconcile_duration_seconds", "Duration of one reconcile of one job.",
            buckets=_RECONCILE_BUCKETS, registry=registry)
        self.reconcile_errors = Counter(
            "etj_reconcile_errors_total",
            "Reconciles that failed (each is retried with backoff).",
            registry=registry)
        self.duplicate_events = Counter(
            "etj_events_already_posted_total",
            "Events not posted because the same status change was posted before (by a "
            "retried write, or by the previous leader).", registry=registry)
        self.leader = Gauge(
            "etj_leader", "1 while this replica holds the leader Lease and reconciles, "
            "0 while it stands by.", ["identity"], registry=registry)
        self.cache_relists = Counter(
            "etj_cache_relists_total",
            "Full lists of a watch-fed cache, by why: start, expired (resourceVersion too "
            "old, e.g. after an API server restart), stalled (the watch fell silent).",
            ["resource", "reason"], registry=registry)
        self.cache_objects = Gauge(
            "etj_cache_objects", "Objects in a watch-fed cache.", ["resource"],
            registry=registry)

    def _declare_replacement_metrics(self, registry: CollectorRegistry) -> None:
        """Slice replacement (docs/architecture.md, "Slice replacement")."""
        labels = _JOB_LABELS
        self.slice_replacements = Counter(
            "etj_slice_replacements_total",
            "What the operator decided for a failed slice: Replace (recreate its Job), Move "
            "(maintenance), GiveUp (restart budget spent).", [*labels, "action"],
            registry=registry)
        self.replacement_duration = Histogram(
            "etj_slice_replacement_seconds",
            "From the operator's decision to replace (or move) a slice to the slice Ready "
            "again.", ["namespace"], buckets=_LATENCY_BUCKETS, registry=registry)
        self.pods_force_deleted = Counter(
            "etj_stuck_pods_force_deleted_total",
            "Pods Terminating on a node that is not Ready, deleted with grace period 0.",
            registry=registry)
        self.pool_quarantines = Counter(
            "etj_pool_quarantines_total", "Node pools the operator quarantined, by reason.",
            ["reason"], registry=registry)
        self.pool_releases = Counter(
            "etj_pool_releases_total", "Quarantined node pools released (healthy again).",
            registry=registry)
        self.node_actions_throttled = Counter(
            "etj_node_actions_throttled_total",
            "Force-deletes and quarantines held back by the node-action rate limit or "
            "cooldown.", registry=registry)
        self.checkpoint_requests = Counter(
            "etj_checkpoint_requests_total",
            "Checkpoint requests to the trainer (maintenance), by how they ended: "
            "Requested, Acknowledged, Expired.", ["namespace", "result"], registry=registry)

    def _declare_goodput_metrics(self, registry: CollectorRegistry) -> None:
        """Goodput (docs/metrics.md, "Goodput"), following status.goodput."""
        labels = _JOB_LABELS
        self.goodput_ratio = Gauge(
            "etj_goodput_ratio", "Productive training time over wall time since the job "
            "started (status.goodput.ratio).", labels, registry=registry)
        self.productive_seconds = Counter(
            "etj_productive_seconds_total", "Step time of steps whose results were kept.",
            labels, registry=registry)
        self.badput_seconds = Counter(
            "etj_badput_seconds_total", "Time lost, by cause (status.goodput.badputSeconds).",
            [*labels, "cause"], registry=registry)
        self.slice_down_seconds = Counter(
            "etj_slice_down_seconds_total",
            "The operator's timeline: time some slice was not Ready after having been Ready.",
            labels, registry=registry)

    def record_relist(self, resource: str, reason: str, objects: int) -> None:
        self.cache_relists.labels(resource, reason).inc()

    def record_status(
        self, namespace: str, job: str, previous: ElasticTrainingJobStatus,
        new: ElasticTrainingJobStatus,
    ) -> None:
        failures = new.counters.slice_failures - previous.counters.slice_failures
        if failures > 0:
            self.slice_failures.labels(namespace, job).inc(failures)
        elastic = new.counters.elastic_events - previous.counters.elastic_events
        if elastic > 0:
            self.elastic_events.labels(namespace, job).inc(elastic)
        restarts = new.counters.trainer_restarts - previous.counters.trainer_restarts
        if restarts > 0:
            self.trainer_restarts.labels(namespace, job).inc(restarts)
        preemptions = new.counters.preemptions - previous.counters.preemptions
        if preemptions > 0:
            self.preemptions.labels(namespace, job).inc(preemptions)
        if new.slices_desired is not None:
            self.desired_slices.labels(namespace, job).set(new.slices_desired)
        if new.slices_ready is not None:
            self.ready_slices.labels(namespace, job).set(new.slices_ready)
        if new.training is not None and new.training.active_slices is not None:
            self.active_slices.labels(namespace, job).set(new.training.active_slices)
        self._record_goodput(namespace, job, previous, new)

    def _record_goodput(self, namespace: str, job: str, previous: ElasticTrainingJobStatus,
                        new: ElasticTrainingJobStatus) -> None:
        """The goodput counters move by the status's increase (never back)."""
        before, after = previous.goodput, new.goodput
        if after is None:
            return
        if after.ratio is not None:
            self.goodput_ratio.labels(namespace, job).set(after.ratio)
        gained = (after.productive_seconds or 0.0) - (
            (before.productive_seconds or 0.0) if before is not None else 0.0)
        if gained > 0:
            self.productive_seconds.labels(namespace, job).inc(gained)
        down = after.slice_down_seconds - (before.slice_down_seconds if before else 0.0)
        if down > 0:
            self.slice_down_seconds.labels(namespace, job).inc(down)
        old = before.badput_seconds.model_dump() if before and before.badput_seconds else {}
        if after.badput_seconds is not None:
            for cause, seconds in after.badput_seconds.model_dump().items():
                delta = seconds - old.get(cause, 0.0)
                if delta > 0:
                    self.badput_seconds.labels(namespace, job, to_camel(cause)).inc(delta)

    def record_events(self, namespace: str, events: list[StatusEvent], written_at_s: float) -> None:
        """written_at_s: POSIX time when the status carrying these events was written."""
        for event in events:
            if event.reason == Reason.SLICE_DOWN and event.failed_at is not None:
                latency = written_at_s - event.failed_at.timestamp()
                self.detection_latency.labels(namespace).observe(max(0.0, latency))
            elif event.reason == Reason.RECOVERED:
                if event.downtime_seconds is not None:
                    self.recovery_duration.labels(namespace).observe(event.downtime_seconds)
                if event.steps_lost is not None:
                    self.steps_lost.labels(namespace).observe(event.steps_lost)
            elif event.reason == Reason.SLICE_REPLACED and event.downtime_seconds is not None:
                self.replacement_duration.labels(namespace).observe(event.downtime_seconds)
            elif event.reason in _REQUEST_RESULTS:
                self.checkpoint_requests.labels(namespace, _REQUEST_RESULTS[event.reason]).inc()

    def record_decisions(self, namespace: str, job: str, events: list[StatusEvent]) -> None:
        """The replacement decisions among a reconcile's Events."""
        for event in events:
            action = _ACTIONS.get(event.reason)
            if action is not None:
                self.slice_replacements.labels(namespace, job, action).inc()

    def forget(self, namespace: str, job: str) -> None:
        """Drop the per-job series of a deleted job (keeps cardinality bounded)."""
        for metric in (self.slice_failures, self.elastic_events, self.trainer_restarts,
                       self.preemptions, self.active_slices, self.desired_slices,
                       self.ready_slices, self.goodput_ratio, self.productive_seconds,
                       self.slice_down_seconds):
            with contextlib.suppress(KeyError):
                metric.remove(namespace, job)
        for action in _ACTIONS.values():
            with contextlib.suppress(KeyError):
                self.slice_replacements.remove(namespace, job, action)
        for cause in BadputSeconds.model_fields:
            with contextlib.suppress(KeyError):
                self.badput_seconds.remove(namespace, job, to_camel(cause))


_ACTIONS = {Reason.SLICE_REPLACING: "Replace", Reason.SLICE_MOVING: "Move",
            Reason.SLICE_RESTARTS_EXHAUSTED: "GiveUp"}
_REQUEST_RESULTS = {Reason.CHECKPOINT_REQUESTED: "Requested",
                    Reason.CHECKPOINT_ACKNOWLEDGED: "Acknowledged",
                    Reason.CHECKPOINT_REQUEST_TIMED_OUT: "Expired"}
