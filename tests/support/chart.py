"""The Helm chart as the tests run it: rendered with the pinned helm, its RBAC installed,
and `etj operator` run with the chart Deployment's own arguments as the chart's
ServiceAccount (a TokenRequest token: RBAC really applies).

`ChartReplicas` runs the chart's replicas (two by default, electing a leader on the
chart's Lease) as local processes, each with a token of its own: the API server's audit
log tells their writes apart (elastic_devtools.localcluster.audit).
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from elastic_devtools.localcluster.audit import credential_of
from elastic_devtools.localcluster.faults import wait_for
from elastic_devtools.localcluster.operator_process import OperatorProcess
from elastic_devtools.localcluster.operator_settings import TEST
from elastic_devtools.localcluster.versions import cache_dir, load_versions
from tests.service_accounts import token_kubeconfig

if TYPE_CHECKING:
    from kubernetes import client

    from elastic_devtools.localcluster import Cluster

CHART = Path(__file__).resolve().parents[2] / "charts" / "elastic-operator"
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
# Test speed, over the chart's arguments (make test's, operator_settings.TEST): resync
# and checkpoint scan every 5 s, a quarantined node pool released 5 s after its nodes are
# Ready again.
FAST_ARGS = TEST.speed_args()


def helm_binary() -> Path:
    """The pinned helm (versions.env), or $HELM; fails (never skips) naming the build."""
    version = load_versions()["HELM_VERSION"]
    helm = Path(os.environ.get("HELM") or cache_dir() / "bin" / f"helm-{version}")
    if not os.access(helm, os.X_OK):
        pytest.fail(f"helm {version} not found at {helm}: run hack/build-control-plane.sh")
    return helm


def helm_template(release: str, namespace: str, *values: str,
                  values_file: Path | None = None, chart: Path = CHART
                  ) -> list[dict[str, Any]]:
    args = [str(helm_binary()), "template", release, str(chart), "--namespace", namespace]
    if values_file is not None:
        args += ["-f", str(values_file)]
    for value in values:
        args += ["--set", value]
    result = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def unique_release() -> str:
    """A release name holding the chart's name, so its objects are named after it alone
    (cluster-scoped ClusterRoles must not collide between tests)."""
    return f"elastic-operator-{uuid.uuid4().hex[:6]}"


def chart_rbac(release: str, namespace: str, *values: str) -> list[dict[str, Any]]:
    return [d for d in helm_template(release, namespace, *values) if d["kind"] in RBAC_KINDS]


def only(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name or ''}, got {len(found)}"
    return found[0]


def operator_args(deployment: dict[str, Any], namespace: str, *more: str) -> list[str]:
    """The chart's container args, with the scope narrowed to the test's namespace (and
    `more`) and free local ports (the session cluster is shared with other tests)."""
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args = []
    for arg in container["args"]:
        if arg == "--all-namespaces" or arg.startswith("--namespace"):
            continue
        if arg.startswith(("--liveness-port", "--readiness-port", "--metrics-port")):
            continue
        if arg.startswith("--log-format"):
            arg = "--log-format=text"
        args.append(arg)
    return [*args, *(f"--namespace={ns}" for ns in (namespace, *more))]


def token_of(kubeconfig: Path) -> str:
    config = yaml.safe_load(kubeconfig.read_text())
    return str(config["users"][0]["user"]["token"])


@dataclass
class ChartReplicas:
    """The chart's operator replicas (release `release` in `namespace`, watching it),
    each an OperatorProcess with a ServiceAccount token of its own (`credentials[i]`, as
    the audit log names it). `kubeconfig(path)` may rewrite each replica's kubeconfig
    (to go through a proxy)."""

    cluster: Cluster
    api: client.ApiClient
    namespace: str
    workdir: Path
    count: int = 2
    kubeconfig: Callable[[Path], Path] = lambda path: path
    # Namespaces watched beside `namespace` (the multi-tenant soak's teams').
    also_watch: tuple[str, ...] = ()
    release: str = field(default_factory=unique_release)
    # /metrics as the chart serves it (HTTPS, a reader's token); else plain HTTP, which
    # OperatorProcess.metrics() and leading() read.
    secure_metrics: bool = False
    procs: list[OperatorProcess] = field(default_factory=list)
    credentials: list[str] = field(default_factory=list)
    _docs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def values(self) -> tuple[str, ...]:
        watched = ",".join((self.namespace, *self.also_watch))
        return (f"watchNamespaces={{{watched}}}", f"replicaCount={self.count}")

    @property
    def service_account(self) -> str:
        return str(only(self._docs, "ServiceAccount")["metadata"]["name"])

    @property
    def lease(self) -> str:
        return self.release  # the chart's full name

    def install(self) -> None:
        """The chart's RBAC, and a token and an OperatorProcess per replica (not started)."""
        from kubernetes import utils

        self._docs = chart_rbac(self.release, self.namespace, *self.values)
        for doc in self._docs:
            utils.create_from_dict(self.api, doc)
        deployment = only(helm_template(self.release, self.namespace, *self.values),
                          "Deployment")
        assert deployment["spec"]["replicas"] == self.count
        args = [*operator_args(deployment, self.namespace, *self.also_watch), *FAST_ARGS]
        for i in range(self.count):
            kubeconfig = self.token_kubeconfig(f"operator-{i}")
            self.credentials.append(credential_of(token_of(kubeconfig)))
            self.procs.append(OperatorProcess(
                self.kubeconfig(kubeconfig), self.workdir / f"operator-{i}.log", args=args,
                identity=f"{self.release}-{i}-{uuid.uuid4().hex[:5]}", new_session=True,
                insecure_metrics=not self.secure_metrics))

    def token_kubeconfig(self, name: str) -> Path:
        """A kubeconfig with a new token of the chart's ServiceAccount."""
        return token_kubeconfig(self.cluster, self.namespace, self.service_account,
                                self.workdir / f"{name}.token-kubeconfig")

    def token(self, name: str) -> str:
        """A new token of the chart's ServiceAccount (another credential than the
        replicas')."""
        return token_of(self.token_kubeconfig(name))

    def uninstall(self) -> None:
        from kubernetes import client

        rbac = client.RbacAuthorizationV1Api(self.api)
        for doc in self._docs:
            with contextlib.suppress(client.ApiException):  # gone with the namespace
                if doc["kind"] == "ClusterRole":
                    rbac.delete_cluster_role(doc["metadata"]["name"])
                elif doc["kind"] == "ClusterRoleBinding":
                    rbac.delete_cluster_role_binding(doc["metadata"]["name"])

    def holder(self) -> str | None:
        from kubernetes import client

        try:
            spec = client.CoordinationV1Api(self.api).read_namespaced_lease(
                self.lease, self.namespace).spec
        except client.ApiException as err:
            if err.status == 404:  # not created yet
                return None
            raise
        return spec.holder_identity if spec is not None else None

    def index_of(self, identity: str | None) -> int | None:
        return next((i for i, p in enumerate(self.procs) if p.identity == identity), None)

    def leader(self, timeout: float = 60) -> int:
        """The index of the replica that holds the Lease (and is running)."""
        def running_holder() -> int | None:
            i = self.index_of(self.holder())
            return i if i is not None and self.procs[i].running else None
        index: int = wait_for(lambda: (i := running_holder()) is not None and [i], timeout,
                              f"a running replica holding Lease {self.lease}",
                              interval=0.1)[0]
        return index

    def start(self) -> None:
        """Replica 0 first, leading; then the others (standbys)."""
        self.procs[0].start()
        first = self.procs[0]
        wait_for(lambda: self.holder() == first.identity if self.secure_metrics
                 else first.leading(), 60, "replica 0 leads")
        for proc in self.procs[1:]:
            proc.start()

    def stop(self) -> None:
        for proc in self.procs:
            proc.stop()

    def logs(self) -> Sequence[Path]:
        return [p.log_path for p in self.procs]

    @contextlib.contextmanager
    def running(self) -> Iterator[ChartReplicas]:
        self.install()
        try:
            self.start()
            yield self
        finally:
            self.stop()
            self.uninstall()
