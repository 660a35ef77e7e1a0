"""/metrics as the chart serves it, on the local control plane: HTTPS, and only to a
bearer token whose user RBAC lets get /metrics (docs/threat-model.md, "The operator's
reach").

The operator runs with the chart's RBAC and arguments as the chart's ServiceAccount
(tests/support/chart.py), two replicas as the chart runs them, so their TokenReviews and
SubjectAccessReviews are authorized by the chart's ClusterRole alone, the standby's too.
The scrapers are ServiceAccounts of the test's namespace: a tenant's (no role) and
Prometheus' (bound to the chart's `<release>-metrics-reader`).
"""
from __future__ import annotations

from pathlib import Path

from kubernetes import client

from elastic_devtools.localcluster import Cluster
from elastic_devtools.localcluster.faults import wait_for
from tests.service_accounts import token_kubeconfig
from tests.support.chart import ChartReplicas, token_of
from tests.support.metrics_scrape import scrape


def service_account_token(cluster: Cluster, api: client.ApiClient, namespace: str,
                          name: str, workdir: Path) -> str:
    client.CoreV1Api(api).create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name)))
    return token_of(token_kubeconfig(cluster, namespace, name, workdir / f"{name}.kubeconfig"))


def may_get_metrics(api: client.ApiClient, user: str) -> bool:
    """What the API server's authorizer says now (RBAC's cache follows a new binding)."""
    review = client.AuthorizationV1Api(api).create_subject_access_review(
        client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
            user=user, groups=["system:serviceaccounts", "system:authenticated"],
            non_resource_attributes=client.V1NonResourceAttributes(path="/metrics",
                                                                   verb="get"))))
    return bool(review.status.allowed)


def test_metrics_need_a_token_whose_user_may_get_them(
        cluster: Cluster, api: client.ApiClient, namespace: str, tmp_path: Path) -> None:
    replicas = ChartReplicas(cluster, api, namespace, tmp_path, secure_metrics=True)
    rbac = client.RbacAuthorizationV1Api(api)
    binding = f"{replicas.release}-prometheus"
    with replicas.running():
        tenant = service_account_token(cluster, api, namespace, "tenant", tmp_path)
        prometheus = service_account_token(cluster, api, namespace, "prometheus", tmp_path)
        rbac.create_cluster_role_binding(client.V1ClusterRoleBinding(
            metadata=client.V1ObjectMeta(name=binding),
            role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io",
                                      kind="ClusterRole",
                                      name=f"{replicas.release}-metrics-reader"),
            subjects=[client.RbacV1Subject(kind="ServiceAccount", name="prometheus",
                                           namespace=namespace)]))
        try:
            wait_for(lambda: may_get_metrics(
                api, f"system:serviceaccount:{namespace}:prometheus"), 30,
                "the API server to authorize the metrics-reader binding")
            port = replicas.procs[0].metrics_port

            status, body = scrape(port, None)
            assert status == 401, body
            assert scrape(port, "not-a-token")[0] == 401
            status, body = scrape(port, tenant)
            assert status == 403 and f"system:serviceaccount:{namespace}:tenant" in body, body
            status, body = scrape(port, prometheus)
            assert status == 200, body
            leader = replicas.procs[0].identity
            assert f'etj_leader{{identity="{leader}"}} 1.0' in body, body[:2000]
            # The standby serves its own (it writes nothing, but its reviews store nothing
            # either: they are not held back by the leader's write fence).
            standby = replicas.procs[1]
            status, body = scrape(standby.metrics_port, prometheus)
            assert status == 200, body
            assert f'etj_leader{{identity="{standby.identity}"}} 0.0' in body, body[:2000]
            assert scrape(standby.metrics_port, tenant)[0] == 403
            # The operators' own reviews were allowed by the chart's RBAC: nothing refused.
            for proc in replicas.procs:
                log = proc.log_path.read_text()
                assert "could not review" not in log, log[-3000:]
        finally:
            rbac.delete_cluster_role_binding(binding)
