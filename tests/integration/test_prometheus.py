"""The chart's alert rules and the Grafana dashboard on a real Prometheus (Debian's 2.42,
hack/install-prometheus.sh) scraping two operator replicas on the local control plane.

A TPU host of a running job dies: the slice-down alert goes pending, fires (once, though
both replicas are scraped) and resolves when the slice is back on the spare pool; the
trainer reports the recovery. Then every query of the dashboard, and its variables, must
return series from that Prometheus: no panel is decorative. The rules are the chart's
(the expressions of manifests/prometheus-rules.yaml), rendered with a short `for:`.
Everything is polled with deadlines through Prometheus' HTTP API.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from elastic_api.checkpoints import COMMIT_MARKER
from elastic_api.conditions import ConditionType, Reason
from elastic_api.names import GROUP, PLURAL, VERSION, worker_pods_selector
from elastic_devtools.localcluster import Cluster, faults
from elastic_devtools.localcluster.crds import install_crd
from elastic_devtools.localcluster.faults import wait_for
from elastic_devtools.localcluster.operator_process import OperatorProcess, replicas
from elastic_devtools.localcluster.prometheus import PrometheusProcess
from elastic_devtools.localcluster.versions import cache_dir, load_versions
from hack import dashboard
from tests.builders import etj

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "elastic-operator"
JOB = "article"
ALERT = "ElasticTrainingSliceDown"
SLICE = 2
FOR = "5s"  # the test's alerts.sliceDown.for (10m shipped)
# The slice stays Down this long before the operator replaces it: time for the alert to
# go pending, then fire (for: 5 s), with room for a lost scrape on a loaded machine.
NODE_NOT_READY_SECONDS = 30
TIMEOUT = 180


# --- fixtures ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def api(cluster: Cluster) -> Iterator[client.ApiClient]:
    api_client = cluster.api_client()
    install_crd(api_client, timeout=30)
    yield api_client
    api_client.close()


@pytest.fixture(scope="module")
def operators(cluster: Cluster, api: client.ApiClient) -> Iterator[list[OperatorProcess]]:
    """Two replicas, as the chart runs them; one leads."""
    procs = replicas(2, cluster.kubeconfig, Path(cluster.logs_dir))
    for proc in procs:
        proc.start()
    wait_for(lambda: sum(p.leading() for p in procs) == 1, 60, "one replica leading")
    yield procs
    for proc in procs:
        proc.stop()


@pytest.fixture(scope="module")
def prometheus(operators: list[OperatorProcess], tmp_path_factory: pytest.TempPathFactory
               ) -> Iterator[PrometheusProcess]:
    workdir = tmp_path_factory.mktemp("prometheus")
    rules = workdir / "rules.yaml"
    rules.write_text(yaml.safe_dump(chart_rules({"alerts.sliceDown.for": FOR})))
    server = PrometheusProcess(workdir, [f"127.0.0.1:{p.metrics_port}" for p in operators],
                               [rules], interval_s=1.0)
    server.start()
    try:
        wait_for(server.targets_up, 60, "both operator replicas scraped")
        yield server
    finally:
        server.stop()


# --- helpers -------------------------------------------------------------------------------


def chart_rules(values: dict[str, str]) -> dict[str, Any]:
    """The chart's PrometheusRule spec (the rule groups), with `values` set."""
    helm = os.environ.get("HELM") or str(cache_dir() / "bin" /
                                         f"helm-{load_versions()['HELM_VERSION']}")
    sets = [arg for key, value in values.items() for arg in ("--set", f"{key}={value}")]
    result = subprocess.run(
        [helm, "template", "elastic-operator", str(CHART), "--show-only",
         "templates/prometheusrule.yaml", "--set", "alerts.prometheusRule.enabled=true", *sets],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    spec: dict[str, Any] = yaml.safe_load(result.stdout)["spec"]
    return spec


def exprs(groups: dict[str, Any]) -> dict[str, str]:
    return {r["alert"]: r["expr"] for g in groups["groups"] for r in g["rules"]}


def status_of(api: client.ApiClient, ns: str) -> dict[str, Any]:
    obj = client.CustomObjectsApi(api).get_namespaced_custom_object(GROUP, VERSION, ns,
                                                                    PLURAL, JOB)
    status: dict[str, Any] = obj.get("status") or {}
    return status


def wait_status(api: client.ApiClient, ns: str, predicate: Callable[[dict[str, Any]], Any],
                what: str, timeout: float = TIMEOUT) -> dict[str, Any]:
    """Poll the job's status (the states waited for here last, they are not transient)."""
    found: dict[str, Any] = wait_for(lambda: (lambda s: s if predicate(s) else None)(
        status_of(api, ns)), timeout, what, interval=0.5)
    return found


def condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions", []) if c["type"] == type_), {})


def iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")


def report(api: client.ApiClient, ns: str, training: dict[str, Any]) -> None:
    """As the trainer does (docs/status-contract.md): a merge patch on /status."""
    client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
        GROUP, VERSION, ns, PLURAL, JOB, {"status": {"training": training}},
        _content_type="application/merge-patch+json")


