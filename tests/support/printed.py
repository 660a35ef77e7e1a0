"""What `kubectl get etj` prints: the API server's Table of the jobs (the CRD's printer
columns, evaluated by the API server exactly as for kubectl)."""
from __future__ import annotations

import json
from typing import Any

from kubernetes import client

from elastic_api.names import GROUP, PLURAL, VERSION

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


def printed_jobs(api: client.ApiClient, namespace: str, name: str | None = None
                 ) -> dict[str, dict[str, Any]]:
    """job name -> {column name: cell} for the namespace's jobs (or the one named)."""
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}" + \
        (f"/{name}" if name else "")
    method, url, headers, body, post = api.param_serialize(
        "GET", path, header_params={"Accept": TABLE}, auth_settings=["BearerToken"])
    response = api.call_api(method, url, headers, body, post, _request_timeout=30)
    response.read()
    table = json.loads(response.data)
    names = [c["name"] for c in table["columnDefinitions"]]
    return {row["object"]["metadata"]["name"]: dict(zip(names, row["cells"], strict=True))
            for row in table["rows"]}
