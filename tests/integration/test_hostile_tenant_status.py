"""A hostile tenant writes the operator's part of a job's status, with its own token.

Without the policy (a cluster that did not install it) a running operator acts on none
of the forged records, says each once (a warning and etj_foreign_status_records_total),
quarantines no pool and keeps recovering its job.

The tenant's ServiceAccount holds exactly the Role the operator renders for the trainer
(render_rbac: `patch` on its own job's /status). With the chart's status policy installed
(rendered by `helm template`, bound to this test's namespace only: the control plane is
shared with modules whose operator runs as admin), every forgery of the operator's records
is refused at admission and status.training still goes through; a status grown past the
CRD's bounds is refused by the schema whoever writes it (docs/threat-model.md, "Status
writers").
"""
from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from elastic_api import GROUP, PLURAL, VERSION
from elastic_api.models import ElasticTrainingJob
from elastic_api.models.status import MAX_PENDING_EVENTS
from elastic_api.names import QUARANTINE_LABEL
from elastic_devtools.localcluster import Cluster, faults
from elastic_devtools.localcluster.faults import wait_for
from elastic_devtools.localcluster.operator_process import OperatorProcess
from elastic_operator.render import render_rbac
from tests.service_accounts import token_kubeconfig
from tests.support.article_job import (
    JOB,
    events,
    job_manifest,
    submit,
    worker_job_uid,
    worker_pods,
)
from tests.support.chart import helm_template, unique_release
from tests.support.waiting import job_version, ready_on_new_job, wait_running, wait_status

pytestmark = pytest.mark.cluster

POLICY_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
WORKER_JOB_UID = "3f2f8c1e-0000-4000-8000-000000000001"


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def report(now: datetime, step: int) -> dict[str, Any]:
    """The trainer's own report (status.training)."""
    return {"observedAt": _iso(now), "state": "Training", "step": step}


def operator_status(now: datetime) -> dict[str, Any]:
    """What the operator would have written: three slices, one restarted twice."""
    slices = [{"index": i, "state": "Ready", "restarts": 2 if i == 1 else 0, "hosts": 4,
               "readyHosts": 4, "pool": f"tpu-pool-{i}",
               "counted": {"jobUid": WORKER_JOB_UID, "failedPods": 2 if i == 1 else 0}}
              for i in range(3)]
    return {"slices": slices, "slicesDesired": 3, "slicesReady": 3,
            "pools": [{"name": f"tpu-pool-{i}"} for i in range(3)],
            "counters": {"sliceFailures": 2}, "observedGeneration": 1, "phase": "Running"}


def forgeries(status: dict[str, Any], now: datetime) -> list[tuple[str, str, dict[str, Any]]]:
    """Each forgery the issue names: what it is, the field it writes, a merge patch."""
    moved = [dict(s) for s in status["slices"]]
    moved[1] = {**moved[1], "replacement": {
        "action": "Move", "reason": "Maintenance", "jobUid": WORKER_JOB_UID,
        "fromPool": "another-teams-pool", "requestedAt": _iso(now), "blame": "Node"}}
    reset = [{**s, "restarts": 0} for s in status["slices"]]
    future = _iso(now + timedelta(days=3650))
    event = {"name": f"{JOB}.0123456789abcdef", "reason": "PoolQuarantined",
             "type": "Warning", "message": "pool another-teams-pool quarantined"}
    return [
        ("a replacement record", "slices", {"slices": moved}),
        ("future-dated pool failures", "pools", {"pools": [{
            "name": "another-teams-pool",
            "failures": [{"at": future, "blame": "Node", "reason": "NodeNotReady"}] * 3}]}),
        ("a pending event", "pendingEvents", {"pendingEvents": [event]}),
        ("restart counts reset", "slices", {"slices": reset}),
        ("counters reset", "counters", {"counters": {"sliceFailures": 0}}),
    ]


def patch_status(api: client.ApiClient, ns: str, status: dict[str, Any],
                 dry_run: str | None = None) -> dict[str, Any]:
    """A JSON merge patch of these status fields, as the trainer writes its report."""
    body = {"status": status}
    kwargs = {"dry_run": dry_run} if dry_run else {}
    result: dict[str, Any] = client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
        GROUP, VERSION, ns, PLURAL, JOB, body, **kwargs)
    return result


def refusal(attempt: Any) -> ApiException:
    with pytest.raises(ApiException) as refused:
        attempt()
    return refused.value


