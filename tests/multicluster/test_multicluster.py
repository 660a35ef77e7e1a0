"""MultiKueue on two real local control planes (each kube-apiserver, etcd, controllers,
scheduler, kwok, JobSet and Kueue v0.19.2; one operator per cluster): a job submitted to
the manager cluster is dispatched by MultiKueue to the worker, whose operator runs it
(JobSet, slice replacement); the manager's job shows the worker's status; deleting the
job on the manager deletes the worker's copy and everything it owned; a worker lost past
MultiKueue's workerLostTimeout suspends the job on the manager until the user allows
running it elsewhere (spec.multiCluster.redispatch); a higher-priority job preempts a
lower one on the manager, and `kubectl get etj` there says where each runs.

Not in `make test`: two control planes and two Kueues take minutes to start on a loaded
CI runner; `make test-multicluster` runs it (README, docs/operations.md "Many clusters").
"""
from __future__ import annotations

import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
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
    KUEUE_VERSION,
    KUEUE_WORKLOAD_PLURAL,
    MULTIKUEUE_ORIGIN_LABEL,
    PLURAL,
    SUSPENDED_AFTER_WORKER_LOST_ANNOTATION,
    VERSION,
    worker_pods_selector,
)
from elastic_api.validation import validate_job
from elastic_devtools import localcluster as lc
from elastic_devtools.localcluster import kueue_queues as kq
from elastic_devtools.localcluster.cluster import start_component, stop_component
from elastic_devtools.localcluster.crds import install_crd
from elastic_devtools.localcluster.faults import fail_pod, wait_for
from elastic_devtools.localcluster.multikueue import Worker, dispatching
from elastic_devtools.localcluster.operator_process import OperatorProcess
from elastic_devtools.localcluster.operator_settings import SETTINGS
from elastic_operator.render import render_jobset, workload_name
from tests.support.multicluster import manifest
from tests.support.printed import printed_jobs

pytestmark = [pytest.mark.cluster, pytest.mark.multicluster]

TIMEOUT = 180  # MultiKueue's dispatch, the worker's admission, kwok's pods, on a loaded host
NAMESPACE = "mk"
WORKERS = ("worker-1", "worker-2")


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


Clusters = tuple["Side", dict[str, "Side"]]


@pytest.fixture(scope="module")
def clusters() -> Iterator[Clusters]:
    """A manager (Kueue as MultiKueue manager, origin `manager`) and two workers (Kueue),
    each with the CRD, the namespace and an operator. Started one after the other, from
    this thread: their processes die with the thread that started them (PDEATHSIG)."""
    root = Path(tempfile.mkdtemp(prefix="etj-multicluster-"))
    pools = (lc.parse_tpu_pool("v5e:2x4:2"),)
    configs = {
        "manager": lc.ClusterConfig(dir=root / "manager", die_with_parent=True, tpu_pools=pools,
                                    cpu_nodes=1, multikueue_origin="manager", timeout=300),
        **{worker: lc.ClusterConfig(dir=root / worker, die_with_parent=True, tpu_pools=pools,
                                    cpu_nodes=1, kueue=True, timeout=300)
           for worker in WORKERS},
    }
    started: dict[str, lc.Cluster] = {}
    for key, config in configs.items():
        try:
            started[key] = lc.up(config)
        except (lc.MissingBinaryError, lc.ClusterStartError) as err:
            for handle in started.values():
                lc.down(handle.dir)
            pytest.fail(f"{key}: {err}\nlogs in {root}", pytrace=False)
    sides = {key: Side(handle) for key, handle in started.items()}
    operators = []
    try:
        for side in sides.values():
            install_crd(side.api, timeout=60)
            side.core.create_namespace({"metadata": {"name": NAMESPACE}})
            wait_for(lambda s=side: _get(lambda: s.core.read_namespaced_service_account(
                "default", NAMESPACE).to_dict()), 60, "the default ServiceAccount")
            proc = OperatorProcess(side.cluster.kubeconfig,
                                   side.cluster.logs_dir / "operator.log",
                                   args=SETTINGS["multicluster"])
            proc.start()
            operators.append(proc)
        yield sides["manager"], {w: sides[w] for w in WORKERS}
    finally:
        for proc in operators:
            proc.stop()
        for side in sides.values():
            side.api.close()
            lc.down(side.cluster.dir)
        print(f"\nmulticluster logs in {root}")


