"""Slice replacement at hardware speed, on the local control plane (real kube-apiserver,
Job and JobSet controllers, scheduler, garbage collector; kwok plays 16 TPU hosts = the
article's 3 slices of v5e 4x4 and one spare pool).

The operator runs as a subprocess. Each test checks behaviour: the slice comes back on
a new worker Job (no pod backoff), the budget is counted and enforced, a dead host's
stuck pods are force-deleted and its pool avoided, a flapping node costs no deletes, a
restarted operator neither repeats nor forgets, and a maintenance notice moves the slice
before the maintenance. How fast is measured by `make bench` (bench/replacement.py),
never asserted here.
"""
from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch

from elastic_api.conditions import ConditionType as C
from elastic_api.conditions import Reason
from elastic_api.names import (
    GROUP,
    NODE_POOL_LABEL,
    PLURAL,
    QUARANTINE_CAUSE_ANNOTATION,
    QUARANTINE_LABEL,
    VERSION,
)
from elastic_devtools.localcluster import Cluster, faults
from elastic_devtools.localcluster.faults import wait_for
from elastic_devtools.localcluster.operator_process import TEST_ARGS, OperatorProcess
from tests.builders import iso
from tests.support.article_job import (
    JOB,
    condition,
    delete_jobs_and_wait_for_pods,
    events,
    get_jobset,
    is_true,
    job_manifest,
    start_trainer,
    status_of,
    submit,
    worker_job_uid,
    worker_pods,
    write_report,
)
from tests.support.waiting import ready_on_new_job, wait_running, wait_status

# One operator for the module's tests (integration/conftest.py).
pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("running_operator")]

TIMEOUT = 120


@pytest.fixture(scope="module")
def operator_args() -> tuple[str, ...]:
    """A flapping node must be able to come back within a test: a short cooldown. The
    administrator trusts jobs' reports here (the quarantine mechanism is under test;
    test_hostile_tenant_status.py holds the default: a report alone quarantines nothing)."""
    return (*TEST_ARGS, "--node-action-cooldown-seconds", "5", "--quarantine-on-job-report")


# --- helpers ----------------------------------------------------------------------------------


def job_uid(api: client.ApiClient, ns: str, index: int) -> str | None:
    return worker_job_uid(api, ns, index)


def pool_of(api: client.ApiClient, node: str) -> str:
    return str(client.CoreV1Api(api).read_node(node).metadata.labels[NODE_POOL_LABEL])


def quarantined(api: client.ApiClient, pool: str) -> set[str | None]:
    nodes = client.CoreV1Api(api).list_node(label_selector=f"{NODE_POOL_LABEL}={pool}").items
    return {(n.metadata.labels or {}).get(QUARANTINE_LABEL) for n in nodes}


def quarantines(api: client.ApiClient) -> dict[str, str]:
    """Every quarantined node and why."""
    nodes = client.CoreV1Api(api).list_node(label_selector=QUARANTINE_LABEL).items
    return {n.metadata.name: n.metadata.labels[QUARANTINE_LABEL] for n in nodes}


def jobset_restarts(api: client.ApiClient, ns: str) -> int:
    return int(((get_jobset(api, ns) or {}).get("status") or {}).get("restarts") or 0)


# --- no growing backoff -----------------------------------------------------------------------


def test_a_slice_failing_six_times_in_a_row_is_replaced_each_time(
        api: client.ApiClient, ns: str) -> None:
    """The Job controller would wait 10, 20, 40, 80, 160, 320 s; the operator recreates
    the worker Job each time (fresh backoff), JobSet never restarts, and the budget
    counts every failure."""
    submit(api, ns, elastic={"maxSliceRestarts": 6})
    wait_running(api, ns)
    for n in range(1, 7):
        old = job_uid(api, ns, 1)
        faults.fail_pod(api, ns, worker_pods(api, ns, 1)[1].metadata.name)
        st = ready_on_new_job(api, ns, 1, old, f"slice 1 Ready on a new Job after failure {n}")
        assert st["slices"][1]["restarts"] == n
        assert st["slices"][1]["lastReplacement"]["action"] == "Replace"
    assert jobset_restarts(api, ns) == 0
    assert [s["restarts"] for s in st["slices"]] == [0, 6, 0]
    assert st["counters"]["sliceFailures"] == 6
    wait_for(lambda: len(events(api, ns, Reason.SLICE_REPLACING)) >= 6, 30,
             "six SliceReplacing events")