@pytest.fixture
def tenant(cluster: Cluster, api: client.ApiClient, ns: str, tmp_path: Path
           ) -> Iterator[client.ApiClient]:
    """The job created, its status as the operator left it, and a client holding the
    tenant's own token with the trainer Role the operator renders for that job."""
    custom = client.CustomObjectsApi(api)
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, job_manifest())
    job = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, JOB)
    seeded = patch_status(api, ns, operator_status(datetime.now(UTC)))
    assert seeded.get("status", {}).get("slices"), seeded
    rbac = client.RbacAuthorizationV1Api(api)
    role, binding = render_rbac(ElasticTrainingJob.model_validate(job))
    rbac.create_namespaced_role(ns, role)
    rbac.create_namespaced_role_binding(ns, binding)
    sa = binding["subjects"][0]["name"]
    tenant_api = config.new_client_from_config(
        config_file=str(token_kubeconfig(cluster, ns, sa, tmp_path / "tenant.kubeconfig")))
    # The RBAC authorizer learns of the binding from its informer: a dry run until it has.
    wait_for(lambda: _allowed(tenant_api, ns), 30, "the trainer Role seen by the authorizer")
    yield tenant_api
    tenant_api.close()


def _allowed(api: client.ApiClient, ns: str) -> bool:
    try:
        patch_status(api, ns, {"training": report(datetime.now(UTC), 1)}, dry_run="All")
    except ApiException as e:
        if e.status == 403:
            return False
        raise
    return True


@pytest.fixture
def status_policy(api: client.ApiClient, ns: str, tmp_path: Path) -> Iterator[None]:
    """The chart's status policy, bound to this namespace alone."""
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"statusPolicy": {"namespaceSelector": {
        "matchLabels": {"kubernetes.io/metadata.name": ns}}}}))
    docs = [d for d in helm_template(unique_release(), "etj-system", values_file=values)
            if d["kind"] in POLICY_KINDS and d["metadata"]["name"].endswith("status-writers")]
    policy, binding = (next(d for d in docs if d["kind"] == k) for k in POLICY_KINDS)
    admission = client.AdmissionregistrationV1Api(api)
    admission.create_validating_admission_policy(policy)
    admission.create_validating_admission_policy_binding(binding)
    yield
    admission.delete_validating_admission_policy_binding(binding["metadata"]["name"])
    admission.delete_validating_admission_policy(policy["metadata"]["name"])


def test_forged_operator_records_are_refused_at_admission(
        api: client.ApiClient, ns: str, tenant: client.ApiClient, status_policy: None) -> None:
    now = datetime.now(UTC)
    before = client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, JOB)["status"]
    forged = forgeries(before, now)

    def refused_now() -> bool:  # the policy reaches the API server's admission by a watch
        try:
            patch_status(tenant, ns, forged[1][2], dry_run="All")
        except ApiException as e:
            return e.status == 403
        return False

    wait_for(refused_now, 30, "the status policy in force")
    for what, field, patch in forged:
        error = refusal(lambda patch=patch: patch_status(tenant, ns, patch))
        assert error.status == 403, (what, error.body)
        assert f"status.{field} is written by the operator only" in error.body, what
    # The trainer's own report still goes through, alone.
    written = patch_status(tenant, ns, {"training": report(now, 7)})
    assert written["status"]["training"]["step"] == 7
    after = {k: v for k, v in written["status"].items() if k != "training"}
    assert after == before


def test_a_status_grown_past_its_bounds_is_refused_by_the_schema(
        api: client.ApiClient, ns: str, tenant: client.ApiClient) -> None:
    """Without the policy (a cluster that did not install it) the schema still bounds
    every list: the tenant cannot grow the status toward etcd's limit."""
    events = [{"name": f"{JOB}.{uuid.uuid4().hex[:16]}", "reason": "SliceDown",
               "message": "x"} for _ in range(MAX_PENDING_EVENTS + 1)]
    error = refusal(lambda: patch_status(tenant, ns, {"pendingEvents": events}))
    assert error.status == 422 and "status.pendingEvents" in error.body, error.body
    assert f"must have at most {MAX_PENDING_EVENTS} items" in error.body


FORGED_FIELDS = ("slices", "pools", "pendingEvents")


