"""Whether the API server refuses a Job JobSet has not created (core/refused_jobs.py):
the missing Jobs tracked in the job's memory, and a server-side dry run of them, as
JobSet would create them, once they are missing past the grace and at most once an
interval per job. What the dry run answered stands (in the job's memory) until the next
one, or until the Job exists.
"""
from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from elastic_operator.client.kube import ApiError, Kube
from elastic_operator.core.refused_jobs import (
    dry_run_wait,
    expected_jobs,
    missing_jobs,
    missing_since,
    refusal,
)
from elastic_operator.model.job_memory import JobKey, JobMemories
from elastic_operator.model.objects import Observed, RefusedJob

logger = logging.getLogger("elastic_operator")


class JobRefusals:
    def __init__(self, kube: Kube, memory: JobMemories) -> None:
        self.kube, self.memory = kube, memory

    def look(self, key: JobKey, jobset: dict[str, Any], observed: Observed,
             now: datetime) -> tuple[tuple[RefusedJob, ...], float | None]:
        """The refused Jobs among those missing, and the seconds until the next look
        (None: nothing missing). `jobset`: the JobSet as rendered."""
        restarts = observed.jobset.restarts if observed.jobset is not None else 0
        expected = expected_jobs(jobset, restarts)
        missing = missing_jobs(jobset, expected, observed)
        remembered = self.memory.of(key)
        with self.memory.lock:
            remembered.missing_since = missing_since(remembered.missing_since, missing, now)
            wait = dry_run_wait(remembered.missing_since, remembered.dry_run_at, now)
            if wait is None:
                remembered.refused, remembered.dry_run_at = (), None
            due = wait == 0.0
            if due:
                remembered.dry_run_at = now
        if due:
            refused = tuple(r for r in (self._dry_run(key[0], expected[m]) for m in missing)
                            if r is not None)
            with self.memory.lock:
                remembered.refused = refused
            wait = dry_run_wait(remembered.missing_since, now, now)
        with self.memory.lock:
            kept = tuple(r for r in remembered.refused if r.name in missing)
        return kept, wait

    def _dry_run(self, namespace: str, job: dict[str, Any]) -> RefusedJob | None:
        name = str(job["metadata"]["name"])
        try:
            self.kube.dry_run_job(namespace, job)
        except ApiError as e:
            found = refusal(name, e.status, e.api_status)
            if found is None:
                logger.info("dry run of Job %s/%s: %s", namespace, name, e)
            return found
        except OSError as e:
            logger.info("dry run of Job %s/%s failed: %s", namespace, name, e)
        return None
