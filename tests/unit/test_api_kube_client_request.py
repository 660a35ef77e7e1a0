"""KubeClient.request (elastic_api.kube), the one way the operator and the trainer talk to
the API server.

A request the API server refused with 429 (API Priority and Fairness) or a 5xx and a
Retry-After is sent again after that wait, any verb (the server did not act on it), while
the wait fits in the request's timeout: the rule client-go follows. The local cluster's
chaos test throttles the operator's ServiceAccount for real (tests/integration/test_chaos.py).

A write is sent only while `may_write()` (asked before each try; the operator's: this
replica leads): a reconcile that outlives its replica's leadership (frozen past the renew
deadline) sends nothing more; the operator's Lease writes are not fenced (the election is
how it leads)."""
from __future__ import annotations

from typing import Any

import pytest

from elastic_api.kube import ApiError, KubeClient, NotLeading
from elastic_api.kube import client as client_module
from elastic_api.kube.client import retry_after_s
from elastic_operator.client.kube import Kube


class Response:
    def __init__(self, status: int, retry_after: str | None = None, data: bytes = b"{}"):
        self.status, self.reason, self.data = status, "", data
        self._headers = {"Retry-After": retry_after} if retry_after is not None else {}

    def read(self) -> bytes:
        return self.data

    def getheader(self, name: str, default: str | None = None) -> str | None:
        return self._headers.get(name, default)


class ApiClient:
    def __init__(self, answers: list[Response]) -> None:
        self.answers = answers
        self.sent: list[tuple[str, Any]] = []

    def param_serialize(self, method: str, path: str, **kw: Any) -> tuple[Any, ...]:
        return method, path, kw.get("header_params"), kw.get("body")

    def call_api(self, method: str, path: str, headers: Any, body: Any,
                 _request_timeout: float | None = None) -> Response:
        self.sent.append((method, body))
        return self.answers.pop(0)


