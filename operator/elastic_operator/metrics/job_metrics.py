"""The per-job series of the operator's metrics (docs/metrics.md), each group with what
records it from a status write; OperatorMetrics (metrics.py) composes them.

Low cardinality: per-job labels are at most `namespace`, `job` and `slice` (a job's
slices: only those down or restarted, at most MAX_SLICE_SERIES; never a host), and a
deleted job's series are dropped (forget). Counters follow the job's
status counters (the delta between the previous and the new status), so a restarted
operator neither double-counts nor loses what the status already recorded. Gauges copy
the status (and the few spec fields the alert rules compare with:
charts/elastic-operator/templates/_alerts.tpl), so they need no clock.
"""
from __future__ import annotations

import contextlib

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from pydantic.alias_generators import to_camel

from elastic_api.badput import BADPUT_TYPES
from elastic_api.conditions import ConditionType, Phase, Reason
from elastic_api.models import (
    BadputSeconds,
    BudgetStatus,
    CheckpointStatus,
    ElasticTrainingJobSpec,
    ElasticTrainingJobStatus,
    RestartBudgets,
    SliceStatus,
    TrainingReport,
)
from elastic_operator.core.status_events import StatusEvent
from elastic_operator.model.job_memory import JobMemories

_LATENCY_BUCKETS = (0.25, 0.5, 1, 2, 3, 5, 10, 15, 20, 30, 45, 60, 120, 300)
_RECOVERY_BUCKETS = (5, 10, 20, 30, 60, 90, 120, 180, 300, 600, 1200, 3600)
_STEPS_BUCKETS = (0, 1, 5, 10, 25, 50, 100, 250, 500, 1000, 5000)
_JOB_LABELS = ["namespace", "job"]
_SLICE_LABELS = ["namespace", "job", "slice"]
# Every status.phase, for the one-hot etj_job_phase.
PHASES = tuple(sorted(v for k, v in vars(Phase).items() if k.isupper()))
_DOWN_STATES = ("Down", "Restarting")
# Per-slice series per job at most (for each of etj_slice_down, etj_slice_restarts):
# whatever numSlices, a job's series stay bounded (docs/metrics.md, "Cardinality").
MAX_SLICE_SERIES = 16
_ACTIONS = {Reason.SLICE_REPLACING: "Replace", Reason.SLICE_MOVING: "Move",
            Reason.SLICE_RESTARTS_EXHAUSTED: "GiveUp",
            Reason.SLICE_RESTARTING_IN_PLACE: "RestartInPlace"}
_REQUEST_RESULTS = {Reason.CHECKPOINT_REQUESTED: "Requested",
                    Reason.CHECKPOINT_ACKNOWLEDGED: "Acknowledged",
                    Reason.CHECKPOINT_REQUEST_TIMED_OUT: "Expired"}
_BADPUT_CAUSES = tuple(to_camel(cause) for cause in BadputSeconds.model_fields)
# The budget label of etj_restart_budget_*: status.budgets' keys.
# The budgets (status.budgets' BudgetStatus fields; not mainRestarts, what the JobSet's
# budget counted of main's restarts in place), by their label.
_BUDGET_LABELS = {name: field.alias or to_camel(name)
                  for name, field in RestartBudgets.model_fields.items()
                  if field.annotation is BudgetStatus}
_BUDGETS = tuple(_BUDGET_LABELS.values())


def slices_with_series(slices: list[SliceStatus]) -> list[SliceStatus]:
    """The slices with per-slice series: those Down or Restarting, then those that
    restarted (most restarts first), at most MAX_SLICE_SERIES. A Ready slice that never
    failed has none: what the alerts and panels of a slice look for is a slice down or
    its restart budget spent, and a job of 199 slices would have 398 series of 0."""
    chosen = [s for s in slices if s.state in _DOWN_STATES or s.restarts > 0]
    chosen.sort(key=lambda s: (s.state not in _DOWN_STATES, -s.restarts, s.index))
    return chosen[:MAX_SLICE_SERIES]


def _remove(metric: Counter | Gauge, *labels: str) -> None:
    """Drop one series, if it was ever created."""
    with contextlib.suppress(KeyError):
        metric.remove(*labels)