def test_past_max_slice_restarts_the_jobset_failure_policy_applies(
        api: client.ApiClient, ns: str) -> None:
    submit(api, ns, elastic={"maxSliceRestarts": 1})
    wait_running(api, ns)
    old = job_uid(api, ns, 2)
    faults.fail_pod(api, ns, worker_pods(api, ns, 2)[0].metadata.name)
    ready_on_new_job(api, ns, 2, old, "slice 2 replaced once")
    faults.fail_pod(api, ns, worker_pods(api, ns, 2)[0].metadata.name)
    st = wait_status(api, ns, lambda s: is_true(s, C.FAILED), "the job Failed")
    assert st["slices"][2]["restarts"] == 2
    assert st["slices"][2]["replacement"]["action"] == "GiveUp"
    assert condition(st, C.FAILED)["reason"] == Reason.MAX_RESTARTS_EXCEEDED
    wait_for(lambda: events(api, ns, Reason.SLICE_RESTARTS_EXHAUSTED), 30,
             "a SliceRestartsExhausted event")


def test_a_crash_loop_with_the_default_budgets_ends_the_job_within_minutes(
        api: client.ApiClient, ns: str) -> None:
    """The API's defaults (no restart count in the spec: each derived per hour, 3 for 12
    hosts; docs/api.md, "Restart budgets"): slice 1's worker exits 1 each time it runs.
    Three failures are replaced; the fourth within the hour gives the slice up and JobSet
    restarts the whole job; slice 1 fails again at once after each restart, and the
    fourth JobSet restart within the hour is one too many: the operator ends the head
    Job, JobSet's rule fails the JobSet, and the job is Failed saying it was a crash
    loop. Polled with a deadline: minutes, not the hours a budget sized for a month of
    failures over the run would take."""
    manifest = job_manifest()
    manifest["spec"].pop("maxRestarts")
    manifest["spec"]["elastic"].pop("maxSliceRestarts")
    custom = client.CustomObjectsApi(api)
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, manifest)
    wait_running(api, ns)
    failed: set[str] = set()

    def crash_slice_1() -> bool:
        st = status_of(api, ns)
        if is_true(st, C.FAILED):
            return True
        if ((st.get("budgets") or {}).get("jobSetRestarts") or {}).get("spentAt"):
            return False  # the job is being ended: no fault races the end
        for pod in worker_pods(api, ns, 1):
            if pod.metadata.uid not in failed and pod.metadata.deletion_timestamp is None \
                    and pod.status.phase == "Running":
                failed.add(pod.metadata.uid)
                faults.fail_pod(api, ns, pod.metadata.name)
                break
        return False

    wait_for(crash_slice_1, 600, "the job Failed by its crash loop", 0.5)
    st = status_of(api, ns)
    failure = condition(st, C.FAILED)
    assert failure["reason"] == Reason.MAX_RESTARTS_EXCEEDED, failure
    assert "within any 1 h: a crash loop" in failure["message"], failure["message"]
    budgets = st["budgets"]
    assert budgets["jobSetRestarts"]["allowed"] == 3 and budgets["jobSetRestarts"]["spentAt"]
    assert budgets["sliceRestarts"]["slice"] == 1 and budgets["sliceRestarts"]["spentAt"]
    assert jobset_restarts(api, ns) == 4
    wait_for(lambda: events(api, ns, Reason.SLICE_RESTARTS_EXHAUSTED)
             and events(api, ns, Reason.MAX_RESTARTS_EXCEEDED), 30, "both Events")


def history(api: client.ApiClient, ns: str, kind: str, since: str) -> list[dict[str, Any]]:
    """Every version of the namespace's pods or Jobs (`kind`) written after `since` (a
    resourceVersion), from a watch replay: an object created and gone between two looks
    is in it."""
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    lister = core.list_namespaced_pod if kind == "pods" else batch.list_namespaced_job
    stream = watch.Watch().stream(lister, ns, resource_version=since, timeout_seconds=1)
    return [{"type": e["type"], **e["raw_object"]} for e in stream]


