"""Leader election on a coordination.k8s.io/v1 Lease, the way client-go's leaderelection
does it, and the gate that lets only the leader reconcile.

Replicas race to hold one Lease. The holder renews it every `retry_period_s`; the others
read it as often. A Lease is expired when its record (holder, renewTime, ...) has not
changed for `lease_duration_s` **as measured by the reader's own monotonic clock, from
when the reader saw it change**; the times written in the Lease are never compared with
the local clock, so clock skew between replicas does not matter (only their clocks'
rates). The holder gives up when it has not renewed for `renew_deadline_s` (< the lease
duration, so it stops before anyone else may start), and on shutdown it releases the
Lease (holder "", as client-go's ReleaseOnCancel does), so a standby takes over at its
next look instead of waiting the lease out.

Election is not fencing: a leader that stalls past its deadline may still finish a write.
The reconciler's status write is conditional on the resourceVersion it read, and its
Events have deterministic names, so two writers cannot both apply one change.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, TypeVar

from elastic_api.clock import SYSTEM_CLOCK, Clock
from elastic_operator.client.kube import ApiError, Kube
from elastic_operator.model.result import Result

logger = logging.getLogger("elastic_operator")

LEASE_API_VERSION = "coordination.k8s.io/v1"
T = TypeVar("T")


@dataclass(frozen=True)
class ElectionConfig:
    namespace: str
    name: str
    identity: str
    # A standby takes over at most about lease + 2 retry periods after the leader died.
    lease_duration_s: int = 10
    renew_deadline_s: float = 7.0
    retry_period_s: float = 1.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_period_s < self.renew_deadline_s < self.lease_duration_s:
            raise ValueError("leader election needs 0 < retry period < renew deadline < "
                             f"lease duration; got {self.retry_period_s}, "
                             f"{self.renew_deadline_s}, {self.lease_duration_s}")
        if not self.identity:
            raise ValueError("leader election needs a non-empty identity")


@dataclass(frozen=True)
class LeaseRecord:
    """The Lease's spec: what a reader compares to tell whether the holder is alive."""

    holder: str  # "" once released
    lease_duration_s: int
    acquire_time: str | None
    renew_time: str | None
    transitions: int

    @classmethod
    def of(cls, lease: dict[str, Any]) -> LeaseRecord:
        spec = lease.get("spec") or {}
        duration = spec.get("leaseDurationSeconds")
        transitions = spec.get("leaseTransitions")
        return cls(
            holder=str(spec.get("holderIdentity") or ""),
            lease_duration_s=duration if isinstance(duration, int) and duration > 0 else 1,
            acquire_time=spec.get("acquireTime"), renew_time=spec.get("renewTime"),
            transitions=transitions if isinstance(transitions, int) else 0)

    def spec(self) -> dict[str, Any]:
        return {"holderIdentity": self.holder, "leaseDurationSeconds": self.lease_duration_s,
                "acquireTime": self.acquire_time, "renewTime": self.renew_time,
                "leaseTransitions": self.transitions}


