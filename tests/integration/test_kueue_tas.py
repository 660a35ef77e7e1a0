"""Slices placed by Kueue's Topology-Aware Scheduling (Kueue v0.19.2, and v0.17.0 in
`make test-compat`; TAS on by default in both), on the real local control plane: a Kueue
Topology block -> node pool -> host over kwok's fake TPU nodes (two v5e 4x4 node pools
per block; render.py labels them), a Topology-Aware ResourceFlavor for google.com/tpu, a
plain one for the head.

A job of 2 slices with spec.tpu.topologyAware {sliceLevel: node pool, jobLevel: block}
lands with each slice in a node pool of its own, both in one block. A failed slice is
recreated in its own (healthy) domain, where Kueue keeps it; nothing is quarantined. A
dead host is Kueue's: no host of the slice's pool is free to replace it, so Kueue evicts
the job (NodeFailures), which the operator counts as an eviction, not more slice
failures, and Kueue readmits it on the healthy block. A level no node carries is
reported, naming it; a level that is no label key is refused at admission.
"""
from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from elastic_api.conditions import ConditionType as C
from elastic_api.conditions import Phase, Reason
from elastic_api.names import (
    GROUP,
    HOSTNAME_LABEL,
    KUEUE_QUEUE_NAME_LABEL,
    NODE_POOL_LABEL,
    PLURAL,
    QUARANTINE_LABEL,
    TOPOLOGY_BLOCK_LABEL,
    TPU_ACCELERATOR_LABEL,
    VERSION,
    worker_pods_selector,
)
from elastic_api.queueing import (
    ADMITTED,
    EVICTED_BY_NODE_FAILURES,
    REASON_ADMITTED,
    REASON_WAITING_FOR_ADMISSION,
)
from elastic_api.validation import validate_job
from elastic_devtools.localcluster import Cluster, faults
from elastic_devtools.localcluster import kueue_queues as kq
from elastic_devtools.localcluster.crds import install_crd
from elastic_devtools.localcluster.faults import wait_for
from elastic_devtools.localcluster.operator_process import TEST_ARGS, OperatorProcess
from elastic_operator.render import render_jobset
from tests.support.article_job import (
    JOB,
    condition,
    delete_jobs_and_wait_for_pods,
    events,
    get_jobset,
    job_manifest,
    worker_job_uid,
    worker_pods,
)
from tests.support.waiting import ready_on_new_job, wait_status

pytestmark = pytest.mark.cluster

SLICES = 2
TIMEOUT = 180
LEVELS = [TOPOLOGY_BLOCK_LABEL, NODE_POOL_LABEL, HOSTNAME_LABEL]
V5E = "tpu-v5-lite-podslice"
PLACEMENT = {"sliceLevel": NODE_POOL_LABEL, "jobLevel": TOPOLOGY_BLOCK_LABEL}


@pytest.fixture(scope="module")
def api(kueue: Cluster) -> Iterator[client.ApiClient]:
    api_client = kueue.api_client()
    install_crd(api_client, timeout=30)
    yield api_client
    api_client.close()


@pytest.fixture(scope="module")
def operator(kueue: Cluster, api: client.ApiClient) -> Iterator[OperatorProcess]:
    with OperatorProcess(Path(kueue.kubeconfig), Path(kueue.logs_dir) / "operator-tas.log",
                         args=(*TEST_ARGS, "--node-action-cooldown-seconds", "5")) as proc:
        yield proc


@pytest.fixture
def ns(namespace: str, api: client.ApiClient, operator: OperatorProcess) -> Iterator[str]:
    yield namespace
    delete_jobs_and_wait_for_pods(api, namespace)


def manifest(queue: str, placement: dict[str, str] | None = None) -> dict[str, Any]:
    obj = job_manifest(tpu={"type": "v5e", "topology": "4x4", "numSlices": SLICES,
                            "topologyAware": placement or PLACEMENT})
    obj["metadata"]["labels"] = {KUEUE_QUEUE_NAME_LABEL: queue}
    return obj