def test_a_blamed_slice_past_its_budget_fails_its_job_once(
        api: client.ApiClient, ns: str) -> None:
    """A slice the trainer blames (SliceHung) keeps its pods Ready: with its budget spent
    the operator ends its worker Job through the Job's own deadline, and the Job controller
    fails it once (DeadlineExceeded, each pod counted once, none recreated); JobSet's
    failurePolicy applies as for a dead slice (maxRestarts 0: the JobSet fails), the
    failure counted once. Deleting one of its pods instead made the Job controller make a
    new one (the deletion uncounted): the operator deleted pod after pod."""
    submit(api, ns, elastic={"maxSliceRestarts": 0})
    wait_running(api, ns)
    blamed = job_uid(api, ns, 1)
    since = client.CoreV1Api(api).list_namespaced_pod(ns).metadata.resource_version
    now = datetime.now(UTC)
    write_report(api, ns, {
        "observedAt": iso(now), "state": "Training", "step": 52, "processId": 7,
        "processStartedAt": iso(now - timedelta(seconds=30)),
        "sliceReplacement": {"id": 1, "slices": [1], "reason": Reason.SLICE_HUNG,
                             "requestedAt": iso(now), "message": "slice 1's part of step "
                             "52 did not finish"}})
    st = wait_status(api, ns, lambda s: is_true(s, C.FAILED), "the job Failed")
    failed_job = condition(st, C.FAILED)
    assert failed_job["reason"] == Reason.MAX_RESTARTS_EXCEEDED
    assert failed_job["message"].startswith(
        "slice 1 failed (SliceHung) with its restart budget spent (maxSliceRestarts 0), so "
        "JobSet article failed after 0 restarts"), failed_job["message"]
    assert get_jobset(api, ns)["status"].get("restarts", 0) == 0  # type: ignore[index]
    one = st["slices"][1]
    assert (one["state"], one["reason"], one["restarts"], one["replacement"]["action"],
            one["replacement"]["reason"]) == (
        "Down", Reason.SLICE_HUNG, 1, "GiveUp", Reason.SLICE_HUNG), one
    assert st["counters"]["sliceFailures"] == 1, st["counters"]
    # The blamed Job: failed by its deadline, each of its pods counted once, none recreated.
    versions = [j for j in history(api, ns, "jobs", since) if j["metadata"]["uid"] == blamed]
    assert versions[-1]["spec"]["activeDeadlineSeconds"] == 0
    failed = next(j for j in reversed(versions) if any(
        c["type"] == "Failed" for c in j.get("status", {}).get("conditions", [])))
    reasons = {c["type"]: c["reason"] for c in failed["status"]["conditions"]}
    assert reasons["Failed"] == "DeadlineExceeded", reasons
    assert failed["status"].get("failed") == 4, failed["status"]
    made = {p["metadata"]["uid"] for p in history(api, ns, "pods", since)
            if p["type"] == "ADDED" and p["metadata"].get("labels", {}).get(
                "batch.kubernetes.io/controller-uid") == blamed}
    assert made == set(), f"{len(made)} pods of the blamed Job made after the blame"
    wait_for(lambda: events(api, ns, Reason.SLICE_RESTARTS_EXHAUSTED), 30,
             "a SliceRestartsExhausted event")
    assert len(events(api, ns, Reason.SLICE_RESTARTS_EXHAUSTED)) == 1


# --- a dead host is a dead slice --------------------------------------------------------------


