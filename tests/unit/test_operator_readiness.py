"""GET /readyz (elastic_operator.entry.readiness): a replica is Ready once it could lead, its
caches synced; never while it starts or stops. The Deployment's rolling update and the
PodDisruptionBudget count on it (issue 68); tests/integration/test_ha.py runs it on a
real operator."""
from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from elastic_operator.entry.readiness import READY_PATH, Readiness, ReadinessServer, verdict

SYNCED: dict[str, Any] = {"stopping": False, "leading": False, "election_alive": True,
                          "alive": True, "unsynced": [], "schema_settled": True}


def test_a_synced_standby_is_ready_as_a_leader_is() -> None:
    assert verdict(**SYNCED) == Readiness(ready=True, why="", role="standby", synced=True)
    assert verdict(**{**SYNCED, "leading": True}).ready
    assert verdict(**{**SYNCED, "election_alive": None, "leading": True}).ready  # no election


@pytest.mark.parametrize(("change", "why"), [
    ({"unsynced": ["pods", "jobsets"]}, "caches not synced yet: pods, jobsets"),
    ({"schema_settled": False}, "the CRD's schema not read yet"),
    ({"stopping": True, "leading": True}, "stopping: the Lease is handed over"),
    ({"election_alive": False}, "the leader election thread has stopped"),
    ({"alive": False}, "the work queue or a background thread has stopped"),
])
def test_not_ready_says_why(change: dict[str, Any], why: str) -> None:
    found = verdict(**{**SYNCED, **change})
    assert not found.ready and found.why == why
    assert found.body()["why"] == why and found.body()["ready"] is False


def get(port: int, path: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_the_endpoint_answers_200_503_and_never_raises() -> None:
    state: dict[str, Any] = {"found": verdict(**SYNCED)}

    def current() -> Readiness:
        if isinstance(state["found"], Exception):
            raise state["found"]
        found: Readiness = state["found"]
        return found

    server = ReadinessServer("127.0.0.1", 0, current).start()
    try:
        assert get(server.port, READY_PATH) == (
            200, {"ready": True, "role": "standby", "synced": True})
        state["found"] = verdict(**{**SYNCED, "unsynced": ["nodes"]})
        assert get(server.port, READY_PATH) == (503, {
            "ready": False, "role": "standby", "synced": False,
            "why": "caches not synced yet: nodes"})
        state["found"] = RuntimeError("boom")
        assert get(server.port, READY_PATH) == (503, {"ready": False,
                                                       "why": "RuntimeError: boom"})
        assert get(server.port, "/healthz")[0] == 404  # liveness is kopf's, on its own port
    finally:
        server.stop()