def quota_of(jobs: float) -> dict[str, str]:
    """A quota for `jobs` of these jobs: 1.5 fits one and not two."""
    obj = manifest("x", "q")
    obj["metadata"]["namespace"] = NAMESPACE
    requests = kq.jobset_requests(render_jobset(validate_job(obj)))
    return {k: f"{v * jobs:.3f}" for k, v in requests.items()}


@pytest.fixture(scope="module")
def queue(clusters: Clusters) -> Iterator[str]:
    """MultiKueue from the manager (room for two jobs) to each worker (room for one)."""
    manager, workers = clusters
    targets = {name: Worker(side.api, Path(side.cluster.kubeconfig).read_text(),
                            quota_of(1.5)) for name, side in workers.items()}
    with dispatching(manager.api, targets, NAMESPACE, manager_quota=quota_of(2.5),
                     prefix="mk") as made:
        for name in workers:
            wait_for(lambda n=name: _active(manager, n), 60, f"MultiKueueCluster {name} Active")
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


def set_suspend(side: Side, name: str, suspend: bool) -> None:
    side.custom.patch_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, PLURAL, name, {"spec": {"suspend": suspend}},
        _content_type="application/merge-patch+json")


def _condition(st: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in st.get("conditions") or [] if c["type"] == type_), None)


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def report(side: Side, name: str, training: dict[str, Any]) -> None:
    """The trainer's report (docs/status-contract.md): a merge patch of
    status.training."""
    side.custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, NAMESPACE, PLURAL, name,
        {"status": {"training": {"observedAt": now(), **training}}},
        _content_type="application/merge-patch+json")


def wait(what: str, check: Callable[[], Any], timeout: float = TIMEOUT,
         about: Callable[[], str] | None = None) -> Any:
    """Poll `check`; at the timeout the error says `about()` too (what each cluster
    shows of the job), so a failure names its state, not only what was awaited."""
    start = time.monotonic()
    try:
        got = wait_for(check, timeout, what, interval=0.25)
        print(f"{time.monotonic() - start:6.1f} s  {what}")  # pytest -rP shows each wait
        return got
    except TimeoutError as err:
        if about is None:
            raise
        raise TimeoutError(f"{err}\n{about()}") from None


def described(manager: Side, workers: dict[str, Side], name: str) -> Callable[[], str]:
    """What every cluster shows of job `name`: the job's phase, reason and conditions,
    its Workload's conditions, cluster and admission checks, and on each worker its copy,
    JobSet and Workload."""
    def conditions(obj: dict[str, Any] | None) -> str:
        found = ((obj or {}).get("status") or {}).get("conditions") or []
        return ", ".join(f"{c['type']}={c['status']}({c.get('reason', '')})" for c in found)

    def workload(side: Side) -> str:
        job = side.job(name)
        wl = side.workload(workload_name(validate_job(job))) if job else None
        if wl is None:
            return "no Workload"
        st = wl.get("status") or {}
        checks = ", ".join(f"{c['name']}={c['state']}" for c in st.get("admissionChecks") or [])
        return (f"Workload active={wl['spec'].get('active', True)} "
                f"cluster={st.get('clusterName')} checks=[{checks}] [{conditions(wl)}]")

    def side_of(label: str, side: Side) -> str:
        try:
            job = side.job(name)
            if job is None:
                return f"{label}: no job"
            st = job.get("status") or {}
            jobset = side.jobset(name)
            return (f"{label}: job uid={job['metadata']['uid']} phase={st.get('phase')} "
                    f"reason={st.get('reason')} message={st.get('message')!r} "
                    f"[{conditions(job)}]; JobSet "
                    f"{'absent' if jobset is None else conditions(jobset) or 'no conditions'}"
                    f"; {workload(side)}")
        except Exception as err:  # a worker may be down: say so
            return f"{label}: unreadable ({err})"

    return lambda: "\n".join([side_of("manager", manager),
                               *(side_of(w, side) for w, side in workers.items())])


