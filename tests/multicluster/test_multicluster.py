"""MultiKueue on two real local control planes (each kube-apiserver, etcd, controllers,
scheduler, kwok, JobSet and Kueue v0.19.2; one operator per cluster): a job submitted to
the manager cluster is dispatched by MultiKueue to the worker, whose operator runs it
(JobSet, slice replacement); the manager's job shows the worker's status; deleting the
job on the manager deletes the worker's copy and everything it owned.

Not in `make test`: two control planes and two Kueues take minutes to start on a loaded
CI runner; `make test-multicluster` runs it (README, docs/operations.md "Many clusters").
"""
from __future__ import annotations

import tempfile
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from elastic_api.conditions import Phase
from elastic_api.names import (
    GROUP,
    JOBSET_GROUP,
    JOBSET_PLURAL,
    JOBSET_VERSION,
    KUEUE_GROUP,
    KUEUE_PREBUILT_WORKLOAD_ANNOTATION,
    KUEUE_PREBUILT_WORKLOAD_LABEL,
    KUEUE_QUEUE_NAME_LABEL,
    KUEUE_VERSION,
    KUEUE_WORKLOAD_PLURAL,
    MULTIKUEUE_CONTROLLER,
    MULTIKUEUE_ORIGIN_LABEL,
    PLURAL,
    VERSION,
    worker_pods_selector,
)
from elastic_api.validation import validate_job
from elastic_devtools import localcluster as lc
from elastic_devtools.localcluster import kueue_queues as kq
from elastic_devtools.localcluster.crds import install_crd
from elastic_devtools.localcluster.faults import fail_pod, wait_for
from elastic_devtools.localcluster.multikueue import Worker, dispatching
from elastic_devtools.localcluster.operator_process import OperatorProcess
from elastic_operator.render import render_jobset, workload_name
from tests.builders import etj

pytestmark = [pytest.mark.cluster, pytest.mark.multicluster]

TIMEOUT = 180  # MultiKueue's dispatch, the worker's admission, kwok's pods, on a loaded host
NAMESPACE = "mk"
WORKER = "worker-1"


class Side:
    """One cluster of the test: its handle, API client and operator."""

    def __init__(self, cluster: lc.Cluster) -> None:
        self.cluster = cluster
        self.api = cluster.api_client()
        self.custom = client.CustomObjectsApi(self.api)
        self.core = client.CoreV1Api(self.api)

    def job(self, name: str) -> dict[str, Any] | None:
        return _get(lambda: self.custom.get_namespaced_custom_object(
            GROUP, VERSION, NAMESPACE, PLURAL, name))

    def jobset(self, name: str) -> dict[str, Any] | None:
        return _get(lambda: self.custom.get_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, NAMESPACE, JOBSET_PLURAL, name))

    def workload(self, name: str) -> dict[str, Any] | None:
        return _get(lambda: self.custom.get_namespaced_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, NAMESPACE, KUEUE_WORKLOAD_PLURAL, name))


def _get(call: Callable[[], Any]) -> dict[str, Any] | None:
    try:
        got: dict[str, Any] = call()
        return got
    except client.ApiException as err:
        if err.status == 404:
            return None
        raise


