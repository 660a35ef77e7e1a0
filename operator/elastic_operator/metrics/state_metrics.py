"""The operator's metrics of its own state (docs/metrics.md): whether the CRD the API
server serves is its own schema (core/schema.py), and how many jobs each of its per-job
stores holds something for (job_stores.py). OperatorMetrics (metrics.py) composes them.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Gauge

from elastic_operator.core.schema import STATES, SchemaVerdict


class SchemaMetrics:
    """etj_crd_schema_revision and etj_crd_schema_state, as the last verdict says."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.revision = Gauge(
            "etj_crd_schema_revision", "Schema revision of the ElasticTrainingJob CRD "
            "(elastic_api/schema_revisions.py), by role: own (this operator's) and served "
            "(the API server's; 0: a CRD from before revisions; absent while it cannot be "
            "read).", ["role"], registry=registry)
        self.state = Gauge(
            "etj_crd_schema_state", "1 for the verdict on the served CRD, 0 for the others: "
            "current, newer (a downgraded operator), older (it stores every status field), "
            "outdated (it lacks status fields: the operator writes no status but the "
            "SchemaCurrent condition), unknown (it cannot be read).", ["state"],
            registry=registry)

    def record(self, verdict: SchemaVerdict) -> None:
        self.revision.labels("own").set(verdict.own_revision)
        if verdict.served_revision is None:
            with contextlib.suppress(KeyError):  # never set
                self.revision.remove("served")
        else:
            self.revision.labels("served").set(verdict.served_revision)
        for state in STATES:
            self.state.labels(state).set(int(state == verdict.state))


class MemoryMetrics:
    """etj_job_memory_entries{store}, each read from its store at each scrape."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.entries = Gauge(
            "etj_job_memory_entries", "Jobs that a per-job store of the operator holds "
            "something for, by store (read at each scrape): it follows the jobs that "
            "exist, never the jobs ever seen.", ["store"], registry=registry)

    def observe(self, store: str, jobs: Callable[[], int]) -> None:
        self.entries.labels(store).set_function(jobs)
