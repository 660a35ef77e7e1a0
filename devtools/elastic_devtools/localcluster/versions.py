"""Pinned versions (from versions.env, shared with hack/build-control-plane.sh) and the
cached binaries built from them. ETJ_VERSIONS_FILE selects another versions file for
both (versions-compat.env: the previous pins, `make test-compat`)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

VERSIONS_FILE = Path(__file__).with_name("versions.env")
COMPAT_VERSIONS_FILE = Path(__file__).with_name("versions-compat.env")
VERSIONS_FILE_ENV = "ETJ_VERSIONS_FILE"
BUILD_HINT = "run hack/build-control-plane.sh (or `make cluster-binaries`)"


class MissingBinaryError(RuntimeError):
    """A control-plane binary (or file from the build) is not in the cache."""


def versions_file() -> Path:
    """The versions file in use: ETJ_VERSIONS_FILE, else versions.env."""
    return Path(os.environ.get(VERSIONS_FILE_ENV) or VERSIONS_FILE)


def parse_versions_env(text: str, name: str = VERSIONS_FILE.name) -> dict[str, str]:
    """KEY=VALUE lines; blank lines and # comments ignored; surrounding quotes stripped."""
    versions: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{name}:{number}: expected KEY=VALUE, got {raw!r}")
        versions[key.strip()] = value.strip().strip("\"'")
    return versions


def load_versions() -> dict[str, str]:
    path = versions_file()
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise MissingBinaryError(
            f"versions file {path} not found (from {VERSIONS_FILE_ENV}); unset it or point "
            f"it at {VERSIONS_FILE} or {COMPAT_VERSIONS_FILE}") from None
    return parse_versions_env(text, path.name)


def cache_dir() -> Path:
    """Where the build script puts binaries; ETJ_CACHE_DIR overrides it."""
    return Path(os.environ.get("ETJ_CACHE_DIR") or Path.home() / ".cache/elastic-training-operator")


def go_mod_cache() -> Path:
    """Go's module cache (GOMODCACHE, else GOPATH/pkg/mod, else ~/go/pkg/mod), read without
    running `go`, so a cluster can start on a machine where only the binaries are present."""
    if os.environ.get("GOMODCACHE"):
        return Path(os.environ["GOMODCACHE"])
    gopath = os.environ.get("GOPATH", "").split(os.pathsep)[0]
    return Path(gopath or Path.home() / "go") / "pkg/mod"


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kwok: Path
    jobset_controller: Path
    jobset_crd: Path
    kwok_stages: Path  # kustomize/stage in the kwok module source

    @classmethod
    def locate(cls, versions: dict[str, str] | None = None, cache: Path | None = None) -> Binaries:
        v = versions if versions is not None else load_versions()
        root = cache if cache is not None else cache_dir()
        b = root / "bin"
        k8s = v["KUBERNETES_VERSION"]
        return cls(
            etcd=b / f"etcd-{v['ETCD_VERSION']}",
            kube_apiserver=b / f"kube-apiserver-{k8s}",
            kube_controller_manager=b / f"kube-controller-manager-{k8s}",
            kube_scheduler=b / f"kube-scheduler-{k8s}",
            kwok=b / f"kwok-{v['KWOK_VERSION']}",
            jobset_controller=b / f"jobset-controller-{v['JOBSET_VERSION']}",
            jobset_crd=root / f"jobset-{v['JOBSET_VERSION']}" / "crd.yaml",
            kwok_stages=go_mod_cache() / f"sigs.k8s.io/kwok@{v['KWOK_VERSION']}/kustomize/stage",
        )

    def missing(self) -> list[Path]:
        paths = [
            self.etcd, self.kube_apiserver, self.kube_controller_manager, self.kube_scheduler,
            self.kwok, self.jobset_controller, self.jobset_crd, self.kwok_stages,
        ]
        return [p for p in paths if not p.exists()]

    def require(self) -> None:
        missing = self.missing()
        if missing:
            names = "\n  ".join(str(p) for p in missing)
            raise MissingBinaryError(
                f"the local control plane is not built; missing:\n  {names}\nFix: {BUILD_HINT}."
            )
