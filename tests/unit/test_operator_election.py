"""election.LeaseElector against an in-memory Lease API with resourceVersions (a write
from a stale version is refused with 409, as the API server does), each replica with its
own monotonic and wall clocks, stepped by hand; and the ReconcileGate.

The clock-skew tests give replicas wall clocks hours apart: the times written in the
Lease must never decide anything, only how long each replica itself has seen the record
unchanged.
"""
from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from elastic_operator.client.kube import ApiError, Kube
from elastic_operator.model.result import FAILED, Result
from elastic_operator.queue.election import ElectionConfig, LeaseElector, ReconcileGate

NS, NAME = "ops", "elastic-training-operator"
T0 = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)


def conflict() -> ApiError:
    body = {"kind": "Status", "code": 409, "reason": "Conflict", "message": "modified"}
    return ApiError(409, "Conflict", json.dumps(body))


class LeaseApi(Kube):
    """One Lease in memory, with the API server's optimistic concurrency."""

    def __init__(self) -> None:
        super().__init__(None)
        self.lease: dict[str, Any] | None = None
        self.version = 0
        self.down = False  # every request fails (the API server is unreachable)
        self.requests = 0
        self.before_patch: Callable[[], object] | None = None  # runs once, then cleared

    def _serve(self) -> None:
        self.requests += 1
        if self.down:
            raise ConnectionError("connection refused")

    def _stored(self) -> dict[str, Any]:
        assert self.lease is not None
        return copy.deepcopy(self.lease)

    def get_lease(self, namespace: str, name: str, *, timeout_s: float = 15
                  ) -> dict[str, Any] | None:
        self._serve()
        return None if self.lease is None else self._stored()

    def create_lease(self, namespace: str, lease: dict[str, Any], *,
                     timeout_s: float = 15) -> dict[str, Any]:
        self._serve()
        if self.lease is not None:
            raise ApiError(409, "Conflict", json.dumps(
                {"kind": "Status", "code": 409, "reason": "AlreadyExists"}))
        self.version += 1
        self.lease = copy.deepcopy(lease)
        self.lease["metadata"]["resourceVersion"] = str(self.version)
        return self._stored()

    def patch_lease(self, namespace: str, name: str, spec: dict[str, Any],
                    resource_version: str, *, timeout_s: float = 15) -> dict[str, Any]:
        self._serve()
        hook, self.before_patch = self.before_patch, None
        if hook is not None:
            hook()
        assert self.lease is not None
        if resource_version != self.lease["metadata"]["resourceVersion"]:
            raise conflict()
        self.version += 1
        self.lease["spec"] = copy.deepcopy(spec)
        self.lease["metadata"]["resourceVersion"] = str(self.version)
        return self._stored()

    @property
    def holder(self) -> str | None:
        return None if self.lease is None else self.lease["spec"]["holderIdentity"]


class SkewedClock:
    """A replica's clocks: its monotonic time is the test's `now` (or real time), its wall
    clock that plus its skew."""

    def __init__(self, replica: Replica, real_time: bool) -> None:
        self.replica, self.real_time = replica, real_time

    def monotonic(self) -> float:
        return time.monotonic() if self.real_time else self.replica.now

    def now(self) -> datetime:
        return T0 + timedelta(seconds=self.replica.now) + self.replica.skew


class Replica:
    """An elector with its own clocks: monotonic seconds, and a wall clock `skew` off."""

    def __init__(self, api: LeaseApi, identity: str, skew: timedelta = timedelta(0),
                 config: ElectionConfig | None = None, real_time: bool = False) -> None:
        self.now = 1000.0 + len(identity)  # monotonic clocks start anywhere
        self.skew = skew
        self.started = 0
        self.stopped = 0
        self.elector = LeaseElector(
            api, config or ElectionConfig(NS, NAME, identity),
            clock=SkewedClock(self, real_time),
            on_started=self._started, on_stopped=self._stopped)

    def _started(self) -> None:
        self.started += 1

    def _stopped(self) -> None:
        self.stopped += 1

    def step(self) -> bool:
        self.elector.step()
        return self.elector.is_leader()


def run(seconds: float, *replicas: Replica, period: float = 1.0) -> None:
    """Every replica looks once per `period` for `seconds` (all clocks advance alike)."""
    elapsed = 0.0
    while elapsed < seconds:
        for replica in replicas:
            replica.now += period
            replica.step()
        elapsed += period


