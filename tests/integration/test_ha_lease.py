"""The leader Lease's hard cases on the local control plane: a Lease left by a holder that
is gone (taken over once it expires, and nothing reconciled before), and replicas whose
clocks are an hour apart (the times written in the Lease must not matter: a standby
ahead of the leader never steals a renewed Lease, and a leader ahead of the standby is
still replaced in time when it dies).
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

from elastic_devtools.localcluster import Cluster
from elastic_devtools.localcluster.faults import wait_for
from elastic_devtools.localcluster.operator_process import TEST_ARGS, OperatorProcess, replicas
from tests.support.article_job import status_of, submit
from tests.support.leases import LEASE_DURATION_S, LEASE_NAMESPACE, holder

pytestmark = pytest.mark.cluster

HOUR_S = 3600.0


def micro_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_spec(api: client.ApiClient, name: str) -> Any:
    return client.CoordinationV1Api(api).read_namespaced_lease(name, LEASE_NAMESPACE).spec


@pytest.fixture
def procs() -> Iterator[list[OperatorProcess]]:
    """The operators a test starts; all stopped afterwards."""
    started: list[OperatorProcess] = []
    yield started
    for proc in started:
        proc.stop()


def test_a_lease_held_by_a_dead_holder_is_taken_once_it_expires(
        cluster: Cluster, api: client.ApiClient, ns: str, procs: list[OperatorProcess]) -> None:
    """The Lease names a holder that is gone, with a renewTime an hour in the future (its
    clock was off). The operator waits out the lease duration on its own clock, reconciles
    nothing meanwhile, then takes over and reconciles."""
    name = f"ha-dead-{uuid.uuid4().hex[:8]}"
    future = micro_time(datetime.now(UTC) + timedelta(hours=1))
    client.CoordinationV1Api(api).create_namespaced_lease(LEASE_NAMESPACE, {
        "metadata": {"name": name},
        "spec": {"holderIdentity": "ghost", "leaseDurationSeconds": LEASE_DURATION_S,
                 "acquireTime": future, "renewTime": future, "leaseTransitions": 4}})
    submit(api, ns, suspend=True)  # no pods needed: any reconcile would write a status
    (op,) = replicas(1, cluster.kubeconfig, Path(cluster.logs_dir) / "dead-holder",
                     args=(*TEST_ARGS, "--leader-election-name", name))
    procs.append(op)
    op.start()
    started = time.monotonic()
    wait_for(lambda: op.health()["leadership"]["holder"] == "ghost", 30,
             "the operator seeing the ghost's Lease")
    assert op.health()["leadership"]["role"] == "standby"
    wait_for(lambda: holder(api, name) == op.identity, 30, "the Lease taken over",
             interval=0.1)
    waited = time.monotonic() - started
    # A full lease duration of its own clock, from when it first saw the record.
    assert waited >= LEASE_DURATION_S - 1, f"took a live-looking Lease after {waited:.1f} s"
    assert lease_spec(api, name).lease_transitions == 5
    wait_for(lambda: status_of(api, ns).get("phase") == "Suspended", 30,
             "the job reconciled by the new leader")


def test_replicas_an_hour_apart_follow_the_lease_not_their_clocks(
        cluster: Cluster, api: client.ApiClient, procs: list[OperatorProcess]) -> None:
    name = f"ha-skew-{uuid.uuid4().hex[:8]}"
    # Replica 1's clock is an hour ahead: to it, the leader's renewTime is an hour old.
    normal, ahead, late = replicas(3, cluster.kubeconfig, Path(cluster.logs_dir) / "skew",
                                   args=(*TEST_ARGS, "--leader-election-name", name),
                                   skews=(0.0, HOUR_S, 0.0))
    procs += [normal, ahead, late]
    normal.start()
    wait_for(normal.leading, 30, "the replica with a good clock leads")
    ahead.start()
    wait_for(lambda: ahead.health()["leadership"]["holder"] == normal.identity, 30,
             "the skewed replica seeing the Lease")
    # Two lease durations: a replica trusting its clock would have taken it at once.
    deadline = time.monotonic() + 2 * LEASE_DURATION_S
    while time.monotonic() < deadline:
        assert holder(api, name) == normal.identity and not ahead.leading()
        time.sleep(0.5)

    normal.kill()
    killed = time.monotonic()
    wait_for(lambda: holder(api, name) == ahead.identity, 30, "the skewed replica leads",
             interval=0.1)
    takeover_s = time.monotonic() - killed
    assert takeover_s < LEASE_DURATION_S + 5
    # Its clock really is an hour ahead: so is the renewTime it writes.
    renewed = lease_spec(api, name).renew_time
    assert renewed - datetime.now(UTC) > timedelta(minutes=59)

    # Now the leader's renewTime is an hour in the future for a standby with a good
    # clock; when the leader dies, it still takes over after one lease duration.
    late.start()
    wait_for(lambda: late.health()["leadership"]["holder"] == ahead.identity, 30,
             "the third replica seeing the Lease")
    ahead.kill()
    killed = time.monotonic()
    wait_for(lambda: holder(api, name) == late.identity, 30,
             "the replica with a good clock leads again", interval=0.1)
    assert time.monotonic() - killed < LEASE_DURATION_S + 5