def test_a_dead_host_moves_its_slice_to_the_spare_pool(
        api: client.ApiClient, ns: str, killed: list[str]) -> None:
    submit(api, ns)
    st = wait_running(api, ns)
    broken = st["slices"][1]["pool"]
    used = {s["pool"] for s in st["slices"]}
    old = job_uid(api, ns, 1)
    node = worker_pods(api, ns, 1)[2].spec.node_name
    killed.append(node)
    faults.kill_node(api, node)
    st = ready_on_new_job(api, ns, 1, old, "slice 1 Ready again on a new Job")
    spare = st["slices"][1]["pool"]
    assert spare not in used, f"slice 1 back on {spare}, a pool already in use ({used})"
    assert {pool_of(api, p.spec.node_name) for p in worker_pods(api, ns, 1)} == {spare}
    last = st["slices"][1]["lastReplacement"]
    assert (last["fromPool"], last["toPool"]) == (broken, spare)
    assert st["slices"][1]["restarts"] == 1 and jobset_restarts(api, ns) == 0
    assert quarantined(api, broken) == {Reason.NODE_NOT_READY}
    pool = next(p for p in st["pools"] if p["name"] == broken)
    assert pool["quarantined"] == Reason.NODE_NOT_READY
    # The pod left on the dead host stayed Terminating until the operator force-deleted it.
    wait_for(lambda: events(api, ns, Reason.STUCK_POD_FORCE_DELETED), 30,
             "a StuckPodForceDeleted event")
    wait_for(lambda: events(api, ns, Reason.POOL_QUARANTINED), 30, "a PoolQuarantined event")
    assert not [p for p in client.CoreV1Api(api).list_namespaced_pod(ns).items
                if p.spec.node_name == node]
    # The host comes back: its pool is released once every node has been Ready a while.
    faults.revive_node(api, node)
    faults.wait_for_node_ready(api, node, True, timeout=60)
    wait_for(lambda: quarantined(api, broken) == {None}, 60, f"pool {broken} released")


def test_a_whole_slice_lost_at_once_is_one_failure_moved_to_the_spare(
        api: client.ApiClient, ns: str, killed: list[str]) -> None:
    """GKE repairs a multi-host TPU slice atomically: when one of its nodes needs repair,
    every VM of the slice's node pool is shut down and recreated (GKE's TPU concepts,
    "Atomicity"). Every host of slice 1 dies at once: one slice failure (not one per
    host), blamed on the nodes, the pool quarantined, the slice moved to the spare; the
    other slices and the JobSet untouched; the pool released once GKE's new VMs are
    Ready."""
    submit(api, ns)
    st = wait_running(api, ns)
    broken = st["slices"][1]["pool"]
    used = {s["pool"] for s in st["slices"]}
    old = {i: job_uid(api, ns, i) for i in range(3)}
    hosts = faults.pool_nodes(api, broken)
    assert len(hosts) == st["slices"][1]["hosts"] == 4
    assert {p.spec.node_name for p in worker_pods(api, ns, 1)} == set(hosts)
    killed.extend(hosts)
    for node in hosts:
        faults.kill_node(api, node)
    st = ready_on_new_job(api, ns, 1, old[1], "slice 1 Ready again on a new Job")
    spare = st["slices"][1]["pool"]
    assert spare not in used, f"slice 1 back on {spare}, a pool already in use ({used})"
    assert {pool_of(api, p.spec.node_name) for p in worker_pods(api, ns, 1)} == {spare}
    last = st["slices"][1]["lastReplacement"]
    assert (last["fromPool"], last["toPool"], last["blame"]) == (broken, spare, "Node")
    # One failure of the slice, however many of its hosts went: the slice is the unit.
    assert st["slices"][1]["restarts"] == 1 and jobset_restarts(api, ns) == 0
    assert st["counters"]["sliceFailures"] == 1
    for i in (0, 2):
        assert st["slices"][i]["restarts"] == 0 and job_uid(api, ns, i) == old[i]
    assert quarantined(api, broken) == {Reason.NODE_NOT_READY}
    wait_for(lambda: events(api, ns, Reason.SLICE_REPLACED), 30, "the SliceReplaced Event")
    assert len(events(api, ns, Reason.SLICE_REPLACED)) == 1
    # Every pod left on the dead hosts was force-deleted.
    wait_for(lambda: not [p for p in client.CoreV1Api(api).list_namespaced_pod(ns).items
                          if p.spec.node_name in hosts], 60, "no pod left on the dead hosts")
    # GKE's repair brings the slice's VMs back: the pool is released, the next spare.
    for node in hosts:
        faults.revive_node(api, node)
    for node in hosts:
        faults.wait_for_node_ready(api, node, True, timeout=60)
    wait_for(lambda: quarantined(api, broken) == {None}, 60, f"pool {broken} released")


