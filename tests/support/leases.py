"""The leader Lease that the HA tests' operator replicas compete for, and a watch that
times each change of its holder (a handover's gap: released, then acquired)."""
from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kubernetes import client, watch

from elastic_devtools.background import BackgroundLoop

LEASE_NAMESPACE = "default"  # an operator outside a pod keeps its Lease there
LEASE_DURATION_S = 10  # the default
RELEASED = ""  # the holder of a Lease its leader handed back on shutdown


def holder(api: client.ApiClient, lease: str, namespace: str = LEASE_NAMESPACE) -> str | None:
    spec = client.CoordinationV1Api(api).read_namespaced_lease(lease, namespace).spec
    return spec.holder_identity if spec is not None else None


@dataclass(frozen=True)
class Holding:
    """The Lease's holder from `at` (time.monotonic, as the watch delivered the change);
    RELEASED while nobody holds it."""

    holder: str
    at: float


@dataclass
class LeaseWatch(BackgroundLoop):
    """Every change of the Lease's holder, in order, as a watch delivers it (not a poll:
    a release that lasts a few milliseconds is seen too). `on_change(holding)` runs on
    the watch's thread as each is seen: what a test injects at a point of a handover."""

    THREAD_NAME = "lease-watch"
    api: client.ApiClient
    lease: str
    namespace: str = LEASE_NAMESPACE
    on_change: Callable[[Holding], None] | None = None
    holdings: list[Holding] = field(default_factory=list)
    _changed: threading.Condition = field(default_factory=threading.Condition)

    def _run(self) -> None:
        leases = client.CoordinationV1Api(self.api)
        version: str | None = None  # go on from the last change seen: none is missed
        while not self._stop.is_set():
            stream = watch.Watch()
            try:
                for event in stream.stream(leases.list_namespaced_lease, self.namespace,
                                           field_selector=f"metadata.name={self.lease}",
                                           resource_version=version, timeout_seconds=5):
                    lease = event["object"]
                    version = lease.metadata.resource_version
                    spec = lease.spec
                    self._see((spec.holder_identity if spec is not None else None) or RELEASED)
                    if self._stop.is_set():
                        break
            except Exception:  # expired (410), the API server busy: list and watch again
                version = None
                self._stop.wait(0.1)
            finally:
                with contextlib.suppress(Exception):
                    stream.stop()

    def _see(self, who: str) -> None:
        with self._changed:
            if self.holdings and self.holdings[-1].holder == who:
                return
            holding = Holding(who, time.monotonic())
            self.holdings.append(holding)
            self._changed.notify_all()
        if self.on_change is not None:
            self.on_change(holding)

    def wait(self, until: Callable[[list[Holding]], bool], timeout: float, what: str
             ) -> list[Holding]:
        """The holdings once `until(holdings)` holds; TimeoutError naming `what` else."""
        with self._changed:
            if not self._changed.wait_for(lambda: until(list(self.holdings)), timeout):
                raise TimeoutError(f"{what}: the Lease's holders were {self.holders()}")
            return list(self.holdings)

    def holders(self) -> list[str]:
        return [h.holder for h in self.holdings]

    def handovers(self) -> list[Handover]:
        """Each change of leader seen, in order."""
        found: list[Handover] = []
        last: Holding | None = None
        released: float | None = None
        for holding in list(self.holdings):
            if holding.holder == RELEASED:
                released = holding.at
                continue
            if last is not None and holding.holder != last.holder:
                found.append(Handover(last.holder, released, holding.holder, holding.at))
            last, released = holding, None
        return found


@dataclass(frozen=True)
class Handover:
    """One change of leader: `released_at` None when the old leader did not hand the
    Lease back (it expired, or was taken while unreleased)."""

    old: str
    released_at: float | None
    new: str
    acquired_at: float

    @property
    def leaderless_s(self) -> float | None:
        """From the release to the new leader's acquisition."""
        return None if self.released_at is None else self.acquired_at - self.released_at