@pytest.fixture(scope="module")
def clusters() -> Iterator[tuple[Side, Side]]:
    """A manager (Kueue as MultiKueue manager, origin `manager`) and a worker (Kueue),
    each with the CRD, the namespace and an operator. Started one after the other, from
    this thread: their processes die with the thread that started them (PDEATHSIG)."""
    root = Path(tempfile.mkdtemp(prefix="etj-multicluster-"))
    pools = (lc.parse_tpu_pool("v5e:2x4:2"),)
    configs = {
        "manager": lc.ClusterConfig(dir=root / "manager", die_with_parent=True, tpu_pools=pools,
                                    cpu_nodes=1, multikueue_origin="manager", timeout=300),
        WORKER: lc.ClusterConfig(dir=root / WORKER, die_with_parent=True, tpu_pools=pools,
                                 cpu_nodes=1, kueue=True, timeout=300),
    }
    started: dict[str, lc.Cluster] = {}
    for key, config in configs.items():
        try:
            started[key] = lc.up(config)
        except (lc.MissingBinaryError, lc.ClusterStartError) as err:
            for handle in started.values():
                lc.down(handle.dir)
            pytest.fail(f"{key}: {err}\nlogs in {root}", pytrace=False)
    sides = (Side(started["manager"]), Side(started[WORKER]))
    operators = []
    try:
        for side in sides:
            install_crd(side.api, timeout=60)
            side.core.create_namespace({"metadata": {"name": NAMESPACE}})
            wait_for(lambda s=side: _get(lambda: s.core.read_namespaced_service_account(
                "default", NAMESPACE).to_dict()), 60, "the default ServiceAccount")
            proc = OperatorProcess(side.cluster.kubeconfig,
                                   side.cluster.logs_dir / "operator.log")
            proc.start()
            operators.append(proc)
        yield sides
    finally:
        for proc in operators:
            proc.stop()
        for side in sides:
            side.api.close()
            lc.down(side.cluster.dir)
        print(f"\nmulticluster logs in {root}")


def manifest(name: str, queue: str) -> dict[str, Any]:
    """One simulated v5e 2x4 slice (2 hosts), checkpoints on gs:// (MultiKueue requires
    storage every cluster reads), dispatched by MultiKueue."""
    obj = (etj(name, namespace=None).backend("simulated").tpu("v5e", "2x4", 1)
           .checkpoint_dir(f"gs://etj-multicluster/{name}").trainer("trainer:test", 1000)
           .spec(managedBy=MULTIKUEUE_CONTROLLER,
                 elastic={"maxSliceRestarts": 5}).obj())
    obj["metadata"]["labels"] = {KUEUE_QUEUE_NAME_LABEL: queue}
    return obj


def one_job_of_quota() -> dict[str, str]:
    obj = manifest("x", "q")
    obj["metadata"]["namespace"] = NAMESPACE
    requests = kq.jobset_requests(render_jobset(validate_job(obj)))
    return {k: str(int(v) + 1) for k, v in requests.items()}


@pytest.fixture(scope="module")
def queue(clusters: tuple[Side, Side]) -> Iterator[str]:
    manager, worker = clusters
    quota = one_job_of_quota()
    kubeconfig = Path(worker.cluster.kubeconfig).read_text()
    with dispatching(manager.api, {WORKER: Worker(worker.api, kubeconfig, quota)}, NAMESPACE,
                     manager_quota=quota, prefix="mk") as made:
        wait_for(lambda: _active(manager, WORKER), 60, f"MultiKueueCluster {WORKER} Active")
        yield made.local_queue


def _active(manager: Side, name: str) -> bool:
    got = manager.custom.get_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION,
                                                   "multikueueclusters", name)
    return any(c["type"] == "Active" and c["status"] == "True"
               for c in (got.get("status") or {}).get("conditions") or [])


def prebuilt(obj: dict[str, Any]) -> str | None:
    """The prebuilt Workload an object names: an annotation from Kueue v0.19
    (WorkloadIdentifierAnnotations), a label before."""
    meta = obj["metadata"]
    return (meta.get("annotations") or {}).get(KUEUE_PREBUILT_WORKLOAD_ANNOTATION) or \
        (meta.get("labels") or {}).get(KUEUE_PREBUILT_WORKLOAD_LABEL)


def status(side: Side, name: str) -> dict[str, Any]:
    got: dict[str, Any] = (side.job(name) or {}).get("status") or {}
    return got


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def report(side: Side, name: str, training: dict[str, Any]) -> None:
    """The trainer's report (docs/status-contract.md): a merge patch of
    status.training."""
    side.custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, NAMESPACE, PLURAL, name,
        {"status": {"training": {"observedAt": now(), **training}}},
        _content_type="application/merge-patch+json")


def wait(what: str, check: Callable[[], Any], timeout: float = TIMEOUT) -> Any:
    return wait_for(check, timeout, what, interval=0.25)