class JobCounters:
    """What happened to the jobs: failures, recoveries, replacements, stalls. The counters
    move by the status counters' increase; the histograms observe each Event once, when
    the status that carries it is written."""

    def __init__(self, registry: CollectorRegistry) -> None:
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
        self._declare_replacement_metrics(registry)

    def _declare_replacement_metrics(self, registry: CollectorRegistry) -> None:
        """Slice replacement (docs/design/slice-replacement.md)."""
        self.slice_replacements = Counter(
            "etj_slice_replacements_total",
            "What the operator decided for a failed slice: Replace (recreate its Job), "
            "RestartInPlace (keep its pods, the kubelet restarts them), Move (maintenance), "
            "GiveUp (restart budget spent).", [*_JOB_LABELS, "action"], registry=registry)
        self.replacement_duration = Histogram(
            "etj_slice_replacement_seconds",
            "From the operator's decision to replace (or move) a slice to the slice Ready "
            "again.", ["namespace"], buckets=_LATENCY_BUCKETS, registry=registry)
        self.in_place_duration = Histogram(
            "etj_slice_in_place_restart_seconds",
            "From the operator's decision to restart a slice in place to the slice Ready "
            "again, its pods kept.", ["namespace"], buckets=_LATENCY_BUCKETS,
            registry=registry)
        self.checkpoint_requests = Counter(
            "etj_checkpoint_requests_total",
            "Checkpoint requests to the trainer (maintenance), by how they ended: "
            "Requested, Acknowledged, Expired.", ["namespace", "result"], registry=registry)

    def _status_counters(self) -> tuple[Counter, ...]:
        """The counters of status.counters' fields (record_status's order)."""
        return (self.slice_failures, self.elastic_events, self.trainer_restarts,
                self.preemptions, self.evictions)

    def start_at_zero(self, namespace: str, job: str) -> None:
        """The job's counters, every action, and its namespace's histograms, at 0."""
        for counter in (*self._status_counters(), self.stalls):
            counter.labels(namespace, job)
        for action in _ACTIONS.values():
            self.slice_replacements.labels(namespace, job, action)
        for histogram in (self.detection_latency, self.recovery_duration, self.steps_lost,
                          self.replacement_duration, self.in_place_duration,
                          self.recoveries_unconfirmed):
            histogram.labels(namespace)
        for result in _REQUEST_RESULTS.values():
            self.checkpoint_requests.labels(namespace, result)

    def record_status(self, namespace: str, job: str, previous: ElasticTrainingJobStatus,
                      new: ElasticTrainingJobStatus) -> None:
        """The counters move by the status counters' increase (never back)."""
        before, after = previous.counters, new.counters
        increases = (after.slice_failures - before.slice_failures,
                     after.elastic_events - before.elastic_events,
                     after.trainer_restarts - before.trainer_restarts,
                     after.preemptions - before.preemptions,
                     after.evictions - before.evictions)
        for counter, increase in zip(self._status_counters(), increases, strict=True):
            if increase > 0:
                counter.labels(namespace, job).inc(increase)

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
            elif event.reason == Reason.SLICE_RESTARTED_IN_PLACE \
                    and event.downtime_seconds is not None:
                self.in_place_duration.labels(namespace).observe(event.downtime_seconds)
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

    def forget(self, namespace: str, job: str) -> None:
        """The per-job series (a namespace's histograms stay: other jobs share them)."""
        for counter in (*self._status_counters(), self.stalls):
            _remove(counter, namespace, job)
        for action in _ACTIONS.values():
            _remove(self.slice_replacements, namespace, job, action)


