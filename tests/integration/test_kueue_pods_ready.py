"""Kueue's waitForPodsReady and the operator, on the real local control plane: forced on
(the module's kueue_settings), so the same on v0.19.2, where it is on by default, as on
v0.17.0 (`make test-compat`), where it is off unless configured; with a recoveryTimeout of
45 s instead of Kueue's 30 min, told to the operator by its flags.

Kueue evicts a running Workload whose pods are not all Ready again within recoveryTimeout
(a JobSet is Ready for Kueue only when every worker Job is). The operator's own
recoveries take seconds: a failed slice recreated, a dead host's slice moved to the spare
pool, a slice moved off a pool under maintenance all end with Kueue's PodsReady back to
True and nothing evicted. A slice that cannot come back (no healthy pool) while the real
trainer trains on the two others (minSlices 2) is announced (EvictionPending with the
deadline, a Warning Event half-way), evicted (PodsReadyTimeout, counted as an eviction,
not a slice failure), readmitted, and the next trainer process resumes from the newest
committed checkpoint with the retry the eviction cost given back.
"""
from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from elastic_api.checkpoints import decide
from elastic_api.conditions import Phase, Reason
from elastic_api.names import (
    GROUP,
    HEAD_REPLICATED_JOB,
    KUEUE_QUEUE_NAME_LABEL,
    NODE_POOL_LABEL,
    PLURAL,
    QUARANTINE_LABEL,
    REPLICATED_JOB_LABEL,
    TPU_ACCELERATOR_LABEL,
    VERSION,
    job_pods_selector,
)
from elastic_api.queueing import (
    ADMITTED,
    EVICTED_BY_PODS_READY_TIMEOUT,
    EVICTION_PENDING,
    REASON_ADMITTED,
    REASON_EVICTED,
    REASON_PODS_READY,
    REASON_WAITING_FOR_RECOVERY,
)
from elastic_api.validation import validate_job
from elastic_devtools.localcluster import Cluster, KueueSettings, faults
from elastic_devtools.localcluster import kueue_queues as kq
from elastic_devtools.localcluster.crds import install_crd
from elastic_devtools.localcluster.faults import wait_for
from elastic_devtools.localcluster.operator_process import TEST_ARGS, OperatorProcess
from elastic_operator.checkpoints.listing import list_local
from elastic_operator.render import render_jobset
from tests.builders import iso
from tests.support.article_job import (
    JOB,
    condition,
    delete_jobs_and_wait_for_pods,
    events,
    get_jobset,
    job_manifest,
    parse,
    start_trainer,
    status_of,
    worker_job_uid,
    worker_pods,
    write_report,
)
from tests.support.waiting import ready_on_new_job, wait_status

pytestmark = pytest.mark.cluster

RECOVERY_S = 45  # Kueue's recoveryTimeout here (30 min by default)
START_S = 300  # its timeout: every pod Ready this long after admission
MAX_RETRIES = 10
CHECKPOINT_PERIOD = 200  # steps (about 50 a second here)
TIMEOUT = 180


@pytest.fixture(scope="module")
def kueue_settings() -> KueueSettings:
    # On whatever the release's default (off before v0.19: without this the tests ran
    # with it off on v0.17.0). A requeuing backoff of 10-20 s (60 s by default): the
    # eviction stays visible a while.
    return KueueSettings(wait_for_pods_ready=True, pods_ready={
        "timeout": f"{START_S}s", "recoveryTimeout": f"{RECOVERY_S}s",
        "requeuingStrategy": {"backoffBaseSeconds": 10, "backoffMaxSeconds": 20}})


@pytest.fixture(scope="module")
def api(kueue: Cluster) -> Iterator[client.ApiClient]:
    api_client = kueue.api_client()
    install_crd(api_client, timeout=30)
    yield api_client
    api_client.close()


@pytest.fixture(scope="module")
def operator(kueue: Cluster, api: client.ApiClient) -> Iterator[OperatorProcess]:
    """Started after Kueue (it watches Workloads), told Kueue's timeouts."""
    with OperatorProcess(
            Path(kueue.kubeconfig), Path(kueue.logs_dir) / "operator-pods-ready.log",
            args=(*TEST_ARGS, "--node-action-cooldown-seconds", "5",
                  "--kueue-pods-ready-timeout-seconds", str(START_S),
                  "--kueue-recovery-timeout-seconds", str(RECOVERY_S))) as proc:
        yield proc