def micro_time(moment: datetime) -> str:
    """A MicroTime as the API server writes it (informative only: never compared)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseElector:
    """Runs the election in its own thread (`start`): a busy event loop or a slow
    reconcile never delays a renewal. `on_started` / `on_stopped` are called from it."""

    def __init__(
        self, kube: Kube, config: ElectionConfig, *,
        on_started: Callable[[], None] = lambda: None,
        on_stopped: Callable[[], None] = lambda: None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.kube = kube
        self.config = config
        self._on_started = on_started
        self._on_stopped = on_stopped
        self._clock = clock
        self._lock = threading.Lock()
        self._lease: dict[str, Any] | None = None  # as last read or written (its version)
        self._observed: LeaseRecord | None = None
        self._observed_at = 0.0  # monotonic time when _observed last changed
        self._leading = False
        self._renewed_at = 0.0  # monotonic time the last successful renewal was sent
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    # --- state (any thread) ---

    @property
    def identity(self) -> str:
        return self.config.identity

    def is_leader(self) -> bool:
        """Leading, and renewed within the deadline (checked now: a renewal stuck in a
        request cannot stretch the leadership)."""
        with self._lock:
            return self._leading and (self._clock.monotonic() - self._renewed_at
                                      < self.config.renew_deadline_s)

    @property
    def holder(self) -> str | None:
        """The holder as last seen (None before the first look)."""
        with self._lock:
            return self._observed.holder if self._observed is not None else None

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # --- the thread ---

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="leader-election", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop electing; if leading, release the Lease first (graceful handover)."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def run(self) -> None:
        while not self._stopping.is_set():
            self.step()
            self._stopping.wait(self.config.retry_period_s)
        if self._leading:
            self._step_down("shutting down", logging.INFO)
            self.release()

    def step(self) -> None:
        """One look: acquire or renew, and change role if that changed."""
        sent_at = self._clock.monotonic()
        try:
            held = self.try_acquire_or_renew()
        except Exception as e:  # the API server is unreachable: keep trying
            logger.warning("leader election: %s: %s", type(e).__name__, str(e)[:300])
            held = False
        if held:
            with self._lock:
                # A renewal answered only after the deadline had passed (sent late, or
                # slow: an API server just restarted, a starved process): is_leader()
                # was False meanwhile, so events were dropped and writes refused as if
                # this replica stood by. It leads again, and starts over as a new leader
                # does (a resync of every job), not at the next periodic resync.
                # Unless the answer came so late that even this renewal is past the
                # deadline (frozen mid-request): is_leader() stays False, the next look
                # decides.
                now, deadline = self._clock.monotonic(), self.config.renew_deadline_s
                lapsed = self._leading and now - self._renewed_at >= deadline \
                    and now - sent_at < deadline
                self._renewed_at = sent_at
                started = not self._leading or lapsed
                self._leading = True
            if started:
                logger.info("leader election: %s leads %s (Lease %s/%s)", self.identity,
                            "again (renewed past the renew deadline)" if lapsed else "now",
                            self.config.namespace, self.config.name)
                self._on_started()
            return
        if not self._leading:
            return
        lost_to = self.holder
        if lost_to not in (None, self.identity):
            self._step_down(f"{lost_to} holds the Lease")
        elif self._clock.monotonic() - self._renewed_at >= self.config.renew_deadline_s:
            self._step_down(f"not renewed for {self.config.renew_deadline_s:.0f} s")

    def _step_down(self, why: str, level: int = logging.WARNING) -> None:
        with self._lock:
            self._leading = False
        logger.log(level, "leader election: %s stops leading: %s", self.identity, why)
        self._on_stopped()

    # --- the Lease ---

    @property
    def _request_timeout_s(self) -> float:
        # Two tries fit in the renew deadline.
        return self.config.renew_deadline_s / 2

    def try_acquire_or_renew(self) -> bool:
        """True if this replica holds the Lease after this call."""
        if self._leading and self._lease is not None and self._update(self._lease):
            return True  # renewed, from the version we wrote last: one request
        lease = self.kube.get_lease(self.config.namespace, self.config.name,
                                    timeout_s=self._request_timeout_s)
        if lease is None:
            return self._create()
        record = self._observe(lease)
        if record.holder and record.holder != self.identity and not self._expired(record):
            return False
        return self._update(lease)

    def _observe(self, lease: dict[str, Any]) -> LeaseRecord:
        record = LeaseRecord.of(lease)
        with self._lock:
            self._lease = lease
            if record != self._observed:
                self._observed, self._observed_at = record, self._clock.monotonic()
        return record

    def _expired(self, record: LeaseRecord) -> bool:
        return self._clock.monotonic() - self._observed_at >= record.lease_duration_s

    def _mine(self, previous: LeaseRecord | None) -> LeaseRecord:
        now = micro_time(self._clock.now())
        kept = previous is not None and previous.holder == self.identity
        return LeaseRecord(
            holder=self.identity, lease_duration_s=self.config.lease_duration_s,
            acquire_time=previous.acquire_time if kept and previous else now, renew_time=now,
            transitions=(previous.transitions if previous else 0) + (0 if kept else 1))

    def _create(self) -> bool:
        record = replace(self._mine(None), transitions=0)
        lease = {"apiVersion": LEASE_API_VERSION, "kind": "Lease",
                 "metadata": {"name": self.config.name, "namespace": self.config.namespace},
                 "spec": record.spec()}
        try:
            self._observe(self.kube.create_lease(self.config.namespace, lease,
                                                 timeout_s=self._request_timeout_s))
        except ApiError as e:
            if e.status == 409:  # another replica created it first
                return False
            raise
        return True

    def _update(self, lease: dict[str, Any]) -> bool:
        """Write our record over `lease` (conditional on its resourceVersion)."""
        try:
            self._observe(self._patch(lease, self._mine(LeaseRecord.of(lease))))
        except ApiError as e:
            if e.status == 409:  # someone wrote it since: look again
                with self._lock:
                    self._lease = None
                return False
            raise
        return True

    def _patch(self, lease: dict[str, Any], record: LeaseRecord) -> dict[str, Any]:
        version = str((lease.get("metadata") or {}).get("resourceVersion") or "")
        return self.kube.patch_lease(self.config.namespace, self.config.name, record.spec(),
                                     version, timeout_s=self._request_timeout_s)

    def release(self) -> None:
        """Hand the Lease back: holder "" (anyone may take it at once), duration 1 s."""
        lease = self._lease
        if lease is None or LeaseRecord.of(lease).holder != self.identity:
            return
        now = micro_time(self._clock.now())
        released = LeaseRecord(holder="", lease_duration_s=1, acquire_time=now,
                               renew_time=now, transitions=LeaseRecord.of(lease).transitions)
        try:
            self._patch(lease, released)
            logger.info("leader election: %s released the Lease", self.identity)
        except Exception as e:  # it expires on its own
            logger.warning("leader election: could not release the Lease: %s", e)


class ReconcileGate:
    """Lets reconciles through only while `may_reconcile()` (this replica leads and its
    caches are synced), and counts the ones running so that a replica stepping down can
    wait for them before it releases the Lease."""

    def __init__(self, may_reconcile: Callable[[], bool]) -> None:
        self._may_reconcile = may_reconcile
        self._cond = threading.Condition()
        self._closed = False
        self._running = 0

    def wrap(self, reconcile: Callable[[str, str], Result]) -> Callable[[str, str], Result]:
        def gated(namespace: str, name: str) -> Result:
            done = self.call(lambda: reconcile(namespace, name))
            return Result() if done is None else done  # a standby has nothing to retry
        return gated

    def call(self, work: Callable[[], T]) -> T | None:
        """Run `work` (any write to the cluster) if the gate is open, counted among the
        running ones; None, doing nothing, if not."""
        with self._cond:
            if self._closed or not self._may_reconcile():
                return None
            self._running += 1
        try:
            return work()
        finally:
            with self._cond:
                self._running -= 1
                self._cond.notify_all()

    @property
    def open(self) -> bool:
        with self._cond:
            return not self._closed and self._may_reconcile()

    def close(self) -> None:
        """No new reconcile starts (shutdown)."""
        with self._cond:
            self._closed = True

    def drain(self, timeout: float) -> bool:
        """Wait for the running reconciles to end; False if some still run."""
        with self._cond:
            return self._cond.wait_for(lambda: self._running == 0, timeout)