def test_a_flapping_node_costs_no_replacement_until_it_stays_down(
        api: client.ApiClient, ns: str) -> None:
    """NotReady shorter than nodeNotReadySeconds: the slice is reported down, nothing is
    deleted. NotReady longer: replaced once (and moved), however often it flaps after."""
    submit(api, ns, recovery={"nodeNotReadySeconds": 8, "workerNodeTolerationSeconds": 60})
    wait_running(api, ns)
    old = job_uid(api, ns, 0)
    node = worker_pods(api, ns, 0)[0].spec.node_name
    for n in range(1, 3):
        faults.make_node_not_ready(api, node)
        wait_status(api, ns, lambda s, n=n: s["slices"][0]["restarts"] == n,
                    f"slice 0 down ({n})", timeout=30)
        faults.make_node_ready(api, node)
        wait_status(api, ns, lambda s: s["slices"][0]["state"] == "Ready", "slice 0 Ready",
                    timeout=30)
    assert job_uid(api, ns, 0) == old and not events(api, ns, Reason.SLICE_REPLACED)
    faults.make_node_not_ready(api, node)
    try:
        ready_on_new_job(api, ns, 0, old, "slice 0 replaced once it stayed down")
        for _ in range(2):  # it goes on flapping: nothing of ours is on it any more
            faults.make_node_ready(api, node)
            faults.wait_for_node_ready(api, node, True)
            faults.make_node_not_ready(api, node)
            faults.wait_for_node_ready(api, node, False)
    finally:
        faults.make_node_ready(api, node)
    st = wait_status(api, ns, lambda s: s["slices"][0]["state"] == "Ready", "slice 0 Ready")
    assert st["slices"][0]["restarts"] == 3
    # Posted after the status write that closes the replacement: wait for it.
    wait_for(lambda: events(api, ns, Reason.SLICE_REPLACED), 30, "the SliceReplaced Event")
    assert len(events(api, ns, Reason.SLICE_REPLACED)) == 1
    assert len(events(api, ns, Reason.POOL_QUARANTINED)) <= 1


# --- who is to blame ---------------------------------------------------------------------------


def test_a_jobs_crash_loop_takes_no_pool_from_another_job(
        api: client.ApiClient, ns: str, another_namespace: str, killed: list[str]) -> None:
    """Issue 24, as a user met it: job A's worker exits 1 four times on healthy nodes (a
    bad image), its slice moving between pools. Its own failure each time: its budget is
    spent, no pool is quarantined. A is deleted; job B (the article's shape) then loses a
    node, and its slice moves to the spare pool at once, the one A crashed on included."""
    crashing = another_namespace
    submit(api, crashing)
    wait_running(api, crashing)
    visited = []
    for n in range(1, 5):
        old = job_uid(api, crashing, 2)
        pod = worker_pods(api, crashing, 2)[0]
        visited.append(pool_of(api, pod.spec.node_name))
        faults.fail_pod(api, crashing, pod.metadata.name, exit_code=1, reason="Error")
        st = ready_on_new_job(api, crashing, 2, old, f"A's slice 2 back after crash {n}")
        assert quarantines(api) == {}, f"crash {n} on {visited[-1]} quarantined a pool"
    assert st["slices"][2]["restarts"] == 4
    blames = {(p["name"], f["blame"], f["reason"]) for p in st["pools"]
              for f in p.get("failures", [])}
    assert blames == {(pool, "Job", Reason.POD_FAILED) for pool in visited}, blames
    assert all("the job's own failure" in e for e in events(api, crashing, Reason.SLICE_REPLACING))
    assert not events(api, crashing, Reason.POOL_QUARANTINED)
    delete_jobs_and_wait_for_pods(api, crashing)
    assert quarantines(api) == {}, "A left a quarantine behind"

    submit(api, ns)
    st = wait_running(api, ns)
    used = {s["pool"] for s in st["slices"]}
    pools = {n.metadata.labels[NODE_POOL_LABEL]
             for n in client.CoreV1Api(api).list_node(label_selector=NODE_POOL_LABEL).items
             if n.metadata.labels[NODE_POOL_LABEL].startswith("tpu-")}
    (spare,) = pools - used
    old = job_uid(api, ns, 1)
    node = worker_pods(api, ns, 1)[2].spec.node_name
    killed.append(node)
    faults.kill_node(api, node)
    st = ready_on_new_job(api, ns, 1, old, "B's slice 1 on the spare", timeout=60)
    assert st["slices"][1]["pool"] == spare, (st["slices"][1], visited)
    assert st["slices"][1]["lastReplacement"]["blame"] == "Node"


