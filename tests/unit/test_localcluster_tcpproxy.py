"""The chaos test's TCP proxy: forwards bytes both ways, cuts every open connection on
demand, and keeps accepting new ones afterwards."""
from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from elastic_devtools.localcluster.tcpproxy import TcpProxy, proxied_kubeconfig


@pytest.fixture
def echo_server() -> Iterator[tuple[str, int]]:
    server = socket.create_server(("127.0.0.1", 0))

    def serve(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(4096):
                conn.sendall(data)

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield server.getsockname()
    server.close()


def _roundtrip(sock: socket.socket, payload: bytes) -> bytes:
    sock.sendall(payload)
    got = b""
    while len(got) < len(payload):
        chunk = sock.recv(65536)
        if not chunk:
            break
        got += chunk
    return got


def test_proxy_forwards_and_drops_connections(echo_server: tuple[str, int]) -> None:
    with TcpProxy(*echo_server) as proxy:
        first = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        payload = bytes(range(256)) * 1000
        assert _roundtrip(first, payload) == payload
        assert proxy.open_connections == 1

        assert proxy.drop_connections() == 1
        with pytest.raises(OSError):  # reset, or the read ends: either way the stream is gone
            first.sendall(b"more")
            if not first.recv(10):
                raise ConnectionResetError("closed")
        first.close()
        assert proxy.open_connections == 0 and proxy.dropped == 1

        second = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        assert _roundtrip(second, b"again") == b"again"
        assert proxy.accepted == 2
        second.close()


def test_proxied_kubeconfig_points_every_cluster_at_the_proxy(
        tmp_path: Path, echo_server: tuple[str, int]) -> None:
    original = tmp_path / "kubeconfig"
    original.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "etj-local",
        "clusters": [{"name": "etj-local", "cluster": {
            "server": "https://127.0.0.1:6443", "certificate-authority-data": "Q0E="}}],
        "users": [{"name": "admin", "user": {"client-key-data": "S0VZ"}}],
    }))
    with TcpProxy(*echo_server) as proxy:
        out = proxied_kubeconfig(original, proxy, tmp_path / "proxied")
        config = yaml.safe_load(out.read_text())
    cluster = config["clusters"][0]["cluster"]
    assert cluster["server"] == f"https://127.0.0.1:{proxy.port}"
    assert cluster["certificate-authority-data"] == "Q0E="
    assert config["users"] == yaml.safe_load(original.read_text())["users"]
    assert out.stat().st_mode & 0o077 == 0  # credentials inside: owner only


def test_a_stalled_connection_stays_open_and_silent(echo_server: tuple[str, int]) -> None:
    """What a client of a silently stalled connection sees: no error, no bytes. New
    connections work; dropping ends the stalled one."""
    with TcpProxy(*echo_server) as proxy:
        stalled = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        assert _roundtrip(stalled, b"before") == b"before"
        assert proxy.stall_connections() == 1 and proxy.stalled == 1
        stalled.settimeout(1.0)
        stalled.sendall(b"after")  # accepted by the kernel, never forwarded
        with pytest.raises(TimeoutError):
            stalled.recv(10)
        fresh = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        assert _roundtrip(fresh, b"fresh") == b"fresh"
        assert proxy.stall_connections() == 1  # only the fresh one is new
        assert proxy.drop_connections() == 2
        fresh.close()
        stalled.close()
