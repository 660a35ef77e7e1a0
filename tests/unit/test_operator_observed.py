"""Parsing what the API server returns into the observed-state dataclasses (lenient)."""
from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta
from typing import Any

import kopf
import pytest

from elastic_operator.client.kube import collection_path, job_path
from elastic_operator.core.pools import QuarantinePolicy
from elastic_operator.entry.handlers import configure_settings
from elastic_operator.entry.operator_cli import add_arguments, replacement_settings
from elastic_operator.model.objects import (
    job_from_dict,
    jobset_from_dict,
    node_from_dict,
    parse_time,
    pod_from_dict,
)
from elastic_operator.watch.caches import WatchScope
from tests.builders import JobSetWrapper, NodeWrapper, PodWrapper

T = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def failed_worker_pod() -> dict[str, Any]:
    # The shape kwok's pod-container-running-failed stage writes (one container failed,
    # another had exited cleanly an hour before).
    return (PodWrapper.worker(2, 1).created(T - timedelta(minutes=1)).on_node("tpu-2-1")
            .failed(T, container="pathways-worker")
            .container_exited("other", 0, T - timedelta(hours=1)).obj())


def test_failed_pod() -> None:
    pod = pod_from_dict(failed_worker_pod())
    assert (pod.replicated_job, pod.slice_index, pod.host_index) == ("worker", 2, 1)
    assert pod.failed and not pod.ready and not pod.terminating
    assert pod.terminated_at == T and pod.terminated_exit_code == 1
    assert pod.terminated_reason == "containerFailed"
    assert pod.failure_started_at == T
    assert pod.node_name == "tpu-2-1"


def test_terminating_pod_failure_time_is_the_delete_request() -> None:
    raw = failed_worker_pod()
    raw["status"] = {"phase": "Running"}
    raw["metadata"]["deletionTimestamp"] = "2026-11-29T12:00:30Z"
    raw["metadata"]["deletionGracePeriodSeconds"] = 30
    pod = pod_from_dict(raw)
    assert pod.terminating and pod.failure_started_at == T


def test_a_pod_kueue_failed_off_its_unhealthy_node_says_so() -> None:
    # As Kueue's TAS node controller writes it (pkg/controller/tas/node_controller.go).
    raw = PodWrapper.worker(1, 0).obj()
    raw["status"] = {"phase": "Failed", "conditions": [
        {"type": "TerminatedByKueue", "status": "True",
         "reason": "UnschedulableOnAssignedNode",
         "message": "Pod terminated by Kueue NodeController due to node taint"}]}
    pod = pod_from_dict(raw)
    assert pod.failed and pod.terminated_by_kueue and pod.node_name is None
    raw["status"]["conditions"][0]["status"] = "False"
    assert not pod_from_dict(raw).terminated_by_kueue
    assert not pod_from_dict(failed_worker_pod()).terminated_by_kueue


@pytest.mark.parametrize("junk", [
    {}, {"metadata": None, "status": "x"}, {"metadata": {"labels": {"jobset.sigs.k8s.io/job-index":
                                                                   "two"}}},
    {"status": {"conditions": [None, 3, {"type": "Ready"}], "containerStatuses": ["x"]}},
])
def test_junk_pods_do_not_raise(junk: dict[str, Any]) -> None:
    pod = pod_from_dict(junk)
    assert pod.slice_index is None and not pod.ready


def test_node() -> None:
    node = node_from_dict(NodeWrapper("n1").ready(False, since=T, reason="nodeFailed").obj())
    assert node.name == "n1" and not node.ready and node.ready_transition_time == T
    assert node_from_dict(NodeWrapper("n2").obj()).ready is False
    assert node_from_dict(NodeWrapper("n3").ready(since=T).obj()).ready


def test_node_pool_quarantine_and_gke_maintenance_signals() -> None:
    obj = NodeWrapper("n1").ready(since=T).obj()
    obj["metadata"]["labels"] = {
        "cloud.google.com/gke-nodepool": "tpu-1",
        "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
        "cloud.google.com/gke-tpu-topology": "4x4",
        "elastic.pathways.dev/quarantined": "NodeNotReady",
        "cloud.google.com/scheduled-maintenance-time": "1795000000",
    }
    obj["metadata"]["annotations"] = {"elastic.pathways.dev/quarantined-at": "2026-11-29T12:00:00Z"}
    node = node_from_dict(obj)
    assert (node.pool, node.accelerator, node.topology) == ("tpu-1", "tpu-v5-lite-podslice",
                                                            "4x4")
    assert node.quarantined == "NodeNotReady" and node.quarantined_at == T
    assert node.scheduled_maintenance == datetime.fromtimestamp(1795000000, UTC)
    assert node.maintenance_signal == "ScheduledMaintenance" and node.ready_status == "True"
    obj["metadata"]["labels"]["cloud.google.com/active-node-maintenance"] = "ONGOING"
    assert node_from_dict(obj).maintenance_signal == "MaintenanceOngoing"
    obj["spec"] = {"taints": [{"key": "cloud.google.com/impending-node-termination",
                               "effect": "NoSchedule"}]}
    assert node_from_dict(obj).maintenance_signal == "ImpendingTermination"
    obj["metadata"]["labels"]["cloud.google.com/scheduled-maintenance-time"] = "soon"
    assert node_from_dict(obj).scheduled_maintenance is None  # junk: no signal from it
    assert node_from_dict(NodeWrapper("n2").obj()).ready_status == "Unknown"


