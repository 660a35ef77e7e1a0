"""The operator's start-up API check on what the real API server answers: discovery of
the pinned JobSet (and Kueue, once running) passes the check and names their versions;
the same document without JobSet is refused; `etj operator` logs what it found at start.
(The decision, and the refusal's log line and Event: tests/unit/test_operator_api_support.py.)"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from elastic_api.kube import KubeClient
from elastic_devtools.localcluster import Cluster
from elastic_devtools.localcluster.operator_process import OperatorProcess
from elastic_operator.client.kube import Kube
from elastic_operator.core.api_support import judge_apis, served_versions


def discovery(cluster: Cluster) -> dict[str, Any]:
    api = cluster.api_client()
    try:
        return Kube(KubeClient(api)).api_groups()
    finally:
        api.close()


def test_the_local_cluster_serves_what_the_operator_needs(cluster: Cluster) -> None:
    groups = discovery(cluster)
    verdict = judge_apis(served_versions(groups))
    assert verdict.ok, verdict.message
    assert "JobSet: jobset.x-k8s.io v1alpha2" in verdict.message
    without_jobset = {**groups, "groups": [g for g in groups["groups"]
                                           if g["name"] != "jobset.x-k8s.io"]}
    refused = judge_apis(served_versions(without_jobset))
    assert not refused.ok and "JobSet is not installed" in refused.message


def test_with_kueue_its_v1beta2_is_found(kueue: Cluster) -> None:
    verdict = judge_apis(served_versions(discovery(kueue)))
    assert verdict.ok, verdict.message
    assert "kueue.x-k8s.io/v1beta2" in verdict.message.split("using", 1)[1]


def test_the_operator_logs_the_versions_it_found_at_start(cluster: Cluster,
                                                         tmp_path: Path) -> None:
    """`etj operator` runs the check before it serves /healthz: once healthy, the line
    is in its log."""
    operator = OperatorProcess(cluster.kubeconfig, tmp_path / "operator.log")
    operator.start()
    try:
        log = (tmp_path / "operator.log").read_text()
    finally:
        operator.stop()
    assert "API versions found: JobSet: jobset.x-k8s.io v1alpha2" in log, log[-2000:]
