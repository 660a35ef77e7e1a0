"""Two operator replicas on the local control plane: one leads (holds the Lease and
reconciles), one stands by with warm caches. A slice failure that meets a change of
leader is still reported exactly once: one SliceDown Event, the counters up by one, and
the recovery carried on by the new leader from the status.

Each test uses its own Lease, so replicas of other tests never compete.
"""
from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from elastic_api.conditions import ConditionType as C
from elastic_api.conditions import Reason
from elastic_devtools.localcluster import Cluster, faults
from elastic_devtools.localcluster.faults import wait_for
from elastic_devtools.localcluster.operator_process import TEST_ARGS, OperatorProcess, replicas
from tests.support.article_job import (
    condition,
    events,
    is_true,
    parse,
    recovered,
    resumed_report,
    status_of,
    submit,
    worker_pods,
    write_report,
)
from tests.support.leases import LEASE_DURATION_S, holder
from tests.support.waiting import wait_running, wait_status

pytestmark = pytest.mark.cluster


@pytest.fixture
def lease() -> str:
    return f"ha-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def pair(cluster: Cluster, api: client.ApiClient, lease: str,
         request: pytest.FixtureRequest) -> Iterator[list[OperatorProcess]]:
    """Replica 0 leads, replica 1 stands by (both running, both healthy)."""
    logs = Path(cluster.logs_dir) / request.node.name
    procs = replicas(2, cluster.kubeconfig, logs,
                     args=(*TEST_ARGS, "--leader-election-name", lease))
    try:
        procs[0].start()
        wait_for(procs[0].leading, 30, "replica 0 leads")
        procs[1].start()
        yield procs
    finally:
        for proc in procs:
            proc.stop()


def wait_holder(api: client.ApiClient, lease: str, identity: str, since: float) -> float:
    """Seconds from `since` (time.monotonic) until `identity` holds the Lease."""
    wait_for(lambda: holder(api, lease) == identity, 60, f"{identity} holding the Lease",
             interval=0.05)
    return time.monotonic() - since


def slice_failures_counted(proc: OperatorProcess, ns: str) -> float:
    return proc.metrics().get(f'etj_slice_failures_total{{job="article",namespace="{ns}"}}', 0)


def recover(api: client.ApiClient, ns: str, slice_index: int) -> dict[str, Any]:
    """The Job controller brings the slice back; the trainer reports it resumed."""
    st = wait_status(api, ns, lambda s: s["slices"][slice_index]["state"] == "Ready",
                     f"slice {slice_index} Ready again")
    detected = parse(st["lastRecovery"]["detectedAt"])
    write_report(api, ns, resumed_report(detected + timedelta(seconds=1), datetime.now(UTC)))
    return wait_status(api, ns, recovered, "Recovering False/Recovered", timeout=30)


def replaced_once(api: client.ApiClient, ns: str, index: int) -> None:
    """The slice came back on a recreated worker Job, decided and done once whichever
    replica made the decision and whichever saw it done (the intent is in the status
    before the Job is deleted; the deletion carries the old Job's uid)."""
    wait_for(lambda: events(api, ns, Reason.SLICE_REPLACED), 30, "the SliceReplaced Event")
    assert len(events(api, ns, Reason.SLICE_REPLACING)) == 1
    assert len(events(api, ns, Reason.SLICE_REPLACED)) == 1
    done = status_of(api, ns)["slices"][index]
    assert done.get("replacement") is None and done["lastReplacement"]["action"] == "Replace"


def test_both_replicas_are_healthy_and_say_who_leads(pair: list[OperatorProcess]) -> None:
    leader, standby = pair
    assert leader.health()["leadership"]["role"] == "leader"
    health = standby.health()
    assert health["leadership"] == {"role": "standby", "identity": standby.identity,
                                    "holder": leader.identity}
    assert health["caches"]["synced"] is True  # warm: ready to take over
    assert leader.leading() and not standby.leading()
    assert standby.metrics()[f'etj_leader{{identity="{standby.identity}"}}'] == 0


