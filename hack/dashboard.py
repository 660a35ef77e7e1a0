"""The Grafana dashboard of the operator, generated into
charts/elastic-operator/dashboards/elastic-training-operator.json (the chart's ConfigMap
reads it with .Files.Get; import the file into a Grafana by hand just as well).

Regenerate with `.venv/bin/python -m hack.dashboard` (hack/regen-golden does);
tests/unit/test_alerts.py fails when the file is stale, and
tests/integration/test_prometheus.py runs every query against a real Prometheus scraping
the operator (no panel may come back empty).

Per-job gauges are kept by the leader only and a replica that lost the lead keeps its
last values (docs/metrics.md): gauges are read `and on(instance) etj_leader == 1`, maxed
over the replicas; counters are summed over the replicas.
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
OUTPUT = REPO_ROOT / "charts" / "elastic-operator" / "dashboards" / "elastic-training-operator.json"
UID = "elastic-training-operator"

JOBS = 'namespace=~"$namespace", job=~"$job"'
NAMESPACES = 'namespace=~"$namespace"'
LEADER = "and on(instance) etj_leader == 1"


def leader_gauge(metric: str, by: str = "namespace, job", match: str = "") -> str:
    """A per-job gauge as the leading replica says it (`match`: more label matchers)."""
    matchers = f"{match}, {JOBS}" if match else JOBS
    return f"max by ({by}) ({metric}{{{matchers}}} {LEADER})"


def quantile(q: float, histogram: str, by: str = "namespace", window: str = "1h",
             selector: str = NAMESPACES) -> str:
    return (f"histogram_quantile({q}, sum by (le, {by}) "
            f"(increase({histogram}_bucket{{{selector}}}[{window}])))")


@dataclass(frozen=True)
class Target:
    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    targets: list[Target]
    unit: str = "short"
    kind: str = "timeseries"
    overrides: dict[str, Any] = field(default_factory=dict)


JOB_PANELS = [
    Panel("Slices: desired, ready, in the trainer's mesh",
          "spec.tpu.numSlices, the slices whose hosts are all ready, and the slices the "
          "trainer's mesh spans (its last report).",
          [Target(leader_gauge("etj_desired_slices"), "{{namespace}}/{{job}} desired"),
           Target(leader_gauge("etj_ready_slices"), "{{namespace}}/{{job}} ready"),
           Target(leader_gauge("etj_active_slices"), "{{namespace}}/{{job}} in the mesh")]),
    Panel("Slices down",
          "1 while a slice is Down or Restarting (alert ElasticTrainingSliceDown): only the "
          "slices down or restarted have a series, at most 16 per job (docs/metrics.md).",
          [Target(leader_gauge("etj_slice_down", "namespace, job, slice"),
                  "{{namespace}}/{{job}} slice {{slice}}")]),
    Panel("Stalls and slow steps",
          "1 while Progressing is False: no new step for the progress deadline (alert "
          "ElasticTrainingStalled); 1 while Degraded is SlowSteps; and the deadline in "
          "force (spec.elastic.progressDeadlineSeconds, or learned), in seconds.",
          [Target(leader_gauge("etj_stalled"), "{{namespace}}/{{job}} stalled"),
           Target(leader_gauge("etj_slow_steps"), "{{namespace}}/{{job}} slow steps"),
           Target(leader_gauge("etj_progress_deadline_seconds"),
                  "{{namespace}}/{{job}} deadline (s)")]),
    Panel("Slice failures and replacements",
          "Slices that went Down, and the operator's decisions: Replace (recreate the "
          "worker Job), Move (maintenance), GiveUp (budget spent).",
          [Target(f"sum by (namespace, job) (increase(etj_slice_failures_total{{{JOBS}}}"
                  "[$__rate_interval]))", "{{namespace}}/{{job}} failures"),
           Target(f"sum by (namespace, job, action) (increase(etj_slice_replacements_total"
                  f"{{{JOBS}}}[$__rate_interval]))", "{{namespace}}/{{job}} {{action}}")]),
    Panel("Slice restarts against the budget",
          "status.slices[].restarts of the slices that restarted (the most restarted 16 "
          "of a job), and status.budgets.sliceRestarts: the restarts that count now (the "
          "slice with the most, within the window) against those allowed (alert "
          "ElasticTrainingSliceRestartBudgetLow at 80 %).",
          [Target(leader_gauge("etj_slice_restarts", "namespace, job, slice"),
                  "{{namespace}}/{{job}} slice {{slice}}"),
           Target(leader_gauge("etj_restart_budget_used", match='budget="sliceRestarts"'),
                  "{{namespace}}/{{job}} counted"),
           Target(leader_gauge("etj_restart_budget_allowed", match='budget="sliceRestarts"'),
                  "{{namespace}}/{{job}} budget")]),
    Panel("Recovery downtime (p50, p90 over 1h)",
          "Detection to the first step after the restore (status.lastRecovery), by "
          "namespace.",
          [Target(quantile(0.5, "etj_recovery_duration_seconds"), "{{namespace}} p50"),
           Target(quantile(0.9, "etj_recovery_duration_seconds"), "{{namespace}} p90")],
          unit="s"),
    Panel("Steps lost per recovery (p50, p90 over 1h)",
          "failedStep - restoredFromStep of each recovery, by namespace.",
          [Target(quantile(0.5, "etj_recovery_steps_lost"), "{{namespace}} p50"),
           Target(quantile(0.9, "etj_recovery_steps_lost"), "{{namespace}} p90")]),
    Panel("Detection latency (p50, p90 over 1h)",
          "A host's failure to the SliceDown condition written, by namespace.",
          [Target(quantile(0.5, "etj_slice_down_detection_seconds"), "{{namespace}} p50"),
           Target(quantile(0.9, "etj_slice_down_detection_seconds"), "{{namespace}} p90")],
          unit="s"),
    Panel("Replacement: decision to slice Ready (p90 over 1h)",
          "From the operator's decision to replace (or move) a slice to the slice Ready "
          "again, by namespace.",
          [Target(quantile(0.9, "etj_slice_replacement_seconds"), "{{namespace}} p90")],
          unit="s"),
    Panel("Goodput",
          "Productive training time over wall time since the job started "
          "(status.goodput.ratio).",
          [Target(leader_gauge("etj_goodput_ratio"), "{{namespace}}/{{job}}")],
          unit="percentunit"),
    Panel("Where the time goes (share of wall time, by ml-goodput-measurement BadputType)",
          "Productive seconds and badput seconds by cause per second of wall time; the "
          "legend names each cause's BadputType (docs/metrics.md).",
          [Target(f"sum by (namespace, job) (rate(etj_productive_seconds_total{{{JOBS}}}"
                  "[$__rate_interval]))", "{{namespace}}/{{job}} productive"),
           Target(f"sum by (namespace, job, cause, badput_type) (rate(etj_badput_seconds_total"
                  f"{{{JOBS}}}[$__rate_interval]) * on(cause) group_left(badput_type) "
                  "max by (cause, badput_type) (etj_badput_cause_info))",
                  "{{namespace}}/{{job}} {{cause}} ({{badput_type}})")],
          unit="percentunit"),
    Panel("Steps since the newest committed checkpoint",
          "The trainer's step minus status.checkpoint.latestCommittedStep, against "
          "spec.checkpoint.periodSteps (alert ElasticTrainingCheckpointStale at 2 periods).",
          [Target(f"max by (namespace, job) (etj_training_step{{{JOBS}}} - "
                  f"etj_checkpoint_latest_committed_step{{{JOBS}}} {LEADER})",
                  "{{namespace}}/{{job}} behind"),
           Target(leader_gauge("etj_checkpoint_period_steps"),
                  "{{namespace}}/{{job}} period")]),
    Panel("Newest checkpoint size",
          "The newest committed step's size, from the operator's listing "
          "(status.checkpoint.latestCommittedBytes).",
          [Target(leader_gauge("etj_checkpoint_latest_committed_bytes"),
                  "{{namespace}}/{{job}}")],
          unit="bytes"),
    Panel("Restore at risk, and the last restore's speed",
          "1 while RestoreAtRisk is True: a restore through the controller can outgrow "
          "the pathways-proxy's memory (alert ElasticTrainingRestoreAtRisk); the trainer's "
          "last restore in GiB/s (status.checkpoint.lastRestore).",
          [Target(leader_gauge("etj_restore_at_risk"), "{{namespace}}/{{job}} at risk"),
           Target(leader_gauge("etj_last_restore_gib_per_second"),
                  "{{namespace}}/{{job}} GiB/s")]),
    Panel("Quarantined node pools (age)",
          "Node pools the operator keeps replacements off, and for how long (alert "
          "ElasticTrainingPoolQuarantinedLong after 1h).",
          [Target("time() - max by (pool, reason) (etj_pool_quarantined_timestamp_seconds)",
                  "{{pool}} ({{reason}})")],
          unit="s"),
]

OPERATOR_PANELS = [
    Panel("Leader",
          "1 on the replica that holds the Lease and reconciles (alert "
          "ElasticTrainingOperatorNoLeader when none does).",
          [Target("etj_leader", "{{identity}}")]),
    Panel("Reconcile latency (p50, p99)", "One reconcile of one job.",
          [Target("histogram_quantile(0.5, sum by (le) "
                  "(rate(etj_reconcile_duration_seconds_bucket[$__rate_interval])))", "p50"),
           Target("histogram_quantile(0.99, sum by (le) "
                  "(rate(etj_reconcile_duration_seconds_bucket[$__rate_interval])))", "p99")],
          unit="s"),
    Panel("Reconcile errors", "Failed reconciles (retried with backoff), by replica.",
          [Target("sum by (instance) (increase(etj_reconcile_errors_total[$__rate_interval]))",
                  "{{instance}}")]),
    Panel("Cache relists",
          "Full lists of a watch-fed cache: start, expired (410), stalled (a silent watch).",
          [Target("sum by (resource, reason) "
                  "(increase(etj_cache_relists_total[$__rate_interval]))",
                  "{{resource}} {{reason}}")]),
    Panel("API requests",
          "Requests of the operator's Kubernetes client, by verb, resource and status code.",
          [Target("sum by (verb, resource, code) "
                  "(rate(etj_api_requests_total[$__rate_interval]))",
                  "{{verb}} {{resource}} {{code}}")],
          unit="reqps"),
    Panel("Cache objects", "Objects in each watch-fed cache, by replica.",
          [Target("etj_cache_objects", "{{instance}} {{resource}}")]),
]


def panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    return {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"},
                    "tooltip": {"mode": "multi"}},
        "targets": [{"refId": chr(ord("A") + i), "expr": t.expr, "legendFormat": t.legend,
                     "datasource": {"type": "prometheus", "uid": "${datasource}"}}
                    for i, t in enumerate(panel.targets)],
    }


def row_json(title: str, panel_id: int, y: int) -> dict[str, Any]:
    return {"id": panel_id, "type": "row", "title": title, "collapsed": False,
            "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []}


def panels() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    y = 0
    for title, group in (("Jobs", JOB_PANELS), ("Operator", OPERATOR_PANELS)):
        out.append(row_json(title, len(out) + 1, y))
        y += 1
        for i, panel in enumerate(group):
            out.append(panel_json(panel, len(out) + 1, 12 * (i % 2), y + 8 * (i // 2)))
        y += 8 * ((len(group) + 1) // 2)
    return out


def variable(name: str, label: str, metric: str) -> dict[str, Any]:
    query = f"label_values({metric}, {name})"
    return {"name": name, "label": label, "type": "query", "refresh": 2,
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "query": {"query": query, "refId": name}, "definition": query,
            "includeAll": True, "multi": True, "allValue": ".*", "sort": 1,
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]}}


def dashboard() -> dict[str, Any]:
    return {
        "uid": UID,
        "title": "Elastic training operator",
        "description": "ElasticTrainingJobs (slices, failures, recovery, goodput) and the "
                       "operator (leader, reconciles, caches, API requests). "
                       "docs/metrics.md says what each metric is.",
        "tags": ["elastic-training-operator", "tpu"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": [
            {"name": "datasource", "label": "Data source", "type": "datasource",
             "query": "prometheus", "current": {}},
            variable("namespace", "Namespace", "etj_desired_slices"),
            variable("job", "Job", 'etj_desired_slices{namespace=~"$namespace"}'),
        ]},
        "annotations": {"list": []},
        "panels": panels(),
    }


def concrete(expr: str, namespace: str = ".*", job: str = ".*",
             rate_interval: str = "1m") -> str:
    """A panel's query as Grafana sends it, its variables replaced."""
    return (expr.replace("$__rate_interval", rate_interval)
            .replace("$namespace", namespace).replace("$job", job))


def render() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


def main() -> int:
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(render())
    print(f"wrote {OUTPUT.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
