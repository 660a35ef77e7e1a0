"""The alert rules and the Grafana dashboard, checked with a real promtool.

`promtool check rules` and `promtool test rules` (tests/prometheus/*.yaml: every alert
firing and not firing) run here; every metric the rules and the dashboard query must be
one the operator declares (operator/elastic_operator/metrics/metrics.py) and docs/metrics.md
documents, so a renamed metric breaks this test, not a pager; every alert has its runbook
section in docs/operations.md, where its runbook_url points. The real server runs in
tests/integration/test_prometheus.py.
"""
from __future__ import annotations

import json
import re
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest

from elastic_devtools.localcluster.prometheus import binary
from elastic_devtools.localcluster.versions import MissingBinaryError
from elastic_operator.metrics.metrics import OperatorMetrics
from hack import dashboard

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "manifests" / "prometheus-rules.yaml"
RULE_TESTS = sorted((ROOT / "tests" / "prometheus").glob("*.yaml"))
OPERATIONS = ROOT / "docs" / "operations.md"
METRICS_DOC = ROOT / "docs" / "metrics.md"
VALUES = ROOT / "charts" / "elastic-operator" / "values.yaml"
METRIC_NAME = re.compile(r"\betj_[a-z0-9_]+\b")
RUNBOOK_PARTS = ("**What it means.**", "**What to look at.**", "**What to do.**")


def promtool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    try:
        path = binary("promtool")
    except MissingBinaryError as e:
        pytest.fail(str(e), pytrace=False)
    return subprocess.run([str(path), *args], input=stdin, capture_output=True, text=True,
                          timeout=120, cwd=ROOT)


def rules() -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"]
            for rule in group["rules"]]


def alert_names() -> list[str]:
    return [r["alert"] for r in rules() if "alert" in r]


def dashboard_queries() -> list[str]:
    board = json.loads(dashboard.OUTPUT.read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    return exprs + [v["definition"] for v in board["templating"]["list"] if "definition" in v]


def test_promtool_checks_the_rules() -> None:
    result = promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules())} rules found" in result.stdout


