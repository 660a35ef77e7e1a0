"""The operator's watch-fed caches on the local control plane, under the faults that
break watches: a watch that silently stalls (a proxy stops forwarding, the connection
stays open) must be noticed and the cache listed again; an API server restart must be
survived. And a slice event is served from the cache: no pod list per event.
"""
from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from elastic_api.conditions import Reason
from elastic_devtools.localcluster import Cluster, faults
from elastic_devtools.localcluster.cluster import start_component, stop_component
from elastic_devtools.localcluster.crds import install_crd
from elastic_devtools.localcluster.faults import wait_for
from elastic_devtools.localcluster.operator_process import TEST_ARGS, OperatorProcess
from elastic_devtools.localcluster.tcpproxy import TcpProxy, proxied_kubeconfig
from tests.support.article_job import events, submit, worker_pods
from tests.support.waiting import wait_running, wait_status

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
WATCH_TIMEOUT_S = 5  # the API server ends each watch after 5 s; silent for 10 s: stalled


def relists(op: OperatorProcess, reason: str, resource: str = "pods") -> float:
    return op.metrics().get(
        f'etj_cache_relists_total{{reason="{reason}",resource="{resource}"}}', 0.0)


@pytest.fixture
def args() -> tuple[str, ...]:
    return (*TEST_ARGS, "--leader-election-name", f"cache-{uuid.uuid4().hex[:8]}",
            "--watch-timeout-seconds", str(WATCH_TIMEOUT_S))


@pytest.fixture
def proxy(cluster: Cluster) -> Iterator[TcpProxy]:
    port = int(cluster.server.rsplit(":", 1)[1])
    with TcpProxy("127.0.0.1", port) as p:
        yield p


def test_a_silently_stalled_watch_is_noticed_and_listed_again(
        cluster: Cluster, api: client.ApiClient, ns: str, proxy: TcpProxy,
        args: tuple[str, ...], tmp_path: Path) -> None:
    """Every connection of the operator stops forwarding, open but silent. A pod fails
    meanwhile: the operator must still report it, because its pod cache notices the
    silence (nothing within the watch's timeout plus a margin), lists again over a new
    connection and finds the failed pod."""
    kubeconfig = proxied_kubeconfig(cluster.kubeconfig, proxy, tmp_path / "kubeconfig")
    op = OperatorProcess(kubeconfig, Path(cluster.logs_dir) / "cache-stall.log", args=args)
    op.start()
    try:
        wait_for(op.leading, 30, "the operator leads")
        submit(api, ns)
        wait_running(api, ns)
        assert relists(op, "stalled") == 0
        assert proxy.stall_connections() >= 2  # at least the pod and node watches
        faults.fail_pod(api, ns, worker_pods(api, ns, 1)[0].metadata.name)
        # Counted, not SliceDown=True: by the time the silence is noticed the replacement
        # pod may be Ready, and SliceDown is True for an instant only.
        st = wait_status(api, ns, lambda s: s["slices"][1]["restarts"] == 1,
                         "slice 1 counted down", timeout=90)
        assert st["counters"]["sliceFailures"] == 1
        # Each watch notices its own silence, timed from its own last event, so whichever
        # cache listed again first told: the pods (the failed pod) or the worker Jobs (the
        # Job's own count of failed pods, core/counting.py). Every one lists again, the
        # others a little later (seen under load), never not at all.
        for resource in ("pods", "worker-jobs", "nodes"):
            wait_for(lambda r=resource: relists(op, "stalled", r) >= 1, 30,
                     f"the {resource} cache listed again")
        wait_for(lambda: events(api, ns, Reason.SLICE_DOWN), 30, "the SliceDown Event")
        assert len(events(api, ns, Reason.SLICE_DOWN)) == 1
    finally:
        op.stop()


