"""Smoke tests of the local control plane: a Pathways-shaped JobSet runs on the fake TPU
node pools with the real JobSet, Job, scheduler and GC controllers, and the fault helpers
do what they claim."""
from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from elastic_devtools.localcluster import Cluster, faults
from elastic_devtools.localcluster.cluster_config import (
    NODE_POOL_LABEL,
    TPU_ACCELERATOR_LABEL,
    TPU_TOPOLOGY_LABEL,
)
from elastic_devtools.localcluster.faults import wait_for

pytestmark = pytest.mark.cluster

JOBSET_GROUP, JOBSET_VERSION, JOBSETS = "jobset.x-k8s.io", "v1alpha2", "jobsets"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
RESTART_ATTEMPT_LABEL = "jobset.sigs.k8s.io/restart-attempt"
COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
WORKERS, PODS_PER_WORKER = 3, 4  # the article's job: 3 x v5e 4x4 (4 VMs each)
TIMEOUT = 90


@pytest.fixture
def api(cluster: Cluster) -> Iterator[client.ApiClient]:
    api_client = cluster.api_client()
    yield api_client
    api_client.close()


def jobset(name: str, worker_backoff_limit: int, max_restarts: int) -> dict[str, Any]:
    def job(replicas: int, pods: int, backoff: int, pod_spec: dict[str, Any]) -> dict[str, Any]:
        return {"replicas": replicas, "template": {"spec": {
            "parallelism": pods, "completions": pods, "backoffLimit": backoff,
            "template": {"spec": {"restartPolicy": "Never", **pod_spec}},
        }}}

    head = job(1, 1, 0, {
        "nodeSelector": {NODE_POOL_LABEL: "cpu-np"},
        "containers": [{"name": "main", "image": "busybox",
                        "resources": {"requests": {"cpu": "1"}}}],
    })
    worker = job(WORKERS, PODS_PER_WORKER, worker_backoff_limit, {
        "nodeSelector": {TPU_ACCELERATOR_LABEL: "tpu-v5-lite-podslice", TPU_TOPOLOGY_LABEL: "4x4"},
        "containers": [{"name": "worker", "image": "busybox",
                        "resources": {"limits": {"google.com/tpu": "4"}}}],
    })
    # One slice per Job, like Pathways: each worker Job gets a node pool to itself.
    worker["template"]["metadata"] = {
        "annotations": {"alpha.jobset.sigs.k8s.io/exclusive-topology": NODE_POOL_LABEL}}
    return {
        "apiVersion": f"{JOBSET_GROUP}/{JOBSET_VERSION}",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": {"maxRestarts": max_restarts},
            "replicatedJobs": [{"name": "head", **head}, {"name": "worker", **worker}],
        },
    }


def create_jobset(api: client.ApiClient, namespace: str, body: dict[str, Any]) -> None:
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        JOBSET_GROUP, JOBSET_VERSION, namespace, JOBSETS, body)


