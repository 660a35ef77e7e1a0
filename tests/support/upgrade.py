"""The releases `make test-upgrade` moves between (tests/upgrade/test_upgrade.py; its guard
in tests/integration/test_long_targets.py): the previous release, the commit that
hack/upgrade/previous-release names, archived from this checkout's git history, and the
current checkout. Each is a `Revision`: a source tree whose operator and trainer run with
this interpreter (today's pinned dependencies: its packages first on PYTHONPATH), whose
chart helm installs, and whose image tag names that tree to the kubelet the test plays
(tests/support/operator_kubelet.py), as an image names a build.

Also: helm for one release on the local control plane, the status fields one CRD adds to
another, and the printed timeline of a run.
"""
from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from elastic_devtools.localcluster.cluster_config import DEAD_KUBELET_LABEL
from elastic_devtools.localcluster.operator_settings import TEST
from tests.support.chart import helm_binary

if TYPE_CHECKING:
    from elastic_devtools.localcluster import Cluster

ROOT = Path(__file__).resolve().parents[2]
PREVIOUS_RELEASE = ROOT / "hack" / "upgrade" / "previous-release"
# The image tag the current checkout's chart is installed with (the previous release's
# is its short commit): a new tag is what makes `helm upgrade` roll the Deployment.
CURRENT_TAG = "checkout"
PACKAGES = ("api", "operator", "trainer")  # the folders of the packages an image holds
# On a release's path besides: its `etj` builds its parser from every command's module,
# the dev tools' too, which today's install renamed (issue 70): the release's own come first.
ON_PATH = (*PACKAGES, "kubectl", "devtools")
CHART = Path("charts") / "elastic-operator"
CRD = Path("crds") / "elastictrainingjobs.yaml"
# `etj` as an image runs it, with this interpreter (the venv's).
# The module of the `etj` command: elastic_api/cli.py before issue 70 split it.
ETJ_MODULES = ("elastic_api.etj_cli", "elastic_api.cli")


class MissingHistory(RuntimeError):
    """The previous release is not in this checkout's git history."""


@dataclass(frozen=True)
class Revision:
    """One release: its source tree and the image tag its chart is installed with."""

    label: str  # how the timeline names it
    tree: Path
    tag: str

    @property
    def chart(self) -> Path:
        return self.tree / CHART

    def crd(self) -> dict[str, Any]:
        crd: dict[str, Any] = yaml.safe_load((self.tree / CRD).read_text())
        return crd

    def etj(self) -> tuple[str, ...]:
        """This release's `etj` command, as `python -m` of its own module: the console
        script of today's install names today's module, which an older tree lacks, and
        the import then found today's file beside the release's others."""
        for module in ETJ_MODULES:
            if (self.tree / "api" / (module.replace(".", "/") + ".py")).exists():
                return (sys.executable, "-m", module)
        raise AssertionError(f"{self.label}: no etj module in {self.tree / 'api'}")

    def env(self) -> dict[str, str]:
        """This tree's packages first on the path, so `self.etj()` runs this release's
        code with today's dependencies."""
        return {"PYTHONPATH": os.pathsep.join(str(self.tree / p) for p in ON_PATH)}


def current() -> Revision:
    return Revision("current (this checkout)", ROOT, CURRENT_TAG)


def previous_release() -> str:
    """What hack/upgrade/previous-release names: its first line that is no comment."""
    lines = (line.strip() for line in PREVIOUS_RELEASE.read_text().splitlines())
    return next(line for line in lines if line and not line.startswith("#"))


def _git(*args: str) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True,
                              timeout=120)
    except FileNotFoundError:
        raise MissingHistory("git is not installed: the upgrade test takes the previous "
                             "release from this checkout's git history") from None


def resolve(ref: str) -> str:
    """The full commit `ref` names; MissingHistory says how to fetch it when this
    checkout does not have it (a shallow clone, a copy without .git)."""
    found = _git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if found.returncode == 0:
        return found.stdout.decode().strip()
    named = f"the previous release {ref} ({PREVIOUS_RELEASE.relative_to(ROOT)})"
    if _git("rev-parse", "--git-dir").returncode != 0:
        raise MissingHistory(f"{named}: {ROOT} is not a git checkout; the upgrade test "
                             "needs the git history (run it from a clone)")
    shallow = _git("rev-parse", "--is-shallow-repository").stdout.decode().strip() == "true"
    raise MissingHistory(f"{named} is not in this clone's history"
                         f"{' (a shallow clone)' if shallow else ''}: fetch it with "
                         f"`git fetch --unshallow` or `git fetch origin {ref}`")


def previous(into: Path) -> Revision:
    """The previous release's tree, `git archive`d into `into`."""
    commit = resolve(previous_release())
    return Revision(f"previous ({commit[:7]})", archived(commit, into), commit[:7])


