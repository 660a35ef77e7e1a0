"""The operator's parts, built and wired once (by `etj operator`, and by tests).

    kopf handlers ──▶ Scheduler ──▶ Reconciler ──▶ core (pure)
         │               ▲              │  └──▶ Replacer ──▶ Kube (writes)
         │               └── wake ──────┤
         ├──▶ NodeIndex ◀── Observations ┤──▶ Kube (writes)
         │        ▲                      │
         │        └──── PoolWarden ──────┘
         └──────────────▶ CheckpointScanner
"""
from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from datetime import UTC, datetime

from elastic_operator.kube import Kube
from elastic_operator.metrics import OperatorMetrics
from elastic_operator.node_actions import NodeActionLimiter, NodeActionLimits
from elastic_operator.node_index import NodeIndex
from elastic_operator.observations import ApiObservations
from elastic_operator.pool_warden import PoolWarden
from elastic_operator.reconciler import Reconciler
from elastic_operator.scanner import CheckpointScanner
from elastic_operator.scheduler import Backoff, Scheduler


@dataclass(frozen=True)
class ReplacementSettings:
    """The operator-wide knobs of slice replacement (`etj operator --help`)."""

    quarantine_pools: bool = True
    limits: NodeActionLimits = field(default_factory=NodeActionLimits)
    release_after_s: float = 600.0
    repeated_failures_quarantine_s: float = 3600.0


@dataclass
class Operator:
    kube: Kube
    metrics: OperatorMetrics
    nodes: NodeIndex
    scanner: CheckpointScanner
    reconciler: Reconciler
    scheduler: Scheduler
    warden: PoolWarden | None = None

    def forget(self, namespace: str, name: str) -> None:
        """A job was deleted: drop everything kept about it."""
        self.scheduler.forget(namespace, name)
        self.reconciler.forget(namespace, name)
        self.scanner.forget((namespace, name))
        self.nodes.forget_job((namespace, name))
        self.metrics.forget(namespace, name)

    def close(self) -> None:
        self.scanner.shutdown()


def build_operator(
    kube: Kube, metrics: OperatorMetrics, *, checkpoint_scan_interval_s: float = 30.0,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    scan_executor: Executor | None = None, backoff: Backoff | None = None,
    replacement: ReplacementSettings | None = None,
) -> Operator:
    settings = replacement or ReplacementSettings()
    nodes = NodeIndex()
    scanner = CheckpointScanner(interval_s=checkpoint_scan_interval_s, executor=scan_executor,
                                clock=clock)
    reconciler = Reconciler(kube, ApiObservations(kube, nodes, scanner), metrics, clock,
                            limiter=NodeActionLimiter(settings.limits),
                            quarantine_pools=settings.quarantine_pools)
    scheduler = Scheduler(reconciler.reconcile, backoff)
    reconciler.wake = scheduler.trigger_later
    warden = PoolWarden(kube, nodes, metrics, release_after_s=settings.release_after_s,
                        repeated_failures_s=settings.repeated_failures_quarantine_s,
                        clock=clock) if settings.quarantine_pools else None
    return Operator(kube=kube, metrics=metrics, nodes=nodes, scanner=scanner,
                    reconciler=reconciler, scheduler=scheduler, warden=warden)
