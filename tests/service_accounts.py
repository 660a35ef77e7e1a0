"""Acting as a ServiceAccount in integration tests: a kubeconfig with a TokenRequest token,
so that what a pod's identity may do is what the test may do (RBAC really applies)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import yaml

if TYPE_CHECKING:
    from elastic_devtools.localcluster import Cluster


def token_kubeconfig(cluster: Cluster, namespace: str, service_account: str, path: Path) -> Path:
    """A kubeconfig that authenticates as the ServiceAccount (a TokenRequest token)."""
    from kubernetes import client

    api = cluster.api_client()
    try:
        request = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600))
        response = client.CoreV1Api(api).create_namespaced_service_account_token(
            service_account, namespace, request)
        assert response.status is not None
        token = response.status.token
    finally:
        api.close()
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    context = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])
    cluster_entry = next(c for c in admin["clusters"] if c["name"] == context["context"]["cluster"])
    user = f"system:serviceaccount:{namespace}:{service_account}"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [cluster_entry],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": cluster_entry["name"], "user": user}}],
        "current-context": "sa",
    }))
    path.chmod(0o600)
    return path
