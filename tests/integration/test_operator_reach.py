"""The operator's own reach, as the chart's admission policies narrow it, with a token of
the operator's ServiceAccount (chart RBAC, TokenRequest): on nodes only its quarantine
label and annotations; Roles and RoleBindings only the trainer's (docs/threat-model.md,
"The operator's reach"). Every write is a server-side dry run: admission runs, nothing
changes the shared control plane's nodes.
"""
from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from elastic_api.models import ElasticTrainingJob
from elastic_api.names import QUARANTINE_CAUSE_ANNOTATION, QUARANTINE_LABEL
from elastic_devtools.localcluster import Cluster
from elastic_devtools.localcluster.faults import wait_for
from elastic_operator.render import render_rbac
from tests.service_accounts import token_kubeconfig
from tests.support.article_job import job_manifest
from tests.support.chart import RBAC_KINDS, helm_template, unique_release

pytestmark = pytest.mark.cluster

OPERATOR_SA = "operator"
POLICIES = ("node-patches", "trainer-rbac")


def _kubectl(cluster: Cluster, verb: str, docs: list[dict[str, Any]]) -> None:
    result = subprocess.run(
        ["kubectl", "--kubeconfig", str(cluster.kubeconfig), verb, "-f", "-",
         *(["--ignore-not-found"] if verb == "delete" else [])],
        input=yaml.safe_dump_all(docs), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


@pytest.fixture
def operator(cluster: Cluster, api: client.ApiClient, ns: str, tmp_path: Path
             ) -> Iterator[client.ApiClient]:
    """The chart's RBAC and reach policies for a release in `ns`, and a client holding
    a token of its ServiceAccount."""
    release = unique_release()
    docs = helm_template(release, ns, f"serviceAccount.name={OPERATOR_SA}")
    installed = [d for d in docs if d["kind"] in RBAC_KINDS or (
        d["kind"].startswith("ValidatingAdmissionPolicy")
        and d["metadata"]["name"].endswith(POLICIES))]
    _kubectl(cluster, "apply", installed)
    kubeconfig = token_kubeconfig(cluster, ns, OPERATOR_SA, tmp_path / "operator.kubeconfig")
    operator_api = config.new_client_from_config(config_file=str(kubeconfig))
    yield operator_api
    operator_api.close()
    _kubectl(cluster, "delete", installed)


def _refused(attempt: Any) -> ApiException | None:
    try:
        attempt()
    except ApiException as e:
        return e
    return None


def _patch_node(api: client.ApiClient, node: str, body: dict[str, Any]) -> Any:
    return client.CoreV1Api(api).patch_node(node, body, dry_run="All")


def test_the_operator_patches_only_its_own_node_label_and_annotations(
        api: client.ApiClient, operator: client.ApiClient) -> None:
    node = client.CoreV1Api(api).list_node().items[0].metadata.name
    foreign = {"metadata": {"labels": {"team": "mine-now"}}}

    def in_force() -> bool:
        error = _refused(lambda: _patch_node(operator, node, foreign))
        return error is not None and "only its own node label" in str(error.body)

    wait_for(in_force, 60, "the node policy in force (and the operator's RBAC seen)")
    assert _refused(lambda: _patch_node(operator, node, {"metadata": {
        "labels": {QUARANTINE_LABEL: "NodeNotReady"},
        "annotations": {QUARANTINE_CAUSE_ANNOTATION: "ml/train: NodeNotReady"}}})) is None
    cordon = _refused(lambda: _patch_node(operator, node, {"spec": {"unschedulable": True}}))
    assert cordon is not None and cordon.status == 403 and "spec" in str(cordon.body)
    noted = _refused(lambda: _patch_node(operator, node, {"metadata": {
        "annotations": {"example.com/owner": "mine-now"}}}))
    assert noted is not None and "only its own node annotations" in str(noted.body)


def test_the_operator_creates_only_the_trainers_role_and_binding(
        api: client.ApiClient, ns: str, operator: client.ApiClient) -> None:
    rbac = client.RbacAuthorizationV1Api(operator)
    body = {**job_manifest(), "metadata": {"name": "train", "namespace": ns, "uid": "u-1"}}
    role, binding = render_rbac(ElasticTrainingJob.model_validate(body))
    wider = {**role, "rules": [{"apiGroups": [""], "resources": ["pods"],
                                "verbs": ["delete"]}]}

    def in_force() -> bool:
        error = _refused(lambda: rbac.create_namespaced_role(ns, wider, dry_run="All"))
        return error is not None and "only the trainer's Role" in str(error.body)

    wait_for(in_force, 60, "the trainer RBAC policy in force (and the operator's RBAC seen)")
    assert _refused(lambda: rbac.create_namespaced_role(ns, role)) is None  # (the binding
    # below is checked against it: the test's namespace goes with the test)
    assert _refused(lambda: rbac.create_namespaced_role_binding(
        ns, binding, dry_run="All")) is None
    # The trainer's grant handed to another namespace's account, or under another name.
    for other in ({**binding, "subjects": [{"kind": "ServiceAccount", "name": "default",
                                            "namespace": "kube-system"}]},
                  {**binding, "metadata": {**binding["metadata"], "name": "renamed"}}):
        error = _refused(lambda other=other: rbac.create_namespaced_role_binding(
            ns, other, dry_run="All"))
        assert error is not None and "binds only the trainer's Role" in str(error.body)
