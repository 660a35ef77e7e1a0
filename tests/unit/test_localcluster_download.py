"""hack/build-control-plane.sh takes the official release where versions.env pins its
checksum and it downloads, else builds from the Go module proxy; its output says which.

Run for real against a local HTTP server standing in for the release hosts
(ETJ_RELEASE_MIRROR), with a temporary cache and versions file: a good download (no Go
on PATH at all), a bad checksum (refused, then built), no network (built), and an empty
checksum (no request made, built). The builds are real `go install`s of helm, at the
version `make test` builds, so Go's build cache usually has it."""
from __future__ import annotations

import functools
import hashlib
import http.server
import io
import os
import shutil
import subprocess
import tarfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from elastic_devtools.localcluster.versions import load_versions

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "hack" / "build-control-plane.sh"
HELM = load_versions()["HELM_VERSION"]
# What the script runs when it only downloads: no `go` among them.
TOOLS = ["bash", "curl", "tar", "gzip", "sha256sum", "sha512sum", "cut", "mktemp", "install",
         "rm", "mv", "mkdir", "date", "uname", "tr", "ln", "sed", "grep", "basename",
         "dirname", "rmdir", "sleep", "tail", "cat", "chmod"]


@dataclass
class Mirror:
    root: Path
    url: str
    requests: list[str] = field(default_factory=list)

    def put(self, path: str, data: bytes) -> str:
        """Serve `data` at /<path>; returns its sha256."""
        target = self.root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        return hashlib.sha256(data).hexdigest()


@pytest.fixture
def mirror(tmp_path: Path) -> Iterator[Mirror]:
    root = tmp_path / "mirror"
    root.mkdir()
    seen: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            seen.append(self.path)

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Handler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Mirror(root, f"http://127.0.0.1:{server.server_address[1]}", seen)
    finally:
        server.shutdown()
        server.server_close()


