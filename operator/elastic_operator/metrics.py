"""Prometheus metrics of the operator (listed in docs/metrics.md).

Low cardinality: per-job labels are at most `namespace`, `job` and `slice` (a job's
slices). Counters follow the job's status counters (the delta between the previous and
the new status), so a restarted operator neither double-counts nor loses what the status
already recorded. Gauges copy the status (and the few spec fields the alert rules compare
with: charts/elastic-operator/templates/_alerts.tpl), so they need no clock.
"""
from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from pydantic.alias_generators import to_camel

from elastic_api.badput import BADPUT_TYPES
from elastic_api.conditions import ConditionType, Phase, Reason
from elastic_api.models import (
    BadputSeconds,
    CheckpointStatus,
    ElasticTrainingJobSpec,
    ElasticTrainingJobStatus,
    TrainingReport,
)
from elastic_operator.core.events import StatusEvent
from elastic_operator.observed import ObservedNode

_LATENCY_BUCKETS = (0.25, 0.5, 1, 2, 3, 5, 10, 15, 20, 30, 45, 60, 120, 300)
_RECOVERY_BUCKETS = (5, 10, 20, 30, 60, 90, 120, 180, 300, 600, 1200, 3600)
_STEPS_BUCKETS = (0, 1, 5, 10, 25, 50, 100, 250, 500, 1000, 5000)
_RECONCILE_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
_JOB_LABELS = ["namespace", "job"]
_SLICE_LABELS = ["namespace", "job", "slice"]
# Every status.phase, for the one-hot etj_job_phase.
PHASES = tuple(sorted(v for k, v in vars(Phase).items() if k.isupper()))
_DOWN_STATES = ("Down", "Restarting")
# The phases of a reconcile (reconciler.py), in order, as etj_reconcile_phase_seconds
# labels them.
RECONCILE_PHASES = ("read", "plan", "observe", "status", "write", "replace")
QUARANTINE_METRIC = "etj_pool_quarantined_timestamp_seconds"


