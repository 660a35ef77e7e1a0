"""The operator against the local control plane (real kube-apiserver, Job, JobSet, GC,
scheduler; kwok plays the kubelets of 12 fake TPU v5e hosts = 3 slices of 4x4).

The operator runs as a subprocess (`etj operator`), exactly as deployed, so a test can
kill and restart it. Tests run one job at a time (the fake TPU nodes fit exactly one
article-shaped job) and wait for its pods to be gone before the next test starts.
"""
from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from kubernetes import client

from elastic_api.conditions import ConditionType as C
from elastic_api.conditions import Phase, Reason
from elastic_api.names import (
    GROUP,
    HEAD_REPLICATED_JOB,
    JOB_NAME_LABEL,
    PLURAL,
    REPLICATED_JOB_LABEL,
    VERSION,
    job_pods_selector,
)
from elastic_devtools.localcluster import Cluster, faults
from elastic_devtools.localcluster.crds import install_crd
from elastic_devtools.localcluster.faults import wait_for
from elastic_devtools.localcluster.operator_process import OperatorProcess
from tests.support.article_job import (
    JOB,
    JOBSETS,
    TIMEOUT,
    condition,
    delete_jobs_and_wait_for_pods,
    events,
    get_jobset,
    is_true,
    parse,
    recovered,
    resumed_report,
    status_of,
    submit,
    worker_pods,
    write_report,
)
from tests.support.waiting import job_version, wait_running, wait_status

pytestmark = pytest.mark.cluster


# --- fixtures --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def api(cluster: Cluster) -> Iterator[client.ApiClient]:
    api_client = cluster.api_client()
    yield api_client
    api_client.close()


@pytest.fixture(scope="module")
def crd(api: client.ApiClient) -> None:
    install_crd(api, timeout=30)


@pytest.fixture(scope="module")
def operator(cluster: Cluster, crd: None) -> Iterator[OperatorProcess]:
    with OperatorProcess(Path(cluster.kubeconfig), Path(cluster.logs_dir) / "operator.log") as proc:
        yield proc


@pytest.fixture
def ns(namespace: str, api: client.ApiClient, operator: OperatorProcess) -> Iterator[str]:
    """The test's namespace; afterwards every job is deleted and its pods are gone, so the
    fake TPU nodes are free for the next test."""
    yield namespace
    if not operator.running:
        operator.start()
    delete_jobs_and_wait_for_pods(api, namespace)


# --- the article's scenario ------------------------------------------------------------------


