"""What the operator's own metrics say about a phase of a benchmark run: where the time
of a detection goes (the work queue's wait, the reconcile, the API server's answers) and
what its requests were, per verb and resource.

Read from two scrapes of the operator's /metrics (bench.detection.Phases.mark), so every
figure is the difference between the end and the start of the phase. Histogram quantiles
are interpolated within buckets, as Prometheus' histogram_quantile does.
"""
from __future__ import annotations

import re
from typing import Any

from elastic_api.names import GROUP, PLURAL, VERSION
from elastic_operator.metrics.metrics import RECONCILE_PHASES, request_kind

Scrape = dict[str, float]  # 'name{labels}' -> value (OperatorProcess.metrics)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def _split(key: str) -> tuple[str, dict[str, str]]:
    name, _, rest = key.partition("{")
    return name, dict(_LABEL.findall(rest))


def _delta(start: Scrape, end: Scrape, name: str,
           where: dict[str, str] | None = None) -> dict[tuple[tuple[str, str], ...], float]:
    """The series of `name` (whose labels include `where`), end minus start."""
    out: dict[tuple[tuple[str, str], ...], float] = {}
    for key, value in end.items():
        metric, labels = _split(key)
        if metric != name or any(labels.get(k) != v for k, v in (where or {}).items()):
            continue
        out[tuple(sorted(labels.items()))] = value - start.get(key, 0.0)
    return out


def requests_but_watches(start: Scrape, end: Scrape) -> float:
    """Every client's requests to the API server but watches over the phase (the count of
    apiserver_request_duration_seconds)."""
    return sum(n for labels, n in _delta(start, end, "apiserver_request_duration_seconds_count")
               .items() if dict(labels).get("verb") != "WATCH")


def counter(start: Scrape, end: Scrape, name: str, **where: str) -> float:
    return sum(_delta(start, end, name, where).values())


def histogram(start: Scrape, end: Scrape, name: str, **where: str) -> dict[str, Any]:
    """count, mean, p50, p99 of a histogram over the phase (None when it saw nothing)."""
    count = counter(start, end, f"{name}_count", **where)
    total = counter(start, end, f"{name}_sum", **where)
    buckets: dict[float, float] = {}
    for labels, value in _delta(start, end, f"{name}_bucket", where).items():
        le = float(dict(labels)["le"])
        buckets[le] = buckets.get(le, 0.0) + value
    return {"count": round(count), "mean": total / count if count > 0 else None,
            "p50": quantile(buckets, 0.5), "p99": quantile(buckets, 0.99)}


