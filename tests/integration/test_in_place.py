"""A slice restarted in place, on the local control plane: kwok plays the kubelet
restarting a worker's container in its pod (faults.restart_container), the operator
records RestartInPlace and deletes nothing; the slice is Ready again on the same pods and
the same Job, counted once. A dead node in the same job still moves its slice to the
spare pool, and a restart in place that does not come back within the deadline is
recreated. How fast is measured by `make bench` (the scale benchmark), never asserted."""
from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from elastic_api.conditions import Reason
from elastic_api.names import HEAD_REPLICATED_JOB, MAIN_CONTAINER, REPLICATED_JOB_LABEL
from elastic_devtools.localcluster import faults
from elastic_devtools.localcluster.faults import wait_for
from elastic_devtools.localcluster.operator_process import OperatorProcess
from tests.support.article_job import (
    events,
    get_jobset,
    status_of,
    submit,
    worker_job_uid,
    worker_pods,
)
from tests.support.server_version import git_version, server_features
from tests.support.waiting import ready_on_new_job, wait_running, wait_status

# One operator for the module's tests (integration/conftest.py).
pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("running_operator")]

TIMEOUT = 120


def uids(api: client.ApiClient, ns: str, index: int) -> dict[str, str]:
    return {p.metadata.name: p.metadata.uid for p in worker_pods(api, ns, index)}


def restart_counts(api: client.ApiClient, ns: str, index: int) -> dict[str, int]:
    return {p.metadata.name: sum(c.restart_count for c in p.status.container_statuses or [])
            for p in worker_pods(api, ns, index)}


def jobset_restarts(api: client.ApiClient, ns: str) -> int:
    return int(((get_jobset(api, ns) or {}).get("status") or {}).get("restarts") or 0)


def restarted_in_place(st: dict[str, Any], index: int, restarts: int) -> bool:
    s = st["slices"][index]
    last = s.get("lastReplacement") or {}
    return s["state"] == "Ready" and s["restarts"] == restarts \
        and last.get("action") == "RestartInPlace" and s.get("replacement") is None


def test_a_worker_process_exit_restarts_the_slice_in_place(
        api: client.ApiClient, ns: str) -> None:
    submit(api, ns)
    wait_running(api, ns)
    before, job = uids(api, ns, 1), worker_job_uid(api, ns, 1)
    victim = worker_pods(api, ns, 1)[2].metadata.name
    faults.restart_container(api, ns, victim, exit_code=1, down="3s")
    # Seen while it restarts: Down for ContainerRestarting, recorded before anything.
    down = wait_status(api, ns, lambda st: (st["slices"][1].get("replacement") or {}).get(
        "action") == "RestartInPlace", "slice 1 restarting in place", TIMEOUT)
    assert down["slices"][1]["reason"] == Reason.CONTAINER_RESTARTING
    st = wait_status(api, ns, lambda st: restarted_in_place(st, 1, 1),
                     "slice 1 Ready again in place", TIMEOUT)
    assert uids(api, ns, 1) == before and worker_job_uid(api, ns, 1) == job
    assert restart_counts(api, ns, 1)[victim] == 1
    assert st["counters"]["sliceFailures"] == 1 and jobset_restarts(api, ns) == 0
    wait_for(lambda: len(events(api, ns, Reason.SLICE_RESTARTED_IN_PLACE)) == 1, 30,
             "one SliceRestartedInPlace event")
    assert events(api, ns, Reason.SLICE_REPLACING) == []


def test_a_restart_no_look_saw_is_counted_once(api: client.ApiClient, ns: str,
                                               operator: OperatorProcess) -> None:
    """The operator is stopped while a container restarts in its pod: the restartCount the
    pod keeps is the evidence; counted once by the operator that comes back."""
    submit(api, ns)
    wait_running(api, ns)
    before = uids(api, ns, 0)
    victim = worker_pods(api, ns, 0)[0].metadata.name
    operator.stop()
    try:
        faults.restart_container(api, ns, victim, down="1s")
        wait_for(lambda: restart_counts(api, ns, 0)[victim] == 1
                 and all(p.status.phase == "Running" and any(
                     c.type == "Ready" and c.status == "True" for c in p.status.conditions)
                         for p in worker_pods(api, ns, 0)), TIMEOUT,
                 "the container restarted and Ready again")
    finally:
        operator.start()
    st = wait_status(api, ns, lambda st: restarted_in_place(st, 0, 1),
                     "the unseen restart counted, in place", TIMEOUT)
    assert uids(api, ns, 0) == before and st["counters"]["sliceFailures"] == 1
    st = status_of(api, ns)
    assert st["slices"][0]["restarts"] == 1


