"""A tenant, with its own ServiceAccount (RBAC on), gets no placement and no host access
the administrator did not allow (issue 78, items 2 and 3): the chart's policies
(templates/tenant-policy.yaml) on the local control plane: host access in a namespace
labelled for it, placement in every namespace it binds, labelled or not. Each refusal
names the field. The operator's own JobSet still goes through, and the
JobSet and Job controllers still make its Jobs and Pods from it."""
from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config, utils

from elastic_api import GROUP, PLURAL, VERSION
from elastic_api.validation import validate_job
from elastic_devtools.localcluster import Cluster
from elastic_devtools.localcluster.faults import wait_for
from elastic_operator.render import render
from tests.builders import etj
from tests.service_accounts import token_kubeconfig
from tests.support.chart import helm_template, unique_release
from tests.support.server_version import server_features

pytestmark = pytest.mark.cluster

TENANT_LABEL = "elastic.pathways.dev/tenant-policy"
POOL = "cloud.google.com/gke-nodepool"
ALIEN_IMAGE = "evil.example.com/pathways/server:20261001-jax_0.10.2"


@dataclass
class Tenancy:
    admin: client.ApiClient
    tenant: client.ApiClient
    operator: client.ApiClient
    namespace: str
    unlabelled: str  # a namespace without the tenant-policy label


def _as(kubeconfig: Path) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(kubeconfig))


def _policy_active(admin: client.ApiClient, namespace: str) -> bool:
    """The policies answer (the API server loads a new one within a second or so)."""
    pod = {"metadata": {"name": "probe"}, "spec": {"hostNetwork": True, "containers": [
        {"name": "c", "image": "busybox"}]}}
    try:
        client.CoreV1Api(admin).create_namespaced_pod(namespace, pod, dry_run="All")
    except client.ApiException as err:
        return "hostNetwork" in err.body
    return False


@pytest.fixture(scope="module")
def tenancy(cluster: Cluster, api: client.ApiClient, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[Tenancy]:
    tag = uuid.uuid4().hex[:6]
    system, tenant_ns, plain_ns = f"etj-system-{tag}", f"tenant-{tag}", f"plain-{tag}"
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": system}})
    # A label value of its own: a chart another module installed on this control plane
    # (manifests/install.yaml binds `enforced`) must not judge this namespace too.
    core.create_namespace({"metadata": {"name": tenant_ns, "labels": {TENANT_LABEL: f"t-{tag}"}}})
    core.create_namespace({"metadata": {"name": plain_ns}})
    # Placement binds every namespace by default (the chart's default: no selector, as
    # tests/unit/test_tenant_policy.py holds); here only this module's two, by name.
    tmp = tmp_path_factory.mktemp("tenancy")
    scope = tmp / "values.yaml"
    scope.write_text(json.dumps({"tenantPolicy": {"placementNamespaceSelector": {
        "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In",
                              "values": [tenant_ns, plain_ns]}]}}}))
    release = unique_release()
    docs = helm_template(release, system, "tenantPolicy.jobSetControllers={jobset-controller}",
                         f"tenantPolicy.namespaceLabel.value=t-{tag}",
                         f"tenantPolicy.allowed.{tenant_ns}.nodePools={{team-a-cpu}}",
                         values_file=scope)
    wanted = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
              "ValidatingAdmissionPolicyBinding")
    applied = [d for d in docs if d["kind"] in wanted]
    for doc in applied:
        utils.create_from_dict(api, doc)
    rbac = client.RbacAuthorizationV1Api(api)
    core.create_namespaced_service_account(tenant_ns, {"metadata": {"name": "tenant"}})
    # Everything a tenant could be given: the policies, not RBAC, must refuse.
    rbac.create_namespaced_role(tenant_ns, {"metadata": {"name": "tenant"}, "rules": [
        {"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["create"]},
        {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["create"]},
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}]})
    rbac.create_namespaced_role_binding(tenant_ns, {
        "metadata": {"name": "tenant"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tenant"},
        "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": tenant_ns}]})
    wait_for(lambda: _policy_active(api, tenant_ns), 30, "the host-access policy to answer")
    operator_sa = next(d for d in applied if d["kind"] == "ServiceAccount")["metadata"]["name"]
    tenancy = Tenancy(api, _as(token_kubeconfig(cluster, tenant_ns, "tenant", tmp / "t")),
                      _as(token_kubeconfig(cluster, system, operator_sa, tmp / "o")), tenant_ns,
                      plain_ns)
    try:
        yield tenancy
    finally:
        tenancy.tenant.close()
        tenancy.operator.close()
        admission = client.AdmissionregistrationV1Api(api)
        for doc in applied:
            name = doc["metadata"]["name"]
            if doc["kind"] == "ValidatingAdmissionPolicy":
                admission.delete_validating_admission_policy(name)
            elif doc["kind"] == "ValidatingAdmissionPolicyBinding":
                admission.delete_validating_admission_policy_binding(name)
            elif doc["kind"] == "ClusterRole":
                rbac.delete_cluster_role(name)
            elif doc["kind"] == "ClusterRoleBinding":
                rbac.delete_cluster_role_binding(name)
        core.delete_namespace(tenant_ns)
        core.delete_namespace(plain_ns)
        core.delete_collection_namespaced_pod(tenant_ns, grace_period_seconds=0)
        core.delete_namespace(system)