def test_leader_killed_mid_recovery_the_standby_finishes_it_counting_once(
        api: client.ApiClient, ns: str, pair: list[OperatorProcess], lease: str) -> None:
    leader, standby = pair
    submit(api, ns)
    wait_running(api, ns)
    faults.fail_pod(api, ns, worker_pods(api, ns, 2)[0].metadata.name)
    before = wait_status(api, ns, lambda s: s["slices"][2]["restarts"] == 1
                         and is_true(s, C.RECOVERING), "slice 2 down, recovering", timeout=30)
    # The leader records the metric after the status write: wait for it, then check once.
    wait_for(lambda: slice_failures_counted(leader, ns) >= 1, 30, "the leader's count")
    assert slice_failures_counted(leader, ns) == 1
    wait_for(lambda: events(api, ns, Reason.SLICE_DOWN), 30, "the SliceDown Event")

    leader.kill()  # SIGKILL, mid-recovery: no release, the Lease must expire
    takeover_s = wait_holder(api, lease, standby.identity, time.monotonic())
    assert takeover_s < LEASE_DURATION_S + 5, f"took over after {takeover_s:.1f} s"
    wait_for(standby.leading, 10, "the standby says it leads")

    st = recover(api, ns, 2)
    assert st["lastRecovery"]["detectedAt"] == before["lastRecovery"]["detectedAt"]
    assert st["counters"]["sliceFailures"] == 1
    assert [s["restarts"] for s in st["slices"]] == [0, 0, 1]
    wait_for(lambda: events(api, ns, Reason.RECOVERED), 30, "the Recovered Event")
    assert len(events(api, ns, Reason.SLICE_DOWN)) == 1
    assert len(events(api, ns, Reason.RECOVERED)) == 1
    replaced_once(api, ns, 2)
    # The new leader counted nothing the old one had: the status was its record.
    assert slice_failures_counted(standby, ns) == 0
    m = standby.metrics()
    assert m[f'etj_recovery_duration_seconds_count{{namespace="{ns}"}}'] == 1
    print(f"\ntakeover after SIGKILL: {takeover_s:.1f} s")


def test_graceful_handover_during_a_slice_failure_reports_it_once(
        api: client.ApiClient, ns: str, pair: list[OperatorProcess], lease: str) -> None:
    """SIGTERM the leader the moment a pod fails: whether it wrote SliceDown before it
    stopped or not, the failure is counted once, and the new leader finishes the
    recovery. The old leader releases the Lease: the standby takes over at its next look,
    long before the lease would expire."""
    leader, standby = pair
    submit(api, ns)
    wait_running(api, ns)
    faults.fail_pod(api, ns, worker_pods(api, ns, 0)[0].metadata.name)
    stopping = time.monotonic()
    leader.stop()  # SIGTERM: finish running reconciles, release the Lease, exit
    takeover_s = wait_holder(api, lease, standby.identity, stopping)
    assert takeover_s < LEASE_DURATION_S, f"took over after {takeover_s:.1f} s: not released"

    st = wait_status(api, ns, lambda s: s["slices"][0]["restarts"] >= 1,
                     "slice 0 counted down", timeout=60)
    assert st["counters"]["sliceFailures"] == 1
    st = recover(api, ns, 0)
    assert st["counters"]["sliceFailures"] == 1
    assert [s["restarts"] for s in st["slices"]] == [1, 0, 0]
    wait_for(lambda: events(api, ns, Reason.RECOVERED), 30, "the Recovered Event")
    assert len(events(api, ns, Reason.SLICE_DOWN)) == 1
    assert len(events(api, ns, Reason.RECOVERED)) == 1
    replaced_once(api, ns, 0)
    assert slice_failures_counted(standby, ns) <= 1
    assert condition(st, C.SLICE_DOWN)["status"] == "False"
    print(f"\ntakeover after SIGTERM: {takeover_s:.2f} s")