def test_worker_job() -> None:
    job = job_from_dict({
        "metadata": {"name": "a-worker-1", "uid": "u1", "deletionTimestamp": "2026-11-29T12:00:00Z",
                     "labels": {"jobset.sigs.k8s.io/job-index": "1"}},
        "spec": {"backoffLimit": 20, "activeDeadlineSeconds": 0},
        "status": {"failed": 2, "conditions": [{"type": "Failed", "status": "True"}]}})
    assert (job.name, job.uid, job.slice_index, job.deleting, job.backoff_limit,
            job.failed_pods, job.finished) == ("a-worker-1", "u1", 1, True, 20, 2, "Failed")
    assert job.active_deadline_seconds == 0
    assert job_from_dict({}).slice_index is None
    assert job_from_dict({}).active_deadline_seconds is None
    assert job.deleted_at == parse_time("2026-11-29T12:00:00Z")


def test_a_worker_jobs_count_of_failed_pods_takes_in_those_not_counted_yet() -> None:
    """The Job controller lists a failed pod in uncountedTerminatedPods before it removes
    its finalizer, and moves it to status.failed after: the sum never goes back."""
    job = job_from_dict({"metadata": {"name": "a-worker-0", "uid": "u0"}, "status": {
        "failed": 2, "uncountedTerminatedPods": {"failed": ["p1"], "succeeded": ["p2"]}}})
    assert job.failed_pods == 3 and job.deleted_at is None


def test_jobset() -> None:
    js = jobset_from_dict(
        JobSetWrapper().suspend().owner("etj1").applied_spec("{}").restarts(2)
        .terminal("Failed", "boom").replicated_job_status("pathways-head", failed=1).obj())
    assert js.suspended and js.restarts == 2 and js.terminal_state == "Failed"
    assert js.failed_message == "boom" and js.worker_hosts_per_slice == 4
    assert js.owner_uid == "etj1" and js.applied_spec == "{}"
    assert js.replicated_jobs[0].failed == 1
    not_ours = jobset_from_dict(JobSetWrapper().owner("etj1", controller=False).obj())
    assert not_ours.owner_uid is None
    done = jobset_from_dict({"metadata": {"name": "a"}, "status": {"conditions": [
        {"type": "Completed", "status": "True"}]}})
    assert done.terminal_state == "Completed" and not done.suspended


def test_parse_time() -> None:
    assert parse_time("2026-11-29T12:00:00Z") == T
    assert parse_time("2026-11-29T12:00:00.5+00:00") == T + timedelta(milliseconds=500)
    assert parse_time("soon") is None and parse_time(None) is None and parse_time(5) is None


def test_api_paths() -> None:
    assert collection_path("v1", "ServiceAccount", "ns") == "/api/v1/namespaces/ns/serviceaccounts"
    assert collection_path("rbac.authorization.k8s.io/v1", "RoleBinding", "ns") == \
        "/apis/rbac.authorization.k8s.io/v1/namespaces/ns/rolebindings"
    assert collection_path("jobset.x-k8s.io/v1alpha2", "JobSet", "ns") == \
        "/apis/jobset.x-k8s.io/v1alpha2/namespaces/ns/jobsets"
    assert job_path("ns", "a") == "/apis/elastic.pathways.dev/v1alpha1/namespaces/ns/" \
        "elastictrainingjobs/a"


def test_operator_cli_arguments() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["-n", "a", "-n", "team-*", "--log-format", "json"])
    assert args.namespace == ["a", "team-*"] and args.log_format == "json"
    assert parser.parse_args([]).namespace == []
    with pytest.raises(SystemExit):
        parser.parse_args(["-n", "a", "--all-namespaces"])
    defaults = parser.parse_args([])
    assert (defaults.quarantine_pools, defaults.node_actions_per_minute,
            defaults.node_action_burst, defaults.node_action_cooldown_seconds,
            defaults.quarantine_release_after_seconds,
            defaults.repeated_failures_quarantine_seconds) == (True, 30.0, 10, 60.0, 600.0,
                                                               3600.0)
    assert parser.parse_args(["--no-quarantine-pools"]).quarantine_pools is False
    with pytest.raises(SystemExit):
        parser.parse_args(["--node-actions-per-minute", "0"])
    # The administrator's say on quarantines resting on tenants' word (core/pools.py).
    assert replacement_settings(defaults).quarantine == QuarantinePolicy(2, False)
    trusting = parser.parse_args(["--quarantine-min-jobs", "1", "--quarantine-on-job-report"])
    assert replacement_settings(trusting).quarantine == QuarantinePolicy(1, True)
    with pytest.raises(SystemExit):
        parser.parse_args(["--quarantine-min-jobs", "0"])


def test_watch_scope() -> None:
    scope = WatchScope(clusterwide=False, namespaces=["a", "team-*"])
    assert scope.matches("a") and scope.matches("team-x") and not scope.matches("b")
    assert WatchScope(clusterwide=True, namespaces=[]).matches("anything")
    assert scope.has_globs and not WatchScope(clusterwide=False, namespaces=["a"]).has_globs


def test_kopf_settings_scan_nothing_even_for_namespace_globs() -> None:
    """kopf watches no resource: the informers serve the namespaces (globs included), so
    kopf never lists CRDs or namespaces, and the Lease elects the leader, not peering."""
    settings = kopf.OperatorSettings()
    configure_settings(settings)
    assert settings.scanning.disabled and settings.peering.standalone
