"""Install the ElasticTrainingJob CRD on a (local) cluster: for tests, the demo and benchmarks.

Production installs use the Helm chart or manifests/install.yaml instead.
"""
from __future__ import annotations

from typing import Any

from elastic_devtools.localcluster.faults import wait_for


def install_crd(api: Any, body: dict[str, Any] | None = None, timeout: float = 60) -> str:
    """Create the CRD (or replace it with this version) and wait until it is Established.

    Returns its name. `api` is a kubernetes ApiClient; `body` defaults to `build_crd()`.
    """
    from kubernetes import client

    from elastic_api.crd import build_crd

    # The client's generated types add nothing over the dict we send; keep them loose.
    ext: Any = client.ApiextensionsV1Api(api)
    body = body if body is not None else build_crd()
    name: str = body["metadata"]["name"]
    try:
        ext.create_custom_resource_definition(body)
    except client.ApiException as err:
        if err.status != 409:
            raise
        body = {**body, "metadata": {**body["metadata"], "resourceVersion":
                                     ext.read_custom_resource_definition(name)
                                     .metadata.resource_version}}
        ext.replace_custom_resource_definition(name, body)

    def established() -> bool:
        status = ext.read_custom_resource_definition(name).status
        return any(c.type == "Established" and c.status == "True"
                   for c in ((status and status.conditions) or []))

    wait_for(established, timeout, f"CRD {name} established")
    return name