@pytest.fixture
def queue(api: client.ApiClient, ns: str) -> Iterator[kq.Queues]:
    """A Topology block -> pool -> host, its TAS flavor for the TPU nodes, quota for one
    job (with room in the TPU quota: Kueue's topology decides, not the quota)."""
    obj = manifest("x")
    obj["metadata"]["namespace"] = ns
    quota = {k: str(int(v)) for k, v in
             kq.jobset_requests(render_jobset(validate_job(obj))).items()}
    quota["google.com/tpu"] = "64"
    with kq.tas_queues(api, ns, quota, prefix="t" + ns.rsplit("-", 1)[-1], levels=LEVELS,
                       node_labels={TPU_ACCELERATOR_LABEL: V5E}) as made:
        yield made


def submit(api: client.ApiClient, ns: str, body: dict[str, Any]) -> None:
    client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL,
                                                                 body)


def running_and_admitted(s: dict[str, Any]) -> bool:
    return s.get("phase") == Phase.RUNNING and \
        condition(s, ADMITTED).get("reason") == REASON_ADMITTED


def node_labels(api: client.ApiClient) -> dict[str, dict[str, str]]:
    return {n.metadata.name: n.metadata.labels or {}
            for n in client.CoreV1Api(api).list_node().items}


def placement(api: client.ApiClient, ns: str) -> dict[int, set[tuple[str, str]]]:
    """Each slice's (node pool, block) pairs, from its live pods' nodes."""
    labels = node_labels(api)
    out: dict[int, set[tuple[str, str]]] = {}
    for index in range(SLICES):
        pods = worker_pods(api, ns, index)
        out[index] = {(labels[p.spec.node_name][NODE_POOL_LABEL],
                       labels[p.spec.node_name][TOPOLOGY_BLOCK_LABEL]) for p in pods}
    return out


def assert_placed_by_topology(api: client.ApiClient, ns: str, st: dict[str, Any]) -> None:
    """Each slice whole in one node pool of its own, both in one block, as the status
    says; nothing quarantined."""
    where = placement(api, ns)
    assert all(len(pairs) == 1 for pairs in where.values()), where
    pools = [next(iter(where[i]))[0] for i in range(SLICES)]
    assert len(set(pools)) == SLICES, where
    assert len({next(iter(where[i]))[1] for i in range(SLICES)}) == 1, where
    assert [s["domain"] for s in st["slices"]] == pools
    assert not [n for n, ls in node_labels(api).items() if QUARANTINE_LABEL in ls]


def not_ready_since(api: client.ApiClient, node: str) -> datetime:
    conditions = client.CoreV1Api(api).read_node(node).status.conditions or []
    (ready,) = [c for c in conditions if c.type == "Ready"]
    assert ready.status == "False", ready
    stamp: datetime = ready.last_transition_time
    return stamp


def workload(api: client.ApiClient, ns: str) -> dict[str, Any]:
    jobset = get_jobset(api, ns)
    assert jobset is not None
    (wl,) = kq.workloads_of(api, ns, jobset["metadata"]["uid"])
    return wl


def test_slices_land_in_domains_of_their_own_and_a_failed_one_is_recreated_in_its_own(
        api: client.ApiClient, ns: str, queue: kq.Queues) -> None:
    submit(api, ns, manifest(queue.local_queue))
    st = wait_status(api, ns, lambda s: running_and_admitted(s)
                     and all(x.get("domain") for x in s["slices"]),
                     "admitted, Running, each slice's domain known", timeout=TIMEOUT)
    assert_placed_by_topology(api, ns, st)
    domains = [s["domain"] for s in st["slices"]]
    assert condition(st, C.TOPOLOGY_PLACEMENT)["reason"] == Reason.PLACED_BY_KUEUE
    assert condition(st, C.SPARES_AVAILABLE)["reason"] == Reason.PLACED_BY_KUEUE
    assert st.get("sparePools") is None

    old = worker_job_uid(api, ns, 1)
    faults.fail_pod(api, ns, worker_pods(api, ns, 1)[2].metadata.name)
    st = ready_on_new_job(api, ns, 1, old, "slice 1 recreated", timeout=TIMEOUT)
    assert_placed_by_topology(api, ns, st)
    assert [s["domain"] for s in st["slices"]] == domains  # Kueue kept it where it was
    assert [s["restarts"] for s in st["slices"]] == [0, 1]
    assert st["counters"]["evictions"] == 0 and st["counters"]["jobSetRestarts"] == 0
    wait_for(lambda: [m for m in events(api, ns, Reason.SLICE_REPLACING)
                      if "Kueue keeps a slice where it placed it" in m], 30,
             "a SliceReplacing Event naming the domain")
    assert not events(api, ns, Reason.POOL_QUARANTINED)


