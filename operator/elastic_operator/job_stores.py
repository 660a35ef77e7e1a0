"""Every store of the operator that keeps something per job, by name: what forgets a
deleted job in all of them at once, sweeps them, and counts them (the metric
etj_job_memory_entries{store}, which the churn soak reads: tests/integration/
test_soak_churn.py).

A job's deletion forgets it everywhere (`forget`, from the job cache's thread). What a
reconcile, a follow-up or a pod event still running then writes for the job comes after
that, and would stay for good: the sweep (`sweep`, at each resync) drops from every store
the jobs the job cache no longer holds, so what the operator remembers follows the jobs
that exist, never the jobs it has ever seen.

Not per job, and bounded otherwise: the informers' stores (the objects that exist), the
node-action limiter (per node), the sizes of committed checkpoint steps on gs://
(checkpoint_listing.py, 4,096 at most), the election (one Lease), and the namespace-labelled
histograms (per namespace).
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from elastic_operator.job_memory import JobKey

logger = logging.getLogger("elastic_operator")


@dataclass(frozen=True)
class JobStore:
    name: str  # the metric's `store` label
    jobs: Callable[[], Iterable[JobKey]]  # the jobs it holds something for
    forget: Callable[[JobKey], None]


class JobStores:
    def __init__(self) -> None:
        self.stores: list[JobStore] = []

    def add(self, name: str, jobs: Callable[[], Iterable[JobKey]],
            forget: Callable[[JobKey], None]) -> None:
        self.stores.append(JobStore(name, jobs, forget))

    def forget(self, key: JobKey) -> None:
        """The job was deleted: every store drops it."""
        for store in self.stores:
            store.forget(key)

    def counts(self) -> dict[str, int]:
        return {store.name: len(set(store.jobs())) for store in self.stores}

    def sweep(self, alive: Callable[[], Iterable[JobKey]]) -> int:
        """Drop the jobs `alive()` does not hold from every store; how many entries went.
        The stores are read before `alive`, so a job created meanwhile is in both."""
        held = {store.name: set(store.jobs()) for store in self.stores}
        living = set(alive())
        dropped = 0
        for store in self.stores:
            for key in held[store.name] - living:
                store.forget(key)
                dropped += 1
        if dropped:
            logger.debug("swept %d entries of deleted jobs from the per-job stores", dropped)
        return dropped