def tarball(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def run(tmp_path: Path, versions: str, *components: str, mirror: str,
        path: str | None = None) -> subprocess.CompletedProcess[str]:
    versions_file = tmp_path / "versions.env"
    versions_file.write_text(versions)
    env = {**os.environ, "ETJ_CACHE_DIR": str(tmp_path / "cache"),
           "ETJ_VERSIONS_FILE": str(versions_file), "ETJ_RELEASE_MIRROR": mirror}
    env.pop("ETJ_NO_DOWNLOAD", None)
    if path is not None:
        env["PATH"] = path
    return subprocess.run(["bash", str(SCRIPT), *components], capture_output=True, text=True,
                          env=env, timeout=1200)


def tools_without_go(tmp_path: Path) -> str:
    bin_dir = tmp_path / "tools"
    bin_dir.mkdir(parents=True)
    for tool in TOOLS:
        found = shutil.which(tool)
        assert found, f"{tool} is needed to run this test"
        (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


def test_good_downloads_are_checked_and_installed_without_go(tmp_path: Path,
                                                             mirror: Mirror) -> None:
    server = tarball({f"kubernetes/server/bin/{b}": f"#!/bin/sh\necho {b}\n".encode()
                      for b in ("kube-apiserver", "kube-controller-manager", "kube-scheduler")})
    mirror.put("dl.k8s.io/v1.99.0/kubernetes-server-linux-amd64.tar.gz", server)
    etcd = mirror.put("github.com/etcd-io/etcd/releases/download/v3.9.0/"
                      "etcd-v3.9.0-linux-amd64.tar.gz",
                      tarball({"etcd-v3.9.0-linux-amd64/etcd": b"#!/bin/sh\necho etcd\n"}))
    helm = mirror.put("get.helm.sh/helm-v3.99.0-linux-amd64.tar.gz",
                      tarball({"linux-amd64/helm": b"#!/bin/sh\necho helm\n"}))
    versions = ("KUBERNETES_VERSION=v1.99.0\n"
                f"KUBERNETES_SERVER_LINUX_AMD64_SHA512={hashlib.sha512(server).hexdigest()}\n"
                f"ETCD_VERSION=v3.9.0\nETCD_LINUX_AMD64_SHA256={etcd}\n"
                f"HELM_VERSION=v3.99.0\nHELM_LINUX_AMD64_SHA256={helm}\n")
    result = run(tmp_path, versions, "kubernetes", "etcd", "helm", mirror=mirror.url,
                 path=tools_without_go(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("checksum verified") == 3, result.stdout
    assert "building" not in result.stdout
    bin_dir = tmp_path / "cache" / "bin"
    for name in ("kube-apiserver-v1.99.0", "kube-controller-manager-v1.99.0",
                 "kube-scheduler-v1.99.0", "etcd-v3.9.0", "helm-v3.99.0"):
        assert os.access(bin_dir / name, os.X_OK), name
    assert subprocess.run([bin_dir / "etcd-v3.9.0"], capture_output=True,
                          text=True).stdout == "etcd\n"
    assert (bin_dir / "kubernetes-v1.99.0").resolve() == bin_dir / "kube-apiserver-v1.99.0"
    assert not list((tmp_path / "cache" / "downloads").iterdir())  # nothing left behind
    again = run(tmp_path, versions, "kubernetes", "etcd", "helm", mirror=mirror.url,
                path=tools_without_go(tmp_path / "again"))
    assert again.returncode == 0 and again.stdout.count(": cached") == 3, again.stdout


def _served_helm(mirror: Mirror) -> str:
    return mirror.put(f"get.helm.sh/helm-{HELM}-linux-amd64.tar.gz",
                      tarball({"linux-amd64/helm": b"#!/bin/sh\necho not helm\n"}))


def _assert_built(tmp_path: Path, result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"helm {HELM}: building from the Go module proxy" in result.stdout
    assert "    helm: built in" in result.stdout
    helm = tmp_path / "cache" / "bin" / f"helm-{HELM}"
    version = subprocess.run([helm, "version", "--short"], capture_output=True, text=True)
    # The real helm (`go install` stamps only major.minor), not what the mirror served.
    assert version.stdout.startswith(HELM.rsplit(".", 1)[0] + "\n"), version


def test_a_bad_checksum_is_refused_then_built(tmp_path: Path, mirror: Mirror) -> None:
    served = _served_helm(mirror)
    pinned = "0" * 64
    result = run(tmp_path, f"HELM_VERSION={HELM}\nHELM_LINUX_AMD64_SHA256={pinned}\n", "helm",
                 mirror=mirror.url)
    assert f"refused: its sha256 is {served}, versions.env pins {pinned}" in result.stdout
    _assert_built(tmp_path, result)


def test_without_network_it_builds(tmp_path: Path, mirror: Mirror) -> None:
    served = _served_helm(mirror)
    closed = "http://127.0.0.1:9"  # the discard port: nothing listens on loopback
    result = run(tmp_path, f"HELM_VERSION={HELM}\nHELM_LINUX_AMD64_SHA256={served}\n", "helm",
                 mirror=closed)
    assert f"download of {closed}/get.helm.sh/helm-{HELM}-linux-amd64.tar.gz failed" \
        in result.stdout
    _assert_built(tmp_path, result)


def test_an_empty_checksum_means_no_download(tmp_path: Path, mirror: Mirror) -> None:
    _served_helm(mirror)
    result = run(tmp_path, f"HELM_VERSION={HELM}\nHELM_LINUX_AMD64_SHA256=\n", "helm",
                 mirror=mirror.url)
    assert "no published sha256 checksum pinned for linux/amd64" in result.stdout
    assert mirror.requests == []
    _assert_built(tmp_path, result)


def test_only_the_components_asked_for_and_unknown_ones_refused(tmp_path: Path) -> None:
    result = run(tmp_path, "HELM_VERSION=v0\n", "kueue", mirror="http://127.0.0.1:9")
    assert result.returncode == 2
    assert "unknown component 'kueue'" in result.stderr and "core" in result.stderr
