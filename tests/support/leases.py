"""The leader Lease that the HA tests' operator replicas compete for."""
from __future__ import annotations

from kubernetes import client

LEASE_NAMESPACE = "default"  # an operator outside a pod keeps its Lease there
LEASE_DURATION_S = 10  # the default


def holder(api: client.ApiClient, lease: str) -> str | None:
    spec = client.CoordinationV1Api(api).read_namespaced_lease(lease, LEASE_NAMESPACE).spec
    return spec.holder_identity if spec is not None else None
