"""A real Prometheus server as a child process, for the tests of the alert rules and the
dashboard: Debian's `prometheus` and `promtool` (hack/install-prometheus.sh), on a free
loopback port, scraping the given targets with short intervals, and its HTTP API.

The scrape keeps the targets' own labels (honor_labels, as the chart's ServiceMonitor
does): the operator's per-job series carry `namespace` and `job` (the job's name), which
Prometheus would otherwise rename to exported_namespace and exported_job.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from elastic_devtools.localcluster.cluster import free_port
from elastic_devtools.localcluster.faults import wait_for
from elastic_devtools.localcluster.versions import MissingBinaryError

INSTALL_HINT = "run hack/install-prometheus.sh (`make prometheus`)"


def binary(name: str) -> Path:
    """`prometheus` or `promtool`: $PROMETHEUS / $PROMTOOL, else the one on PATH."""
    found = os.environ.get(name.upper()) or shutil.which(name)
    if not found or not os.access(found, os.X_OK):
        raise MissingBinaryError(f"{name} not found: {INSTALL_HINT}")
    return Path(found)


def scrape_config(targets: Sequence[str], rule_files: Sequence[Path], interval_s: float,
                  ) -> dict[str, Any]:
    interval = f"{interval_s:g}s"
    return {
        "global": {"scrape_interval": interval, "scrape_timeout": interval,
                   "evaluation_interval": interval},
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": [{"job_name": "elastic-operator", "honor_labels": True,
                            "static_configs": [{"targets": list(targets)}]}],
    }


class PrometheusProcess:
    """`prometheus` scraping `targets` (host:port, /metrics) every `interval_s` and
    evaluating `rule_files` as often; its data and log under `workdir`."""

    def __init__(self, workdir: Path, targets: Sequence[str], rule_files: Sequence[Path] = (),
                 *, interval_s: float = 1.0) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = scrape_config(targets, rule_files, interval_s)
        self.log_path = workdir / "prometheus.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "prometheus.yml"
        config.write_text(yaml.safe_dump(self.config, sort_keys=False))
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [str(binary("prometheus")), f"--config.file={config}",
                 f"--storage.tsdb.path={self.workdir / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        wait_for(self._ready, timeout, f"prometheus ready (log: {self.log_path})", interval=0.3)

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"prometheus exited with {self.proc.returncode}; "
                               f"see {self.log_path}")
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def api(self, path: str, **params: Any) -> Any:
        """GET /api/v1/<path>; its `data`, or RuntimeError with Prometheus' error."""
        query = urllib.parse.urlencode(params, doseq=True)
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as r:
                body = json.loads(r.read().decode())
        except urllib.error.HTTPError as e:  # 400/422: a bad query, said in the body
            body = json.loads(e.read().decode() or "{}")
        if body.get("status") != "success":
            raise RuntimeError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.api("query", query=expr)["result"]
        return result

    def query_range(self, expr: str, start: float, end: float, step: float
                    ) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.api(
            "query_range", query=expr, start=start, end=end, step=step)["result"]
        return result

    def alerts(self, name: str | None = None) -> list[dict[str, Any]]:
        """The pending and firing alerts (of one rule, if named)."""
        alerts: list[dict[str, Any]] = self.api("alerts")["alerts"]
        return [a for a in alerts if name is None or a["labels"].get("alertname") == name]

    def targets_up(self) -> bool:
        active = self.api("targets")["activeTargets"]
        return bool(active) and all(t["health"] == "up" for t in active)
