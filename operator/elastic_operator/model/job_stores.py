"""Everything the operator keeps per job, in one place: each store that keeps something
per job, by name, with the same two methods (`JobStore`); what forgets a deleted job in
all of them in one call (`forget`), sweeps them, and counts them (the metric
etj_job_memory_entries{store}, which the churn soak reads: tests/integration/
test_soak_churn.py). app.py registers each one:

    job-memory        job_memory.py: JobMemory, what the reconciles remember of a job
                      (our writes, the outbox, the pacing, the replacement follow-ups, the
                      slice memo)
    work-queue        work_queue.py: a job queued or running, its follow-ups running, and
                      whether its run was requeued or is for progress (its failures and
                      pending looks: fields of its JobMemory)
    checkpoint-scans  scanner.py: the last scan started, the one running, its last result
                      (fields of the job's JobMemory, counted by the scanner)
    node-index        node_index.py: the job's pods on each node, its failures on pools
    slice-index       slice_index.py: its worker pods by slice and host, each slice as last
                      computed (the latter a field of the job's JobMemory)
    torn-down-jobs    caches.py: its worker Jobs seen being deleted
    metrics           metrics.py, job_metrics.py: its per-job series (which ones: fields
                      of its JobMemory)
    pool-warden       pool_warden.py: the jobs a quarantine cites, as last seen existing

A job's deletion forgets it everywhere (`forget`, from the job cache's thread), in the
order registered: app.py registers job-memory last, so that a store whose part is in the
job's record (the metrics' per-slice series) finds it while it forgets. What a
reconcile, a follow-up or a pod event still running then writes for the job comes after
that, and would stay for good: the sweep (`sweep`, at each resync) drops from every store
the jobs the job cache no longer holds, so what the operator remembers follows the jobs
that exist, never the jobs it has ever seen. tests/unit/test_operator_job_stores.py
creates and deletes a thousand jobs and finds nothing of them left anywhere in the
operator, and measures what each job leaves behind.

Not per job, and bounded otherwise: the informers' stores (the objects that exist), the
node-action limiter (per node), the sizes of committed checkpoint steps on gs://
(checkpoints/listing.py, 4,096 at most), the election (one Lease), and the
namespace-labelled histograms (per namespace).
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from elastic_operator.model.job_memory import JobKey

logger = logging.getLogger("elastic_operator")


class JobStore(Protocol):
    """Anything that keeps something per job."""

    def job_keys(self) -> Iterable[JobKey]:
        """The jobs it holds anything for."""
        ...

    def forget_job(self, key: JobKey) -> None:
        """The job was deleted: everything it holds of the job goes."""
        ...


@dataclass(frozen=True)
class NamedStore:
    name: str  # the metric's `store` label
    jobs: Callable[[], Iterable[JobKey]]  # the jobs it holds something for
    forget: Callable[[JobKey], None]


class JobStores:
    def __init__(self) -> None:
        self.stores: list[NamedStore] = []

    def register(self, name: str, store: JobStore) -> None:
        self.add(name, store.job_keys, store.forget_job)

    def add(self, name: str, jobs: Callable[[], Iterable[JobKey]],
            forget: Callable[[JobKey], None]) -> None:
        self.stores.append(NamedStore(name, jobs, forget))

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