def test_a_dead_host_is_kueues_an_eviction_and_the_job_comes_back_on_a_healthy_block(
        api: client.ApiClient, ns: str, queue: kq.Queues, killed: list[str]) -> None:
    submit(api, ns, manifest(queue.local_queue))
    st = wait_status(api, ns, lambda s: running_and_admitted(s)
                     and all(x.get("domain") for x in s["slices"]),
                     "admitted, Running, each slice's domain known", timeout=TIMEOUT)
    admitted_at = st["admission"]["admittedAt"]
    node = worker_pods(api, ns, 1)[0].spec.node_name
    labels = node_labels(api)
    dead_pool, dead_block = labels[node][NODE_POOL_LABEL], labels[node][TOPOLOGY_BLOCK_LABEL]
    before = datetime.now(UTC).replace(microsecond=0)
    killed.append(node)
    faults.kill_node(api, node)
    # Ready=False since now, not since the node was created: Kueue before v0.19 fails a
    # host NotReady for 30 s counted from that stamp, whatever its pods do.
    assert not_ready_since(api, node) >= before

    # No host of the slice's pool is free: Kueue evicts the job (NodeFailures) and
    # readmits it where both slices fit, the other block. (Recovering stays True until a
    # trainer reports a step: none runs here.)
    st = wait_status(api, ns, lambda s: s["counters"]["evictions"] == 1
                     and condition(s, ADMITTED).get("reason") == REASON_ADMITTED
                     and s["admission"]["admittedAt"] > admitted_at
                     and all(x["state"] == "Ready" and x.get("domain") for x in s["slices"]),
                     "evicted, readmitted, every slice Ready again", timeout=TIMEOUT)
    assert st["admission"]["lastEvictionReason"] == EVICTED_BY_NODE_FAILURES
    stats = ((workload(api, ns).get("status") or {}).get("schedulingStats") or {})
    assert [e["reason"] for e in stats.get("evictions") or []] == [EVICTED_BY_NODE_FAILURES]
    assert_placed_by_topology(api, ns, st)
    where = placement(api, ns)
    assert {pair for pairs in where.values() for pair in pairs} & {(dead_pool, dead_block)} \
        == set()
    assert {block for pairs in where.values() for _, block in pairs} != {dead_block}
    # One slice failure (the host); the eviction's pods are no failure, nothing restarted.
    assert st["counters"]["sliceFailures"] == 1 and st["counters"]["jobSetRestarts"] == 0
    wait_for(lambda: [m for m in events(api, ns, "Evicted") if EVICTED_BY_NODE_FAILURES in m],
             30, "an Evicted Event naming NodeFailures")
    assert not events(api, ns, Reason.POOL_QUARANTINED)


def test_a_level_no_node_carries_is_reported_and_one_that_is_no_label_is_refused(
        api: client.ApiClient, ns: str, queue: kq.Queues) -> None:
    missing = "example.com/no-such-level"
    submit(api, ns, manifest(queue.local_queue, {"sliceLevel": missing}))
    st = wait_status(api, ns, lambda s: condition(s, C.TOPOLOGY_PLACEMENT).get("reason")
                     == Reason.TOPOLOGY_LEVEL_NOT_FOUND, "the level reported", timeout=TIMEOUT)
    message = condition(st, C.TOPOLOGY_PLACEMENT)["message"]
    assert missing in message and "spec.tpu.topologyAware.sliceLevel" in message
    # Kueue does not admit it; the Admitted condition carries Kueue's own reason.
    st = wait_status(api, ns, lambda s: condition(s, ADMITTED).get("reason")
                     == REASON_WAITING_FOR_ADMISSION and "Kueue:" in
                     condition(s, ADMITTED).get("message", ""), "Kueue's reason", timeout=60)
    assert st["phase"] == Phase.QUEUED
    assert not client.CoreV1Api(api).list_namespaced_pod(
        ns, label_selector=worker_pods_selector(JOB, 0)).items

    bad = manifest(queue.local_queue, {"sliceLevel": "not a label"})
    bad["metadata"]["name"] = "refused"
    with pytest.raises(client.ApiException) as refused:
        submit(api, ns, bad)
    assert refused.value.status == 422
    assert "spec.tpu.topologyAware.sliceLevel: not a node label key" in refused.value.body