@pytest.fixture
def ns(namespace: str, api: client.ApiClient, operator: OperatorProcess) -> Iterator[str]:
    yield namespace
    delete_jobs_and_wait_for_pods(api, namespace)


@pytest.fixture
def queue(api: client.ApiClient, ns: str) -> Iterator[kq.Queues]:
    """A ClusterQueue with the quota of one article job, and its LocalQueue."""
    obj = job_manifest()
    obj["metadata"]["namespace"] = ns
    requests = kq.jobset_requests(render_jobset(validate_job(obj)))
    quota = {k: str(int(v)) for k, v in requests.items()}
    with kq.queues(api, ns, quota, prefix="pr" + ns.rsplit("-", 1)[-1]) as made:
        yield made


def submit_queued(api: client.ApiClient, ns: str, queue: str, **spec: Any) -> None:
    obj = job_manifest(**spec)
    obj["metadata"]["labels"] = {KUEUE_QUEUE_NAME_LABEL: queue}
    client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL,
                                                                 obj)


def running_and_admitted(s: dict[str, Any]) -> bool:
    return s.get("phase") == Phase.RUNNING and \
        condition(s, ADMITTED).get("reason") == REASON_ADMITTED


def workload(api: client.ApiClient, ns: str) -> dict[str, Any]:
    jobset = get_jobset(api, ns)
    assert jobset is not None
    (wl,) = kq.workloads_of(api, ns, jobset["metadata"]["uid"])
    return wl


def kueue_evictions(api: client.ApiClient, ns: str) -> list[dict[str, Any]]:
    return list(((workload(api, ns).get("status") or {}).get("schedulingStats") or {})
                .get("evictions") or [])


def tpu_pools(api: client.ApiClient) -> set[str]:
    nodes = client.CoreV1Api(api).list_node(label_selector=TPU_ACCELERATOR_LABEL).items
    return {n.metadata.labels[NODE_POOL_LABEL] for n in nodes}


def quarantined(api: client.ApiClient, pool: str) -> set[str | None]:
    nodes = client.CoreV1Api(api).list_node(label_selector=f"{NODE_POOL_LABEL}={pool}").items
    return {(n.metadata.labels or {}).get(QUARANTINE_LABEL) for n in nodes}


def newest_committed(directory: Path) -> int | None:
    return decide(list_local(str(directory))).latest_committed


def test_the_operators_recoveries_end_before_kueues_recovery_timeout(
        api: client.ApiClient, ns: str, queue: kq.Queues, killed: list[str]) -> None:
    """A failed slice recreated, a dead host's slice moved to the spare, a slice moved off
    a pool under maintenance: each time Kueue's PodsReady goes False and is True again
    (Recovered) well within recoveryTimeout, and nothing is evicted."""
    submit_queued(api, ns, queue.local_queue)
    st = wait_status(api, ns, running_and_admitted, "admitted and Running", timeout=TIMEOUT)

    old = worker_job_uid(api, ns, 1)
    faults.fail_pod(api, ns, worker_pods(api, ns, 1)[0].metadata.name)
    st = ready_on_new_job(api, ns, 1, old, "slice 1 recreated")

    # The pools in use now: the recreated slice 1 may have taken the spare (JobSet's
    # exclusive placement lets its new Job land on any free pool), freeing its old one.
    old = worker_job_uid(api, ns, 2)
    used = {s["pool"] for s in st["slices"]}
    node = worker_pods(api, ns, 2)[0].spec.node_name
    killed.append(node)
    faults.kill_node(api, node)
    st = ready_on_new_job(api, ns, 2, old, "slice 2 moved off its dead host")
    broken = next(iter(used - {s["pool"] for s in st["slices"]}))
    assert st["slices"][2]["pool"] not in used
    faults.revive_node(api, node)  # its pool is released: the spare of the next move
    wait_for(lambda: quarantined(api, broken) == {None}, 60, f"pool {broken} released")

    pool = st["slices"][0]["pool"]
    old = worker_job_uid(api, ns, 0)
    faults.schedule_maintenance(api, pool, in_seconds=600)
    try:
        st = wait_status(api, ns, lambda s: (s.get("checkpointRequest") or {}).get("phase")
                         == "Requested", "a checkpoint request", timeout=60)
        now = iso(datetime.now(UTC))
        request = st["checkpointRequest"]
        write_report(api, ns, {"observedAt": now, "state": "Training", "step": 50,
                               "activeSlices": 3, "checkpointAck": {
                                   "id": request["id"], "step": 50, "committedAt": now,
                                   "paused": True}})
        st = ready_on_new_job(api, ns, 0, old, "slice 0 moved off the pool under maintenance")
    finally:
        faults.end_maintenance(api, pool)
    assert st["slices"][0]["moves"] == 1

    # Kueue saw every pod Ready again each time: nothing evicted, nothing pending.
    st = wait_status(api, ns, lambda s: condition(s, EVICTION_PENDING).get("reason")
                     == REASON_PODS_READY, "EvictionPending False", timeout=60)
    wl = workload(api, ns)
    ready = kq.condition(wl, "PodsReady")
    assert ready is not None and (ready["status"], ready["reason"]) == ("True", "Recovered")
    assert kueue_evictions(api, ns) == []
    assert (st["counters"]["evictions"], st["counters"]["preemptions"]) == (0, 0)
    assert st["counters"]["sliceFailures"] == 2 and st["counters"]["jobSetRestarts"] == 0
    assert condition(st, ADMITTED)["reason"] == REASON_ADMITTED
    assert (st.get("admission") or {}).get("podsReadyDeadline") is None


