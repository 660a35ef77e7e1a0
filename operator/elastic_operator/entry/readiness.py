"""GET /readyz: whether this replica could lead now, for the Deployment's readinessProbe.

A replica is ready once every watch-fed cache holds its first list and the CRD's verdict
is settled (what the reconcile gate waits for: a leader whose caches are not synced
reconciles nothing), and while its election, work queue and background threads run and
it is not stopping. A standby is ready as soon as it could take over at once.

Why it matters: a rolling update (`maxSurge: 1, maxUnavailable: 0`) stops an old
replica only once a new one is Ready, and the PodDisruptionBudget counts only Ready
replicas. Without this probe a new pod counted as Ready the moment its container
started, before its caches were listed, so both old replicas could stop while the new
ones were still starting: 8-10 s with no replica able to lead (issue 68).

kopf's liveness server answers one path, and caches its probes for 10 s: readiness is
served beside it, on a port of its own, straight from the operator's state.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any

from elastic_operator.entry.http_thread import BackgroundServer

if TYPE_CHECKING:
    from elastic_operator.app import Operator

READY_PATH = "/readyz"


@dataclass(frozen=True)
class Readiness:
    """The verdict and what it was made of (the probe's body)."""

    ready: bool
    why: str  # "" when ready
    role: str  # leader, standby, or leader (election off)
    synced: bool

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"ready": self.ready, "role": self.role, "synced": self.synced}
        if self.why:
            body["why"] = self.why
        return body


def readiness(op: Operator) -> Readiness:
    """Whether `op` could lead now."""
    elector = op.elector
    return verdict(stopping=op.stopping, leading=op.leading(),
                   election_alive=None if elector is None else elector.alive,
                   alive=op.alive, unsynced=[i.resource for i in op.caches.informers
                                             if not i.synced],
                   schema_settled=op.schema.settled)


def verdict(*, stopping: bool, leading: bool, election_alive: bool | None, alive: bool,
            unsynced: list[str], schema_settled: bool) -> Readiness:
    """The rule, from what the operator says of itself (`election_alive` None: no
    election; `unsynced`: the caches without their first list yet)."""
    if stopping:
        why = "stopping: the Lease is handed over"
    elif election_alive is False:
        why = "the leader election thread has stopped"
    elif not alive:
        why = "the work queue or a background thread has stopped"
    elif unsynced:
        why = f"caches not synced yet: {', '.join(unsynced)}"
    elif not schema_settled:
        why = "the CRD's schema not read yet"
    else:
        why = ""
    return Readiness(ready=not why, why=why, role="leader" if leading else "standby",
                     synced=not unsynced and schema_settled)


class ReadinessServer(BackgroundServer):
    """Serves GET /readyz (200 ready, 503 not) from `verdict`, in a daemon thread."""

    def __init__(self, address: str, port: int, verdict: Callable[[], Readiness]) -> None:
        super().__init__(address, port, _handler(verdict), "readiness")


def _handler(verdict: Callable[[], Readiness]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] != READY_PATH:
                self._answer(404, {"error": f"not found; GET {READY_PATH}"})
                return
            try:
                found = verdict()
            except Exception as err:  # a probe never raises: it says not ready, and why
                self._answer(503, {"ready": False, "why": f"{type(err).__name__}: {err}"})
                return
            self._answer(200 if found.ready else 503, found.body())

        def _answer(self, code: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # one probe a second: not worth a log line each

    return Handler
