"""The article's job (v5e 4x4 x 3 slices, backend pathways) on the local control plane:
submitted, read back (status, conditions, pods, the JobSet, Events), reported on as the
trainer does, and deleted with its pods gone, so the fake TPU nodes are free again."""
from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from kubernetes import client

from elastic_api.conditions import ConditionType as C
from elastic_api.conditions import Reason
from elastic_api.names import (
    GROUP,
    JOBSET_GROUP,
    JOBSET_PLURAL,
    JOBSET_VERSION,
    PLURAL,
    VERSION,
    worker_job_name,
    worker_pods_selector,
)
from elastic_devtools.localcluster.faults import wait_for
from tests.builders import etj, iso

JOB = "article"
JOBSETS = (JOBSET_GROUP, JOBSET_VERSION, JOBSET_PLURAL)
TIMEOUT = 120  # scheduling 13 pods and the Job controller's backoff take a while


def delete_jobs_and_wait_for_pods(api: client.ApiClient, namespace: str) -> None:
    """Delete every job of the namespace and wait until the garbage collector has taken
    their pods, so the fake TPU nodes are free for the next test."""
    custom = client.CustomObjectsApi(api)
    for item in custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]:
        custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                               item["metadata"]["name"])
    core = client.CoreV1Api(api)
    wait_for(lambda: not core.list_namespaced_pod(namespace).items, TIMEOUT,
             f"pods of {namespace} gone")


def job_manifest(**spec: Any) -> dict[str, Any]:
    """The article's job (v5e 4x4 x 3 slices), backend pathways; `spec` fields on top."""
    return (etj(JOB, namespace=None).backend("pathways").max_restarts(0)
            .spec(elastic={"maxSliceRestarts": 5},
                  checkpoint={"directory": "/tmp/etj-operator-test/no-checkpoints-here"},
                  pathways={"gcsScratch": "gs://test-bucket/scratch"})
            .trainer("trainer:test", 1000).spec(**spec).obj())


def submit(api: client.ApiClient, ns: str, **spec: Any) -> None:
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, job_manifest(**spec))


def get_job(api: client.ApiClient, ns: str) -> dict[str, Any]:
    obj: dict[str, Any] = client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, JOB)
    return obj


def status_of(api: client.ApiClient, ns: str) -> dict[str, Any]:
    status: dict[str, Any] = get_job(api, ns).get("status") or {}
    return status


def condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions", []) if c["type"] == type_), {})


def is_true(status: dict[str, Any], type_: str) -> bool:
    return condition(status, type_).get("status") == "True"


def recovered(status: dict[str, Any]) -> bool:
    return condition(status, C.RECOVERING).get("reason") == Reason.RECOVERED


def worker_pods(api: client.ApiClient, ns: str, slice_index: int) -> list[client.V1Pod]:
    pods = client.CoreV1Api(api).list_namespaced_pod(
        ns, label_selector=worker_pods_selector(JOB, slice_index)).items
    return sorted((p for p in pods if p.metadata.deletion_timestamp is None
                   and p.status.phase == "Running"), key=lambda p: p.metadata.name)


def get_jobset(api: client.ApiClient, ns: str) -> dict[str, Any] | None:
    try:
        obj: dict[str, Any] = client.CustomObjectsApi(api).get_namespaced_custom_object(
            *JOBSETS[:2], ns, JOBSETS[2], JOB)
        return obj
    except client.ApiException as err:
        if err.status == 404:
            return None
        raise


def events(api: client.ApiClient, ns: str, reason: str) -> list[str]:
    items = client.CoreV1Api(api).list_namespaced_event(
        ns, field_selector=f"involvedObject.name={JOB},reason={reason}").items
    return [e.message for e in items]


def write_report(api: client.ApiClient, ns: str, report: dict[str, Any]) -> None:
    """As the trainer does (docs/status-contract.md): a merge patch on /status."""
    client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
        GROUP, VERSION, ns, PLURAL, JOB, {"status": {"training": report}},
        _content_type="application/merge-patch+json")


def resumed_report(detected_at: datetime, resumed_at: datetime) -> dict[str, Any]:
    return {
        "observedAt": iso(resumed_at), "state": "Training", "step": 101, "attempt": 1,
        "activeSlices": 3, "elasticEventsTotal": 1,
        "elasticEvent": {"id": 1, "phase": "Resumed", "detectedAt": iso(detected_at),
                         "failedStep": 188, "slicesDown": [2], "restoredFromStep": 100,
                         "restoreSource": "checkpoint", "resumedAt": iso(resumed_at),
                         "resumedStep": 101},
    }


def parse(ts: str) -> datetime:
    return datetime.fromisoformat(ts.replace("Z", "+00:00"))


def worker_job_uid(api: client.ApiClient, ns: str, index: int) -> str | None:
    """The uid of slice `index`'s worker Job (None: there is none)."""
    try:
        return str(client.BatchV1Api(api).read_namespaced_job(
            worker_job_name(JOB, index), ns).metadata.uid)
    except client.ApiException as err:
        if err.status == 404:
            return None
        raise


def start_trainer(ns: str, kubeconfig: Path, work: Path, *, checkpoint_dir: Path | None = None,
                  checkpoint_period: int = 100000, extra: Sequence[str] = (),
                  log_name: str = "train.log") -> subprocess.Popen[bytes]:
    """The real trainer (`etj train`) of the job, on simulated slices that follow the
    worker pods' readiness, as the head pod runs it (the kwok head pod runs nothing);
    its log in `work`/`log_name`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ETJ_JOB_", "XLA_"))}
    env.update(KUBECONFIG=str(kubeconfig))
    cmd = [sys.executable, "-m", "elastic_api.etj_cli", "train", "--config", "tiny",
           "--steps", "100000", "--batch", "6", "--simulate-slices", "3",
           "--devices-per-slice", "1", "--slice-health", "pods", "--job", f"{ns}/{JOB}",
           "--checkpoint-dir", str(checkpoint_dir or work / "ckpt"),
           "--checkpoint-period", str(checkpoint_period),
           "--compilation-cache", str(work / "cache"), "--min-step-seconds", "0.02",
           "--log-every", "100", "--report-interval", "1", "--elastic-timeout", "120",
           *extra]
    with open(work / log_name, "wb") as log_file:
        return subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, env=env)