def test_article_slice_failure_is_detected_and_recovered(
        api: client.ApiClient, ns: str, operator: OperatorProcess) -> None:
    submit(api, ns)
    wait_running(api, ns)
    jobset_uid = get_jobset(api, ns)["metadata"]["uid"]  # type: ignore[index]
    # The trainer's Role, bound to the account the pods run as (the namespace's default).
    binding = client.RbacAuthorizationV1Api(api).read_namespaced_role_binding(
        "article-trainer", ns)
    assert [s.name for s in binding.subjects] == ["default"]
    victim = worker_pods(api, ns, 2)[0]
    before = job_version(api, ns)
    failed_at = datetime.now(UTC)
    faults.fail_pod(api, ns, victim.metadata.name)

    st = wait_status(api, ns, lambda s: is_true(s, C.SLICE_DOWN), "SliceDown True", timeout=30,
                     since=before)
    seen_at = datetime.now(UTC)  # the SliceDown write happened before this
    sd = condition(st, C.SLICE_DOWN)
    assert "slice 2" in sd["message"] and sd["reason"] == Reason.POD_FAILED, sd
    assert "slice 0" not in sd["message"] and "slice 1" not in sd["message"]
    assert st["slices"][2]["state"] == "Down" and st["slices"][2]["restarts"] == 1
    assert st["counters"]["sliceFailures"] == 1
    assert is_true(st, C.RECOVERING)
    detected_at = parse(st["lastRecovery"]["detectedAt"])
    # The container's finishedAt: after the fault (in whole seconds), before we saw it.
    assert failed_at - timedelta(seconds=1) <= detected_at <= seen_at
    wait_for(lambda: events(api, ns, Reason.SLICE_DOWN), 30, "a SliceDown event")
    assert any("slice 2" in m for m in events(api, ns, Reason.SLICE_DOWN))

    # The Job controller replaces the pod; the slice is Ready again, recovery continues.
    st = wait_status(api, ns, lambda s: s["slices"][2]["state"] == "Ready",
                     "slice 2 Ready again")
    assert st["slices"][2]["restarts"] == 1 and not is_true(st, C.SLICE_DOWN)
    assert is_true(st, C.RECOVERING)
    wait_for(lambda: events(api, ns, Reason.SLICE_RESTORED), 30, "a SliceRestored event")

    # The trainer reports the resumed elastic event.
    resumed_at = datetime.now(UTC)
    write_report(api, ns, resumed_report(detected_at + timedelta(seconds=3), resumed_at))
    st = wait_status(api, ns, recovered, "Recovering False/Recovered", timeout=30)
    rec = condition(st, C.RECOVERING)
    assert rec["status"] == "False" and "88 steps lost" in rec["message"]
    downtime = st["lastRecovery"]["downtimeSeconds"]
    assert downtime == pytest.approx((resumed_at - detected_at).total_seconds(), abs=0.01)
    assert f"{downtime:.1f} s" in rec["message"]
    assert st["lastRecovery"]["stepsLost"] == 88
    assert st["phase"] == Phase.RUNNING and st["training"]["step"] == 101
    wait_for(lambda: events(api, ns, Reason.RECOVERED), 30, "a Recovered event")

    # The JobSet never restarted and was never recreated.
    js = get_jobset(api, ns)
    assert js is not None and js["metadata"]["uid"] == jobset_uid
    assert js.get("status", {}).get("restarts", 0) == 0
    assert st["counters"]["jobSetRestarts"] == 0

    m = operator.metrics()
    assert m[f'etj_slice_failures_total{{job="{JOB}",namespace="{ns}"}}'] == 1
    assert m[f'etj_slice_down_detection_seconds_count{{namespace="{ns}"}}'] == 1
    # From the container's finishedAt (whole seconds) to the SliceDown write: within what
    # the test saw from the fault to the condition (plus the second's truncation).
    latency = m[f'etj_slice_down_detection_seconds_sum{{namespace="{ns}"}}']
    assert 0 <= latency <= (seen_at - failed_at).total_seconds() + 1
    assert m[f'etj_recovery_duration_seconds_count{{namespace="{ns}"}}'] == 1
    assert m[f'etj_desired_slices{{job="{JOB}",namespace="{ns}"}}'] == 3


def test_deleted_pod_counts_as_a_slice_failure(api: client.ApiClient, ns: str) -> None:
    submit(api, ns)
    wait_running(api, ns)
    victim = worker_pods(api, ns, 1)[1]
    faults.delete_pod(api, ns, victim.metadata.name)
    st = wait_status(api, ns, lambda s: s["slices"][1]["restarts"] == 1,
                     "slice 1 counted down once", timeout=30)
    assert st["counters"]["sliceFailures"] == 1
    assert st["lastRecovery"]["slices"] == [1]
    wait_for(lambda: any("slice 1" in m for m in events(api, ns, Reason.SLICE_DOWN)), 30,
             "a SliceDown event naming slice 1")
    st = wait_status(api, ns, lambda s: s["slices"][1]["state"] == "Ready", "slice 1 Ready")
    assert [s["restarts"] for s in st["slices"]] == [0, 1, 0]


def test_node_not_ready_marks_its_slice_down(api: client.ApiClient, ns: str) -> None:
    submit(api, ns)
    wait_running(api, ns)
    node = worker_pods(api, ns, 0)[0].spec.node_name
    before = job_version(api, ns)
    faults.make_node_not_ready(api, node)
    try:
        st = wait_status(api, ns, lambda s: is_true(s, C.SLICE_DOWN), "SliceDown True",
                         timeout=30, since=before)
        sd = condition(st, C.SLICE_DOWN)
        assert sd["reason"] == Reason.NODE_NOT_READY and "slice 0" in sd["message"], sd
        assert node in sd["message"]
        assert st["slices"][0]["restarts"] == 1
    finally:
        faults.make_node_ready(api, node)
    faults.wait_for_node_ready(api, node, True)
    st = wait_status(api, ns, lambda s: s["slices"][0]["state"] != "Down",
                     "slice 0 no longer Down once its node is Ready")
    assert st["slices"][0]["restarts"] == 1