class GoodputMetrics:
    """Goodput (docs/metrics.md, "Goodput"), following status.goodput."""

    def __init__(self, registry: CollectorRegistry) -> None:
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
        badput_types = Gauge(
            "etj_badput_cause_info", "Each etj_badput_seconds_total cause with its "
            "ml-goodput-measurement BadputType name (always 1).", ["cause", "badput_type"],
            registry=registry)
        for cause, badput_type in BADPUT_TYPES.items():
            badput_types.labels(cause, badput_type).set(1)

    def start_at_zero(self, namespace: str, job: str) -> None:
        """The job's goodput counters, every badput cause, at 0."""
        for counter in (self.productive_seconds, self.slice_down_seconds):
            counter.labels(namespace, job)
        for cause in _BADPUT_CAUSES:
            self.badput_seconds.labels(namespace, job, cause)

    def record_status(self, namespace: str, job: str, previous: ElasticTrainingJobStatus,
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

    def forget(self, namespace: str, job: str) -> None:
        for metric in (self.goodput_ratio, self.productive_seconds, self.slice_down_seconds):
            _remove(metric, namespace, job)
        for cause in _BADPUT_CAUSES:
            _remove(self.badput_seconds, namespace, job, cause)


class JobGauges:
    """The job's status, and the spec limits it is compared with, as gauges: what the
    dashboards show and the alert rules compare (docs/operations.md, "Alerts")."""

    def __init__(self, registry: CollectorRegistry) -> None:
        labels = _JOB_LABELS
        self.active_slices = Gauge(
            "etj_active_slices", "Slices the trainer's mesh spans (its last report).", labels,
            registry=registry)
        self.desired_slices = Gauge(
            "etj_desired_slices", "spec.tpu.numSlices.", labels, registry=registry)
        self.ready_slices = Gauge(
            "etj_ready_slices", "Slices whose hosts are all ready.", labels, registry=registry)
        self.job_phase = Gauge(
            "etj_job_phase", "1 for the job's status.phase, 0 for the others.",
            [*labels, "phase"], registry=registry)
        self.slice_down = Gauge(
            "etj_slice_down", "1 while the slice is Down or Restarting, else 0.",
            _SLICE_LABELS, registry=registry)
        self.slice_restarts = Gauge(
            "etj_slice_restarts", "Times the slice failed (status.slices[].restarts).",
            _SLICE_LABELS, registry=registry)
        self.jobset_restarts = Gauge(
            "etj_jobset_restarts", "Whole-JobSet restarts so far "
            "(status.counters.jobSetRestarts).", labels, registry=registry)
        self.budget_allowed = Gauge(
            "etj_restart_budget_allowed", "Restarts a budget allows within its window, or "
            "over the run (status.budgets.<budget>.allowed).", [*labels, "budget"],
            registry=registry)
        self.budget_used = Gauge(
            "etj_restart_budget_used", "Restarts that count against a budget now "
            "(status.budgets.<budget>.used; sliceRestarts: the slice with the most).",
            [*labels, "budget"], registry=registry)
        self.recovering = Gauge(
            "etj_recovering", "1 while the Recovering condition is True, else 0.", labels,
            registry=registry)
        self.training_step = Gauge(
            "etj_training_step", "The trainer's step (status.training.step; never back "
            "without a restore or new process it names: elastic_api.forward).", labels,
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
        self._declare_checkpoint_gauges(registry)
        # The slice indices each job has per-slice series for are in its record
        # (JobMemory.slice_series; OperatorMetrics.remember_in gives the operator's).
        self.memory = JobMemories()

    def _declare_checkpoint_gauges(self, registry: CollectorRegistry) -> None:
        labels = _JOB_LABELS
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

    def _per_job(self) -> tuple[Gauge, ...]:
        """The gauges labelled (namespace, job) only."""
        return (self.active_slices, self.desired_slices, self.ready_slices,
                self.jobset_restarts, self.recovering, self.training_step, self.stalled,
                self.progress_deadline,
                self.slow_steps, self.checkpoint_step, self.checkpoint_period,
                self.checkpoint_bytes, self.restore_at_risk, self.restore_gib_per_second,
                self.checkpoint_scan_failing)

    def record_spec(self, namespace: str, job: str, spec: ElasticTrainingJobSpec,
                    report: TrainingReport | None = None) -> None:
        """The limits the alert rules compare the status with. The checkpoint period is
        the spec's, else the one the trainer reports it chose (none known: no series, so
        the stale-checkpoint alert does not guess)."""
        period = spec.checkpoint.period_steps
        cadence = report.checkpoint_cadence if report is not None else None
        if period is None and cadence is not None and cadence.period_steps > 0:
            period = cadence.period_steps
        if period is not None:
            self.checkpoint_period.labels(namespace, job).set(period)
        else:
            _remove(self.checkpoint_period, namespace, job)

    def record_status(self, namespace: str, job: str, new: ElasticTrainingJobStatus) -> None:
        """The gauges, as the new status says."""
        if new.slices_desired is not None:
            self.desired_slices.labels(namespace, job).set(new.slices_desired)
        if new.slices_ready is not None:
            self.ready_slices.labels(namespace, job).set(new.slices_ready)
        if new.training is not None and new.training.active_slices is not None:
            self.active_slices.labels(namespace, job).set(new.training.active_slices)
        if new.phase is not None:
            for phase in PHASES:
                self.job_phase.labels(namespace, job, phase).set(int(phase == new.phase))
        self._record_slices(namespace, job, new.slices)
        self.jobset_restarts.labels(namespace, job).set(new.counters.jobset_restarts)
        if new.budgets is not None:
            for name, label in _BUDGET_LABELS.items():
                budget = getattr(new.budgets, name)
                self.budget_allowed.labels(namespace, job, label).set(budget.allowed)
                self.budget_used.labels(namespace, job, label).set(budget.used)
        self._record_conditions(namespace, job, new)
        if new.progress is not None and new.progress.deadline_seconds is not None:
            self.progress_deadline.labels(namespace, job).set(new.progress.deadline_seconds)
        if new.training is not None:  # the step the operator holds (core/reported.py)
            seen = new.progress.step if new.progress is not None else None
            self.training_step.labels(namespace, job).set(
                seen if seen is not None else new.training.step)
        if new.checkpoint is not None:
            self._record_checkpoint(namespace, job, new.checkpoint)

    def _record_slices(self, namespace: str, job: str, slices: list[SliceStatus]) -> None:
        """The per-slice gauges of the slices worth a series (`slices_with_series`); a
        slice that no longer is loses its series."""
        chosen = {s.index: s for s in slices_with_series(slices)}
        remembered = self.memory.of((namespace, job))
        if remembered.slice_series is None:
            remembered.slice_series = set()
        known = remembered.slice_series
        for index in known - chosen.keys():
            for per_slice in (self.slice_down, self.slice_restarts):
                _remove(per_slice, namespace, job, str(index))
        known.intersection_update(chosen)
        for index, s in chosen.items():
            known.add(index)
            self.slice_down.labels(namespace, job, str(index)).set(int(s.state in _DOWN_STATES))
            self.slice_restarts.labels(namespace, job, str(index)).set(s.restarts)

    def _record_conditions(self, namespace: str, job: str,
                           new: ElasticTrainingJobStatus) -> None:
        """The 0/1 gauges of the conditions the alert rules watch."""
        recovering = any(c.type == ConditionType.RECOVERING and c.status == "True"
                         for c in new.conditions)
        self.recovering.labels(namespace, job).set(int(recovering))
        self.stalled.labels(namespace, job).set(int(any(
            c.type == ConditionType.PROGRESSING and c.status == "False"
            for c in new.conditions)))
        self.slow_steps.labels(namespace, job).set(int(any(
            c.type == ConditionType.DEGRADED and c.status == "True"
            and c.reason == Reason.SLOW_STEPS for c in new.conditions)))
        at_risk = any(c.type == ConditionType.RESTORE_AT_RISK and c.status == "True"
                      for c in new.conditions)
        self.restore_at_risk.labels(namespace, job).set(int(at_risk))

    def _record_checkpoint(self, namespace: str, job: str,
                           checkpoint: CheckpointStatus) -> None:
        if checkpoint.latest_committed_bytes is not None:
            self.checkpoint_bytes.labels(namespace, job).set(checkpoint.latest_committed_bytes)
        restore = checkpoint.last_restore
        if restore is not None and restore.gib_per_second is not None:
            self.restore_gib_per_second.labels(namespace, job).set(restore.gib_per_second)
        if checkpoint.directory is not None or checkpoint.error is not None:
            self.checkpoint_scan_failing.labels(namespace, job).set(int(bool(checkpoint.error)))
            # Unknown (a failed listing that never succeeded) is no series, not 0.
            if checkpoint.latest_committed_step is not None or not checkpoint.error:
                self.checkpoint_step.labels(namespace, job).set(
                    checkpoint.latest_committed_step or 0)

    def forget(self, namespace: str, job: str) -> None:
        for gauge in self._per_job():
            _remove(gauge, namespace, job)
        for phase in PHASES:
            _remove(self.job_phase, namespace, job, phase)
        for budget in _BUDGETS:
            _remove(self.budget_allowed, namespace, job, budget)
            _remove(self.budget_used, namespace, job, budget)
        remembered = self.memory.peek((namespace, job))
        known = remembered.slice_series if remembered is not None else None
        if remembered is not None:
            remembered.slice_series = None
        for index in known or ():
            for per_slice in (self.slice_down, self.slice_restarts):
                _remove(per_slice, namespace, job, str(index))