def test_the_first_replica_creates_the_lease_and_leads_the_other_stands_by() -> None:
    api = LeaseApi()
    a, b = Replica(api, "a"), Replica(api, "b")
    assert a.step() and not b.step()
    run(30, a, b)
    assert a.elector.is_leader() and not b.elector.is_leader()
    assert api.holder == "a" and (a.started, b.started) == (1, 0)
    assert api.lease is not None and api.lease["spec"]["leaseTransitions"] == 0


def test_a_dead_leader_is_replaced_after_the_lease_duration_of_the_standby_clock() -> None:
    api = LeaseApi()
    a, b = Replica(api, "a"), Replica(api, "b")
    a.step()
    run(5, a, b)
    # a dies: b keeps looking. It waits the lease duration from when it last saw a renew.
    waited = 0.0
    while not b.step():
        b.now += 1.0
        waited += 1.0
        assert waited < 20, "the standby never took over"
    assert 9 <= waited <= 11  # lease 10 s, one look per second
    assert api.holder == "b" and api.lease is not None
    assert api.lease["spec"]["leaseTransitions"] == 1


def test_a_lease_left_by_a_dead_holder_is_taken_after_a_full_lease_duration() -> None:
    """A replica that starts and finds someone's Lease cannot know how old its renewTime
    is (whose clock?): it waits a full lease duration of its own clock."""
    api = LeaseApi()
    dead = Replica(api, "dead", skew=timedelta(hours=5))  # renewTime 5 h in the future
    dead.step()
    fresh = Replica(api, "fresh")
    assert not fresh.step()
    run(9, fresh)
    assert not fresh.elector.is_leader()
    run(2, fresh)
    assert fresh.elector.is_leader() and api.holder == "fresh"


@pytest.mark.parametrize("skew", [timedelta(hours=1), -timedelta(hours=1),
                                  timedelta(days=400)])
def test_a_standby_with_a_skewed_clock_never_steals_a_renewed_lease(skew: timedelta) -> None:
    api = LeaseApi()
    leader, skewed = Replica(api, "leader"), Replica(api, "skewed", skew=skew)
    leader.step()
    run(120, leader, skewed)
    assert leader.elector.is_leader() and not skewed.elector.is_leader()
    assert skewed.started == 0 and leader.stopped == 0


@pytest.mark.parametrize("skew", [timedelta(hours=1), -timedelta(hours=1)])
def test_a_leader_with_a_skewed_clock_is_followed_and_replaced_in_time(skew: timedelta) -> None:
    api = LeaseApi()
    skewed, standby = Replica(api, "skewed", skew=skew), Replica(api, "standby")
    skewed.step()
    run(60, skewed, standby)
    assert skewed.elector.is_leader() and not standby.elector.is_leader()
    waited = 0.0
    while not standby.step():  # the skewed leader dies
        standby.now += 1.0
        waited += 1.0
        assert waited < 20
    assert waited <= 11


def test_a_released_lease_is_taken_at_the_next_look() -> None:
    api = LeaseApi()
    a, b = Replica(api, "a"), Replica(api, "b")
    a.step()
    run(5, a, b)
    a.elector.release()
    assert api.holder == ""
    b.now += 1.0
    assert b.step()  # no waiting out the lease
    assert api.holder == "b"


def test_a_leader_that_cannot_renew_stops_leading_before_anyone_may_take_over() -> None:
    api = LeaseApi()
    a, b = Replica(api, "a"), Replica(api, "b")
    a.step()
    run(3, a, b)
    api.down = True
    for _ in range(6):  # 6 s without a renewal: still within the 7 s deadline
        a.now += 1.0
        b.now += 1.0
        a.step()
    assert a.elector.is_leader()
    a.now += 1.5  # past the deadline, even before its next look
    assert not a.elector.is_leader()
    a.step()
    assert a.stopped == 1
    # It stepped down at 7 s; b may take over only after 10 s.
    api.down = False
    b.now += 1.5
    assert not b.step()