def test_two_slices_down_at_once(api: client.ApiClient, ns: str) -> None:
    submit(api, ns)
    wait_running(api, ns)
    before = job_version(api, ns)
    # Both pods named first, then failed back to back: a list in between (slow on a loaded
    # machine) let slice 0 be Restarting, no longer Down, before slice 2 failed.
    victims = [worker_pods(api, ns, index)[0].metadata.name for index in (0, 2)]
    for pod in victims:
        faults.fail_pod(api, ns, pod)
    st = wait_status(
        api, ns, lambda s: is_true(s, C.SLICE_DOWN) and "slice 0" in
        condition(s, C.SLICE_DOWN)["message"] and "slice 2" in
        condition(s, C.SLICE_DOWN)["message"],
        "SliceDown naming slices 0 and 2", timeout=30, since=before)
    assert "slice 1" not in condition(st, C.SLICE_DOWN)["message"]
    assert st["counters"]["sliceFailures"] == 2
    assert [s["restarts"] for s in st["slices"]] == [1, 0, 1]
    assert sorted(st["lastRecovery"]["slices"]) == [0, 2]
    st = wait_status(api, ns, lambda s: s.get("slicesReady") == 3, "all slices Ready again")
    assert st["counters"]["sliceFailures"] == 2


def test_suspend_and_resume(api: client.ApiClient, ns: str) -> None:
    submit(api, ns)
    wait_running(api, ns)
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)

    def set_suspend(value: bool) -> None:
        custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, JOB,
                                              {"spec": {"suspend": value}},
                                              _content_type="application/merge-patch+json")

    set_suspend(True)
    wait_for(lambda: (get_jobset(api, ns) or {}).get("spec", {}).get("suspend") is True, 30,
             "JobSet suspended")
    wait_for(lambda: not core.list_namespaced_pod(ns, label_selector=JOB_NAME_LABEL).items,
             TIMEOUT,
             "pods deleted while suspended")
    st = wait_status(api, ns, lambda s: s.get("phase") == Phase.SUSPENDED
                     and condition(s, C.SUSPENDED).get("reason") == Reason.SUSPENDED, "Suspended")
    assert st["counters"]["sliceFailures"] == 0 and not is_true(st, C.SLICE_DOWN)
    set_suspend(False)
    wait_for(lambda: (get_jobset(api, ns) or {}).get("spec", {}).get("suspend") is False, 30,
             "JobSet resumed")
    st = wait_running(api, ns)
    assert st["counters"]["sliceFailures"] == 0 and not is_true(st, C.SUSPENDED)


def test_deletion_cascades_through_the_garbage_collector(api: client.ApiClient, ns: str) -> None:
    submit(api, ns)
    wait_running(api, ns)
    batch = client.BatchV1Api(api)
    core = client.CoreV1Api(api)
    rbac = client.RbacAuthorizationV1Api(api)
    assert batch.list_namespaced_job(ns).items
    client.CustomObjectsApi(api).delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, JOB)
    wait_for(lambda: get_jobset(api, ns) is None, 60, "JobSet deleted")
    wait_for(lambda: not batch.list_namespaced_job(ns).items, 60, "Jobs deleted")
    wait_for(lambda: not core.list_namespaced_pod(ns).items, TIMEOUT, "pods deleted")
    wait_for(lambda: not rbac.list_namespaced_role(ns).items
             and not rbac.list_namespaced_role_binding(ns).items, 60, "trainer RBAC deleted")


def test_operator_killed_mid_recovery_loses_nothing(
        api: client.ApiClient, ns: str, operator: OperatorProcess) -> None:
    submit(api, ns)
    wait_running(api, ns)
    faults.fail_pod(api, ns, worker_pods(api, ns, 1)[0].metadata.name)
    before = wait_status(api, ns, lambda s: s["slices"][1]["restarts"] == 1
                         and is_true(s, C.RECOVERING), "slice 1 down, recovering", timeout=30)
    operator.kill()
    # While the operator is down the Job controller brings slice 1 back.
    wait_for(lambda: len(worker_pods(api, ns, 1)) == 4 and all(
        any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
        for p in worker_pods(api, ns, 1)), TIMEOUT, "slice 1 pods Ready again")
    operator.start()
    st = wait_status(api, ns, lambda s: s["slices"][1]["state"] == "Ready",
                     "slice 1 Ready after the restart")
    assert st["counters"]["sliceFailures"] == 1
    assert st["slices"][1]["restarts"] == 1
    assert st["lastRecovery"]["detectedAt"] == before["lastRecovery"]["detectedAt"]
    assert is_true(st, C.RECOVERING)
    detected = parse(before["lastRecovery"]["detectedAt"])
    resumed = datetime.now(UTC)
    write_report(api, ns, resumed_report(detected, resumed))
    st = wait_status(api, ns, recovered, "Recovered after the operator restart", timeout=30)
    assert st["counters"]["sliceFailures"] == 1 and st["counters"]["elasticEvents"] == 1
    assert st["lastRecovery"]["detectedAt"] == before["lastRecovery"]["detectedAt"]