def _tenant_client(cluster: Cluster, ns: str, path: Path) -> client.ApiClient:
    """The job's pods' ServiceAccount (`default`), whose Role the operator created."""
    tenant = config.new_client_from_config(
        config_file=str(token_kubeconfig(cluster, ns, "default", path)))
    wait_for(lambda: _allowed(tenant, ns), 30, "the trainer Role seen by the authorizer")
    return tenant


def _foreign(operator: OperatorProcess) -> dict[str, float]:
    metrics = operator.metrics()
    return {k: v for k, v in metrics.items() if k.startswith("etj_foreign_status_records_total")}


def test_without_the_policy_the_operator_ignores_forgeries_says_once_and_recovers(
        cluster: Cluster, api: client.ApiClient, ns: str, tmp_path: Path) -> None:
    log_path = Path(cluster.logs_dir) / "operator-hostile-tenant.log"
    offset = log_path.stat().st_size if log_path.exists() else 0  # (a reused cluster's)
    with OperatorProcess(Path(cluster.kubeconfig), log_path) as operator:
        submit(api, ns)
        running = wait_running(api, ns)
        tenant = _tenant_client(cluster, ns, tmp_path / "tenant.kubeconfig")
        now = datetime.now(UTC)
        for _what, _field, patch in forgeries(running, now)[:3]:
            patch_status(tenant, ns, patch)
        wanted = {f'etj_foreign_status_records_total{{field="{f}"}}': 1.0
                  for f in FORGED_FIELDS}
        wait_for(lambda: _foreign(operator) == wanted, 60,
                 f"each forged field said once, and no other ({_foreign(operator)})")

        # Its own job keeps recovering: a slice fails and comes back.
        before = job_version(api, ns)
        faults.fail_pod(api, ns, worker_pods(api, ns, 2)[0].metadata.name)
        recovered = wait_status(api, ns, lambda s: s["slices"][2]["state"] == "Ready"
                                and s["slices"][2]["restarts"] == 1,
                                "slice 2 replaced and Ready again", since=before)
        assert recovered["slices"][1]["restarts"] == 0  # nothing taken from the forgery
        assert _foreign(operator) == wanted  # said once, however often it was read
        nodes = client.CoreV1Api(api).list_node(label_selector=QUARANTINE_LABEL).items
        assert nodes == [], [n.metadata.name for n in nodes]
        assert events(api, ns, "PoolQuarantined") == []  # the forged outbox entry
    log = log_path.read_bytes()[offset:].decode()
    for field_name in FORGED_FIELDS:
        assert log.count(f"status.{field_name} was written by someone other") == 1, field_name


def test_a_tenants_own_failures_and_reports_quarantine_no_shared_pool(
        cluster: Cluster, api: client.ApiClient, ns: str) -> None:
    """The tenant asks for a quarantine after one failure and names exit code 42 as the
    hardware's, then its worker exits 42: under the operator's defaults (--quarantine-min-
    jobs 2, no --quarantine-on-job-report) its slice is replaced at once, no pool is
    quarantined, and the SliceReplacing Event says why and which flag would change it."""
    log_path = Path(cluster.logs_dir) / "operator-hostile-tenant-quarantine.log"
    with OperatorProcess(Path(cluster.kubeconfig), log_path):
        submit(api, ns, recovery={"quarantineAfterFailures": 1, "hardwareExitCodes": [42]})
        st = wait_running(api, ns)
        pool = st["slices"][1]["pool"]
        old = worker_job_uid(api, ns, 1)
        faults.fail_pod(api, ns, worker_pods(api, ns, 1)[0].metadata.name, exit_code=42)
        st = ready_on_new_job(api, ns, 1, old, "slice 1 replaced after its own report")
        # The quarantine, had it been decided, was written before the Job's deletion.
        nodes = client.CoreV1Api(api).list_node(label_selector=QUARANTINE_LABEL).items
        assert nodes == [], [n.metadata.name for n in nodes]
        assert [(f["blame"], p["name"]) for p in st["pools"] for f in p.get("failures", [])] \
            == [("Reported", pool)]
        wait_for(lambda: events(api, ns, "SliceReplacing"), 30, "a SliceReplacing Event")
        (said,) = events(api, ns, "SliceReplacing")
        assert f"node pool {pool} not quarantined: the job's own report is no evidence " \
            "against a pool other teams use" in said and "(--quarantine-on-job-report)" in said
        assert events(api, ns, "PoolQuarantined") == []
