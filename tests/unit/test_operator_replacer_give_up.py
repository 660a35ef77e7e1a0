"""A slice the trainer blamed, past its restart budget (replacement_writes.py, FailWorkerJob): its
Job is ended through the Job's own deadline (a JSON patch with the Job's uid as its
precondition), and no pod is deleted: the Job controller replaces a deleted pod it did
not count, which is how the withdrawn pod-deleting attempt looped."""
from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from elastic_api.conditions import Reason
from elastic_operator.client.kube import Kube
from elastic_operator.core.plan import FailWorkerJob
from elastic_operator.metrics.metrics import OperatorMetrics
from elastic_operator.writes.node_actions import NodeActionLimiter
from elastic_operator.writes.replacement_writes import ReplacementWrites
from tests.builders import at

JOB = {"metadata": {"name": "article", "namespace": "ns", "uid": "uid-1"}}


class JobsKube(Kube):
    """Records every write the replacer makes."""

    def __init__(self, found: bool = True) -> None:
        super().__init__(None)
        self.found = found
        self.calls: list[tuple[Any, ...]] = []

    def fail_job(self, namespace: str, name: str, uid: str) -> bool:
        self.calls.append(("end", namespace, name, uid))
        return self.found

    def delete_pod(self, namespace: str, name: str, uid: str) -> bool:
        self.calls.append(("delete", name, uid))
        return True

    def delete_pod_now(self, namespace: str, name: str, uid: str) -> bool:
        self.calls.append(("force-delete", name, uid))
        return True


def test_the_job_is_ended_and_no_pod_deleted() -> None:
    for found in (True, False):  # False: the Job is gone or another one (no retry)
        kube = JobsKube(found)
        action = FailWorkerJob("ns", "article-worker-1", "job-uid", 1, Reason.SLICE_HUNG)
        waits = ReplacementWrites(kube, OperatorMetrics(CollectorRegistry()),
                         NodeActionLimiter()).execute(JOB, (action,), at(0))
        assert kube.calls == [("end", "ns", "article-worker-1", "job-uid")]
        assert waits is None