def submit(manager: Side, queue: str, priority: str | None = None) -> tuple[str, str]:
    """A job submitted to the manager: its name and its Workload's."""
    name = f"mk-{uuid.uuid4().hex[:5]}"
    manager.custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL,
                                                   manifest(name, queue, priority))
    job = manager.job(name)
    assert job is not None
    return name, workload_name(validate_job(job))


def dispatched_to(manager: Side, wl_name: str) -> str:
    wl = wait(f"Workload {wl_name} dispatched to a worker",
              lambda: (w := manager.workload(wl_name)) is not None
              and (w.get("status") or {}).get("clusterName"))
    return str(wl)


def test_a_job_submitted_to_the_manager_runs_on_the_worker_and_reports_there(
        clusters: Clusters, queue: str) -> None:
    manager, workers = clusters
    name, wl_name = submit(manager, queue)
    worker_name = runs_on_a_worker(manager, workers, name, wl_name)
    worker = workers[worker_name]
    slice_replaced_on_the_worker(manager, worker, name, wl_name)
    worker_lost_and_back(manager, worker, worker_name, name)
    worker = suspended_and_resumed(manager, worker, workers, name)
    # Deleted on the manager: the worker's copy and what it owned go too.
    manager.custom.delete_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, name)
    wait("the worker's copy deleted", lambda: worker.job(name) is None)
    wait("the worker's JobSet deleted", lambda: worker.jobset(name) is None)
    wait("the manager's Workload deleted", lambda: manager.workload(wl_name) is None)
    wait("the worker's Workload deleted", lambda: worker.workload(wl_name) is None)


def runs_on_a_worker(manager: Side, workers: dict[str, Side], name: str,
                     wl_name: str) -> str:
    """The job dispatched: on the manager a Workload it owns and never a JobSet; on the
    worker MultiKueue's copy, which runs as any job, and the manager shows its status
    and the trainer's report. Returns the worker's name."""
    worker_name = dispatched_to(manager, wl_name)
    worker = workers[worker_name]
    wl = manager.workload(wl_name)
    assert wl is not None
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
    return worker_name


def slice_replaced_on_the_worker(manager: Side, worker: Side, name: str,
                                 wl_name: str) -> None:
    """A slice lost on the worker is replaced there; the manager's status follows."""
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


def worker_lost_and_back(manager: Side, worker: Side, worker_name: str, name: str) -> None:
    """The worker's API server goes away (shorter than MultiKueue's workerLostTimeout,
    so the job is not dispatched again): the manager says so, naming it; back, the
    worker's status replaces that."""
    stop_component(worker.cluster.dir, "kube-apiserver")
    try:
        # One read for every assertion: once the worker is back, its next copy replaces it.
        unreachable = wait("the manager's job says its worker cluster is lost",
                           lambda: _condition(s := status(manager, name),
                                              "WorkerClusterReachable") and s,
                           timeout=60)
    finally:
        start_component(worker.cluster.dir, "kube-apiserver")
    lost = _condition(unreachable, "WorkerClusterReachable")
    assert lost is not None
    assert (lost["status"], lost["reason"]) == ("False", "WorkerClusterLost")
    assert f"worker cluster {worker_name}" in lost["message"]
    assert _condition(unreachable, "Ready")["status"] == "Unknown"
    wait("the worker's status copied again once it is back",
         lambda: _condition(status(manager, name), "WorkerClusterReachable") is None
         and status(manager, name).get("phase") == Phase.RUNNING)