def get_jobset(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = client.CustomObjectsApi(api).get_namespaced_custom_object(
        JOBSET_GROUP, JOBSET_VERSION, namespace, JOBSETS, name)
    return obj


def pods_of(api: client.ApiClient, namespace: str, name: str) -> list[client.V1Pod]:
    return list(client.CoreV1Api(api).list_namespaced_pod(
        namespace, label_selector=f"{JOBSET_NAME_LABEL}={name}").items)


def running(pods: list[client.V1Pod], attempt: int) -> list[client.V1Pod]:
    """Live pods of restart attempt `attempt` that kwok reports Running and Ready."""
    out = []
    for pod in pods:
        if pod.metadata.deletion_timestamp is not None:
            continue
        if pod.metadata.labels.get(RESTART_ATTEMPT_LABEL) != str(attempt):
            continue
        ready = any(c.type == "Ready" and c.status == "True"
                    for c in (pod.status.conditions or []))
        if pod.status.phase == "Running" and ready and pod.spec.node_name:
            out.append(pod)
    return out


def wait_all_running(api: client.ApiClient, namespace: str, name: str,
                     attempt: int = 0) -> list[client.V1Pod]:
    want = 1 + WORKERS * PODS_PER_WORKER

    def check() -> list[client.V1Pod] | None:
        pods = running(pods_of(api, namespace, name), attempt)
        return pods if len(pods) == want else None

    pods: list[client.V1Pod] = wait_for(
        check, TIMEOUT, f"{want} Running pods of JobSet {namespace}/{name} attempt {attempt}")
    return pods


def node_pool_of(api: client.ApiClient, node: str) -> str:
    labels = client.CoreV1Api(api).read_node(node).metadata.labels
    return str(labels[NODE_POOL_LABEL])


def check_placement(api: client.ApiClient, pods: list[client.V1Pod]) -> None:
    head = [p for p in pods if p.metadata.labels[REPLICATED_JOB_LABEL] == "head"]
    assert len(head) == 1 and node_pool_of(api, head[0].spec.node_name) == "cpu-np"
    pools_by_job: dict[str, set[str]] = {}
    for pod in pods:
        if pod.metadata.labels[REPLICATED_JOB_LABEL] == "worker":
            pool = node_pool_of(api, pod.spec.node_name)
            pools_by_job.setdefault(pod.metadata.labels[JOB_INDEX_LABEL], set()).add(pool)
    assert sorted(pools_by_job) == ["0", "1", "2"]
    # Exclusive placement: each worker Job on exactly one TPU node pool, all distinct.
    pools = [next(iter(p)) for p in pools_by_job.values() if len(p) == 1]
    assert len(pools) == WORKERS and len(set(pools)) == WORKERS, pools_by_job
    assert all(p.startswith("tpu-v5e-4x4-") for p in pools)


def worker_pod(pods: list[client.V1Pod], job_index: str, completion_index: str) -> client.V1Pod:
    for pod in pods:
        labels = pod.metadata.labels
        if (labels[REPLICATED_JOB_LABEL] == "worker" and labels[JOB_INDEX_LABEL] == job_index
                and labels.get(COMPLETION_INDEX_LABEL) == completion_index):
            return pod
    raise AssertionError(f"no worker pod job-index={job_index} completion={completion_index}")


def test_jobset_runs_on_fake_tpu_pools(api: client.ApiClient, namespace: str) -> None:
    create_jobset(api, namespace, jobset("smoke", worker_backoff_limit=4, max_restarts=3))
    js = get_jobset(api, namespace, "smoke")
    # JobSet's real defaulting webhook ran: success policy, DNS hostnames, indexed Jobs.
    assert js["spec"]["successPolicy"]["operator"] == "All"
    assert js["spec"]["network"]["enableDNSHostnames"] is True
    job_spec = js["spec"]["replicatedJobs"][1]["template"]["spec"]
    assert job_spec["completionMode"] == "Indexed"
    pods = wait_all_running(api, namespace, "smoke")
    check_placement(api, pods)
    for pod in pods:
        if pod.metadata.labels[REPLICATED_JOB_LABEL] == "worker":
            limits = pod.spec.containers[0].resources.limits
            assert limits["google.com/tpu"] == "4"


def test_jobset_validation_is_real(api: client.ApiClient, namespace: str) -> None:
    # Only JobSet's validating webhook knows this name must be one of the replicatedJobs.
    bad = jobset("bad", worker_backoff_limit=0, max_restarts=0)
    bad["spec"]["successPolicy"] = {"operator": "All", "targetReplicatedJobs": ["nope"]}
    with pytest.raises(client.ApiException) as info:
        create_jobset(api, namespace, bad)
    assert info.value.status in (400, 403, 422)
    assert "invalid replicatedJob name 'nope'" in str(info.value.body)


def test_failed_worker_pod_is_replaced_without_jobset_restart(
    api: client.ApiClient, namespace: str
) -> None:
    create_jobset(api, namespace, jobset("retry", worker_backoff_limit=4, max_restarts=3))
    pods = wait_all_running(api, namespace, "retry")
    victim = worker_pod(pods, "1", "2")
    faults.fail_pod(api, namespace, victim.metadata.name)
    faults.wait_for_pod_phase(api, namespace, victim.metadata.name, "Failed", TIMEOUT)

    # The Job creates a replacement for the same completion index, and the JobSet does not
    # restart: every pod still belongs to attempt 0.
    def replaced() -> bool:
        live = running(pods_of(api, namespace, "retry"), 0)
        same_index = [p for p in live
                      if p.metadata.labels[JOB_INDEX_LABEL] == "1"
                      and p.metadata.labels.get(COMPLETION_INDEX_LABEL) == "2"]
        return len(live) == 1 + WORKERS * PODS_PER_WORKER and len(same_index) == 1 and (
            same_index[0].metadata.uid != victim.metadata.uid)

    wait_for(replaced, TIMEOUT, "the failed worker pod to be replaced")
    # The Job controller counts the failure once it has finalized the failed pod, which
    # can come a moment after the replacement exists.
    wait_for(lambda: client.BatchV1Api(api).read_namespaced_job(
        victim.metadata.labels["job-name"], namespace).status.failed == 1,
        TIMEOUT, "the worker Job to count exactly one failed pod")
    status = get_jobset(api, namespace, "retry").get("status", {})
    assert status.get("restarts", 0) == 0
    assert not any(c["type"] in ("Failed", "Completed") and c["status"] == "True"
                   for c in status.get("conditions", []))


def test_failed_worker_pod_restarts_jobset_when_backoff_is_exhausted(
    api: client.ApiClient, namespace: str
) -> None:
    create_jobset(api, namespace, jobset("restart", worker_backoff_limit=0, max_restarts=3))
    pods = wait_all_running(api, namespace, "restart")
    victim = worker_pod(pods, "0", "1")
    faults.fail_pod(api, namespace, victim.metadata.name)

    def restarted() -> bool:
        return bool(get_jobset(api, namespace, "restart").get("status", {}).get("restarts") == 1)

    wait_for(restarted, TIMEOUT, "JobSet status.restarts == 1")
    # The JobSet recreated every Job; all pods of attempt 1 run, exclusively placed again.
    new_pods = wait_all_running(api, namespace, "restart", attempt=1)
    check_placement(api, new_pods)
    assert victim.metadata.uid not in {p.metadata.uid for p in new_pods}


# --------------------------------------------------------------------------- fault helpers

def bare_pod(namespace: str, node_pool: str = "cpu-np") -> client.V1Pod:
    name = f"p-{uuid.uuid4().hex[:6]}"
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, namespace=namespace),
        spec=client.V1PodSpec(
            restart_policy="Never",
            node_selector={NODE_POOL_LABEL: node_pool},
            containers=[client.V1Container(name="c", image="busybox"),
                        client.V1Container(name="sidecar", image="busybox")],
        ),
    )