class Clock:
    """time.monotonic and time.sleep of client.py: sleeping moves the clock."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(client_module.time, "monotonic", fake.monotonic)
    monkeypatch.setattr(client_module.time, "sleep", fake.sleep)
    return fake


@pytest.mark.parametrize(("status", "header", "wait"), [
    (429, "1", 1.0), (429, "7", 7.0), (503, "2", 2.0), (500, "0", 0.0),
    (429, None, None), (429, "", None), (429, "Wed, 21 Oct 2015 07:28:00 GMT", None),
    (409, "1", None), (404, "1", None), (200, "1", None)])
def test_which_answers_are_sent_again_and_after_how_long(
        status: int, header: str | None, wait: float | None) -> None:
    assert retry_after_s(status, header) == wait


@pytest.mark.parametrize("method", ["PATCH", "POST", "DELETE", "GET"])
def test_a_throttled_request_waits_what_the_server_says_then_goes_again(
        clock: Clock, method: str) -> None:
    api = ApiClient([Response(429, "1"), Response(429, "2"), Response(200, data=b'{"a": 1}')])
    assert KubeClient(api).request(method, "/x", body={"b": 2}) == {"a": 1}
    assert clock.slept == [1.0, 2.0]
    assert api.sent == [(method, {"b": 2})] * 3  # the same request each time


def test_no_retry_after_no_second_try(clock: Clock) -> None:
    api = ApiClient([Response(429), Response(200)])
    with pytest.raises(ApiError) as err:
        KubeClient(api).request("PATCH", "/x", body={})
    assert err.value.status == 429 and clock.slept == [] and len(api.sent) == 1


def test_a_wait_past_the_timeout_is_not_waited(clock: Clock) -> None:
    """A lease renewal (3.5 s timeout) never sleeps past its renew deadline."""
    api = ApiClient([Response(429, "1"), Response(429, "5"), Response(200)])
    with pytest.raises(ApiError) as err:
        KubeClient(api).request("PATCH", "/lease", body={}, timeout_s=3.5)
    assert err.value.status == 429 and clock.slept == [1.0] and len(api.sent) == 2


def test_at_most_ten_retries(clock: Clock) -> None:
    api = ApiClient([Response(429, "0")] * 12)
    with pytest.raises(ApiError):
        KubeClient(api).request("POST", "/x", body={})
    assert len(api.sent) == 11


def test_a_retry_after_too_long_to_wait_still_backs_off_the_next_request_there(
        clock: Clock) -> None:
    """APF answered Retry-After: 20 (its wait grows while a priority level keeps
    dropping requests): this request gives up at once, and the next one to the same
    path (the next Event, the next reconcile's status write) is not sent before the 20 s
    are over: it waits them out if it may wait so long, else fails unsent. Other paths
    are not backed off; the soak's audit log caught an Event POST 14 ms after a 429."""
    api = ApiClient([Response(429, "20"), Response(201), Response(201), Response(201)])
    client = KubeClient(api)
    with pytest.raises(ApiError) as refused:
        client.request("POST", "/events", body={"n": 1})
    assert refused.value.status == 429 and len(api.sent) == 1 and clock.slept == []
    with pytest.raises(ApiError) as backed_off:
        client.request("POST", "/events", body={"n": 2}, timeout_s=15)
    assert backed_off.value.status == 429 and "not sent" in backed_off.value.reason
    assert len(api.sent) == 1
    client.request("PATCH", "/status", body={})  # another path: not backed off
    clock.now += 10.0
    client.request("POST", "/events", body={"n": 3}, timeout_s=15)
    assert clock.slept == [pytest.approx(10.0)]  # the rest of the 20 s, then sent
    assert [b for _, b in api.sent] == [{"n": 1}, {}, {"n": 3}]


def test_the_lease_does_not_back_off_for_an_earlier_retry_after(clock: Clock) -> None:
    """A renewal goes at the election's period: backed off past the renew deadline, the
    leader would give up its Lease to a standby throttled just the same."""
    lease = b'{"metadata": {}}'
    api = ApiClient([Response(429, "30"), Response(200, data=lease)])
    kube = Kube(KubeClient(api))
    with pytest.raises(ApiError):
        kube.patch_lease("ns", "lease", {"holderIdentity": "me"}, "7", timeout_s=3.5)
    clock.now += 1.0
    kube.patch_lease("ns", "lease", {"holderIdentity": "me"}, "7", timeout_s=3.5)
    assert len(api.sent) == 2 and clock.slept == []


@pytest.mark.parametrize("method", ["PATCH", "POST", "DELETE", "PUT"])
def test_a_replica_that_no_longer_leads_sends_no_write(clock: Clock, method: str) -> None:
    api = ApiClient([Response(200)])
    client = KubeClient(api)
    client.may_write = lambda: False
    with pytest.raises(NotLeading):
        client.request(method, "/x", body={})
    assert api.sent == []


def test_reads_and_the_lease_are_not_fenced(clock: Clock) -> None:
    api = ApiClient([Response(200, data=b'{"metadata": {}}')] * 3)
    kube = Kube(KubeClient(api))
    kube.client.may_write = lambda: False
    kube.client.request("GET", "/x")
    kube.patch_lease("ns", "lease", {"holderIdentity": "me"}, "7")
    kube.create_lease("ns", {"metadata": {"name": "lease"}})
    assert [m for m, _ in api.sent] == ["GET", "PATCH", "POST"]


def test_the_fence_is_asked_again_before_a_retry(clock: Clock) -> None:
    """Leadership lost while waiting out a Retry-After: the retry is not sent."""
    leads = iter([True, False])
    api = ApiClient([Response(429, "1"), Response(200)])
    client = KubeClient(api)
    client.may_write = lambda: next(leads)
    with pytest.raises(NotLeading):
        client.request("PATCH", "/x", body={})
    assert len(api.sent) == 1 and clock.slept == [1.0]


def test_an_electing_operator_fences_its_writes_with_its_leadership() -> None:
    from prometheus_client import CollectorRegistry

    from elastic_operator.app import build_operator
    from elastic_operator.metrics.metrics import OperatorMetrics
    from elastic_operator.queue.election import ElectionConfig

    kube = Kube(KubeClient(None))
    op = build_operator(kube, OperatorMetrics(CollectorRegistry()),
                        election=ElectionConfig("ns", "lease", "me"))
    assert op.elector is not None and kube.client.may_write == op.elector.is_leader
    assert kube.client.may_write() is False  # not elected yet
    alone = Kube(KubeClient(None))
    build_operator(alone, OperatorMetrics(CollectorRegistry()))
    assert alone.client.may_write() is True  # no election: this replica always leads