def goodput(productive: float, **badput: float) -> dict[str, Any]:
    return {"productiveSeconds": productive, "badputSeconds": badput,
            "medianStepSeconds": 0.4}


def slice_alerts(server: PrometheusProcess, ns: str) -> list[dict[str, Any]]:
    return [a for a in server.alerts(ALERT)
            if a["labels"].get("namespace") == ns and a["labels"].get("job") == JOB]


def wait_alert_state(server: PrometheusProcess, ns: str, state: str) -> dict[str, Any]:
    def seen() -> dict[str, Any] | None:
        alerts = slice_alerts(server, ns)
        assert len(alerts) <= 1, f"more than one {ALERT} for the job: {alerts}"
        return next((a for a in alerts if a["state"] == state), None)
    alert: dict[str, Any] = wait_for(seen, TIMEOUT, f"{ALERT} {state}")
    return alert


# --- the test ------------------------------------------------------------------------------


def test_slice_down_alert_and_every_dashboard_query_on_a_real_prometheus(
        api: client.ApiClient, namespace: str, prometheus: PrometheusProcess,
        killed: list[str], tmp_path: Path) -> None:
    # The test's rules differ from the shipped ones in the durations only.
    shipped = exprs(yaml.safe_load((ROOT / "manifests" / "prometheus-rules.yaml").read_text()))
    assert exprs(chart_rules({"alerts.sliceDown.for": FOR})) == shipped

    started = time.time()
    checkpoints = tmp_path / "checkpoints"
    (checkpoints / "40").mkdir(parents=True)
    (checkpoints / "40" / COMMIT_MARKER).write_text("")  # a committed step
    manifest = (etj(JOB, namespace=None).backend("pathways").max_restarts(3)
                .spec(elastic={"maxSliceRestarts": 5},
                      checkpoint={"directory": str(checkpoints), "periodSteps": 20},
                      recovery={"nodeNotReadySeconds": NODE_NOT_READY_SECONDS},
                      pathways={"gcsScratch": "gs://test-bucket/scratch"})
                .trainer("trainer:test", 1000).obj())
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, manifest)
    wait_status(api, namespace, lambda s: s.get("slicesReady") == 3
                and s.get("checkpoint", {}).get("latestCommittedStep") == 40,
                "3 slices Ready and checkpoint 40 seen")
    report(api, namespace, {"observedAt": iso(datetime.now(UTC)), "state": "Training",
                            "step": 50, "activeSlices": 3, "elasticEventsTotal": 0,
                            "goodput": goodput(20.0, startup=4.0)})

    pods = client.CoreV1Api(api).list_namespaced_pod(
        namespace, label_selector=worker_pods_selector(JOB, SLICE)).items
    node = sorted(p.spec.node_name for p in pods if p.spec.node_name)[0]
    killed.append(node)
    failed_at = datetime.now(UTC)
    faults.kill_node(api, node)

    killed_at = time.monotonic()
    pending = wait_alert_state(prometheus, namespace, "pending")
    pending_after = time.monotonic() - killed_at
    firing = wait_alert_state(prometheus, namespace, "firing")
    firing_after = time.monotonic() - killed_at
    assert pending["labels"] == firing["labels"] == {
        "alertname": ALERT, "severity": "critical", "namespace": namespace, "job": JOB,
        "slice": str(SLICE)}
    assert firing["annotations"]["summary"] == (
        f"Slice {SLICE} of job {namespace}/{JOB} has been down for more than {FOR}")
    assert firing["annotations"]["runbook_url"].endswith("#elastictrainingslicedown")
    # The slice is back on the spare pool: the alert resolves.
    wait_status(api, namespace, lambda s: s["slices"][SLICE]["state"] == "Ready",
                f"slice {SLICE} Ready again on the spare pool")
    wait_for(lambda: not slice_alerts(prometheus, namespace), TIMEOUT, f"{ALERT} resolved")
    print(f"{ALERT} after the host died: pending {pending_after:.1f} s, firing "
          f"{firing_after:.1f} s, resolved {time.monotonic() - killed_at:.1f} s")

    # The trainer resumed (restored step 40, 20 steps lost): a recovery to observe.
    now = datetime.now(UTC)
    report(api, namespace, {
        "observedAt": iso(now), "state": "Training", "step": 61, "attempt": 1,
        "activeSlices": 3, "elasticEventsTotal": 1,
        "goodput": goodput(25.0, startup=4.0, waitingForSlices=30.0, restore=1.0,
                           recomputedSteps=8.0),
        "elasticEvent": {"id": 1, "phase": "Resumed", "detectedAt": iso(failed_at),
                         "failedStep": 60, "slicesDown": [SLICE], "restoredFromStep": 40,
                         "restoreSource": "checkpoint", "resumedAt": iso(now),
                         "resumedStep": 61},
        "lastRestore": {"source": "checkpoint", "step": 40, "bytes": 2**31, "seconds": 1.0,
                        "gibPerSecond": 2.0, "restoredAt": iso(now)}})
    wait_status(api, namespace, lambda s: condition(s, ConditionType.RECOVERING).get("reason")
                == Reason.RECOVERED, "Recovering False/Recovered")
    board = json.loads(dashboard.OUTPUT.read_text())
    wait_for(lambda: events_scraped(prometheus, board, namespace), 60,
             "the failure, the replacement and the recovery scraped")
    check_every_dashboard_query(prometheus, board, namespace, started)


