"""The write fence at the send (elastic_api.kube.client): a write goes out only while
`may_write()`, asked by the connection just before each chunk leaves, on a real
connection pool (the kubernetes client's urllib3) to a real HTTP server on loopback.

Why at the send: the multi-tenant soak (issue 33, seed 117658176) SIGSTOPped a leading
replica between its fence check and its DELETE; it woke 18 s later, past its renew
deadline and after the other replica had taken the Lease, and the API server accepted
the DELETE 0.1 s after the wake. And urllib3 sends a DELETE again after a dropped
connection without coming back through KubeClient.request."""
from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from elastic_api.kube import KubeClient, NotLeading


class Server:
    """Records each request it read whole; `drop_first`: closes the connection of the
    first one without an answer, as an API server restarting does."""

    def __init__(self, drop_first: bool = False) -> None:
        self.received: list[str] = []
        self.drop_first = drop_first
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                server.received.append(f"{self.command} {self.path}")
                if server.drop_first and len(server.received) == 1:
                    self.close_connection = True
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            do_GET = do_PATCH = do_POST = do_DELETE = do_PUT = _any

            def log_message(self, *args: object) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http.server_address[1]}"


@pytest.fixture
def server() -> Iterator[Server]:
    yield from _serve(Server())


@pytest.fixture
def dropping_server() -> Iterator[Server]:
    yield from _serve(Server(drop_first=True))


def _serve(server: Server) -> Iterator[Server]:
    server.thread.start()
    try:
        yield server
    finally:
        server.http.shutdown()
        server.http.server_close()


def _client(server: Server, tmp_path: Path) -> KubeClient:
    """A KubeClient made as the operator makes its own (from a kubeconfig)."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: local\n"
        f"clusters: [{{name: local, cluster: {{server: '{server.url}'}}}}]\n"
        "users: [{name: me, user: {token: t}}]\n"
        "contexts: [{name: local, context: {cluster: local, user: me}}]\n")
    return KubeClient.from_environment(kubeconfig=str(kubeconfig))


class Leadership:
    """`may_write` that says yes `yes` times, then no: the leadership ends after the
    request's own check, while the request is on its way to the socket."""

    def __init__(self, yes: int) -> None:
        self.left = yes
        self.asked = 0

    def __call__(self) -> bool:
        self.asked += 1
        self.left -= 1
        return self.left >= 0


@pytest.mark.parametrize("method", ["PATCH", "POST", "DELETE", "PUT"])
def test_a_leadership_lost_after_the_check_cuts_the_write_at_the_send(
        server: Server, tmp_path: Path, method: str) -> None:
    client = _client(server, tmp_path)
    client.may_write = Leadership(yes=1)
    with pytest.raises(NotLeading, match=f"{method} /x: cut at the send"):
        client.request(method, "/x", body={"a": 1})
    client.may_write = lambda: True  # the same pool sends on once leading again
    assert client.request("GET", "/after") == {}
    assert server.received == ["GET /after"]


def test_a_write_urllib3_sends_again_after_a_dropped_connection_is_fenced(
        dropping_server: Server, tmp_path: Path) -> None:
    """urllib3 retries a DELETE whose connection dropped unanswered; the retry goes out
    only if the replica still leads. The first try, sent while it led, arrived."""
    client = _client(dropping_server, tmp_path)
    leadership = Leadership(yes=3)  # request's check, the headers' and the body's sends
    client.may_write = leadership
    with pytest.raises(NotLeading):
        client.delete("/jobs/w", {"preconditions": {"uid": "u"}})
    assert dropping_server.received == ["DELETE /jobs/w"]
    assert leadership.asked == 4


def test_a_write_still_leading_is_sent_again_after_a_dropped_connection(
        dropping_server: Server, tmp_path: Path) -> None:
    """The fence does not stop urllib3's own retry of a replica that leads."""
    client = _client(dropping_server, tmp_path)
    assert client.delete("/jobs/w", {}) == {}
    assert dropping_server.received == ["DELETE /jobs/w"] * 2


def test_reads_and_unfenced_writes_are_not_asked(server: Server, tmp_path: Path) -> None:
    client = _client(server, tmp_path)
    leadership = Leadership(yes=0)
    client.may_write = leadership
    client.request("GET", "/r")
    client.request("PATCH", "/lease", body={}, fenced=False)
    assert server.received == ["GET /r", "PATCH /lease"] and leadership.asked == 0