def archived(commit: str, into: Path, *paths: str) -> Path:
    """`paths` of `commit` (this checkout's history), `git archive`d into `into`."""
    full = resolve(commit)
    result = _git("archive", "--format=tar", full, *paths)
    if result.returncode != 0:
        raise RuntimeError(f"git archive {full} {' '.join(paths)}: {result.stderr.decode()}")
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(result.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into


# Imports every module of a tree's packages and prints those that fail or resolve
# elsewhere (another checkout, the venv's editable install): run with the tree's env().
_IMPORT_ALL = """
import importlib, json, pathlib, sys
tree, problems = pathlib.Path(sys.argv[1]).resolve(), []
for folder in sys.argv[2:]:
    base = tree / folder
    for path in sorted(base.glob("elastic_*/**/*.py")):
        name = ".".join(path.relative_to(base).with_suffix("").parts)
        name = name.removesuffix(".__init__")
        try:
            module = importlib.import_module(name)
        except Exception as err:
            problems.append(f"{name}: {type(err).__name__}: {err}")
            continue
        where = pathlib.Path(getattr(module, "__file__", "") or "").resolve()
        if not where.is_relative_to(tree):
            problems.append(f"{name} resolved to {where}, outside {tree}")
print(json.dumps(problems))
"""


def import_problems(revision: Revision) -> list[str]:
    """Modules of the release's packages that do not import with today's dependencies
    (or import from elsewhere), in words; none: its code runs here."""
    import json

    result = subprocess.run([sys.executable, "-c", _IMPORT_ALL, str(revision.tree),
                             *PACKAGES], capture_output=True, text=True, timeout=300,
                            cwd=revision.tree, env={**os.environ, **revision.env()})
    if result.returncode != 0:
        return [f"the import check exited {result.returncode}: {result.stderr[-2000:]}"]
    problems: list[str] = json.loads(result.stdout.splitlines()[-1])
    return problems


# --- the CRD ------------------------------------------------------------------------------


def schema_fields(crd: dict[str, Any]) -> set[str]:
    """Every field the CRD's first version serves, as paths: .status.slices[].counted."""
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    found: set[str] = set()

    def walk(node: dict[str, Any], path: str) -> None:
        for name, child in (node.get("properties") or {}).items():
            found.add(f"{path}.{name}")
            walk(child, f"{path}.{name}")
        if isinstance(node.get("items"), dict):
            walk(node["items"], f"{path}[]")
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], f"{path}{{}}")

    walk(schema, "")
    return found


def added_status_fields(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The status fields `new` serves and `old` does not, the outermost only (a new
    object's own fields are not listed again)."""
    added = {p for p in schema_fields(new) - schema_fields(old) if p.startswith(".status.")}
    return sorted(p for p in added
                  if p.rsplit(".", 1)[0].removesuffix("[]").removesuffix("{}") not in added)


def has_field(obj: Any, path: str) -> bool:
    """Whether `obj` holds the field at `path` (schema_fields' form), in any element of
    a list or map on the way."""
    if not path:
        return obj is not None
    name, _, rest = path.lstrip(".").partition(".")
    rest = f".{rest}" if rest else ""
    key, each = name.removesuffix("[]").removesuffix("{}"), name[len(name.rstrip("[]{}")):]
    if not isinstance(obj, dict) or key not in obj:
        return False
    value = obj[key]
    if each == "[]":
        return any(has_field(v, rest) for v in value or [])
    if each == "{}":
        return any(has_field(v, rest) for v in (value or {}).values())
    return has_field(value, rest)


# --- helm ---------------------------------------------------------------------------------


def chart_values(revision: Revision, namespace: str, replicas: int,
                 **more: Any) -> dict[str, Any]:
    """A release's values in the upgrade test: the namespace it serves, `replicas`, the
    image tag naming `revision`, make test's periods (operator_settings.TEST) as extra
    arguments, text logs, and the label that leaves the pods' kubelet to the test's
    (operator_kubelet.py: kwok would make them Ready at once, whatever their probe
    says); `more` on top."""
    return {"watchNamespaces": [namespace], "replicaCount": replicas,
            "image": {"tag": revision.tag}, "podLabels": {DEAD_KUBELET_LABEL: "true"},
            "operator": {"logFormat": "text", "extraArgs": list(TEST.speed_args())}, **more}


@dataclass
class Helm:
    """The pinned helm on the local control plane, for one release in one namespace;
    values files written into `workdir`."""

    cluster: Cluster
    release: str
    namespace: str
    workdir: Path

    def __call__(self, *args: str) -> str:
        env = {**os.environ, "KUBECONFIG": str(self.cluster.kubeconfig)}
        result = subprocess.run([str(helm_binary()), *args, "--namespace", self.namespace],
                                capture_output=True, text=True, timeout=300, env=env)
        if result.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed:\n{result.stderr}")
        return result.stdout

    def values(self, revision: Revision, replicas: int, **more: Any) -> Path:
        """chart_values as a file."""
        path = self.workdir / f"values-{revision.tag}.yaml"
        path.write_text(yaml.safe_dump(chart_values(revision, self.namespace, replicas,
                                                    **more)))
        return path

    def install(self, revision: Revision, replicas: int) -> str:
        return self("install", self.release, str(revision.chart),
                    "-f", str(self.values(revision, replicas)))

    def upgrade(self, revision: Revision, replicas: int, *flags: str, **more: Any) -> str:
        return self("upgrade", self.release, str(revision.chart),
                    "-f", str(self.values(revision, replicas, **more)), *flags)


# --- the timeline -------------------------------------------------------------------------


class Timeline:
    """What happened, printed as it happens with the seconds since the start (from any
    thread); `lines` keeps it for the end."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.lines: list[str] = []
        self._lock = threading.Lock()

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def note(self, message: str) -> None:
        line = f"[{self.elapsed():7.1f} s] {message}"
        with self._lock:
            self.lines.append(line)
        print(line, flush=True)
