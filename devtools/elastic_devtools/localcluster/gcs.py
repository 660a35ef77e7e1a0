"""Run fake-gcs-server (github.com/fsouza/fake-gcs-server), a GCS JSON-API emulator, on a
free loopback port, for google-cloud-storage clients (STORAGE_EMULATOR_HOST) in tests and
local clusters. The binary comes from hack/build-control-plane.sh, at the version pinned
in versions.env."""
from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from elastic_devtools.localcluster.versions import (
    BUILD_HINT,
    MissingBinaryError,
    cache_dir,
    load_versions,
)

HOST = "127.0.0.1"
READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
# A free port can be taken between finding and binding it; try a few.
START_ATTEMPTS = 3


def fake_gcs_binary(versions: dict[str, str] | None = None, cache: Path | None = None) -> Path:
    """Where the build script puts fake-gcs-server-<FAKE_GCS_VERSION> (may not exist)."""
    v = versions if versions is not None else load_versions()
    root = cache if cache is not None else cache_dir()
    return root / "bin" / f"fake-gcs-server-{v['FAKE_GCS_VERSION']}"


def require_fake_gcs_binary(binary: Path | None = None) -> Path:
    path = binary if binary is not None else fake_gcs_binary()
    if not (path.is_file() and path.stat().st_mode & 0o111):
        raise MissingBinaryError(
            f"fake-gcs-server is not built: {path} is missing.\nFix: {BUILD_HINT}.",
        )
    return path


def fake_gcs_command(binary: Path, port: int, host: str = HOST) -> list[str]:
    """In-memory backend, plain http; URLs the server hands out (resumable uploads) point
    back at the same host:port."""
    endpoint = f"http://{host}:{port}"
    return [
        str(binary), "-scheme", "http", "-host", host, "-port", str(port),
        "-backend", "memory", "-external-url", endpoint, "-public-host", f"{host}:{port}",
        "-log-level", "warn",
    ]


def free_port(host: str = HOST) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass
class FakeGcsServer:
    endpoint: str  # http://127.0.0.1:PORT, the value for STORAGE_EMULATOR_HOST
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def env(self) -> dict[str, str]:
        """Environment that points every GCS client we use at this server, without
        Google credentials: google-cloud-storage and gcsfs (Orbax's gs:// paths, through
        etils.epath) read STORAGE_EMULATOR_HOST and go anonymous; tensorstore (Orbax's
        array data) reads TENSORSTORE_GCS_HTTP_URL and, instead of looking for
        credentials, sends GOOGLE_AUTH_TOKEN_FOR_TESTING, which the server ignores."""
        return {
            "STORAGE_EMULATOR_HOST": self.endpoint,
            "TENSORSTORE_GCS_HTTP_URL": self.endpoint,
            "GOOGLE_AUTH_TOKEN_FOR_TESTING": "fake-gcs-server",
            # gcsfs would ask the storage-control API (absent here) for each bucket's type.
            "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
        }

    def running(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def __enter__(self) -> FakeGcsServer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class FakeGcsStartError(RuntimeError):
    """fake-gcs-server exited or did not answer in time."""


def start_fake_gcs(
    *, binary: Path | None = None, log_dir: Path | None = None,
    ready_timeout_s: float = READY_TIMEOUT_S,
) -> FakeGcsServer:
    """Start fake-gcs-server on a free loopback port and wait until its API answers."""
    path = require_fake_gcs_binary(binary)
    logs = log_dir if log_dir is not None else Path(tempfile.mkdtemp(prefix="fake-gcs-"))
    logs.mkdir(parents=True, exist_ok=True)
    last_error = ""
    for attempt in range(1, START_ATTEMPTS + 1):
        port = free_port()
        log_path = logs / f"fake-gcs-server-{port}.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                fake_gcs_command(path, port), stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        server = FakeGcsServer(endpoint=f"http://{HOST}:{port}", process=process, log_path=log_path)
        try:
            wait_until_ready(server, ready_timeout_s)
            return server
        except FakeGcsStartError as e:
            exited_by_itself = process.poll() is not None  # e.g. the port was taken meanwhile
            server.stop()
            last_error = str(e)
            if not exited_by_itself or attempt == START_ATTEMPTS:
                break  # it ran but never answered: another port will not help
    raise FakeGcsStartError(last_error)


def wait_until_ready(server: FakeGcsServer, timeout_s: float) -> None:
    """Poll the bucket list endpoint until it answers 200 (or the process exits)."""
    url = f"{server.endpoint}/storage/v1/b"
    deadline = time.monotonic() + timeout_s
    while True:
        if not server.running():
            raise FakeGcsStartError(
                f"fake-gcs-server exited with code {server.process.returncode} before "
                f"answering on {server.endpoint}; log {server.log_path}:\n{server.log_tail()}",
            )
        with (
            contextlib.suppress(urllib.error.URLError, OSError),
            urllib.request.urlopen(url, timeout=2) as response,
        ):
            if response.status == 200:
                return
        if time.monotonic() > deadline:
            raise FakeGcsStartError(
                f"fake-gcs-server did not answer {url} within {timeout_s:.0f}s; "
                f"log {server.log_path}:\n{server.log_tail()}",
            )
        time.sleep(0.1)


def create_bucket(endpoint: str, bucket: str, project: str = "etj-e2e") -> None:
    """A bucket on the server (its JSON API), for a client that does not make its own."""
    body = json.dumps({"name": bucket}).encode()
    request = urllib.request.Request(f"{endpoint}/storage/v1/b?project={project}", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10):
        pass


@contextlib.contextmanager
def client_environ(values: dict[str, str]) -> Iterator[None]:
    """This process's environment with `values` (a server's `env`) for the duration: the
    GCS clients created inside it talk to the emulator."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
