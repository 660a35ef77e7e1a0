"""The local API server's audit log: the writes made with ServiceAccount tokens outside
kube-system (render.audit_policy), rejected ones included (API Priority and Fairness
runs after the audit filter: its 429s are logged too).

A ServiceAccount token names its credential in the entry (user.extra's credential-id,
`JTI=<the token's jti claim>`), so two replicas of an operator that share the chart's
ServiceAccount, each with a token of its own, are told apart: `credential_of(token)`.

    entries(cluster_root)                    every entry so far, oldest first
    writes_by(entries, credential, since)    one credential's, received at or after `since`
    retried_too_soon(entries, seconds)       writes sent again sooner than that after a 429
"""
from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from elastic_devtools.localcluster.cluster_config import Layout

CREDENTIAL_KEY = "authentication.kubernetes.io/credential-id"


@dataclass(frozen=True)
class AuditEntry:
    verb: str
    uri: str  # the request URI without its query
    code: int  # the answer's HTTP status
    username: str
    credential: str | None
    received: datetime  # the API server's clock (this machine's)
    # When the answer was complete (stageTimestamp of ResponseComplete; `received` if the
    # entry has none): a 429 queued by APF before its rejection is answered later.
    answered: datetime | None = None

    @property
    def answered_at(self) -> datetime:
        return self.answered or self.received

    @property
    def succeeded(self) -> bool:
        return 200 <= self.code <= 299

    def __str__(self) -> str:
        return f"{self.received.isoformat()} {self.verb} {self.uri} -> {self.code}"


def credential_of(token: str) -> str:
    """The credential-id the API server logs for a ServiceAccount token: its jti claim."""
    payload = token.split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return f"JTI={claims['jti']}"


def log_path(cluster_root: Path | str) -> Path:
    return Layout(Path(cluster_root)).audit_log


def entries(cluster_root: Path | str) -> list[AuditEntry]:
    """Every entry of the audit log so far (the rotated file first), oldest first; a
    last line still being written is skipped. Fails if the cluster has no audit log (it
    was started before the policy existed: restart it)."""
    path = log_path(cluster_root)
    if not path.exists():
        raise FileNotFoundError(f"no audit log at {path}: the local cluster was started "
                                "without one; stop it (`etj cluster down`) and start it again")
    out: list[AuditEntry] = []
    for file in [*sorted(path.parent.glob("audit-*.log")), path]:
        for line in file.read_text(errors="replace").splitlines():
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue  # being written
            out.append(_entry(event))
    return sorted(out, key=lambda e: e.received)


def _entry(event: dict[str, object]) -> AuditEntry:
    user = event.get("user") or {}
    assert isinstance(user, dict)
    extra = user.get("extra") or {}
    credential = (extra.get(CREDENTIAL_KEY) or [None])[0]
    status = event.get("responseStatus") or {}
    assert isinstance(status, dict)
    return AuditEntry(
        verb=str(event.get("verb")), uri=str(event.get("requestURI", "")).split("?")[0],
        code=int(status.get("code") or 0), username=str(user.get("username", "")),
        credential=credential,
        received=datetime.fromisoformat(str(event["requestReceivedTimestamp"])),
        answered=datetime.fromisoformat(str(event["stageTimestamp"]))
        if event.get("stageTimestamp") else None)


def writes_by(all_entries: Iterable[AuditEntry], credential: str,
              since: datetime | None = None) -> list[AuditEntry]:
    return [e for e in all_entries if e.credential == credential
            and (since is None or e.received >= since)]


def retried_too_soon(all_entries: Iterable[AuditEntry], seconds: float
                     ) -> list[tuple[AuditEntry, AuditEntry]]:
    """(the 429, the next write of the same credential to the same URI) pairs where the
    write arrived less than `seconds` after the 429 was answered: a client that honours
    Retry-After: <seconds> has none. A write that arrived before the 429 was answered
    was on its way already (another thread's, to the same URI: two jobs' Events in one
    namespace), not sent again: the client could not know yet."""
    last_rejected: dict[tuple[str | None, str, str], AuditEntry] = {}
    early = []
    for entry in all_entries:
        key = (entry.credential, entry.verb, entry.uri)
        rejected = last_rejected.get(key)
        if rejected is not None and entry.received >= rejected.answered_at:
            del last_rejected[key]
            if (entry.received - rejected.answered_at).total_seconds() < seconds:
                early.append((rejected, entry))
        if entry.code == 429 and key not in last_rejected:
            last_rejected[key] = entry
    return early