def panel_exprs(board: dict[str, Any], title_part: str, ns: str) -> list[str]:
    return [dashboard.concrete(t["expr"], namespace=ns, job=JOB, rate_interval="5s")
            for p in board["panels"] if title_part in p["title"] for t in p["targets"]]


def events_scraped(server: PrometheusProcess, board: dict[str, Any], ns: str) -> bool:
    """The panels of this run's events (quantiles over 1h) show a number now."""
    exprs = [e for part in ("Recovery downtime", "Steps lost", "Detection latency",
                            "Replacement:") for e in panel_exprs(board, part, ns)]
    return all(any(v["value"][1] != "NaN" for v in server.query(e)) for e in exprs)


def check_every_dashboard_query(server: PrometheusProcess, board: dict[str, Any], ns: str,
                                since: float) -> None:
    end = time.time()
    start = end - math.ceil(end - since)  # the last step is now
    empty = []
    values: dict[str, list[float]] = {}
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            expr = dashboard.concrete(target["expr"], namespace=ns, job=JOB,
                                      rate_interval="5s")
            series = server.query_range(expr, start, end, step=1)
            if not series:
                empty.append(f"{panel['title']}: {expr}")
            values[f"{panel['title']} {target['refId']}"] = [
                float(v) for s in series for _, v in s["values"]]
    assert not empty, "dashboard queries with no series:\n" + "\n".join(empty)
    # And the panels about this run show it (NaN: a quantile of no event in its window).
    def peak(key: str) -> float:
        return max((v for v in values[key] if not math.isnan(v)), default=0.0)

    assert peak("Slice failures and replacements A") >= 1  # slice 2 went down
    assert peak("Slice failures and replacements B") >= 1  # and was replaced
    assert peak("Steps lost per recovery (p50, p90 over 1h) A") > 0  # 20 steps
    assert peak("Quarantined node pools (age) A") > 0  # the dead host's pool
    for variable in board["templating"]["list"]:
        if variable["type"] != "query":
            continue
        metric, label = variable["definition"][len("label_values("):-1].rsplit(", ", 1)
        metric = metric.replace("$namespace", ns)
        found = server.api(f"label/{label}/values", **{"match[]": metric})
        assert {"namespace": ns, "job": JOB}[label] in found, (variable["name"], found)
