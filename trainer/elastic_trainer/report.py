"""Reporting: `status.training` on the job (docs/status-contract.md) and Prometheus metrics.

The reporter never stops or slows training: `update()` only stores the newest report;
a background thread writes it (merge patch on the status subresource, short timeout),
at most once per interval, at once for event transitions and the final state. A failed
write is logged and dropped; the next one carries the newest state.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from elastic_api.budgets import job_hosts, spec_of
from elastic_api.kube import KubeClient, job_path
from elastic_api.models import (
    CheckpointAck,
    ElasticTrainingJobStatus,
    TrainerGoodput,
    TrainingReport,
)
from elastic_api.queueing import caused_by_eviction
from elastic_api.status_parsing import parse_status

log = logging.getLogger(__name__)


def job_from_args(job: str | None) -> tuple[str, str] | None:
    """`--job NS/NAME`, else env ETJ_JOB_NAMESPACE and ETJ_JOB_NAME, else None."""
    if job:
        namespace, sep, name = job.partition("/")
        if not sep or not namespace or not name:
            raise ValueError(f"--job {job!r}: expected NAMESPACE/NAME")
        return namespace, name
    env_namespace, env_name = os.environ.get("ETJ_JOB_NAMESPACE"), os.environ.get("ETJ_JOB_NAME")
    if env_namespace and env_name:
        return env_namespace, env_name
    return None


def _read(status: dict[str, Any] | None) -> ElasticTrainingJobStatus:
    """The job's status as the operator reads it (elastic_api.status_parsing): a report is
    untrusted input, read by the one lenient reader both sides use."""
    return parse_status(status)[0]


def prior_run(status: dict[str, Any] | None, max_retries: int) -> tuple[int, int]:
    """(elastic events counted so far, retries used so far) from the job's status, for a
    trainer process that replaces an earlier one (the head container restarted): event
    ids and the --max-retries budget go on from there instead of starting again at 0."""
    return _events_and_retries(_read(status), max_retries)


def _events_and_retries(status: ElasticTrainingJobStatus, max_retries: int) -> tuple[int, int]:
    training = status.training
    events = max(status.counters.elastic_events,
                 training.elastic_events_total if training is not None else 0, 0)
    remaining = training.retries_remaining if training is not None else None
    used = 0 if remaining is None else min(max(max_retries - remaining, 0), max_retries)
    if used > 0 and _lost_to_an_eviction(status):
        used -= 1  # the slices went because Kueue stopped the job: not a failure
    return events, used


def _retry_times(status: ElasticTrainingJobStatus) -> tuple[datetime, ...]:
    """When the slice losses the earlier process counted within its window came, the
    last one left out when Kueue's eviction caused it (as `_events_and_retries`)."""
    training = status.training
    times = sorted(training.retry_times or []) if training is not None else []
    if times and _lost_to_an_eviction(status):
        times = times[:-1]
    return tuple(times)


def _lost_to_an_eviction(status: ElasticTrainingJobStatus) -> bool:
    """The last elastic event of the earlier process was a slice loss that Kueue's last
    eviction (preemption, suspension through its queue) caused, by the rule the operator
    applies too (elastic_api.queueing.caused_by_eviction): the retry it used is given
    back."""
    training = status.training
    event = training.elastic_event if training is not None else None
    if training is None or event is None or not event.slices_down:
        return False
    evicted = status.admission.evicted_at if status.admission is not None else None
    return caused_by_eviction(evicted, running_since=training.process_started_at,
                              lost_at=event.detected_at)


@dataclass(frozen=True)
class PriorRun:
    """What an earlier trainer process of the job left in its status."""

    events: int = 0
    failures: int = 0
    goodput: TrainerGoodput | None = None
    step: int = 0  # its last reported step (steps after a restored one are redone)
    checkpoint_ack: CheckpointAck | None = None
    retry_times: tuple[datetime, ...] = ()  # the slice losses counted within the window
    hosts: int | None = None  # the hosts of the job's slices, from its spec (None: unknown)


def prior_state(status: dict[str, Any] | None, max_retries: int,
                window_seconds: int | None = None) -> PriorRun:
    """What the earlier process left: with `window_seconds`, the retries are counted from
    the times it reported (those within the window), not from its remaining count."""
    parsed = _read(status)
    events, failures = _events_and_retries(parsed, max_retries)
    times = _retry_times(parsed) if window_seconds is not None else ()
    training = parsed.training
    if training is None:
        return PriorRun(events, failures)
    return PriorRun(events, failures, training.goodput, training.step,
                    training.checkpoint_ack, times)


def read_prior_run(namespace: str, name: str, max_retries: int,
                   window_seconds: int | None = None) -> PriorRun:
    """`prior_state` of the job as it is now; nothing when it cannot be read (logged)."""
    try:
        job: Any = KubeClient.from_environment().get(job_path(namespace, name), timeout_s=10)
    except Exception as err:  # a trainer without its job still trains
        log.warning("reading %s/%s for earlier elastic events: %s; counting from 0",
                    namespace, name, str(err).splitlines()[0])
        return PriorRun()
    prior = prior_state(job.get("status") if isinstance(job, dict) else None, max_retries,
                        window_seconds)
    return replace(prior, hosts=hosts_of(job))


