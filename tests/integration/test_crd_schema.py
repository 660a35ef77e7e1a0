"""The operator on an older CRD (issue 61, its first done-when), on the local control
plane: the CRD as git history has it before status.slices[].counted existed
(tests/fixtures/crds/elastictrainingjobs-a59b14a.yaml), the operator of this checkout.

Within a minute of a job's creation the refusal is visible everywhere it is said: the
SchemaCurrent condition on the job, one Warning Event, the metric, the ERROR log line.
The operator writes no status but that condition (nothing the old schema would prune)
and creates nothing. Then the current CRD is applied: the job is served at once, its
status whole (slices[].counted among it). The cluster is the session's: the current CRD
is restored whatever happens.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from elastic_api.conditions import ConditionType as C
from elastic_api.conditions import Reason
from elastic_api.schema_revisions import REVISIONS
from elastic_devtools.localcluster import Cluster
from elastic_devtools.localcluster.crds import install_crd
from elastic_devtools.localcluster.faults import wait_for
from elastic_devtools.localcluster.operator_process import OperatorProcess
from tests.support.article_job import (
    JOB,
    condition,
    delete_jobs_and_wait_for_pods,
    events,
    get_jobset,
    status_of,
    submit,
)
from tests.support.waiting import wait_running, wait_status

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
OLD_CRD = ROOT / "tests" / "fixtures" / "crds" / "elastictrainingjobs-a59b14a.yaml"
WITHIN = 60.0  # the done-when: visible everywhere within a minute


@pytest.fixture
def api(cluster: Cluster) -> Iterator[client.ApiClient]:
    api_client = cluster.api_client()
    yield api_client
    api_client.close()


@pytest.fixture
def old_crd(api: client.ApiClient) -> Iterator[None]:
    """The CRD before status.slices[].counted, the current one restored after."""
    install_crd(api, yaml.safe_load(OLD_CRD.read_text()), timeout=30)
    try:
        yield
    finally:
        install_crd(api, timeout=30)


@pytest.fixture
def operator(cluster: Cluster, old_crd: None, tmp_path: Path) -> Iterator[OperatorProcess]:
    with OperatorProcess(Path(cluster.kubeconfig), tmp_path / "operator.log") as proc:
        yield proc


def reconciles(op: OperatorProcess) -> float:
    return op.metrics().get("etj_reconcile_duration_seconds_count", 0.0)


def refusal_seen(api: client.ApiClient, ns: str, op: OperatorProcess) -> dict[str, Any] | None:
    """Every place the refusal is said, once all say it (None: not yet)."""
    cond = condition(status_of(api, ns), C.SCHEMA_CURRENT)
    metrics = op.metrics()
    logged = [line for line in op.log_path.read_text().splitlines()
              if "ERROR" in line and "schema outdated" in line]
    if not (cond.get("reason") == Reason.CRD_OUTDATED and events(api, ns, Reason.CRD_OUTDATED)
            and metrics.get('etj_crd_schema_state{state="outdated"}') == 1 and logged):
        return None
    return cond


def test_an_outdated_crd_is_refused_visibly_and_loses_no_status_field(
        api: client.ApiClient, namespace: str, operator: OperatorProcess) -> None:
    ns = namespace
    try:
        submit(api, ns)
        created = time.monotonic()
        cond = wait_for(lambda: refusal_seen(api, ns, operator), WITHIN,
                        f"the refusal said everywhere (log: {operator.log_path})")
        assert time.monotonic() - created < WITHIN
        assert cond["status"] == "False" and "status.slices[].counted" in cond["message"]
        assert "kubectl apply --server-side -f crds/elastictrainingjobs.yaml" in \
            cond["message"]
        metrics = operator.metrics()
        assert metrics['etj_crd_schema_revision{role="served"}'] == 0
        assert metrics['etj_crd_schema_revision{role="own"}'] == len(REVISIONS)
        # The operator wrote nothing but the condition, and created nothing (the zero
        # counters are the old schema's defaults, filled in by the API server).
        status = status_of(api, ns)
        assert [c["type"] for c in status["conditions"]] == [C.SCHEMA_CURRENT], status
        assert set(status) <= {"conditions", "counters"}, status
        assert not any(status.get("counters", {}).values()), status
        assert get_jobset(api, ns) is None

        # Once per job: another pass (the job changed) posts no second Event.
        before = reconciles(operator)
        client.CustomObjectsApi(api).patch_namespaced_custom_object(
            "elastic.pathways.dev", "v1alpha1", ns, "elastictrainingjobs", JOB,
            {"metadata": {"annotations": {"etj.test/touched": "yes"}}})
        wait_for(lambda: reconciles(operator) > before, 30, "a pass after the touch")
        assert len(events(api, ns, Reason.CRD_OUTDATED)) == 1

        # The CRD upgraded: the job is served at once, its status whole.
        install_crd(api, timeout=30)
        status = wait_running(api, ns)
        status = wait_status(api, ns, lambda s: all(
            "counted" in sl for sl in s.get("slices", [])) and condition(
            s, C.SCHEMA_CURRENT).get("reason") == Reason.CRD_CURRENT,
            "every slice's counted stored, SchemaCurrent True", timeout=WITHIN)
        assert condition(status, C.SCHEMA_CURRENT)["status"] == "True"
        assert status["jobSetName"] == JOB and len(status["slices"]) == 3
        assert operator.metrics()['etj_crd_schema_state{state="current"}'] == 1
        assert "schema current" in operator.log_path.read_text()
    finally:
        install_crd(api, timeout=30)
        delete_jobs_and_wait_for_pods(api, ns)
