"""handlers.Reconciler against a stand-in Kube: an admitted job whose children the API
server refuses is reported once, not retried as an error; a checkpoint scan that is done
before its callback is registered does not deadlock the reconciler."""
from __future__ import annotations

import json
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from elastic_api.validation import validate_job
from elastic_operator.handlers import Reconciler
from elastic_operator.kube import ApiError, Kube
from elastic_operator.metrics import OperatorMetrics

JOB: dict[str, Any] = {
    "apiVersion": "elastic.pathways.dev/v1alpha1", "kind": "ElasticTrainingJob",
    "metadata": {"name": "train", "namespace": "ml", "uid": "u-1", "generation": 1},
    "spec": {"tpu": {"type": "v5e", "topology": "2x4", "numSlices": 1},
             "checkpoint": {"directory": "gs://b/ckpt"},
             "trainer": {"image": "trainer:1", "steps": 10},
             "pathways": {"gcsScratch": "gs://b/scratch"}, "maxRestarts": 2**31},
}
# What JobSet's webhook answers for a maxRestarts beyond int32 (HTTP 400). Admission now
# refuses such a spec; a job admitted under an older CRD still carries it, and this path
# stays for what admission cannot check (e.g. a duplicate env name, refused by JobSet's schema).
WEBHOOK_REFUSAL = ApiError(400, "Bad Request", json.dumps({
    "kind": "Status", "status": "Failure", "code": 400,
    "message": 'admission webhook "mjobset.kb.io" denied the request: json: cannot unmarshal '
               "number 2147483648 into Go struct field FailurePolicy.spec.failurePolicy."
               "maxRestarts of type int32"}))


class StandInKube(Kube):
    """One job; creating a JobSet raises `jobset_error`; status patches are merged."""

    def __init__(self, jobset_error: ApiError) -> None:
        super().__init__(None)
        self.job = json.loads(json.dumps(JOB))
        self.jobset_error = jobset_error
        self.created: list[str] = []
        self.patches: list[dict[str, Any]] = []

    def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        return json.loads(json.dumps(self.job))

    def get_jobset(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None

    def create(self, obj: dict[str, Any]) -> bool:
        if obj["kind"] == "JobSet":
            raise self.jobset_error
        self.created.append(obj["kind"])
        return True

    def patch_job_status(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self.patches.append(patch)
        self.job["status"] = {**(self.job.get("status") or {}), **patch["status"]}


def reconciler(kube: Kube) -> tuple[Reconciler, OperatorMetrics]:
    metrics = OperatorMetrics(CollectorRegistry())
    return Reconciler(kube, metrics), metrics


def errors(metrics: OperatorMetrics) -> float:
    return float(metrics.reconcile_errors._value.get())


def test_a_refused_jobset_is_reported_once_as_invalid_spec() -> None:
    kube = StandInKube(WEBHOOK_REFUSAL)
    rec, metrics = reconciler(kube)
    for _ in range(3):  # the first reconcile, then two resyncs
        rec.reconcile("ml", "train")
    assert len(kube.patches) == 1 and errors(metrics) == 0
    status = kube.job["status"]
    assert status["observedGeneration"] == 1
    applied = next(c for c in status["conditions"] if c["type"] == "SpecApplied")
    assert (applied["status"], applied["reason"]) == ("False", "InvalidSpec")
    assert applied["message"].startswith(
        "the API server refused the JobSet train rendered from this spec (HTTP 400): "
        'admission webhook "mjobset.kb.io" denied the request: json: cannot unmarshal')


def test_a_failure_that_may_pass_is_still_an_error_retried_later() -> None:
    kube = StandInKube(ApiError(500, "Internal Server Error", '{"message": "etcd timeout"}'))
    rec, metrics = reconciler(kube)
    rec.reconcile("ml", "train")
    assert kube.patches == [] and errors(metrics) == 1


class DoneAtOnce:
    """An executor whose futures are finished before submit returns."""

    def submit(self, fn: Any, *args: Any) -> Future[Any]:
        future: Future[Any] = Future()
        future.set_result(fn(*args))
        return future


def test_a_scan_done_before_its_callback_is_registered_does_not_deadlock(
        tmp_path: Path) -> None:
    rec, _ = reconciler(Kube(None))
    rec._scan_pool = DoneAtOnce()  # type: ignore[assignment]
    woken: list[tuple[str, str]] = []
    rec.on_scan_done = lambda ns, name: woken.append((ns, name))
    job = validate_job({**JOB, "spec": {**JOB["spec"], "maxRestarts": 0, "checkpoint": {
        "directory": str(tmp_path)}}})
    scan = threading.Thread(target=rec._maybe_scan, args=("ml", "train", job), daemon=True)
    scan.start()
    scan.join(timeout=10)
    assert not scan.is_alive(), "_maybe_scan deadlocked on its own scan lock"
    assert woken == [("ml", "train")]