def start_pod(api: client.ApiClient, namespace: str) -> client.V1Pod:
    pod = client.CoreV1Api(api).create_namespaced_pod(namespace, bare_pod(namespace))
    return faults.wait_for_pod_phase(api, namespace, pod.metadata.name, "Running", TIMEOUT)


def test_fail_pod(api: client.ApiClient, namespace: str) -> None:
    pod = start_pod(api, namespace)
    faults.fail_pod(api, namespace, pod.metadata.name, exit_code=42, reason="Boom")
    failed = faults.wait_for_pod_phase(api, namespace, pod.metadata.name, "Failed", TIMEOUT)
    for status in failed.status.container_statuses:
        assert status.state.terminated.exit_code == 42
        assert status.state.terminated.reason == "Boom"


def test_fail_one_container(api: client.ApiClient, namespace: str) -> None:
    pod = start_pod(api, namespace)
    faults.fail_pod(api, namespace, pod.metadata.name, container="sidecar")
    failed = faults.wait_for_pod_phase(api, namespace, pod.metadata.name, "Failed", TIMEOUT)
    states = {s.name: s.state for s in failed.status.container_statuses}
    assert states["sidecar"].terminated.exit_code == 1
    assert states["c"].running is not None


@pytest.mark.parametrize("force", [False, True])
def test_delete_pod(api: client.ApiClient, namespace: str, force: bool) -> None:
    pod = start_pod(api, namespace)
    faults.delete_pod(api, namespace, pod.metadata.name, force=force)
    faults.wait_for_pod_gone(api, namespace, pod.metadata.name, timeout=TIMEOUT)