def hosts_of(job: Any) -> int | None:
    """The hosts of the job's slices, from its spec as the operator reads it (None: not a
    spec that parses)."""
    spec = spec_of(job)  # without: the cadence does without; reporting does not need it
    return None if spec is None else job_hosts(spec)


def read_stored_report(namespace: str, name: str) -> TrainingReport | None:
    """status.training as the job holds it now, read by the one lenient reader (None:
    none yet, or the job cannot be read: logged): what a restarted progress sidecar goes
    on from (elastic_api.forward)."""
    try:
        job: Any = KubeClient.from_environment().get(job_path(namespace, name), timeout_s=10)
    except Exception as err:  # reporting goes on; only what was reported before is unknown
        log.warning("reading %s/%s for what was reported before: %s", namespace, name,
                    str(err).splitlines()[0])
        return None
    return _read(job.get("status") if isinstance(job, dict) else None).training


def status_patch(report: TrainingReport) -> dict[str, Any]:
    """The merge patch body. Fields that are unset go out as null, so a field that
    disappeared from the report is removed from the object too (merge-patch semantics)."""
    return {"status": {"training": report.model_dump(by_alias=True, mode="json")}}


class StatusReporter:
    def __init__(self, namespace: str, name: str, interval: float = 5.0,
                 request_timeout: float = 3.0) -> None:
        self.namespace, self.name = namespace, name
        self.interval, self.request_timeout = interval, request_timeout
        self._latest: TrainingReport | None = None
        self._urgent = False
        self._cond = threading.Condition()
        self._closing = False
        self._last_sent = 0.0
        self._pending_since_sent = False
        self.sent = 0
        self.failed = 0
        self._last_error_log = 0.0
        self._client: KubeClient | None = None
        self._thread = threading.Thread(target=self._run, name="status-reporter", daemon=True)
        self._thread.start()

    def update(self, report: TrainingReport, urgent: bool = False) -> None:
        with self._cond:
            self._latest = report
            self._pending_since_sent = True
            self._urgent = self._urgent or urgent
            self._cond.notify()

    def _send(self, report: TrainingReport) -> None:
        try:
            if self._client is None:
                # No urllib3 retries: a dropped write is replaced by the next one anyway.
                self._client = KubeClient.from_environment(retries=0)
            self._client.patch(job_path(self.namespace, self.name) + "/status",
                               status_patch(report), timeout_s=self.request_timeout)
            self.sent += 1
        except Exception as err:  # never let reporting stop training
            self.failed += 1
            now = time.monotonic()
            if now - self._last_error_log > 30:  # one line per 30s, not one per write
                self._last_error_log = now
                log.warning("status report to %s/%s failed (%d so far): %s",
                            self.namespace, self.name, self.failed, str(err).splitlines()[0])

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    due = self._last_sent + self.interval
                    if self._pending_since_sent and (
                        self._urgent or self._closing or time.monotonic() >= due
                    ):
                        break
                    if self._closing:
                        return
                    wait = None if not self._pending_since_sent else due - time.monotonic()
                    self._cond.wait(timeout=wait)
                report = self._latest
                self._urgent = False
                self._pending_since_sent = False
            if report is not None:
                self._send(report)
            self._last_sent = time.monotonic()

    def close(self, timeout: float = 10.0) -> None:
        """Flush the newest report (bounded by `timeout`) and stop."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join(timeout)


class Metrics:
    """Prometheus metrics served on --metrics-port (off when no port is given)."""

    def __init__(self, port: int | None) -> None:
        self.enabled = port is not None
        if port is None:
            return
        from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

        self.registry = CollectorRegistry()
        self.step = Gauge("etj_trainer_step", "Last completed training step",
                          registry=self.registry)
        self.loss = Gauge("etj_trainer_loss", "Loss of the last completed step",
                          registry=self.registry)
        self.step_seconds = Gauge("etj_trainer_step_seconds", "Wall time of the last step",
                                  registry=self.registry)
        self.active_slices = Gauge("etj_trainer_active_slices", "Slices the mesh spans",
                                   registry=self.registry)
        self.events = Counter("etj_trainer_elastic_events", "Elastic events (slice losses)",
                              registry=self.registry)
        self.recovery = Gauge("etj_trainer_recovery_seconds",
                              "Detection to next completed step, last elastic event",
                              registry=self.registry)
        self.steps_lost = Counter("etj_trainer_steps_lost", "Steps redone after restores",
                                  registry=self.registry)
        self.stalls = Counter("etj_trainer_stalls", "Phases past the watchdog's deadline",
                              registry=self.registry)
        start_http_server(port, registry=self.registry)
        log.info("metrics on :%d/metrics", port)

    def on_step(self, step: int, loss: float, seconds: float, active_slices: int) -> None:
        if self.enabled:
            self.step.set(step)
            self.loss.set(loss)
            self.step_seconds.set(seconds)
            self.active_slices.set(active_slices)

    def on_event(self) -> None:
        if self.enabled:
            self.events.inc()

    def on_stall(self) -> None:
        if self.enabled:
            self.stalls.inc()

    def on_resumed(self, recovery_seconds: float, steps_lost: int) -> None:
        if self.enabled:
            self.recovery.set(recovery_seconds)
            self.steps_lost.inc(max(0, steps_lost))