def test_a_dead_node_still_moves_its_slice_and_an_exit_beside_it_restarts_in_place(
        api: client.ApiClient, ns: str) -> None:
    submit(api, ns)
    wait_running(api, ns)
    old = worker_job_uid(api, ns, 2)
    node = worker_pods(api, ns, 2)[0].spec.node_name
    faults.kill_node(api, node)
    try:
        faults.restart_container(api, ns, worker_pods(api, ns, 0)[1].metadata.name)
        st = ready_on_new_job(api, ns, 2, old, "slice 2 moved off the dead node")
        assert st["slices"][2]["lastReplacement"]["action"] == "Replace"
        assert st["slices"][2]["lastReplacement"]["toPool"] != st["slices"][2][
            "lastReplacement"]["fromPool"]
        wait_status(api, ns, lambda st: restarted_in_place(st, 0, 1),
                    "slice 0 restarted in place", TIMEOUT)
    finally:
        faults.revive_node(api, node)


def test_not_back_within_the_deadline_the_slice_is_recreated(
        api: client.ApiClient, ns: str) -> None:
    submit(api, ns, recovery={"inPlaceDeadlineSeconds": 5})
    wait_running(api, ns)
    old = worker_job_uid(api, ns, 1)
    faults.restart_container(api, ns, worker_pods(api, ns, 1)[0].metadata.name, down="600s")
    st = ready_on_new_job(api, ns, 1, old, "slice 1 recreated after the deadline")
    assert st["slices"][1]["restarts"] == 1
    assert st["slices"][1]["lastReplacement"]["action"] == "Replace"
    wait_for(lambda: len(events(api, ns, Reason.IN_PLACE_RESTART_TIMED_OUT)) == 1, 30,
             "one InPlaceRestartTimedOut event")


def head_pod(api: client.ApiClient, ns: str) -> client.V1Pod:
    pods = client.CoreV1Api(api).list_namespaced_pod(
        ns, label_selector=f"{REPLICATED_JOB_LABEL}={HEAD_REPLICATED_JOB}").items
    return next(p for p in pods if p.metadata.deletion_timestamp is None)


def main_restarts(pod: client.V1Pod) -> int:
    return next((c.restart_count for c in pod.status.container_statuses or []
                 if c.name == MAIN_CONTAINER), 0)


def test_main_restarts_in_place_within_max_restarts_then_the_job_fails(
        api: client.ApiClient, ns: str) -> None:
    """The rule reaches the head pod through JobSet and the Job; each restart of main in
    place leaves the workers and the JobSet alone; the third of maxRestarts 2 spends the
    budget: the operator ends the head Job and JobSet's rule fails the JobSet."""
    if not server_features(api).restart_rules:  # make test-compat's 1.32
        pytest.skip(f"{git_version(api)} refuses main's restart rules: the operator renders "
                    "none there (test_main_crash.py holds the JobSet restart instead)")
    submit(api, ns, maxRestarts=2)
    wait_running(api, ns)
    head = head_pod(api, ns)
    main = next(c for c in head.spec.containers if c.name == MAIN_CONTAINER)
    assert main.restart_policy == "Never" and main.restart_policy_rules[0].action == "Restart"
    workers = {i: uids(api, ns, i) for i in range(3)}
    for n in (1, 2):
        faults.restart_container(api, ns, head.metadata.name, exit_code=1, down="1s")
        wait_for(lambda n=n: main_restarts(head_pod(api, ns)) == n, TIMEOUT,
                 f"main restarted in place {n} time(s)")
        assert head_pod(api, ns).metadata.uid == head.metadata.uid
    assert {i: uids(api, ns, i) for i in range(3)} == workers
    assert jobset_restarts(api, ns) == 0 and status_of(api, ns)["phase"] != "Failed"
    faults.restart_container(api, ns, head.metadata.name, exit_code=1, down="1s")
    st = wait_status(api, ns, lambda st: st.get("phase") == "Failed",
                     "the job Failed, maxRestarts spent by main's restarts in place", TIMEOUT)
    failed = next(c for c in st["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == Reason.MAX_RESTARTS_EXCEEDED
    assert "and 3 of main in place, 3 of them over the whole run: the budget spent" \
        in failed["message"], failed["message"]
    assert jobset_restarts(api, ns) == 0  # failed by the rule, not restarted