def test_node_not_ready_and_back(api: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(api)
    node = "cpu-np-3"

    def taints() -> set[tuple[str, str]]:
        return {(t.key, t.effect) for t in (core.read_node(node).spec.taints or [])}

    faults.make_node_not_ready(api, node)
    try:
        faults.wait_for_node_ready(api, node, ready=False, timeout=TIMEOUT)
        # The real node lifecycle controller reacts with the taint that evicts pods.
        wait_for(lambda: ("node.kubernetes.io/not-ready", "NoExecute") in taints(), TIMEOUT,
                 "not-ready NoExecute taint")
    finally:
        faults.make_node_ready(api, node)
    faults.wait_for_node_ready(api, node, ready=True, timeout=TIMEOUT)
    wait_for(lambda: not any(k.startswith("node.kubernetes.io/") for k, _ in taints()),
             TIMEOUT, "taints lifted")


def test_a_pod_marked_not_ready_is_ready_again_once_its_node_is(
        api: client.ApiClient, namespace: str) -> None:
    """The node lifecycle controller marks Ready=False (and nothing else) a pod bound to a
    node it believes NotReady. kwok, playing the pod's kubelet, keeps that mark while the
    node is NotReady and says the pod is Ready again once it is (a second later:
    render.pod_ready_again_stage), as a real kubelet's status sync does. The mark is made
    here as MarkPodsNotReady makes it: the controller's is a race with kwok's pod-ready.
    The node's Ready report carries a heartbeat of a later second than its NotReady one:
    the controller takes a node's status in only when that heartbeat changes."""
    core = client.CoreV1Api(api)
    node = "cpu-np-2"
    pod = bare_pod(namespace)
    pod.spec.node_name = node  # pinned, and tolerating the NotReady taints: never evicted
    pod.spec.tolerations = [client.V1Toleration(key=f"node.kubernetes.io/{taint}",
                                                operator="Exists", effect="NoExecute")
                            for taint in ("not-ready", "unreachable")]
    name = core.create_namespaced_pod(namespace, pod).metadata.name

    def ready() -> str | None:
        got = core.read_namespaced_pod(name, namespace).status.conditions or []
        return next((c.status for c in got if c.type == "Ready"), None)

    def mark_not_ready() -> None:
        core.patch_namespaced_pod_status(name, namespace, {"status": {"conditions": [
            {"type": "Ready", "status": "False"}]}})

    def heartbeat() -> Any:
        return next(c.last_heartbeat_time for c in core.read_node(node).status.conditions
                    if c.type == "Ready")

    wait_for(lambda: ready() == "True", TIMEOUT, "the pod Ready")
    mark_not_ready()  # on a Ready node: Ready again at the next status sync
    wait_for(lambda: ready() == "True", TIMEOUT, "the pod Ready again on a Ready node")
    faults.make_node_not_ready(api, node)
    try:
        faults.wait_for_node_ready(api, node, ready=False, timeout=TIMEOUT)
        not_ready_beat = heartbeat()
        mark_not_ready()
        # kwok's stage would act a second after a match: three seconds of NotReady say
        # it does not while the node is NotReady.
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            assert ready() == "False"
            time.sleep(0.2)
    finally:
        faults.make_node_ready(api, node)
    faults.wait_for_node_ready(api, node, ready=True, timeout=TIMEOUT)
    assert heartbeat() > not_ready_beat
    wait_for(lambda: ready() == "True", TIMEOUT, "the pod Ready again with its node")
    # NotReady and back at once, as the chaos test does (its fault 18 took 154 ms).
    faults.make_node_not_ready(api, node)
    try:
        faults.wait_for_node_ready(api, node, ready=False, timeout=TIMEOUT)
        not_ready_beat = heartbeat()
    finally:
        faults.make_node_ready(api, node)
    faults.wait_for_node_ready(api, node, ready=True, timeout=TIMEOUT)
    assert heartbeat() > not_ready_beat


# ------------------------------------------------------------------------- cluster lifecycle

def test_second_cluster_side_by_side_up_noop_and_down(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second, small cluster next to the session one: a port taken during start is
    retried, `up` again is a fast no-op, a dead component makes `up` start afresh, and
    `down` leaves no process behind."""
    from elastic_devtools import localcluster as lc
    from elastic_devtools.localcluster import cluster as cluster_module
    from elastic_devtools.localcluster import procs

    # The first start gets an etcd port that someone else holds.
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    real_free_ports = cluster_module.free_ports
    calls: list[int] = []

    def free_ports_once_taken(count: int) -> list[int]:
        ports = real_free_ports(count)
        calls.append(count)
        return [squatter.getsockname()[1], *ports[1:]] if len(calls) == 1 else ports

    monkeypatch.setattr(cluster_module, "free_ports", free_ports_once_taken)
    config = lc.ClusterConfig(dir=tmp_path / "c2", tpu_pools=(lc.parse_tpu_pool("v6e:2x2"),),
                              cpu_nodes=1)
    lines: list[str] = []
    try:
        first = lc.up(config, progress=lines.append)
        squatter.close()
        assert len(calls) == 2 and any("retrying" in line for line in lines)
        assert first.server != cluster.server
        assert any(line.startswith("cluster ready") for line in lines)
        api = first.api_client()
        nodes = client.CoreV1Api(api).list_node().items
        api.close()
        assert sorted(n.metadata.name for n in nodes) == ["cpu-np-0", "tpu-v6e-2x2-0-0"]

        lines.clear()
        t0 = time.monotonic()
        lc.up(config, progress=lines.append)
        assert time.monotonic() - t0 < 3 and "already running" in lines[-1]

        # Kill one component: the cluster is no longer "running", and `up` starts afresh.
        started = first.state["started_at"]
        kwok = next(c for c in lc.status(config.dir).components if c.name == "kwok")
        assert kwok.pid is not None
        procs.stop_all([procs.PidRecord("kwok", kwok.pid, str(lc.Binaries.locate().kwok))])
        assert not lc.status(config.dir).running
        lines.clear()
        second = lc.up(config, progress=lines.append)
        assert "partly running" in lines[0] and lc.status(config.dir).running
        assert second.state["started_at"] != started
    finally:
        squatter.close()
        pids = [c.pid for c in lc.status(config.dir).components if c.pid]
        lc.down(config.dir, progress=lines.append)
    st = lc.status(config.dir)
    assert not st.any_alive
    assert not set(pids) & procs.live_groups()
    assert not (config.dir / "run" / "etcd.pid").exists()