def head_pod_gone(api: client.ApiClient, ns: str) -> bool:
    pods = client.CoreV1Api(api).list_namespaced_pod(
        ns, label_selector=f"{job_pods_selector(JOB)},{REPLICATED_JOB_LABEL}="
        f"{HEAD_REPLICATED_JOB}").items
    return not [p for p in pods if p.metadata.deletion_timestamp is None]


def head_pod_running(api: client.ApiClient, ns: str) -> bool:
    pods = client.CoreV1Api(api).list_namespaced_pod(
        ns, label_selector=f"{job_pods_selector(JOB)},{REPLICATED_JOB_LABEL}="
        f"{HEAD_REPLICATED_JOB}").items
    return any(p.status.phase == "Running" and p.metadata.deletion_timestamp is None
               for p in pods)


def stop(trainer: subprocess.Popen[bytes]) -> None:
    """As the kubelet stops a container: SIGTERM, then SIGKILL."""
    if trainer.poll() is None:
        trainer.send_signal(signal.SIGTERM)
        try:
            trainer.wait(timeout=30)
        except subprocess.TimeoutExpired:
            trainer.kill()
            trainer.wait(timeout=10)


def eviction_pending_said(api: client.ApiClient, ns: str) -> dict[str, Any]:
    """A slice that cannot come back, the job training on without it: EvictionPending
    says Kueue's deadline (the Workload's PodsReady WaitForRecovery plus the recovery
    timeout), in the status and, half-way, as a Warning Event. Returns that status."""
    st = wait_status(api, ns, lambda s: condition(s, EVICTION_PENDING).get("reason")
                     == REASON_WAITING_FOR_RECOVERY, "EvictionPending", timeout=60)
    deadline = parse(st["admission"]["podsReadyDeadline"])
    ready = kq.condition(workload(api, ns), "PodsReady")
    assert ready is not None and ready["reason"] == "WaitForRecovery"
    assert deadline - parse(ready["lastTransitionTime"]) == timedelta(seconds=RECOVERY_S)
    message = condition(st, EVICTION_PENDING)["message"]
    assert st["admission"]["podsReadyDeadline"] in message and "slice 1" in message
    wait_for(lambda: events(api, ns, EVICTION_PENDING), RECOVERY_S,
             "the EvictionPending Warning Event, half-way")
    return st


