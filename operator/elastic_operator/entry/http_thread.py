"""An HTTP server answering from a daemon thread of its own: the base of the operator's
readiness and metrics endpoints (readiness.py, metrics_server.py), which differ only in
their handler and, for /metrics, the TLS wrap of the listening socket."""
from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self


class BackgroundServer:
    """`handler` served on `address:port` (0: any free port) by thread `name`; `wrap`
    replaces the listening socket (TLS) before the first accept."""

    def __init__(self, address: str, port: int, handler: type[BaseHTTPRequestHandler],
                 name: str, wrap: Callable[[socket.socket], socket.socket] | None = None
                 ) -> None:
        self._server = ThreadingHTTPServer((address, port), handler)
        self._server.daemon_threads = True
        if wrap is not None:
            self._server.socket = wrap(self._server.socket)
        self._thread = threading.Thread(target=self._server.serve_forever, name=name,
                                        daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