def suspended_and_resumed(manager: Side, worker: Side, workers: dict[str, Side],
                          name: str) -> Side:
    """spec.suspend on the manager: MultiKueue takes the job back (the worker's copy
    goes) and the manager says so; resumed, the job is dispatched again. Returns the
    worker it runs on then."""
    about = described(manager, workers, name)
    set_suspend(manager, name, True)
    wait("the worker's copy deleted for the suspension", lambda: worker.job(name) is None,
         about=about)
    wait("the manager's job Suspended",
         lambda: status(manager, name).get("phase") == Phase.SUSPENDED, about=about)
    set_suspend(manager, name, False)
    worker_name = wait("a worker's copy again after the resumption",
                       lambda: next((w for w, side in workers.items()
                                     if side.job(name) is not None), None), about=about)
    wait("the job Running again after its resumption",
         lambda: status(manager, name).get("phase") == Phase.RUNNING, about=about)
    return workers[worker_name]


def test_a_second_job_goes_to_the_other_worker_when_the_first_is_full(
        clusters: Clusters, queue: str) -> None:
    manager, workers = clusters
    first, first_wl = submit(manager, queue)
    on = dispatched_to(manager, first_wl)
    wait("the first job Running", lambda: status(manager, first).get("phase") == Phase.RUNNING)
    second, second_wl = submit(manager, queue)
    other = dispatched_to(manager, second_wl)
    assert other != on, f"both jobs on {on}, whose quota fits one"
    wait("the second job Running on the other worker (its status on the manager)",
         lambda: status(manager, second).get("phase") == Phase.RUNNING)
    assert workers[other].job(second) is not None and workers[on].job(second) is None
    assert workers[on].job(first) is not None and workers[other].job(first) is None
    for name in (first, second):
        manager.custom.delete_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL,
                                                       name)
    for name, worker in ((first, on), (second, other)):
        wait(f"{name} deleted on {worker}", lambda n=name, w=worker: workers[w].job(n) is None)


def test_a_job_whose_worker_is_lost_runs_elsewhere_only_once_the_user_allows_it(
        clusters: Clusters, queue: str) -> None:
    """The worker's API server down past MultiKueue's workerLostTimeout (60 s here): with
    spec.multiCluster.redispatch unset (Never) the manager suspends the job, saying why, and
    no copy stays on the other worker; set to OnWorkerLost, the job lands on the other worker
    and runs there."""
    manager, workers = clusters
    name, wl_name = submit(manager, queue)
    lost_name = dispatched_to(manager, wl_name)
    lost = workers[lost_name]
    other_name, other = next((w, s) for w, s in workers.items() if w != lost_name)
    wait("the job Running", lambda: status(manager, name).get("phase") == Phase.RUNNING)
    wait("the manager's Workload PodsReady",
         lambda: kq.is_true(manager.workload(wl_name) or {}, "PodsReady"))

    stop_component(lost.cluster.dir, "kube-apiserver")
    try:
        # workerLostTimeout (60 s) from MultiKueue noticing, then Kueue's eviction.
        suspended = wait("the manager's job suspended after its worker was lost",
                         lambda: (s := status(manager, name)).get("phase") == Phase.SUSPENDED
                         and _condition(s, "Admitted"),
                         timeout=TIMEOUT + 60)
        assert suspended["reason"] == "RedispatchNotAllowed", suspended
        assert f"worker cluster {lost_name} was lost" in suspended["message"]
        assert "spec.multiCluster.redispatch is Never" in suspended["message"]
        wl = manager.workload(wl_name)
        assert wl is not None and wl["spec"]["active"] is False
        assert wl["metadata"]["annotations"][SUSPENDED_AFTER_WORKER_LOST_ANNOTATION] == lost_name
        # Kueue v0.19.2 nominates workers again as its eviction resets the MultiKueue
        # check, before the operator releases the quota: a copy may appear on the other
        # worker for a second (docs/operations.md, "Many clusters"); MultiKueue deletes
        # it once the quota is released. Then the Workload, inactive and without quota,
        # is neither readmitted nor dispatched.
        wait("no copy on the other worker while the job is suspended",
             lambda: other.job(name) is None)
        wl = manager.workload(wl_name)
        assert wl is not None and wl["spec"]["active"] is False
        assert not kq.is_true(wl, "QuotaReserved") and not (wl.get("status") or {}).get(
            "clusterName")
        assert status(manager, name).get("phase") == Phase.SUSPENDED

        # The user allows it: the job lands on the other worker and runs there.
        manager.custom.patch_namespaced_custom_object(
            GROUP, VERSION, NAMESPACE, PLURAL, name,
            {"spec": {"multiCluster": {"redispatch": "OnWorkerLost"}}},
            _content_type="application/merge-patch+json")
        assert dispatched_to(manager, wl_name) == other_name
        wait("the job Running on the other worker (its status on the manager)",
             lambda: status(manager, name).get("phase") == Phase.RUNNING)
        assert other.job(name) is not None
        # Deleted on the manager while the lost worker is still away. (Not after it is
        # back: Kueue v0.19.2 then takes the lost worker's stale copy for the admitted
        # one, deletes the other's and fails to move status.clusterName; docs/
        # operations.md, "Many clusters".)
        manager.custom.delete_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL,
                                                       name)
        wait("the other worker's copy deleted", lambda: other.job(name) is None)
    finally:
        start_component(lost.cluster.dir, "kube-apiserver")


