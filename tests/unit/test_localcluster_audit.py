"""The local API server's audit log as the HA tests read it (localcluster/audit.py): the
entries, whose credential, and writes sent again too soon after a 429."""
from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from elastic_devtools.localcluster import audit
from elastic_devtools.localcluster.cluster_config import Layout, audit_policy

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


def entry(seconds: float, code: int, credential: str = "JTI=a", verb: str = "patch",
          uri: str = "/apis/x/status", answered: float | None = None) -> dict[str, object]:
    out: dict[str, object] = {
        "kind": "Event", "verb": verb, "requestURI": f"{uri}?fieldManager=m",
        "user": {"username": "system:serviceaccount:ns:op",
                 "extra": {audit.CREDENTIAL_KEY: [credential]}},
        "responseStatus": {"code": code},
        "requestReceivedTimestamp": (T0 + timedelta(seconds=seconds)).isoformat()}
    if answered is not None:
        out["stageTimestamp"] = (T0 + timedelta(seconds=answered)).isoformat()
    return out


def write_log(tmp_path: Path, events: list[dict[str, object]], tail: str = "") -> Path:
    path = Layout(tmp_path).audit_log
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(e) + "\n" for e in events) + tail)
    return tmp_path


def test_entries_are_read_in_order_with_their_credential(tmp_path: Path) -> None:
    root = write_log(tmp_path, [entry(2, 200, "JTI=b"), entry(1, 429)], tail='{"kind": "Ev')
    got = audit.entries(root)
    assert [(e.credential, e.code, e.uri) for e in got] == [
        ("JTI=a", 429, "/apis/x/status"), ("JTI=b", 200, "/apis/x/status")]
    assert not got[0].succeeded and got[1].succeeded
    assert audit.writes_by(got, "JTI=b", since=T0 + timedelta(seconds=2)) == [got[1]]
    assert audit.writes_by(got, "JTI=b", since=T0 + timedelta(seconds=3)) == []


def test_a_write_sent_again_sooner_than_retry_after_is_found(tmp_path: Path) -> None:
    root = write_log(tmp_path, [
        entry(0, 429), entry(1.2, 200),  # waited: fine
        entry(5, 429), entry(5.4, 429), entry(6.5, 201),  # the 2nd try too soon
        entry(7, 429, credential="JTI=b"), entry(7.1, 200, verb="create"),  # another request
    ])
    early = audit.retried_too_soon(audit.entries(root), 1.0)
    assert [(a.received - T0).total_seconds() for a, _ in early] == [5.0]


def test_a_write_already_on_its_way_when_the_429_was_answered_is_not_sent_again(
        tmp_path: Path) -> None:
    """Seed 5379c9's soak: two jobs' Events POSTed to one namespace by two threads; APF
    queued the first 13 ms, and the second arrived before the first's 429 was answered."""
    root = write_log(tmp_path, [
        entry(0.0, 429, verb="create", uri="/api/v1/namespaces/n/events", answered=0.013),
        entry(0.012, 429, verb="create", uri="/api/v1/namespaces/n/events", answered=0.012),
        entry(1.1, 201, verb="create", uri="/api/v1/namespaces/n/events"),  # waited
        entry(3.0, 429, answered=3.05), entry(3.5, 200),  # sent 0.45 s after the answer
    ])
    early = audit.retried_too_soon(audit.entries(root), 1.0)
    assert [((a.received - T0).total_seconds(), (b.received - T0).total_seconds())
            for a, b in early] == [(3.0, 3.5)]


def test_the_credential_is_the_tokens_jti() -> None:
    claims = base64.urlsafe_b64encode(json.dumps({"jti": "1234"}).encode()).rstrip(b"=")
    assert audit.credential_of(f"e30.{claims.decode()}.sig") == "JTI=1234"


def test_the_policy_audits_service_account_writes_outside_kube_system_only() -> None:
    rules = audit_policy()["rules"]
    assert rules[0] == {"level": "None", "userGroups": ["system:serviceaccounts:kube-system"]}
    assert rules[1]["level"] == "Metadata" and "get" not in rules[1]["verbs"]
    assert rules[-1] == {"level": "None"}