def test_a_quarantine_on_a_jobs_own_report_goes_with_the_job(
        api: client.ApiClient, ns: str) -> None:
    """A worker exit code the spec names as the hardware's quarantines the pool (the
    administrator trusts jobs' reports: --quarantine-on-job-report), and the
    nodes say who and why; deleting the job releases it (its evidence went with it)
    long before the RepeatedFailures hold of an hour."""
    submit(api, ns, recovery={"hardwareExitCodes": [42]})
    st = wait_running(api, ns)
    pool = st["slices"][1]["pool"]
    old = job_uid(api, ns, 1)
    faults.fail_pod(api, ns, worker_pods(api, ns, 1)[0].metadata.name, exit_code=42)
    st = ready_on_new_job(api, ns, 1, old, "slice 1 moved off the pool it reported")
    assert st["slices"][1]["pool"] != pool
    assert quarantined(api, pool) == {Reason.HARDWARE_FAILURE}
    first = faults.pool_nodes(api, pool)[0]
    cause = json.loads(client.CoreV1Api(api).read_node(first).metadata.annotations[
        QUARANTINE_CAUSE_ANNOTATION])
    assert cause["jobs"][0]["name"] == f"{ns}/{JOB}"
    assert "exited with code 42 (spec.recovery.hardwareExitCodes)" in cause["evidence"]
    wait_status(api, ns, lambda s: any(p["name"] == pool and p.get("quarantineCause")
                                       for p in s["pools"]), "status.pools says who")
    wait_for(lambda: events(api, ns, Reason.POOL_QUARANTINED), 30, "a PoolQuarantined event")
    node_events = client.CoreV1Api(api).list_namespaced_event(
        "default", field_selector=f"involvedObject.name={first},"
        f"reason={Reason.POOL_QUARANTINED}").items
    assert any(f"by {ns}/{JOB}" in e.message for e in node_events)
    delete_jobs_and_wait_for_pods(api, ns)
    wait_for(lambda: quarantined(api, pool) == {None}, 30, f"pool {pool} released")


# --- a restarted operator ---------------------------------------------------------------------


def test_an_operator_killed_after_writing_its_intent_replaces_once(
        api: client.ApiClient, ns: str, operator: OperatorProcess) -> None:
    """The status says slice 0 is down and its Job about to be replaced (what an
    operator killed between its status write and the delete leaves): the next one
    deletes that Job, once, and counts the failure once."""
    submit(api, ns)
    wait_running(api, ns)
    operator.kill()
    old = job_uid(api, ns, 0)
    st = status_of(api, ns)
    now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    st["slices"][0].update(state="Down", reason=Reason.POD_FAILED, restarts=1,
                           lastTransitionTime=now, message="host 0 failed")
    st["slices"][0]["replacement"] = {"action": "Replace", "reason": Reason.POD_FAILED,
                                      "jobUid": old, "requestedAt": now}
    st["counters"]["sliceFailures"] = 1
    client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
        GROUP, VERSION, ns, PLURAL, JOB, {"status": {"slices": st["slices"],
                                                     "counters": st["counters"]}},
        _content_type="application/merge-patch+json")
    faults.fail_pod(api, ns, worker_pods(api, ns, 0)[0].metadata.name)
    operator.start()
    st = ready_on_new_job(api, ns, 0, old, "slice 0 replaced by the restarted operator")
    assert st["slices"][0]["restarts"] == 1 and st["counters"]["sliceFailures"] == 1
    assert st["slices"][0]["lastReplacement"]["action"] == "Replace"
    assert jobset_restarts(api, ns) == 0


# --- maintenance ahead of time ----------------------------------------------------------------