def job(namespace: str, **spec: Any) -> dict[str, Any]:
    return etj(f"j-{uuid.uuid4().hex[:6]}", namespace).spec(**spec).obj()


def refused(call: Any) -> str:
    """The API server's refusal of `call` (a dry run), as its message."""
    with pytest.raises(client.ApiException) as err:
        call()
    assert err.value.status in (400, 403, 422), err.value
    message: str = json.loads(err.value.body)["message"]
    return message


def create_job(api: client.ApiClient, obj: dict[str, Any], **kw: Any) -> Any:
    return client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, obj["metadata"]["namespace"], PLURAL, obj, dry_run="All", **kw)


def test_a_toleration_of_every_taint_is_refused_by_the_crd(tenancy: Tenancy) -> None:
    obj = job(tenancy.namespace, tolerations=[{"operator": "Exists"}])
    message = refused(lambda: create_job(tenancy.tenant, obj))
    assert "spec.tolerations: a toleration with operator Exists and no key" in message


def test_a_toleration_key_not_allowed_is_refused(tenancy: Tenancy) -> None:
    obj = job(tenancy.namespace, tolerations=[{"key": "team-b", "operator": "Exists"}])
    message = refused(lambda: create_job(tenancy.tenant, obj))
    assert "spec.tolerations: the taint key team-b is not one" in message
    assert "tenantPolicy.allowed." in message


def test_another_teams_pool_is_refused_and_an_allowed_one_admitted(tenancy: Tenancy) -> None:
    other = job(tenancy.namespace, nodeSelector={POOL: "team-b-tpu"})
    message = refused(lambda: create_job(tenancy.tenant, other))
    assert f"spec.nodeSelector: {POOL}=team-b-tpu is not placement" in message
    head = job(tenancy.namespace, headNodePool="team-b-cpu")
    assert "spec.headNodePool: node pool team-b-cpu" in refused(
        lambda: create_job(tenancy.tenant, head))
    # The namespace's own pool (chart value tenantPolicy.allowed.<ns>.nodePools) and "*"'s.
    ours = job(tenancy.namespace, nodeSelector={POOL: "team-a-cpu"}, headNodePool="cpu-np")
    assert create_job(tenancy.tenant, ours)["spec"]["nodeSelector"] == {POOL: "team-a-cpu"}


def test_placement_needs_no_label_host_access_does(tenancy: Tenancy) -> None:
    """By default a job lands only on the TPU pools of its shape and the allowed head pool
    in every namespace the operator serves, labelled or not; host access, which judges
    every Pod, only where labelled."""
    ns = tenancy.unlabelled
    head = job(ns, headNodePool="team-b-cpu")

    def placement_refuses() -> bool:  # its binding reaches admission by a watch
        try:
            create_job(tenancy.admin, head)
        except client.ApiException as err:
            return "spec.headNodePool: node pool team-b-cpu" in json.loads(err.body)["message"]
        return False

    wait_for(placement_refuses, 30, f"the placement policy to judge unlabelled {ns}")
    other = job(ns, nodeSelector={POOL: "team-a-cpu"})  # tenant-ns's pool, not this one's
    assert f"spec.nodeSelector: {POOL}=team-a-cpu is not placement" in refused(
        lambda: create_job(tenancy.admin, other))
    assert create_job(tenancy.admin, job(ns))["metadata"]["namespace"] == ns  # "*": cpu-np
    pod = {"metadata": {"name": "host"}, "spec": {"hostNetwork": True, "containers": [
        {"name": "c", "image": "busybox"}]}}
    client.CoreV1Api(tenancy.admin).create_namespaced_pod(ns, pod, dry_run="All")


