"""The faults that running the chart's two operator replicas adds to the chaos test
(tests/integration/test_chaos.py), and the audit-log checks that prove them harmless.

    leader_killed         the leader SIGKILLed once it counted a slice failure: the standby
                          takes the Lease when it expires and finishes the recovery; the
                          killed one comes back as a standby
    leader_stopped        the leader SIGSTOPped in the middle of a slice replacement (the
                          intent written, the slice not back yet) for longer than its lease,
                          then SIGCONT: from its waking to the next fault its token makes no
                          write that the API server accepts (QuietWindow, audit log)
    apiserver_throttled   API Priority and Fairness lets the operator's ServiceAccount run
                          one request at a time (429 + Retry-After for the others) while a
                          slice fails and recovers: some write of the operator is refused,
                          and none is sent again sooner than the Retry-After (audit log)
    apiserver_restarted   kube-apiserver stopped and started again, a slice failed right
                          after: every watch resumed

Each takes `fail` (inject the slice failure) and `slice_down` (wait until the operator
counted it); the test asserts the rest (counted once, one SliceReplacing per failure, the
parameters of an undisturbed run).
"""
from __future__ import annotations

import contextlib
import http.client
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from elastic_devtools.localcluster import audit, faults
from elastic_devtools.localcluster.cluster import start_component, stop_component
from elastic_devtools.localcluster.faults import wait_for
from elastic_devtools.localcluster.operator_process import OperatorProcess
from tests.support.chart import ChartReplicas
from tests.support.leases import LEASE_DURATION_S

if TYPE_CHECKING:
    from kubernetes import client

    from elastic_devtools.localcluster import Cluster

STOPPED_SECONDS = LEASE_DURATION_S + 5  # longer than the lease: the standby takes over
# APF's Retry-After is at least 1 s (the API server writes whole seconds, >= 1).
MIN_RETRY_AFTER_S = 1.0
APISERVER = "kube-apiserver"
NEIGHBOUR_THREADS = 2  # the busy neighbour's reads in flight at once


def now() -> datetime:
    return datetime.now(UTC)


def _role(proc: OperatorProcess) -> str | None:
    try:
        role = proc.health()["leadership"]["role"]
    except OSError:  # its endpoint not answering yet
        return None
    return str(role)


@dataclass
class QuietWindow:
    """Replica `replica`, woken from SIGSTOP after losing the Lease, must write nothing
    from `start` to `end` (the next fault)."""

    replica: int
    credential: str
    start: datetime
    end: datetime | None = None


@dataclass
class Throttle:
    name: str
    start: datetime
    rejected: int = 0  # by the priority level (the operator's requests, reads included)
    refused_writes: int = 0  # the operator's writes answered 429 (audit log)


