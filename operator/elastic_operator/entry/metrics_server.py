"""GET /metrics over HTTPS, to a bearer token whose user may get it (metrics_auth), in a
daemon thread: the secure default of `etj operator` (`--metrics-insecure` serves plain
HTTP to anyone, as prometheus_client does, for local runs).

Every job's name and namespace is in the metrics: a tenant's pod must not read the
others' (docs/threat-model.md).
"""
from __future__ import annotations

import contextlib
import ssl
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

from elastic_operator.entry.http_thread import BackgroundServer
from elastic_operator.entry.metrics_auth import METRICS_PATH, MetricsAuthorizer

# A client that connects and sends nothing holds its thread this long at most.
CLIENT_TIMEOUT_S = 30.0
Exposition = Callable[[], tuple[bytes, str]]  # the metrics' text and its Content-Type


class SecureMetricsServer(BackgroundServer):
    """Serves `exposition()` at GET /metrics with TLS `context`, to whom `authorizer`
    allows."""

    def __init__(self, address: str, port: int, context: ssl.SSLContext,
                 authorizer: MetricsAuthorizer, exposition: Exposition) -> None:
        # The handshake runs in the connection's own thread (at its first read), so a
        # slow or silent client never holds up the accepting one.
        super().__init__(address, port, _handler(authorizer, exposition), "metrics",
                         wrap=lambda sock: context.wrap_socket(
                             sock, server_side=True, do_handshake_on_connect=False))


def _handler(authorizer: MetricsAuthorizer,
             exposition: Exposition) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        timeout = CLIENT_TIMEOUT_S

        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] != METRICS_PATH:
                self._answer(404, f"not found; GET {METRICS_PATH}".encode(), "text/plain")
                return
            decision = authorizer.check(self.headers.get("Authorization"))
            if decision.code != 200:
                self._answer(decision.code, decision.why.encode(), "text/plain")
                return
            body, content_type = exposition()
            self._answer(200, body, content_type)

        def _answer(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            if code == 401:
                self.send_header("WWW-Authenticate", 'Bearer realm="metrics"')
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def handle(self) -> None:
            # A client that failed the handshake or went: nothing to answer.
            with contextlib.suppress(ssl.SSLError, ConnectionError, TimeoutError):
                super().handle()

        def log_message(self, format: str, *args: Any) -> None:
            pass  # a scrape every 15 s: not worth a log line each

    return Handler