def quantile(buckets: dict[float, float], q: float) -> float | None:
    """histogram_quantile over cumulative bucket counts {upper bound: count}."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    rank = q * buckets[bounds[-1]]
    lower, below = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if bound == float("inf"):
                return lower  # beyond the last finite bucket: its bound
            inside = count - below
            return lower + (bound - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = bound, count
    return lower


def request_breakdown(requests: dict[str, int], quiet: dict[str, int], quiet_s: float,
                      events_s: float, events: int) -> dict[str, dict[str, float | None]]:
    """Per "VERB resource": requests per slice event over the failure phase, gross and
    net of the steady rate of the quiet window (Lease renewals, resyncs, watch restarts:
    they scale with the phase's length, which the slowest baseline decides)."""
    out: dict[str, dict[str, float | None]] = {}
    for kind in sorted(set(requests) | set(quiet)):
        n = requests.get(kind, 0)
        steady = quiet.get(kind, 0) * (events_s / quiet_s) if quiet_s > 0 else 0.0
        out[kind] = {"gross": n / events if events else None,
                     "net": (n - steady) / events if events else None}
    return out


def internals(start: Scrape, end: Scrape, seconds: float) -> dict[str, Any]:
    """The operator's own view of a phase `seconds` long."""
    reconcile = histogram(start, end, "etj_reconcile_duration_seconds")
    busy = counter(start, end, "etj_reconcile_duration_seconds_sum")
    latency: dict[str, float | None] = {}
    for labels, n in _delta(start, end, "etj_api_request_duration_seconds_count").items():
        tags = dict(labels)
        if n > 0 and tags.get("verb") != "watch":
            h = histogram(start, end, "etj_api_request_duration_seconds", **tags)
            latency[f"{tags['verb']} {tags['resource']}"] = h["mean"]
    return {
        "reconcile_seconds": reconcile,
        # The share of the phase a reconcile was running: near 1 with one job, the job
        # is reconciled back to back and every change waits for the one before.
        "reconcile_busy_ratio": busy / seconds if seconds > 0 else None,
        "queue_wait_seconds": histogram(start, end, "etj_work_queue_wait_seconds"),
        # CPU against wall time: a reconcile slow for little CPU waited (for the CPU,
        # the GIL or the API server), and the phases say where.
        "reconcile_cpu_seconds": histogram(start, end, "etj_reconcile_cpu_seconds"),
        "reconcile_phase_seconds": {
            phase: histogram(start, end, "etj_reconcile_phase_seconds", phase=phase)
            for phase in RECONCILE_PHASES},
        "slice_down_reaction_seconds": histogram(start, end, "etj_slice_down_reaction_seconds"),
        "status_writes": {
            "change": counter(start, end, "etj_status_writes_total", kind="change"),
            "progress": counter(start, end, "etj_status_writes_total", kind="progress"),
            "deferred": counter(start, end, "etj_status_writes_deferred_total"),
        },
        # Reconciles cut short for news and started over (core/startover.py).
        "started_over": counter(start, end, "etj_reconcile_started_over_total"),
        "api_request_mean_seconds": latency,
        # What named the job in the work queue (etj_wakes_total), by cause.
        "wakes": {cause: counter(start, end, "etj_wakes_total", cause=cause)
                  for cause in WAKE_CAUSES},
    }


WAKE_CAUSES = ("job", "pod", "pod-paced", "pod-progress", "jobset", "worker-job",
               "worker-job-progress", "node", "workload", "recheck")


# The status write's key in internals()' request times (the operator's metric names it with
# request_kind) and in server()'s (the API server's verb, resource and subresource).
OPERATOR_STATUS_PATCH = " ".join(request_kind(
    "PATCH", f"/apis/{GROUP}/{VERSION}/namespaces/ns/{PLURAL}/name/status"))
SERVER_STATUS_PATCH = f"PATCH {PLURAL}/status"

# What bench.detection scrapes from the API server at the failure phase's two edges.
SERVER_FAMILIES = ("apiserver_request_duration_seconds_", "apiserver_request_sli_duration_seconds_",
                   "apiserver_flowcontrol_request_wait_duration_seconds_")
_APF_WAIT = "apiserver_flowcontrol_request_wait_duration_seconds"
# The resources whose requests the split is given for: the status write (only the
# operator PATCHes elastictrainingjobs/status), and for comparison the other objects the
# operator writes (Leases, Events, pods, Jobs), which other clients write too.
_SERVER_RESOURCES = {("elastictrainingjobs", "status"), ("leases", ""), ("events", ""),
                     ("pods", ""), ("jobs", "")}


def server(start: Scrape, end: Scrape) -> dict[str, Any]:
    """The API server's view of the phase: per "VERB resource[/subresource]" its mean time
    handling a request (apiserver_request_duration_seconds: from receipt, priority and
    fairness' queue included) and the same without that queue and webhooks (the _sli_
    histogram), and per priority level the mean wait in its queue. Requests of every client
    count: only elastictrainingjobs/status is the operator's alone."""
    if not start or not end:
        return {}
    requests: dict[str, dict[str, float | None]] = {}
    for labels, n in _delta(start, end, "apiserver_request_duration_seconds_count").items():
        tags = dict(labels)
        key = (tags.get("resource", ""), tags.get("subresource", ""))
        if n <= 0 or key not in _SERVER_RESOURCES or tags.get("verb") == "WATCH":
            continue
        where = {k: tags[k] for k in ("verb", "resource", "subresource") if k in tags}
        name = f"{tags['verb']} {key[0]}" + (f"/{key[1]}" if key[1] else "")
        total = histogram(start, end, "apiserver_request_duration_seconds", **where)
        sli = histogram(start, end, "apiserver_request_sli_duration_seconds", **where)
        requests[name] = {"count": total["count"], "mean": total["mean"], "p99": total["p99"],
                          "sli_mean": sli["mean"]}
    waits: dict[str, float | None] = {}
    for labels, n in _delta(start, end, f"{_APF_WAIT}_count").items():
        level = dict(labels).get("priority_level", "")
        if n > 0 and level not in waits:
            waits[level] = histogram(start, end, _APF_WAIT, priority_level=level)["mean"]
    return {"requests": requests, "priority_level_wait_mean_seconds": waits}