def test_promtool_unit_tests_of_every_alert_pass() -> None:
    assert RULE_TESTS, "no tests/prometheus/*.yaml"
    result = promtool("test", "rules", *map(str, RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_is_tested_firing_and_not_firing() -> None:
    fires: set[str] = set()
    silent: set[str] = set()
    for path in RULE_TESTS:
        for case in yaml.safe_load(path.read_text())["tests"]:
            for check in case.get("alert_rule_test", []):
                (fires if check.get("exp_alerts") else silent).add(check["alertname"])
    for name in alert_names():
        assert name in fires, f"no promtool test expects {name} to fire"
        assert name in silent, f"no promtool test expects {name} to stay silent"


def test_every_alert_has_severity_summary_and_its_runbook_section() -> None:
    base = yaml.safe_load(VALUES.read_text())["alerts"]["runbookUrl"]
    headings = re.findall(r"^### (\S+)$", OPERATIONS.read_text(), flags=re.MULTILINE)
    text = OPERATIONS.read_text()
    for rule in rules():
        name = rule["alert"]
        assert rule["labels"]["severity"] in {"critical", "warning"}, name
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], name
        assert rule["annotations"]["runbook_url"] == f"{base}#{name.lower()}", name
        assert name in headings, f"docs/operations.md has no '### {name}' runbook section"
        section = text.split(f"### {name}\n", 1)[1].split("\n### ", 1)[0].split("\n## ", 1)[0]
        for part in RUNBOOK_PARTS:
            assert part in section, f"the runbook of {name} lacks {part}"
        if "by (namespace, job" in rule["expr"]:
            assert "{{ $labels.job }}" in rule["annotations"]["summary"], name
        if "by (namespace, job, slice)" in rule["expr"]:
            assert "{{ $labels.slice }}" in rule["annotations"]["summary"], name


def exposed_names(registry: CollectorRegistry) -> dict[str, str]:
    """Every sample name the operator exposes -> the name docs/metrics.md documents
    (counters with _total; a histogram's _bucket, _sum and _count under its own name)."""
    names = {}
    for family in registry.collect():
        if family.type == "counter":
            names[f"{family.name}_total"] = f"{family.name}_total"
        elif family.type == "histogram":
            for suffix in ("", "_bucket", "_sum", "_count"):
                names[family.name + suffix] = family.name
        else:
            names[family.name] = family.name
    return names


def documented_names() -> set[str]:
    return set(re.findall(r"^\| `(etj_[a-z0-9_]+)`", METRICS_DOC.read_text(), re.MULTILINE))


def test_every_metric_queried_is_declared_and_documented() -> None:
    exposed = exposed_names(_registry())
    documented = documented_names()
    queried = {(where, name) for where, exprs in (
        ("manifests/prometheus-rules.yaml", [r["expr"] for r in rules()]),
        ("the dashboard", dashboard_queries()))
        for expr in exprs for name in METRIC_NAME.findall(expr)}
    assert queried
    for where, name in sorted(queried):
        assert name in exposed, (
            f"{where} queries {name}, which operator/elastic_operator/metrics/metrics.py does not "
            "declare (renamed?)")
        assert exposed[name] in documented, f"{name} ({where}) is not in docs/metrics.md"


def test_every_declared_metric_is_documented() -> None:
    documented = documented_names()
    declared = {v for k, v in exposed_names(_registry()).items() if k.startswith("etj_")}
    assert declared - documented == set(), "declared but not in docs/metrics.md"
    assert documented - declared == set(), "in docs/metrics.md but not declared"


def _registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    OperatorMetrics(registry)
    return registry


def test_the_exposition_passes_promlint() -> None:
    """`promtool check metrics` (client_golang's promlint) over a scrape of the operator
    with every per-job, per-slice and operator series present."""
    from elastic_api.models import (
        CheckpointStatus,
        Counters,
        ElasticTrainingJobStatus,
        SliceStatus,
        TrainingReport,
    )
    from elastic_api.validation import validate_job
    from elastic_operator.model.objects import ObservedNode
    from tests.builders import etj

    registry = CollectorRegistry()
    metrics = OperatorMetrics(registry)
    now = datetime(2026, 12, 1, tzinfo=UTC)
    metrics.record_spec("ns", "job", validate_job(etj("job").obj()).spec)
    metrics.record_status("ns", "job", ElasticTrainingJobStatus(), ElasticTrainingJobStatus(
        phase="Running", slices=[SliceStatus(index=0, state="Down", restarts=1)],
        counters=Counters(slice_failures=1), slices_desired=1, slices_ready=0,
        training=TrainingReport(observed_at=now, state="Training", step=5, active_slices=1),
        checkpoint=CheckpointStatus(directory="/tmp/c", latest_committed_step=0)))
    metrics.observe_quarantines(lambda: [ObservedNode(
        "n", ready=False, pool="p", quarantined="NodeNotReady", quarantined_at=now)])
    metrics.leader.labels("pod-0").set(1)
    metrics.api_requests.labels("list", "pods", "200").inc()
    metrics.record_relist("pods", "start", 3)
    exposition = generate_latest(registry).decode()
    assert "etj_pool_quarantined_timestamp_seconds{" in exposition
    result = promtool("check", "metrics", stdin=exposition)
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


def test_the_dashboard_is_current() -> None:
    assert dashboard.OUTPUT.read_text() == dashboard.render(), (
        f"{dashboard.OUTPUT.relative_to(ROOT)} is stale: run `.venv/bin/python -m "
        "hack.dashboard` (hack/regen-golden), then hack/render-manifests")


def test_every_dashboard_query_is_valid_promql() -> None:
    """promtool parses each query (Grafana's variables replaced) as a recording rule."""
    exprs = [q for q in dashboard_queries() if not q.startswith("label_values(")]
    rules_file = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:query{i}", "expr": dashboard.concrete(e)}
        for i, e in enumerate(exprs)]}]}
    result = promtool("check", "rules", "/dev/stdin", stdin=yaml.safe_dump(rules_file))
    assert result.returncode == 0, result.stdout + result.stderr