class CountingOperator(OperatorProcess):
    """`etj operator` through bench.opshim, which counts its API requests by kind."""

    def __init__(self, kubeconfig: Path, log: Path, counts: Path, args: tuple[str, ...]):
        self.counts = counts
        pythonpath = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
        super().__init__(kubeconfig, log, args=args, cwd=REPO, env={"PYTHONPATH": pythonpath},
                         command=(sys.executable, "-m", "bench.opshim", str(counts), "--"))

    def requests(self, kind: str) -> int:
        try:
            return int(json.loads(self.counts.read_text()).get(kind, 0))
        except (OSError, ValueError):
            return 0

    def settled_requests(self, kind: str) -> int:
        """The count once the shim has written what happened so far (every 0.5 s)."""
        before = self.counts.stat().st_mtime_ns
        wait_for(lambda: self.counts.stat().st_mtime_ns != before, 10, "fresh request counts")
        return self.requests(kind)


@pytest.fixture
def own_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A small cluster of its own (2 slices of v5e 2x4, one CPU node): restarting the API
    server makes the node lifecycle controller mark nodes NotReady for a while after,
    which other tests sharing a cluster must not see."""
    from elastic_devtools import localcluster as lc

    directory = tmp_path_factory.mktemp("restart-cluster")
    handle = lc.up(lc.ClusterConfig(dir=directory, tpu_pools=(lc.parse_tpu_pool("v5e:2x4:2"),),
                                    cpu_nodes=1, die_with_parent=True), progress=lambda _: None)
    try:
        yield handle
    finally:
        lc.down(directory, progress=lambda _: None)


def test_an_api_server_restart_is_survived_and_slice_events_list_no_pods(
        own_cluster: Cluster, args: tuple[str, ...], tmp_path: Path) -> None:
    """The API server stops and starts again: the operator takes its Lease back, its
    caches carry on (listing again if their resourceVersion expired), and a slice
    failure afterwards is detected and served from the cache (no pod list). Nodes may
    turn NotReady for a while after the restart (the node lifecycle controller missed
    their heartbeats), taking slices down for real: whatever happens, every slice
    failure is counted once and posted once."""
    cluster = own_cluster
    api = cluster.api_client()
    install_crd(api, timeout=30)
    ns = "restart"
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": ns}})
    wait_for(lambda: any(sa.metadata.name == "default"
                         for sa in core.list_namespaced_service_account(ns).items), 30,
             "the default ServiceAccount")
    op = CountingOperator(cluster.kubeconfig, Path(cluster.logs_dir) / "operator.log",
                          tmp_path / "requests.json", args)
    op.start()
    try:
        wait_for(op.leading, 30, "the operator leads")
        submit(api, ns, tpu={"type": "v5e", "topology": "2x4", "numSlices": 2})
        wait_running(api, ns)
        assert stop_component(cluster.dir, "kube-apiserver")
        start_component(cluster.dir, "kube-apiserver")
        wait_for(op.leading, 60, "the operator leading after the restart")
        wait_for(lambda: op.health()["caches"]["synced"], 30, "the caches synced")
        before = wait_running(api, ns)

        lists_before = op.settled_requests("LIST pods")
        relists_before = sum(relists(op, why) for why in ("start", "expired", "stalled"))
        faults.fail_pod(api, ns, worker_pods(api, ns, 1)[0].metadata.name)
        restarts = before["slices"][1]["restarts"]
        wait_status(api, ns, lambda s: s["slices"][1]["restarts"] > restarts,
                    "slice 1 counted down", timeout=30)
        # Pod lists only where the cache itself listed again (none, normally). A relist
        # after the restart can be counted by the shim before the cache has finished it
        # and counted it in its metric: until both agree, or the deadline says a pod list
        # came from elsewhere.
        def lists_are_relists() -> bool:
            relists_after = sum(relists(op, why) for why in ("start", "expired", "stalled"))
            return op.settled_requests("LIST pods") - lists_before == \
                relists_after - relists_before
        wait_for(lists_are_relists, 20, "every pod list since the failure a cache relist")
        st = wait_status(api, ns, lambda s: s.get("slicesReady") == 2, "both slices Ready",
                         timeout=240)
        failures = st["counters"]["sliceFailures"]
        assert failures == sum(s["restarts"] for s in st["slices"]) and failures >= 1
        wait_for(lambda: len(events(api, ns, Reason.SLICE_DOWN)) == failures, 30,
                 "one SliceDown Event per failure counted")
    finally:
        op.stop()
        api.close()