def test_a_maintenance_notice_moves_the_slice_after_the_trainer_checkpoints(
        api: client.ApiClient, ns: str) -> None:
    """The trainer's part is played by the test (docs/status-contract.md): it sees the
    request and acknowledges a committed step; the operator moves the slice to the spare
    before the maintenance starts, as a move, not a failure."""
    submit(api, ns)
    st = wait_running(api, ns)
    pool = st["slices"][1]["pool"]
    old = job_uid(api, ns, 1)
    faults.schedule_maintenance(api, pool, in_seconds=600)  # within leadSeconds (900)
    try:
        st = wait_status(api, ns, lambda s: (s.get("checkpointRequest") or {}).get("phase")
                         == "Requested", "a checkpoint request", timeout=30)
        request = st["checkpointRequest"]
        assert request["slices"] == [1] and request["pause"] is True
        assert request["reason"] == "Maintenance"
        assert condition(st, C.MAINTENANCE_PENDING)["reason"] == Reason.SCHEDULED_MAINTENANCE
        now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        write_report(api, ns, {
            "observedAt": now, "state": "Training", "step": 200, "activeSlices": 3,
            "checkpointAck": {"id": request["id"], "step": 200, "committedAt": now,
                              "paused": True}})
        st = ready_on_new_job(api, ns, 1, old, "slice 1 moved to the spare")
        assert st["slices"][1]["pool"] != pool
        assert st["slices"][1]["moves"] == 1 and st["slices"][1]["restarts"] == 0
        assert st["counters"]["sliceFailures"] == 0
        assert st["slices"][1]["lastReplacement"]["action"] == "Move"
        st = wait_status(api, ns, lambda s: s["checkpointRequest"]["phase"] == "Released",
                         "the request released", timeout=30)
        assert quarantined(api, pool) == {Reason.MAINTENANCE}
        assert not is_true(st, C.MAINTENANCE_PENDING)
    finally:
        faults.end_maintenance(api, pool)


def test_the_real_trainer_answers_a_maintenance_request_and_loses_no_step(
        api: client.ApiClient, ns: str, cluster: Cluster, tmp_path: Path) -> None:
    """As the test above, with `etj train` answering: the request -> its committed save
    and acknowledgement -> the slice moved while the trainer holds -> the move is an
    elastic event that restores exactly the acknowledged step -> Released, training on."""
    submit(api, ns)
    wait_running(api, ns)
    pool = status_of(api, ns)["slices"][1]["pool"]
    trainer = start_trainer(ns, Path(cluster.kubeconfig), tmp_path)
    log = tmp_path / "train.log"

    def training(s: dict[str, Any]) -> bool:
        assert trainer.poll() is None, log.read_text()[-3000:]
        return (s.get("training") or {}).get("step", 0) >= 5

    try:
        wait_status(api, ns, training, "the trainer at step 5", timeout=TIMEOUT)
        faults.schedule_maintenance(api, pool, in_seconds=600)
        st = wait_status(api, ns, lambda s: ((s.get("training") or {}).get("checkpointAck")
                                             or {}).get("id") is not None,
                         "the trainer's acknowledgement", timeout=60)
        ack = st["training"]["checkpointAck"]
        assert ack["id"] == st["checkpointRequest"]["id"] and st["checkpointRequest"]["pause"]
        st = wait_status(api, ns, lambda s: s["checkpointRequest"]["phase"] == "Released"
                         and (s["training"].get("elasticEvent") or {}).get("phase")
                         == "Resumed", "the move, the restore and the release",
                         timeout=TIMEOUT)
        event = st["training"]["elasticEvent"]
        assert event["slicesDown"] == [1]
        assert event["failedStep"] == event["restoredFromStep"] == ack["step"]
        # The acknowledged step is on storage; with snapshots on by default (#25) the
        # trainer may hold the same step in memory too, and restores the nearer copy.
        assert event["restoreSource"] in ("checkpoint", "snapshot")
        assert st["slices"][1]["pool"] != pool and st["slices"][1]["moves"] == 1
        assert st["slices"][1]["restarts"] == 0
        # Training goes on after the release, the operator's record of the recovery says
        # no step was lost, and the trainer's time is accounted for.
        st = wait_status(api, ns, lambda s: s["training"]["step"] > event["resumedStep"]
                         and s["training"]["state"] == "Training"
                         and (s.get("lastRecovery") or {}).get("stepsLost") == 0,
                         "training on, 0 steps lost")
        goodput = st["goodput"]
        assert goodput["productiveSeconds"] > 0 and goodput["ratio"] > 0
        assert goodput["badputSeconds"]["waitingForSlices"] > 0
        assert goodput["badputSeconds"]["recomputedSteps"] < goodput["productiveSeconds"]
    finally:
        trainer.terminate()
        trainer.wait(timeout=30)
        faults.end_maintenance(api, pool)