def test_terminal_jobset_is_not_recreated(
        api: client.ApiClient, ns: str, operator: OperatorProcess) -> None:
    submit(api, ns)
    wait_running(api, ns)
    head = client.CoreV1Api(api).list_namespaced_pod(
        ns, label_selector=f"{job_pods_selector(JOB)},"
                           f"{REPLICATED_JOB_LABEL}={HEAD_REPLICATED_JOB}").items[0]
    faults.fail_pod(api, ns, head.metadata.name)
    st = wait_status(api, ns, lambda s: is_true(s, C.FAILED), "Failed")
    assert condition(st, C.FAILED)["reason"] == Reason.HEAD_FAILED
    assert st["phase"] == Phase.FAILED
    client.CustomObjectsApi(api).delete_namespaced_custom_object(*JOBSETS[:2], ns, JOBSETS[2],
                                                                 JOB)
    wait_for(lambda: get_jobset(api, ns) is None, 60, "JobSet deleted by the test")
    # Make the operator reconcile after the deletion, and know that it did.
    key = "etj_reconcile_duration_seconds_count"
    count = operator.metrics()[key]
    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, JOB, {"metadata": {"annotations": {"test/poke": "1"}}},
        _content_type="application/merge-patch+json")
    wait_for(lambda: operator.metrics()[key] >= count + 2, 30, "two reconciles after the poke")
    assert get_jobset(api, ns) is None
    st = status_of(api, ns)
    assert condition(st, C.FAILED)["reason"] == Reason.HEAD_FAILED and st["phase"] == Phase.FAILED


def test_checkpoint_status_comes_from_the_checkpoint_directory(
        api: client.ApiClient, ns: str, tmp_path: Path) -> None:
    """Orbax's local layout: `<step>/` is committed, `<step>.orbax-checkpoint-tmp` is not.
    The job is created suspended: no pods, only the operator's checkpoint scan."""
    root = tmp_path / "ckpt"
    (root / "100").mkdir(parents=True)
    (root / "100" / "commit_success.txt").write_text("ok")
    (root / "200.orbax-checkpoint-tmp").mkdir()
    submit(api, ns, suspend=True, checkpoint={"directory": str(root)})
    st = wait_status(api, ns, lambda s: (s.get("checkpoint") or {}).get(
        "latestCommittedStep") == 100, "status.checkpoint.latestCommittedStep 100", timeout=30)
    assert st["checkpoint"]["incompleteSteps"] == [200]
    assert st["checkpoint"]["directory"] == str(root)
    assert st["phase"] == Phase.SUSPENDED
    # A newer committed step shows up on a later scan.
    (root / "300").mkdir()
    (root / "300" / "commit_success.txt").write_text("ok")
    st = wait_status(api, ns, lambda s: s["checkpoint"].get("latestCommittedStep") == 300,
                     "status.checkpoint.latestCommittedStep 300", timeout=30)
    # Step 200's tmp directory is older than a committed step now: abandoned, not in
    # flight (and the field survives the API server's schema pruning).
    assert (st["checkpoint"]["incompleteSteps"], st["checkpoint"]["abandonedSteps"]) == (
        [], [200])


def test_jobset_deleted_behind_our_back_is_reported_not_recreated(
        api: client.ApiClient, ns: str, operator: OperatorProcess) -> None:
    submit(api, ns, suspend=True)  # no pods needed
    wait_status(api, ns, lambda s: s.get("jobSetName") == JOB, "JobSet created")
    old_uid = get_jobset(api, ns)["metadata"]["uid"]  # type: ignore[index]
    client.CustomObjectsApi(api).delete_namespaced_custom_object(*JOBSETS[:2], ns, JOBSETS[2],
                                                                 JOB)
    st = wait_status(api, ns, lambda s: is_true(s, C.FAILED), "Failed", timeout=30)
    assert condition(st, C.FAILED)["reason"] == Reason.JOBSET_LOST
    assert "not recreated" in condition(st, C.FAILED)["message"]
    js = get_jobset(api, ns)
    assert js is None or js["metadata"]["uid"] == old_uid  # gone, or still being deleted
    wait_for(lambda: events(api, ns, Reason.JOBSET_LOST), 30, "a JobSetLost event")