# Over a minute by its nature (a slice kept gone past Kueue's recovery timeout): `make
# test-long`. Its guard in `make test`: the recoveries inside the timeout above, on the same
# Kueue, and the eviction rule both sides apply (tests/unit/test_contract.py,
# test_status_admission.py).
@pytest.mark.long
def test_a_slice_gone_longer_than_the_recovery_timeout_is_an_eviction_said_before(
        api: client.ApiClient, ns: str, queue: kq.Queues, killed: list[str],
        kueue: Cluster, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    submit_queued(api, ns, queue.local_queue, elastic={"minSlices": 2,
                                                         "maxRetries": MAX_RETRIES},
                  checkpoint={"directory": str(ckpt), "periodSteps": CHECKPOINT_PERIOD})
    wait_status(api, ns, running_and_admitted, "admitted and Running", timeout=TIMEOUT)
    kubeconfig = Path(kueue.kubeconfig)
    args = ("--min-slices", "2", "--max-retries", str(MAX_RETRIES))
    first = start_trainer(ns, kubeconfig, tmp_path, checkpoint_dir=ckpt,
                          checkpoint_period=CHECKPOINT_PERIOD, extra=args,
                          log_name="train-1.log")
    second: subprocess.Popen[bytes] | None = None
    try:
        st = wait_status(api, ns, lambda s: ((s.get("checkpoint") or {})
                                             .get("latestCommittedStep") or 0) >= CHECKPOINT_PERIOD,
                         "a committed checkpoint", timeout=TIMEOUT)
        # Slice 1's host dies, and the spare pool is broken too: it cannot come back.
        spare = tpu_pools(api) - {s["pool"] for s in st["slices"]}
        node = worker_pods(api, ns, 1)[0].spec.node_name
        for dead in (node, *(faults.pool_nodes(api, p)[0] for p in spare)):
            killed.append(dead)
            faults.kill_node(api, dead)

        st = eviction_pending_said(api, ns)
        assert st["slices"][1]["restarts"] == 1

        # Evicted by Kueue: an eviction, not a slice failure.
        st = wait_status(api, ns, lambda s: s["counters"]["evictions"] == 1,
                         "the eviction counted", timeout=RECOVERY_S + 60)
        assert st["admission"]["lastEvictionReason"] == EVICTED_BY_PODS_READY_TIMEOUT
        assert [e["reason"] for e in kueue_evictions(api, ns)] == [EVICTED_BY_PODS_READY_TIMEOUT]
        wait_for(lambda: [m for m in events(api, ns, REASON_EVICTED)
                          if EVICTED_BY_PODS_READY_TIMEOUT in m], 30, "an Evicted Event")
        # The first trainer saw its slices go with the eviction: a retry it gives back.
        wait_for(lambda: ((status_of(api, ns).get("training") or {}).get("elasticEventsTotal")
                          or 0) >= 2, 60, "the trainer's second elastic event")
        wait_for(lambda: head_pod_gone(api, ns), 60, "the head pod gone (JobSet suspended)")
        stop(first)
        for dead in killed:
            faults.revive_node(api, dead)

        evicted_at = st["admission"]["evictedAt"]
        # Readmitted: every slice Ready again (the trainer, still to start, says Running).
        st = wait_status(api, ns, lambda s: condition(s, ADMITTED).get("reason")
                         == REASON_ADMITTED and s["admission"]["admittedAt"] > evicted_at
                         and {x["state"] for x in s["slices"]} == {"Ready"},
                         "readmitted, every slice Ready", timeout=TIMEOUT)
        wait_for(lambda: head_pod_running(api, ns), 60, "the new head pod Running")
        newest = newest_committed(ckpt)
        second = start_trainer(ns, kubeconfig, tmp_path, checkpoint_dir=ckpt,
                               checkpoint_period=CHECKPOINT_PERIOD, extra=args,
                               log_name="train-2.log")
        st = wait_status(api, ns, lambda s: (s.get("training") or {}).get("processId")
                         == second.pid and s["training"]["step"] > (newest or 0)
                         and s.get("phase") == Phase.RUNNING,
                         "the second trainer training on, Running", timeout=TIMEOUT)
        log = (tmp_path / "train-2.log").read_text()
        assert f"start at step {newest} (checkpoint" in log, log[-2000:]
        # The eviction cost no retry: only the real failure of slice 1 is spent.
        assert st["training"]["retriesRemaining"] == MAX_RETRIES - 1, log[-2000:]
        counters = st["counters"]
        assert (counters["sliceFailures"], counters["evictions"], counters["preemptions"],
                counters["jobSetRestarts"], counters["trainerRestarts"]) == (1, 1, 0, 0, 0)
        assert [s["restarts"] for s in st["slices"]] == [0, 1, 0]
        assert condition(st, EVICTION_PENDING)["reason"] == REASON_PODS_READY
        assert not [m for m in events(api, ns, Reason.TRAINER_RESTARTED)]
    finally:
        for trainer in (first, second):
            if trainer is not None:
                stop(trainer)
