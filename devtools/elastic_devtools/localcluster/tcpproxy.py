"""A TCP proxy in front of the local API server whose connections a test can cut or stall.

The chaos test points the operator and the trainer at it (`proxied_kubeconfig`) and calls
`drop_connections()`: every open connection, long-running watches included, is reset at
once, as when a load balancer or an API server replica goes away. `stall_connections()`
stops forwarding on every open connection but leaves it open: the peers see silence, as
behind a NAT or load balancer that lost the connection without telling anyone (a watch
that silently stalls). TLS passes through untouched (the serving certificate is for
127.0.0.1, whatever the port).
"""
from __future__ import annotations

import contextlib
import selectors
import socket
import struct
import threading
from pathlib import Path
from urllib.parse import urlsplit

import yaml


class TcpProxy:
    """Forwards 127.0.0.1:<port> to `target`, one thread per connection pair."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._stalled: set[socket.socket] = set()
        self._closed = threading.Event()
        self.accepted = 0
        self.dropped = 0
        self.stalled = 0
        self._thread = threading.Thread(target=self._accept, name="tcpproxy", daemon=True)

    def start(self) -> TcpProxy:
        self._thread.start()
        return self

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        self.drop_connections()

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._open) // 2

    def stall_connections(self) -> int:
        """Stop forwarding on every open connection, leaving it open (no FIN, no RST);
        returns how many client connections were stalled. New connections are forwarded
        as before; `drop_connections` ends the stalled ones."""
        with self._lock:
            count = len(self._open - self._stalled) // 2
            self._stalled |= self._open
        self.stalled += count
        return count

    def drop_connections(self) -> int:
        """Reset every open connection (both sides); returns how many client connections
        were cut. New connections are accepted as before."""
        with self._lock:
            sockets, self._open = list(self._open), set()
            self._stalled.clear()
        for sock in sockets:
            with contextlib.suppress(OSError):
                # RST rather than FIN: the peer sees "connection reset", as on a crash.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()
        cut = len(sockets) // 2
        self.dropped += cut
        return cut

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                downstream, _ = self._listener.accept()
            except OSError:
                return  # closed
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                downstream.close()
                continue
            with self._lock:
                self._open.update((downstream, upstream))
                self.accepted += 1
            threading.Thread(target=self._pump, args=(downstream, upstream),
                             name="tcpproxy-conn", daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        peer = {a: b, b: a}
        with selectors.DefaultSelector() as sel:
            sel.register(a, selectors.EVENT_READ)
            sel.register(b, selectors.EVENT_READ)
            try:
                while True:
                    if self._is_stalled(a):  # read nothing, send nothing, until dropped
                        if self._closed.wait(0.2) or not self._is_open(a):
                            return
                        continue
                    for key, _ in sel.select(timeout=0.2):
                        src: socket.socket = key.fileobj  # type: ignore[assignment]
                        data = src.recv(65536)
                        if not data:
                            return
                        peer[src].sendall(data)
                    if self._closed.is_set():
                        return
            except (OSError, ValueError):
                return  # cut by drop_connections, or reset by a peer
            finally:
                with self._lock:
                    self._open.discard(a)
                    self._open.discard(b)
                    self._stalled.discard(a)
                    self._stalled.discard(b)
                for sock in (a, b):
                    with contextlib.suppress(OSError):
                        sock.close()


    def _is_stalled(self, sock: socket.socket) -> bool:
        with self._lock:
            return sock in self._stalled

    def _is_open(self, sock: socket.socket) -> bool:
        with self._lock:
            return sock in self._open


def proxied_kubeconfig(kubeconfig: Path | str, proxy: TcpProxy, out: Path | str) -> Path:
    """A copy of `kubeconfig` whose clusters point at `proxy` instead of the API server."""
    config = yaml.safe_load(Path(kubeconfig).read_text())
    for entry in config.get("clusters") or []:
        server = urlsplit(entry["cluster"]["server"])
        entry["cluster"]["server"] = f"{server.scheme}://127.0.0.1:{proxy.port}"
    path = Path(out)
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path
