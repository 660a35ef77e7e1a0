"""The trainer restart's writes (replacement_writes.py, RestartTrainer), against a Kube that records
them: the head Job's backoffLimit is raised to its failures + 1 first (so the Job replaces
the pod instead of failing, and the JobSet with it), then the pod deleted (uid
precondition); a Job that is another one (a JobSet restart made a new head Job) or changed
meanwhile is left alone, and a limit already high enough is not raised again."""
from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from elastic_operator.client.kube import Kube
from elastic_operator.core.plan import RestartTrainer
from elastic_operator.metrics.metrics import OperatorMetrics
from elastic_operator.writes.node_actions import NodeActionLimiter
from elastic_operator.writes.replacement_writes import ReplacementWrites
from tests.builders import at

ACTION = RestartTrainer("ns", "article-pathways-head-0", "head-job-uid",
                        "article-pathways-head-0-0", "pod-uid", 42)
JOB = {"metadata": {"name": "article", "namespace": "ns", "uid": "uid-1"}}


class HeadKube(Kube):
    def __init__(self, head: dict[str, Any] | None, patch_ok: bool = True) -> None:
        super().__init__(None)
        self.head, self.patch_ok = head, patch_ok
        self.calls: list[tuple[Any, ...]] = []

    def get_batch_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.calls.append(("get", name))
        return self.head

    def allow_job_failure(self, namespace: str, name: str, uid: str, failed: int,
                          limit: int) -> bool:
        self.calls.append(("raise", name, uid, failed, limit))
        return self.patch_ok

    def delete_pod(self, namespace: str, name: str, uid: str) -> bool:
        self.calls.append(("delete", name, uid))
        return True


def head_job(uid: str = "head-job-uid", limit: int = 0, failed: int = 0) -> dict[str, Any]:
    return {"metadata": {"uid": uid}, "spec": {"backoffLimit": limit},
            "status": {"failed": failed} if failed else {}}


@pytest.mark.parametrize(("head", "patch_ok", "calls"), [
    (head_job(), True, [("get", ACTION.head_job), ("raise", ACTION.head_job, "head-job-uid",
                                                   0, 0),
                        ("delete", ACTION.pod_name, "pod-uid")]),
    (head_job(limit=2, failed=1), True, [("get", ACTION.head_job),
                                         ("delete", ACTION.pod_name, "pod-uid")]),
    (head_job(limit=1, failed=1), True, [("get", ACTION.head_job),
                                         ("raise", ACTION.head_job, "head-job-uid", 1, 1),
                                         ("delete", ACTION.pod_name, "pod-uid")]),
    (head_job(), False, [("get", ACTION.head_job),
                         ("raise", ACTION.head_job, "head-job-uid", 0, 0)]),
    (head_job(uid="another-head-job"), True, [("get", ACTION.head_job)]),
    (None, True, [("get", ACTION.head_job)]),
], ids=["raised then deleted", "limit high enough", "after an earlier restart",
        "the Job changed meanwhile", "another head Job", "no head Job"])
def test_the_head_job_lets_one_more_pod_fail_before_its_pod_is_deleted(
        head: dict[str, Any] | None, patch_ok: bool, calls: list[tuple[Any, ...]]) -> None:
    kube = HeadKube(head, patch_ok)
    ReplacementWrites(kube, OperatorMetrics(CollectorRegistry()), NodeActionLimiter()).execute(
        JOB, (ACTION,), at(0))
    assert kube.calls == calls
