"""The local API server's own /metrics, for the tests and benchmarks that read what it
says about itself (rejected requests, where a request's time went): one scrape, kept to
the metric families asked for (the whole text is several MB; parsing all of it per mark
would cost the benchmark's CPU, which the operator shares)."""
from __future__ import annotations

from kubernetes import client

from elastic_devtools.localcluster.promtext import parse_metrics


def scrape(api: client.ApiClient, families: tuple[str, ...],
           timeout_s: float = 30.0) -> dict[str, float]:
    """{'name{labels}': value} for the series whose name starts with one of `families`."""
    request = api.param_serialize("GET", "/metrics", header_params={"Accept": "text/plain"},
                                  auth_settings=["BearerToken"])
    response = api.call_api(*request, _request_timeout=timeout_s)
    text = (response.read() or b"").decode()
    kept = "\n".join(line for line in text.splitlines() if line.startswith(families))
    return parse_metrics(kept)