def test_a_higher_priority_job_preempts_a_dispatched_one_and_get_shows_where_each_runs(
        clusters: Clusters) -> None:
    """Queues of their own (the manager's quota fits one job, each worker's three, so
    only the manager preempts): a low-priority job runs on a worker; a high-priority one
    preempts it there on the manager, by the priority the operator gave each Workload
    from its WorkloadPriorityClass, and runs; `kubectl get etj` on the manager says on
    which cluster each runs (the Cluster column; empty for the preempted job)."""
    manager, workers = clusters
    # Other MultiKueueCluster names than the `queue` fixture's (they are cluster-wide).
    targets = {f"p-{name}": Worker(side.api, Path(side.cluster.kubeconfig).read_text(),
                                   quota_of(3)) for name, side in workers.items()}
    low_class, high_class = "mk-low", "mk-high"
    with ExitStack() as stack:
        for side in (manager, *workers.values()):  # every cluster knows the classes
            stack.enter_context(kq.priority_classes(side.api, {low_class: 100,
                                                               high_class: 1000}))
        made = stack.enter_context(dispatching(manager.api, targets, NAMESPACE,
                                               manager_quota=quota_of(1.5), prefix="mkp"))
        for name in targets:
            wait_for(lambda n=name: _active(manager, n), 60, f"MultiKueueCluster {name} Active")
        low, low_wl = submit(manager, made.local_queue, low_class)
        low_on = dispatched_to(manager, low_wl)
        wait("the low-priority job Running",
             lambda: status(manager, low).get("phase") == Phase.RUNNING)
        wait(f"the manager's table saying the low-priority job runs on {low_on}",
             lambda: printed_jobs(manager.api, NAMESPACE)[low]["Cluster"] == low_on)

        high, high_wl = submit(manager, made.local_queue, high_class)
        wait("the low-priority Workload preempted on the manager",
             lambda: kq.is_true(manager.workload(low_wl) or {}, "Preempted"))
        priorities = {n: (manager.workload(w) or {})["spec"].get("priority")
                      for n, w in ((low, low_wl), (high, high_wl))}
        assert priorities == {low: 100, high: 1000}
        high_on = dispatched_to(manager, high_wl)
        wait("the high-priority job Running",
             lambda: status(manager, high).get("phase") == Phase.RUNNING)
        assert workers[high_on.removeprefix("p-")].job(high) is not None
        rows = wait("the manager's table: the high-priority job's cluster, none for the "
                    "preempted one",
                    lambda: (r := printed_jobs(manager.api, NAMESPACE))[high]["Cluster"]
                    == high_on and not r[low]["Cluster"] and r)
        assert rows[low]["Status"] == Phase.QUEUED, rows[low]
        for name in (low, high):
            manager.custom.delete_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL,
                                                           name)
        for name in (low, high):
            wait(f"{name}'s copies deleted", lambda n=name: all(
                side.job(n) is None for side in workers.values()))