def test_images_from_an_unknown_registry_are_refused(tenancy: Tenancy) -> None:
    server = job(tenancy.namespace, pathways={"gcsScratch": "gs://b/s",
                                              "images": {"server": ALIEN_IMAGE}})
    message = refused(lambda: create_job(tenancy.tenant, server))
    assert f"spec.pathways.images.server: {ALIEN_IMAGE} is not from a registry" in message
    colocated = job(tenancy.namespace, pathways={
        "gcsScratch": "gs://b/s", "colocatedPython": {"image": ALIEN_IMAGE}})
    assert "spec.pathways.colocatedPython.image:" in refused(
        lambda: create_job(tenancy.tenant, colocated))


def test_privileged_is_no_field_of_a_job(tenancy: Tenancy) -> None:
    obj = job(tenancy.namespace)
    obj["spec"]["trainer"]["securityContext"] = {"privileged": True}
    message = refused(lambda: create_job(tenancy.tenant, obj, field_validation="Strict"))
    assert 'unknown field "spec.trainer.securityContext.privileged"' in message
    # Without strict validation the field is dropped, and nothing rendered is privileged.
    stored = create_job(tenancy.tenant, obj)
    assert "privileged" not in stored["spec"]["trainer"].get("securityContext", {})
    for container in _containers(render(validate_job(stored))[-1]):
        assert not container["securityContext"].get("privileged"), container["name"]


def _containers(jobset: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for r in jobset["spec"]["replicatedJobs"]
            for key in ("initContainers", "containers")
            for c in r["template"]["spec"]["template"]["spec"].get(key, [])]


def operator_jobset(tenancy: Tenancy) -> dict[str, Any]:
    """The JobSet the operator renders for a Pathways job on this API server (1.32 refuses
    main's restart rules): host network, host /tmp."""
    obj = etj(f"p-{uuid.uuid4().hex[:4]}", tenancy.namespace).obj()
    jobset = render(validate_job(obj), server_features(tenancy.admin))[-1]
    jobset["metadata"].pop("ownerReferences", None)
    return jobset


def test_a_tenant_gets_no_host_access_directly(tenancy: Tenancy) -> None:
    ns = tenancy.namespace
    jobset = operator_jobset(tenancy)
    objects = client.CustomObjectsApi(tenancy.tenant)
    message = refused(lambda: objects.create_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", ns, "jobsets", jobset, dry_run="All"))
    assert "spec.replicatedJobs[].template.spec.template.spec.hostNetwork" in message
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "c", "image": "busybox", "securityContext": {"privileged": True}}]}}
    assert "spec.containers[].securityContext.privileged" in refused(
        lambda: client.CoreV1Api(tenancy.tenant).create_namespaced_pod(ns, pod, dry_run="All"))
    batch_job = {"metadata": {"name": "j"}, "spec": {"template": {"spec": {
        "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}],
        "volumes": [{"name": "h", "hostPath": {"path": "/tmp"}}]}}}}
    assert "spec.template.spec.volumes[].hostPath" in refused(
        lambda: client.BatchV1Api(tenancy.tenant).create_namespaced_job(ns, batch_job,
                                                                        dry_run="All"))


def test_the_operators_jobset_gets_its_jobs_and_pods(tenancy: Tenancy) -> None:
    """Created as the operator's ServiceAccount: admitted, and the JobSet controller's
    Jobs and the Job controller's Pods, host network and all, are admitted too."""
    ns = tenancy.namespace
    jobset = operator_jobset(tenancy)
    client.CustomObjectsApi(tenancy.operator).create_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", ns, "jobsets", jobset)
    core = client.CoreV1Api(tenancy.admin)

    def host_pods() -> list[Any]:
        pods = core.list_namespaced_pod(ns).items
        return [p for p in pods if p.spec.host_network] if len(pods) >= 2 else []

    pods = wait_for(host_pods, 60, "the JobSet's pods on the host network")
    assert any(v.host_path for p in pods for v in (p.spec.volumes or []))
    client.CustomObjectsApi(tenancy.admin).delete_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", ns, "jobsets", jobset["metadata"]["name"],
        propagation_policy="Foreground")
    core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
