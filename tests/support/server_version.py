"""What the local control plane's API server accepts, as the operator decides it
(core/server_features.py), for tests that render a JobSet themselves: `make test` runs
1.37 (main's container restart rules kept), `make test-compat` 1.32 (refused). The local
control plane never turns alpha gates on, so its version alone decides (no dry run)."""
from __future__ import annotations

from kubernetes import client

from elastic_operator.core.server_features import judge
from elastic_operator.model.server import ServerFeatures


def git_version(api: client.ApiClient) -> str:
    version: str = client.VersionApi(api).get_code().git_version
    return version


def server_features(api: client.ApiClient) -> ServerFeatures:
    return judge({"gitVersion": git_version(api)}, None)
