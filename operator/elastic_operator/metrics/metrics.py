"""Prometheus metrics of the operator (listed in docs/metrics.md): its own workings
(reconciles, the work queue, caches, leadership, its API requests, node actions), its
own state (state_metrics.py: the CRD's schema, its per-job stores) and, composed from
job_metrics.py, the per-job series it records from each status write.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from elastic_api.conditions import Reason
from elastic_api.models import ElasticTrainingJobSpec, ElasticTrainingJobStatus, TrainingReport
from elastic_operator.core.status_events import StatusEvent
from elastic_operator.metrics.job_metrics import GoodputMetrics, JobCounters, JobGauges
from elastic_operator.metrics.state_metrics import MemoryMetrics, SchemaMetrics
from elastic_operator.model.job_memory import JobMemories
from elastic_operator.model.objects import Observed, ObservedNode

_RECONCILE_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
# The phases of a reconcile (reconciler.py), in order, as etj_reconcile_phase_seconds
# labels them.
RECONCILE_PHASES = ("read", "plan", "observe", "status", "write", "replace")
QUARANTINE_METRIC = "etj_pool_quarantined_timestamp_seconds"


class OperatorMetrics:
    """Every metric of the operator, on one registry. The operator's own families are
    attributes its parts observe directly; the per-job ones are recorded here, from what
    a reconcile wrote (its status, its Events, the job's spec), by the part each belongs
    to: counters (`job_counters`), goodput (`goodput`) and gauges (`job_gauges`)."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.job_counters = JobCounters(registry)
        self._declare_operator_metrics(registry)
        self._declare_node_action_metrics(registry)
        self.goodput = GoodputMetrics(registry)
        self.job_gauges = JobGauges(registry)
        self._declare_api_metrics(registry)
        self.schema = SchemaMetrics(registry)
        self.job_memory = MemoryMetrics(registry)
        self._quarantines = _QuarantineCollector()
        registry.register(self._quarantines)
        # Which jobs it has per-job series for is kept in each job's record (JobMemory.
        # series, spec_series, slice_series): its own until the operator's is given
        # (`remember_in`), forgotten with the job after the series are removed.
        self._memory = JobMemories()

    def remember_in(self, memory: JobMemories) -> None:
        """Keep which jobs have series in `memory`, the operator's job records (app.py)."""
        self._memory = self.job_gauges.memory = memory

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
        self.foreign_status = Counter(
            "etj_foreign_status_records_total",
            "Fields of a job's status found written by someone other than the operator "
            "(its records: replacements, pool failures, the Event outbox, restart counts) "
            "and not acted on, each counted once a job (docs/threat-model.md).", ["field"],
            registry=registry)
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
            "etj_reconcile_started_over_total", "Reconciles whose pass was cut short, the "
            "job requeued at once, and started over from its reads (core/startover.py).",
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

    def _declare_node_action_metrics(self, registry: CollectorRegistry) -> None:
        """What the operator did to pods and node pools (replacement_writes.py, pool_warden.py)."""
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

    def _declare_api_metrics(self, registry: CollectorRegistry) -> None:
        """The operator's own Kubernetes requests (count_requests)."""
        self.api_requests = Counter(
            "etj_api_requests_total", "Requests of the operator's Kubernetes client, by "
            "verb, resource and HTTP status code (error: no answer).",
            ["verb", "resource", "code"], registry=registry)
        self.api_request_duration = Histogram(
            "etj_api_request_duration_seconds", "Latency of the operator's Kubernetes "
            "requests, by verb and resource (a watch: until its response headers).",
            ["verb", "resource"], buckets=_RECONCILE_BUCKETS, registry=registry)

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
        """The spec's limits the alert rules compare the status with (JobGauges)."""
        self._memory.of((namespace, job)).spec_series = True
        self.job_gauges.record_spec(namespace, job, spec, report)

    def record_status(
        self, namespace: str, job: str, previous: ElasticTrainingJobStatus,
        new: ElasticTrainingJobStatus,
    ) -> None:
        remembered = self._memory.of((namespace, job))
        if not remembered.series:
            remembered.series = True
            self._start_at_zero(namespace, job)
        self.job_counters.record_status(namespace, job, previous, new)
        self.goodput.record_status(namespace, job, previous, new)
        self.job_gauges.record_status(namespace, job, new)

    def _start_at_zero(self, namespace: str, job: str) -> None:
        """Create a job's counters and its namespace's histograms at 0 before their first
        event: increase() and rate() count from a series' first sample, so a series born
        at 1 would hide the first failure (or recovery) from every dashboard and alert."""
        self.job_counters.start_at_zero(namespace, job)
        self.goodput.start_at_zero(namespace, job)

    def record_events(self, namespace: str, events: list[StatusEvent], written_at_s: float) -> None:
        """written_at_s: POSIX time when the status carrying these events was written."""
        self.job_counters.record_events(namespace, events, written_at_s)

    def record_decisions(self, namespace: str, job: str, events: list[StatusEvent]) -> None:
        """The replacement decisions (and the stalls) among a reconcile's Events."""
        self.job_counters.record_decisions(namespace, job, events)

    def record_reaction(self, namespace: str, events: list[StatusEvent], observed: Observed,
                        seen_at: Callable[[str, str], float | None], written_s: float) -> None:
        """etj_slice_down_reaction_seconds: from the pod cache receiving a slice's first
        failed (or deleted) pod (`seen_at`) to its SliceDown written (`written_s`), for
        each slice that went down. (A pod changed again since then was received later:
        it can only shorten it.)"""
        down = [e.slice_index for e in events
                if e.reason == Reason.SLICE_DOWN and e.slice_index is not None]
        if not down:
            return
        by_slice = observed.worker_pods_by_slice
        for index in down:
            seen = [seen_at(namespace, p.name)
                    for p in by_slice.get(index, []) if p.failed or p.terminating]
            known = [t for t in seen if t is not None]
            if known:
                self.reaction.observe(max(0.0, written_s - min(known)))

    def record_relist(self, resource: str, reason: str, objects: int) -> None:
        self.cache_relists.labels(resource, reason).inc()

    def count_wake(self, cause: str) -> None:
        """A job named in the work queue by a watched change (`wakes`)."""
        self.wakes.labels(cause).inc()

    def job_keys(self) -> set[tuple[str, str]]:
        """The jobs it has per-job series for (job_stores.py)."""
        return {key for key, remembered in self._memory.items()
                if remembered.series or remembered.spec_series
                or remembered.slice_series is not None}

    def forget_job(self, key: tuple[str, str]) -> None:
        """Drop the per-job series of a deleted job (keeps cardinality bounded); before
        its record goes (app.py forgets the records last: the per-slice series are
        found there)."""
        namespace, job = key
        remembered = self._memory.peek(key)
        if remembered is not None:
            remembered.series = remembered.spec_series = False
        self.job_counters.forget(namespace, job)
        self.goodput.forget(namespace, job)
        self.job_gauges.forget(namespace, job)


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