def test_a_renewal_answered_past_the_deadline_starts_the_leadership_over() -> None:
    """A renewal sent within the renew deadline but answered after it (an API server just
    restarted, a starved process): meanwhile is_leader() was False (events dropped,
    writes refused), so leading again is a start, with its resync, not a quiet renewal."""
    api = LeaseApi()
    a = Replica(api, "a")
    a.step()
    run(3, a)
    assert a.started == 1  # renewals on time start nothing
    a.now += 6.0  # the next look comes late, within the deadline; its answer takes 2 s
    seen_meanwhile: list[bool] = []

    def slow_answer() -> None:
        a.now += 2.0
        seen_meanwhile.append(a.elector.is_leader())

    api.before_patch = slow_answer
    assert a.step()
    assert seen_meanwhile == [False] and a.stopped == 0
    assert a.started == 2
    run(3, a)
    assert a.started == 2


def test_a_renewal_answered_after_a_freeze_longer_than_the_deadline_starts_nothing() -> None:
    """Frozen (SIGSTOP) between sending a renewal and reading its answer: the answer is
    older than the renew deadline, so it does not lead on it (the next look decides)."""
    api = LeaseApi()
    a = Replica(api, "a")
    a.step()
    run(3, a)

    def frozen() -> None:
        a.now += 15.0

    api.before_patch = frozen
    assert not a.step()
    assert a.started == 1


def test_a_renewal_refused_because_another_replica_took_the_lease_steps_down_at_once() -> None:
    api = LeaseApi()
    a = Replica(api, "a")
    a.step()
    # Someone else writes the Lease (an operator with a broken clock, a human).
    assert api.lease is not None
    api.patch_lease(NS, NAME, {**api.lease["spec"], "holderIdentity": "intruder"},
                    api.lease["metadata"]["resourceVersion"])
    a.now += 1.0
    assert not a.step()
    assert a.stopped == 1


def test_two_replicas_racing_for_an_expired_lease_cannot_both_win() -> None:
    api = LeaseApi()
    Replica(api, "dead").step()
    b, c = Replica(api, "b"), Replica(api, "c")
    b.step()
    c.step()
    b.now += 11
    c.now += 11
    # c reads and writes while b is between its read and its write: b's write is from a
    # stale version.
    results: list[bool] = []
    api.before_patch = lambda: results.append(c.step())
    results.append(b.step())
    assert results == [True, False]
    assert api.holder == "c" and not b.elector.is_leader() and b.started == 0


def test_the_leader_renews_with_one_request_per_period() -> None:
    api = LeaseApi()
    a = Replica(api, "a")
    a.step()
    before = api.requests
    run(10, a)
    assert api.requests - before == 10


def test_config_refuses_a_deadline_not_below_the_lease() -> None:
    with pytest.raises(ValueError, match="renew deadline < lease duration"):
        ElectionConfig(NS, NAME, "a", lease_duration_s=5, renew_deadline_s=5)


def test_stop_releases_the_lease_and_reports_the_step_down() -> None:
    api = LeaseApi()
    replica = Replica(api, "a", config=ElectionConfig(
        NS, NAME, "a", lease_duration_s=3, renew_deadline_s=2.0, retry_period_s=0.01),
        real_time=True)
    replica.elector.start()
    try:
        deadline = datetime.now(UTC) + timedelta(seconds=10)
        while api.holder != "a":
            assert datetime.now(UTC) < deadline
            threading.Event().wait(0.01)
    finally:
        replica.elector.stop()
    assert api.holder == "" and replica.stopped == 1 and not replica.elector.alive


# --- the gate --------------------------------------------------------------------------


def test_the_gate_runs_reconciles_only_while_allowed_and_drains_them() -> None:
    allowed = [False]
    calls: list[str] = []
    release = threading.Event()

    def reconcile(namespace: str, name: str) -> Result:
        calls.append(name)
        release.wait(5)
        return FAILED

    gate = ReconcileGate(lambda: allowed[0])
    gated = gate.wrap(reconcile)
    assert gated("ns", "standby") == Result() and calls == []  # nothing to do, nothing to retry
    allowed[0] = True
    worker = threading.Thread(target=gated, args=("ns", "leader"))
    worker.start()
    while not calls:
        threading.Event().wait(0.01)
    gate.close()
    assert gated("ns", "after-close") == Result() and calls == ["leader"]
    assert gate.drain(0.05) is False  # still running
    release.set()
    assert gate.drain(5) is True
    worker.join()