class OperatorMetrics:
    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self._declare_job_metrics(registry)
        self._declare_operator_metrics(registry)
        self._declare_replacement_metrics(registry)
        self._declare_goodput_metrics(registry)
        self._declare_alerting_metrics(registry)
        self._quarantines = _QuarantineCollector()
        registry.register(self._quarantines)
        # (namespace, job) -> the slice indices it has per-slice series for (forget()).
        self._slices: dict[tuple[str, str], set[int]] = {}

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
        self.evictions = Counter(
            "etj_evictions_total",
            "Times Kueue evicted the job for another reason of its own (PodsReadyTimeout, "
            "NodeFailures, ...); not slice failures.", labels, registry=registry)
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
        self.stalls = Counter(
            "etj_stalls_total", "Stalls: the progress deadline passed with no new step "
            "(ProgressDeadlineExceeded Events).", labels, registry=registry)
        self.recoveries_unconfirmed = Counter(
            "etj_recoveries_unconfirmed", "Recoveries the operator closed itself for a "
            "trainer that reports no elastic events (every slice back, main still running): "
            "no downtime or steps lost measured, so none is in the recovery histograms.",
            ["namespace"], registry=registry)
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
        self.reconcile_phase = Histogram(
            "etj_reconcile_phase_seconds", "Wall time of each phase of a reconcile: read "
            "(the job, parsed and rendered), plan (its children ensured), observe (pods, "
            "nodes, Jobs gathered), status (computed), write (the status PATCH), replace "
            "(the slice replacement planned and handed on).", ["phase"],
            buckets=_RECONCILE_BUCKETS, registry=registry)
        for phase in RECONCILE_PHASES:
            self.reconcile_phase.labels(phase)
        self.reconcile_cpu = Histogram(
            "etj_reconcile_cpu_seconds", "CPU time of the thread that ran one reconcile: "
            "against etj_reconcile_duration_seconds, what a slow reconcile waited for (the "
            "CPU, or the API server) rather than worked.",
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
        self.status_writes = Counter(
            "etj_status_writes_total", "Status writes of the operator, by what they carry: "
            "change (a transition, counters, Events: written at once) or progress (only "
            "readyHosts and messages: at most one per interval per job).", ["kind"],
            registry=registry)
        self.status_writes_deferred = Counter(
            "etj_status_writes_deferred_total", "Progress-only status changes not written "
            "because the job's last write was less than an interval ago (a later reconcile "
            "writes the latest).", registry=registry)
        self.reconciles_started_over = Counter(
            "etj_reconcile_started_over_total", "Reconciles whose pass was cut short for "
            "news of the job and started over from its reads (core/startover.py).",
            registry=registry)
        self.wakes = Counter(
            "etj_wakes_total", "Jobs named in the work queue by a watched change, by cause: "
            "job, pod (at once), pod-paced (at the progress interval: it may move a slice's "
            "state), pod-progress (at the job's next progress write), jobset, worker-job, "
            "worker-job-progress (its slice's replacement running its course: at the next "
            "progress write), node, workload; and recheck (a pod change during a reconcile "
            "may have moved a slice).", ["cause"], registry=registry)
        self.queue_wait = Histogram(
            "etj_work_queue_wait_seconds", "From a job being named in the work queue to its "
            "reconcile starting (the wait for a worker, or for the job's running reconcile "
            "to end).", buckets=_RECONCILE_BUCKETS, registry=registry)
        self.queue_depth = Gauge(
            "etj_work_queue_depth", "Jobs waiting for a worker.", registry=registry)
        self.reaction = Histogram(
            "etj_slice_down_reaction_seconds", "From the pod cache receiving a slice's "
            "failed pod to the SliceDown status written: the operator's own share of the "
            "detection latency (the rest is the watch's delivery).",
            buckets=_RECONCILE_BUCKETS, registry=registry)

    def _declare_replacement_metrics(self, registry: CollectorRegistry) -> None:
        """Slice replacement (docs/design/slice-replacement.md)."""
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

    def _declare_alerting_metrics(self, registry: CollectorRegistry) -> None:
        """What the alert rules compare (docs/operations.md, "Alerts"), as gauges."""
        labels = _JOB_LABELS
        self.job_phase = Gauge(
            "etj_job_phase", "1 for the job's status.phase, 0 for the others.",
            [*labels, "phase"], registry=registry)
        self.slice_down = Gauge(
            "etj_slice_down", "1 while the slice is Down or Restarting, else 0.",
            _SLICE_LABELS, registry=registry)
        self.slice_restarts = Gauge(
            "etj_slice_restarts", "Times the slice failed (status.slices[].restarts).",
            _SLICE_LABELS, registry=registry)
        self.max_slice_restarts = Gauge(
            "etj_max_slice_restarts", "The slice restart budget "
            "(spec.elastic.maxSliceRestarts).", labels, registry=registry)
        self.jobset_restarts = Gauge(
            "etj_jobset_restarts", "Whole-JobSet restarts so far "
            "(status.counters.jobSetRestarts).", labels, registry=registry)
        self.max_restarts = Gauge(
            "etj_max_restarts", "Whole-JobSet restarts allowed (spec.maxRestarts).", labels,
            registry=registry)
        self.recovering = Gauge(
            "etj_recovering", "1 while the Recovering condition is True, else 0.", labels,
            registry=registry)
        self.training_step = Gauge(
            "etj_training_step", "The trainer's step (status.training.step).", labels,
            registry=registry)
        self.stalled = Gauge(
            "etj_stalled", "1 while the Progressing condition is False (no new step for the "
            "progress deadline), else 0.", labels, registry=registry)
        self.progress_deadline = Gauge(
            "etj_progress_deadline_seconds", "The progress deadline in force "
            "(status.progress.deadlineSeconds: the spec's, or learned).", labels,
            registry=registry)
        self.slow_steps = Gauge(
            "etj_slow_steps", "1 while Degraded is True with reason SlowSteps, else 0.",
            labels, registry=registry)
        self.checkpoint_step = Gauge(
            "etj_checkpoint_latest_committed_step", "Newest committed checkpoint step "
            "(status.checkpoint.latestCommittedStep; 0: a listing found none).", labels,
            registry=registry)
        self.checkpoint_period = Gauge(
            "etj_checkpoint_period_steps", "Steps between checkpoints "
            "(spec.checkpoint.periodSteps).", labels, registry=registry)
        self.checkpoint_bytes = Gauge(
            "etj_checkpoint_latest_committed_bytes", "Size of the newest committed "
            "checkpoint step (status.checkpoint.latestCommittedBytes).", labels,
            registry=registry)
        self.restore_at_risk = Gauge(
            "etj_restore_at_risk", "1 while RestoreAtRisk is True (a restore can outgrow "
            "the pathways-proxy's memory), else 0.", labels, registry=registry)
        self.restore_gib_per_second = Gauge(
            "etj_last_restore_gib_per_second", "Speed of the trainer's last restore from a "
            "checkpoint (status.checkpoint.lastRestore.gibPerSecond).", labels,
            registry=registry)
        self.checkpoint_scan_failing = Gauge(
            "etj_checkpoint_scan_failing", "1 while the checkpoint directory cannot be "
            "listed (status.checkpoint.error), else 0.", labels, registry=registry)
        self.api_requests = Counter(
            "etj_api_requests_total", "Requests of the operator's Kubernetes client, by "
            "verb, resource and HTTP status code (error: no answer).",
            ["verb", "resource", "code"], registry=registry)
        self.api_request_duration = Histogram(
            "etj_api_request_duration_seconds", "Latency of the operator's Kubernetes "
            "requests, by verb and resource (a watch: until its response headers).",
            ["verb", "resource"], buckets=_RECONCILE_BUCKETS, registry=registry)
        badput_types = Gauge(
            "etj_badput_cause_info", "Each etj_badput_seconds_total cause with its "
            "ml-goodput-measurement BadputType name (always 1).", ["cause", "badput_type"],
            registry=registry)
        for cause, badput_type in BADPUT_TYPES.items():
            badput_types.labels(cause, badput_type).set(1)

    def observe_quarantines(self, nodes: Callable[[], Iterable[ObservedNode]]) -> None:
        """Export the quarantined node pools among `nodes()` (read at each scrape)."""
        self._quarantines.source = nodes

    def count_requests(self, api_client: Any) -> None:
        """Count every request of a kubernetes ApiClient (kube.py makes all its requests
        through `call_api`) in etj_api_requests_total."""
        call_api = api_client.call_api

        def counted(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            verb, resource = request_kind(method, url)
            started = time.monotonic()
            try:
                response = call_api(method, url, *args, **kwargs)
            except Exception:
                self.api_requests.labels(verb, resource, "error").inc()
                raise
            finally:
                self.api_request_duration.labels(verb, resource).observe(
                    time.monotonic() - started)
            self.api_requests.labels(verb, resource, str(response.status)).inc()
            return response

        api_client.call_api = counted

    def record_spec(self, namespace: str, job: str, spec: ElasticTrainingJobSpec,
                    report: TrainingReport | None = None) -> None:
        """The limits the alert rules compare the status with. The checkpoint period is
        the spec's, else the one the trainer reports it chose (none known: no series, so
        the stale-checkpoint alert does not guess)."""
        self.max_slice_restarts.labels(namespace, job).set(spec.elastic.max_slice_restarts)
        self.max_restarts.labels(namespace, job).set(spec.max_restarts)
        period = spec.checkpoint.period_steps
        cadence = report.checkpoint_cadence if report is not None else None
        if period is None and cadence is not None and cadence.period_steps > 0:
            period = cadence.period_steps
        if period is not None:
            self.checkpoint_period.labels(namespace, job).set(period)
        else:
            with contextlib.suppress(KeyError):
                self.checkpoint_period.remove(namespace, job)

    def record_relist(self, resource: str, reason: str, objects: int) -> None:
        self.cache_relists.labels(resource, reason).inc()

    def record_status(
        self, namespace: str, job: str, previous: ElasticTrainingJobStatus,
        new: ElasticTrainingJobStatus,
    ) -> None:
        if (namespace, job) not in self._slices:
            self._start_at_zero(namespace, job)
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
        evictions = new.counters.evictions - previous.counters.evictions
        if evictions > 0:
            self.evictions.labels(namespace, job).inc(evictions)
        if new.slices_desired is not None:
            self.desired_slices.labels(namespace, job).set(new.slices_desired)
        if new.slices_ready is not None:
            self.ready_slices.labels(namespace, job).set(new.slices_ready)
        if new.training is not None and new.training.active_slices is not None:
            self.active_slices.labels(namespace, job).set(new.training.active_slices)
        self._record_goodput(namespace, job, previous, new)
        self._record_alerting(namespace, job, new)

    def _start_at_zero(self, namespace: str, job: str) -> None:
        """Create a job's counters and its namespace's histograms at 0 before their first
        event: increase() and rate() count from a series' first sample, so a series born
        at 1 would hide the first failure (or recovery) from every dashboard and alert."""
        for counter in (self.slice_failures, self.elastic_events, self.trainer_restarts,
                        self.preemptions, self.evictions, self.productive_seconds,
                        self.slice_down_seconds, self.stalls):
            counter.labels(namespace, job)
        for action in _ACTIONS.values():
            self.slice_replacements.labels(namespace, job, action)
        for cause in BadputSeconds.model_fields:
            self.badput_seconds.labels(namespace, job, to_camel(cause))
        for histogram in (self.detection_latency, self.recovery_duration, self.steps_lost,
                          self.replacement_duration, self.recoveries_unconfirmed):
            histogram.labels(namespace)
        for result in _REQUEST_RESULTS.values():
            self.checkpoint_requests.labels(namespace, result)

    def _record_alerting(self, namespace: str, job: str, new: ElasticTrainingJobStatus) -> None:
        """The gauges of the alert rules, as the new status says."""
        if new.phase is not None:
            for phase in PHASES:
                self.job_phase.labels(namespace, job, phase).set(int(phase == new.phase))
        indices = self._slices.setdefault((namespace, job), set())
        for s in new.slices:
            indices.add(s.index)
            self.slice_down.labels(namespace, job, str(s.index)).set(
                int(s.state in _DOWN_STATES))
            self.slice_restarts.labels(namespace, job, str(s.index)).set(s.restarts)
        self.jobset_restarts.labels(namespace, job).set(new.counters.jobset_restarts)
        recovering = any(c.type == ConditionType.RECOVERING and c.status == "True"
                         for c in new.conditions)
        self.recovering.labels(namespace, job).set(int(recovering))
        self.stalled.labels(namespace, job).set(int(any(
            c.type == ConditionType.PROGRESSING and c.status == "False"
            for c in new.conditions)))
        self.slow_steps.labels(namespace, job).set(int(any(
            c.type == ConditionType.DEGRADED and c.status == "True"
            and c.reason == Reason.SLOW_STEPS for c in new.conditions)))
        if new.progress is not None and new.progress.deadline_seconds is not None:
            self.progress_deadline.labels(namespace, job).set(new.progress.deadline_seconds)
        if new.training is not None:
            self.training_step.labels(namespace, job).set(new.training.step)
        at_risk = any(c.type == ConditionType.RESTORE_AT_RISK and c.status == "True"
                      for c in new.conditions)
        self.restore_at_risk.labels(namespace, job).set(int(at_risk))
        checkpoint = new.checkpoint
        if checkpoint is not None:
            self._record_checkpoint_size(namespace, job, checkpoint)
        if checkpoint is not None and (checkpoint.directory is not None
                                       or checkpoint.error is not None):
            self.checkpoint_scan_failing.labels(namespace, job).set(int(bool(checkpoint.error)))
            # Unknown (a failed listing that never succeeded) is no series, not 0.
            if checkpoint.latest_committed_step is not None or not checkpoint.error:
                self.checkpoint_step.labels(namespace, job).set(
                    checkpoint.latest_committed_step or 0)

    def _record_checkpoint_size(self, namespace: str, job: str,
                                checkpoint: CheckpointStatus) -> None:
        if checkpoint.latest_committed_bytes is not None:
            self.checkpoint_bytes.labels(namespace, job).set(checkpoint.latest_committed_bytes)
        restore = checkpoint.last_restore
        if restore is not None and restore.gib_per_second is not None:
            self.restore_gib_per_second.labels(namespace, job).set(restore.gib_per_second)

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
            elif event.reason == Reason.RECOVERED_UNCONFIRMED:
                self.recoveries_unconfirmed.labels(namespace).inc()
            elif event.reason == Reason.RECOVERED:
                # None when nobody measured it (a recovery the operator closed, confirmed).
                if event.downtime_seconds is not None:
                    self.recovery_duration.labels(namespace).observe(event.downtime_seconds)
                if event.steps_lost is not None:
                    self.steps_lost.labels(namespace).observe(event.steps_lost)
            elif event.reason == Reason.SLICE_REPLACED and event.downtime_seconds is not None:
                self.replacement_duration.labels(namespace).observe(event.downtime_seconds)
            elif event.reason in _REQUEST_RESULTS:
                self.checkpoint_requests.labels(namespace, _REQUEST_RESULTS[event.reason]).inc()

    def record_decisions(self, namespace: str, job: str, events: list[StatusEvent]) -> None:
        """The replacement decisions (and the stalls) among a reconcile's Events."""
        for event in events:
            if event.reason == Reason.PROGRESS_DEADLINE_EXCEEDED:
                self.stalls.labels(namespace, job).inc()
            action = _ACTIONS.get(event.reason)
            if action is not None:
                self.slice_replacements.labels(namespace, job, action).inc()

    def count_wake(self, cause: str) -> None:
        """A job named in the work queue by a watched change (`wakes`)."""
        self.wakes.labels(cause).inc()

    def forget(self, namespace: str, job: str) -> None:
        """Drop the per-job series of a deleted job (keeps cardinality bounded)."""
        for metric in (self.slice_failures, self.elastic_events, self.trainer_restarts,
                       self.preemptions, self.evictions, self.active_slices, self.desired_slices,
                       self.ready_slices, self.goodput_ratio, self.productive_seconds,
                       self.slice_down_seconds, self.max_slice_restarts,
                       self.jobset_restarts, self.max_restarts, self.recovering,
                       self.training_step, self.checkpoint_step, self.checkpoint_period,
                       self.checkpoint_scan_failing, self.stalled, self.progress_deadline,
                       self.slow_steps, self.stalls, self.checkpoint_bytes,
                       self.restore_at_risk, self.restore_gib_per_second):
            with contextlib.suppress(KeyError):
                metric.remove(namespace, job)
        for phase in PHASES:
            with contextlib.suppress(KeyError):
                self.job_phase.remove(namespace, job, phase)
        for index in self._slices.pop((namespace, job), set()):
            for per_slice in (self.slice_down, self.slice_restarts):
                with contextlib.suppress(KeyError):
                    per_slice.remove(namespace, job, str(index))
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


def request_kind(method: str, url: str) -> tuple[str, str]:
    """('GET', 'https://h/api/v1/namespaces/x/pods?watch=true') -> ('watch', 'pods'):
    the verb as the API server names it and the resource (with its subresource)."""
    parts = urlsplit(url)
    segments = [s for s in parts.path.split("/") if s]
    rest = segments[2:] if segments[:1] == ["api"] else segments[3:]
    if segments[:1] not in (["api"], ["apis"]) or not rest:
        return method.lower(), "discovery"
    if rest[0] == "namespaces" and len(rest) > 2:
        rest = rest[2:]
    resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
    verb = {"POST": "create", "PUT": "update"}.get(method.upper(), method.lower())
    if verb == "get" and parse_qs(parts.query).get("watch", [""])[0] in ("true", "1"):
        verb = "watch"
    elif verb == "get" and len(rest) == 1:
        verb = "list"
    return verb, resource


def pool_quarantines(nodes: Iterable[ObservedNode]) -> dict[str, tuple[str, float]]:
    """pool -> (reason, since): each quarantined pool, since its earliest node's
    quarantined-at annotation (a pool whose nodes carry none is left out)."""
    out: dict[str, tuple[str, float]] = {}
    for node in nodes:
        if not node.pool or not node.quarantined or node.quarantined_at is None:
            continue
        since = node.quarantined_at.timestamp()
        reason, known = out.get(node.pool, (node.quarantined, since))
        out[node.pool] = (reason, min(known, since))
    return out


class _QuarantineCollector(Collector):
    """etj_pool_quarantined_timestamp_seconds{pool, reason}, read from the node cache at
    each scrape (a quarantine belongs to the pool, not to one job)."""

    def __init__(self) -> None:
        self.source: Callable[[], Iterable[ObservedNode]] = lambda: ()

    def _family(self) -> GaugeMetricFamily:
        return GaugeMetricFamily(
            QUARANTINE_METRIC, "When the operator quarantined the node pool (Unix time: the "
            "earliest elastic.pathways.dev/quarantined-at of its nodes).",
            labels=["pool", "reason"])

    def describe(self) -> Iterator[Metric]:
        yield self._family()

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        for pool, (reason, since) in sorted(pool_quarantines(self.source()).items()):
            family.add_metric([pool, reason], since)
        yield family


class PhaseTimer:
    """Times a reconcile's phases into etj_reconcile_phase_seconds: each mark observes
    the wall time since the one before (or since the timer started)."""

    def __init__(self, histogram: Histogram, monotonic: Callable[[], float]) -> None:
        self._histogram = histogram
        self._monotonic = monotonic
        self._last = monotonic()

    def mark(self, phase: str) -> None:
        assert phase in RECONCILE_PHASES, phase
        now = self._monotonic()
        self._histogram.labels(phase).observe(now - self._last)
        self._last = now
