"""GET /metrics over HTTPS as Prometheus does, for the tests of the secured endpoint."""
from __future__ import annotations

import ssl
import urllib.error
import urllib.request


def scrape(port: int, token: str | None, timeout: float = 20) -> tuple[int, str]:
    """GET https://127.0.0.1:port/metrics with `token` as the bearer (none: no header):
    (status, body). The certificate is self-signed, so not verified: the token is what
    guards the data."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    request = urllib.request.Request(f"https://127.0.0.1:{port}/metrics")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