@dataclass
class HaFaults:
    cluster: Cluster
    api: client.ApiClient
    ns: str
    operators: ChartReplicas
    status: Callable[[], dict[str, Any]]
    quiet: list[QuietWindow] = field(default_factory=list)
    throttles: list[Throttle] = field(default_factory=list)
    restarts_s: list[float] = field(default_factory=list)  # API server down, seconds
    takeovers_s: list[float] = field(default_factory=list)  # leader gone -> new leader
    # Set while a fault keeps the API server from serving the operator (APF throttling,
    # a restart): what the operator may do then is the server's to say (a 429's
    # Retry-After, up to 32 s at a time under sustained rejection), not the operator's.
    holding_back: threading.Event = field(default_factory=threading.Event)

    def next_fault(self) -> None:
        """A fault is about to be injected: the quiet windows open so far end here (it
        may make a woken replica the leader again)."""
        for window in self.quiet:
            if window.end is None:
                window.end = now()

    def _new_leader(self, old: int) -> int:
        ops = self.operators
        found = wait_for(lambda: (i := ops.index_of(ops.holder())) not in (None, old) and [i],
                         LEASE_DURATION_S * 3, f"a replica other than {old} holding the Lease",
                         interval=0.05)
        index: int = found[0]
        return index

    def operator_kill(self) -> str:
        """The leader SIGKILLed and started again at once (its container restarted): it
        takes its own Lease back."""
        leader = self.operators.leader()
        self.operators.procs[leader].kill()
        self.operators.procs[leader].start()
        return f"replica {leader}"

    def leader_killed(self, fail: Callable[[], str], slice_down: Callable[[], None]) -> str:
        ops = self.operators
        leader = ops.leader()
        detail = fail()
        slice_down()
        killed = time.monotonic()
        ops.procs[leader].kill()
        new = self._new_leader(leader)
        self.takeovers_s.append(time.monotonic() - killed)
        ops.procs[leader].start()  # back, as a standby
        return (f"{detail}; replica {leader} SIGKILLed, replica {new} led "
                f"{self.takeovers_s[-1]:.1f} s later")

    def leader_stopped(self, fail: Callable[[], str],
                       replacing: Callable[[], bool]) -> str:
        ops = self.operators
        leader = ops.leader()
        proc = ops.procs[leader]
        detail = fail()
        wait_for(replacing, 60, "the leader to record the slice's replacement", interval=0.02)
        proc.pause()
        stopped = time.monotonic()
        still_open = replacing()
        new = self._new_leader(leader)
        self.takeovers_s.append(time.monotonic() - stopped)
        # The fault is the stop's length, not a wait for something to happen.
        time.sleep(max(0.0, STOPPED_SECONDS - (time.monotonic() - stopped)))
        woke = now()
        proc.resume()
        self.quiet.append(QuietWindow(leader, ops.credentials[leader], woke))
        wait_for(lambda: _role(proc) == "standby", 30,
                 f"replica {leader} to know it no longer leads", interval=0.1)
        return (f"{detail}; replica {leader} SIGSTOPped for {STOPPED_SECONDS} s "
                f"(replacement {'still open' if still_open else 'already done'}), "
                f"replica {new} led {self.takeovers_s[-1]:.1f} s after the stop")

    def apiserver_throttled(self, fail: Callable[[], str], slice_down: Callable[[], None],
                            healthy: Callable[[], bool], timeout: float) -> str:
        throttle = Throttle(f"etj-chaos-{uuid.uuid4().hex[:6]}", now())
        faults.throttle(self.api, throttle.name, self.ns, self.operators.service_account)
        self.holding_back.set()
        try:
            with self._contended():
                detail = self._recover_throttled(throttle, fail, slice_down, healthy, timeout)
        finally:
            faults.unthrottle(self.api, throttle.name)
            self.holding_back.clear()
        self.throttles.append(throttle)
        return (f"{detail}; recovered under APF: {throttle.refused_writes} writes of the "
                f"operator refused (429), {throttle.rejected} requests rejected in all")

    def _recover_throttled(self, throttle: Throttle, fail: Callable[[], str],
                           slice_down: Callable[[], None], healthy: Callable[[], bool],
                           timeout: float) -> str:
        detail = fail()
        slice_down()
        wait_for(healthy, timeout, "the job healthy again while throttled", interval=0.25)
        refused = wait_for(lambda: self._refused_writes(throttle.start), 120,
                           "a write of the operator refused with 429", interval=1)
        throttle.refused_writes = len(refused)
        throttle.rejected = faults.rejected_requests(self.api, throttle.name)
        return detail

    @contextlib.contextmanager
    def _contended(self) -> Iterator[None]:
        """Another client of the operator's ServiceAccount (a token of its own: not in
        the replicas' audit) reads in a loop meanwhile, as a busy neighbour on the same
        flow would: the one seat is often taken when the operator asks for it, and the
        operator's own requests, mostly one at a time, meet 429s for sure."""
        headers = {"Authorization": f"Bearer {self.operators.token('noise')}"}
        context = ssl.create_default_context(cafile=str(self.cluster.layout.pki / "ca.crt"))
        server = urlsplit(self.cluster.server)
        path = f"/api/v1/namespaces/{self.ns}/serviceaccounts/{self.operators.service_account}"
        stop = threading.Event()

        def read() -> None:
            connection = None
            while not stop.is_set():
                try:  # one kept-alive connection: the requests come back to back
                    connection = connection or http.client.HTTPSConnection(
                        server.hostname or "127.0.0.1", server.port, context=context,
                        timeout=10)
                    connection.request("GET", path, headers=headers)
                    connection.getresponse().read()  # 200, or 429
                except (OSError, http.client.HTTPException):  # the API server busy
                    connection = None

        threads = [threading.Thread(target=read, name=f"apf-neighbour-{i}", daemon=True)
                   for i in range(NEIGHBOUR_THREADS)]
        for thread in threads:
            thread.start()
        try:
            yield
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=15)

    def _refused_writes(self, since: datetime) -> list[audit.AuditEntry]:
        return [e for e in audit.entries(self.cluster.dir) if e.code == 429
                and e.credential in self.operators.credentials and e.received >= since]

    def apiserver_restarted(self, fail: Callable[[], str],
                            slice_down: Callable[[], None]) -> str:
        started = time.monotonic()
        self.holding_back.set()
        try:
            assert stop_component(self.cluster.dir, APISERVER), "the API server was not running"
            start_component(self.cluster.dir, APISERVER, timeout=120)
        finally:
            self.holding_back.clear()
        self.restarts_s.append(time.monotonic() - started)
        detail = fail()
        slice_down()
        return f"API server back after {self.restarts_s[-1]:.1f} s, then {detail}"

    # --- after the run ---

    def audit_problems(self) -> list[str]:
        """What the audit log shows went wrong: a woken replica's accepted write, or a
        write sent again sooner than its Retry-After."""
        entries = audit.entries(self.cluster.dir)
        problems = []
        for window in self.quiet:
            for entry in self._woken_writes(entries, window):
                if entry.succeeded:
                    problems.append(f"replica {window.replica} wrote after it woke: {entry}")
        ours = [e for e in entries if e.credential in self.operators.credentials]
        for refused, again in audit.retried_too_soon(ours, MIN_RETRY_AFTER_S):
            gap = (again.received - refused.received).total_seconds()
            problems.append(f"sent again {gap:.2f} s after a 429: {refused} / {again}")
        return problems

    @staticmethod
    def _woken_writes(entries: list[audit.AuditEntry],
                      window: QuietWindow) -> list[audit.AuditEntry]:
        return [e for e in audit.writes_by(entries, window.credential, window.start)
                if window.end is None or e.received <= window.end]

    def figures(self) -> dict[str, Any]:
        entries = audit.entries(self.cluster.dir)
        ours = [e for e in entries if e.credential in self.operators.credentials]
        woken = [e for w in self.quiet for e in self._woken_writes(entries, w)]
        return {
            "operator_writes_audited": len(ours),
            "operator_writes_refused_429": sum(e.code == 429 for e in ours),
            "throttles": [{"rejected": t.rejected, "refused_writes": t.refused_writes}
                          for t in self.throttles],
            "woken_leader_write_attempts": [str(e) for e in woken],
            "takeover_seconds": [round(s, 1) for s in self.takeovers_s],
            "apiserver_restart_seconds": [round(s, 1) for s in self.restarts_s],
        }