def test_a_job_submitted_to_the_manager_runs_on_the_worker_and_reports_there(
        clusters: tuple[Side, Side], queue: str) -> None:
    manager, worker = clusters
    name = f"mk-{uuid.uuid4().hex[:5]}"
    manager.custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL,
                                                   manifest(name, queue))
    job = manager.job(name)
    assert job is not None
    wl_name = workload_name(validate_job(job))

    # The manager: a Workload owned by the job, and never a JobSet.
    wl = wait("the manager's Workload dispatched to the worker",
              lambda: (w := manager.workload(wl_name)) is not None
              and (w.get("status") or {}).get("clusterName") == WORKER and w)
    owner = wl["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"]) == ("ElasticTrainingJob", name)

    # The worker: MultiKueue's copy, without managedBy, runs as any job.
    copy = wait("the worker's copy", lambda: worker.job(name))
    assert "managedBy" not in copy["spec"]
    assert prebuilt(copy) == wl_name
    assert copy["metadata"]["labels"][MULTIKUEUE_ORIGIN_LABEL] == "manager"
    jobset = wait("the worker's JobSet", lambda: worker.jobset(name))
    assert prebuilt(jobset) == wl_name
    # The worker's Kueue took MultiKueue's copy of the Workload for the JobSet (no second).
    wait("the worker's Workload owned by the JobSet",
         lambda: (w := worker.workload(wl_name)) is not None and any(
             r["kind"] == "JobSet" and r["name"] == name
             for r in w["metadata"].get("ownerReferences") or []))

    running = wait("the manager's job Running with its slice Ready (the worker's status)",
                   lambda: (s := status(manager, name)).get("phase") == Phase.RUNNING
                   and s.get("slicesReady") == 1 and s)
    assert running["jobSetName"] == name
    assert manager.jobset(name) is None
    # Kueue on the manager hears that the pods are Ready (else waitForPodsReady evicts).
    wait("the manager's Workload PodsReady",
         lambda: kq.is_true(manager.workload(wl_name) or {}, "PodsReady"))
    # The trainer (kwok runs no process: the test writes its report, as it does, on
    # the worker's copy) reports; the manager's copy shows it.
    report(worker, name, {"state": "Training", "step": 5, "attempt": 1, "activeSlices": 1,
                          "elasticEventsTotal": 0})
    wait("the trainer's step on the manager",
         lambda: (status(manager, name).get("training") or {}).get("step") == 5)

    # A slice lost on the worker is replaced there; the manager's status follows.
    pods = worker.core.list_namespaced_pod(NAMESPACE,
                                           label_selector=worker_pods_selector(name, 0)).items
    fail_pod(worker.api, NAMESPACE, pods[0].metadata.name, exit_code=1)
    down = wait("the manager's job Recovering, its slice failure counted",
                lambda: (s := status(manager, name)).get("phase") == Phase.RECOVERING
                and s.get("counters", {}).get("sliceFailures") == 1 and s)
    wait("the replaced slice Ready on the worker",
         lambda: status(worker, name).get("slicesReady") == 1)
    detected = down["lastRecovery"]["detectedAt"]
    report(worker, name, {
        "state": "Training", "step": 6, "attempt": 1, "activeSlices": 1,
        "elasticEventsTotal": 1,
        "elasticEvent": {"id": 1, "phase": "Resumed", "detectedAt": detected,
                         "failedStep": 5, "slicesDown": [0], "restoredFromStep": 5,
                         "restoreSource": "snapshot", "resumedAt": now(), "resumedStep": 6}})
    recovered = wait("the manager's job Running again, the recovery closed",
                     lambda: (s := status(manager, name)).get("phase") == Phase.RUNNING
                     and (s.get("lastRecovery") or {}).get("closedAt") and s)
    assert recovered["counters"]["sliceFailures"] == 1
    assert recovered["training"]["step"] == 6
    wait("the manager's Workload PodsReady again",
         lambda: kq.is_true(manager.workload(wl_name) or {}, "PodsReady"))

    # Deleted on the manager: the worker's copy and what it owned go too.
    manager.custom.delete_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, name)
    wait("the worker's copy deleted", lambda: worker.job(name) is None)
    wait("the worker's JobSet deleted", lambda: worker.jobset(name) is None)
    wait("the manager's Workload deleted", lambda: manager.workload(wl_name) is None)
