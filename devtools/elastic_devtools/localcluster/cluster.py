"""Bring the local control plane up and down.

One state directory per cluster (default `$ETJ_CACHE_DIR/cluster`, or `ETJ_CLUSTER_DIR`):
certificates, kubeconfigs, etcd data, pid files and one log per component. Ports are
picked free on loopback at start, so several clusters can run side by side.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import shutil
import socket
import ssl
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from elastic_devtools.localcluster import cluster_config, kueue, pki, procs
from elastic_devtools.localcluster.cluster_config import (
    DEFAULT_CPU_NODES,
    DEFAULT_TPU_POOLS,
    Layout,
    Ports,
    TpuPoolSpec,
)
from elastic_devtools.localcluster.kapi import ApiError, KubeApi
from elastic_devtools.localcluster.versions import Binaries, cache_dir, load_versions

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

# Start order; `down` stops them all at once.
COMPONENTS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "jobset-controller",
    kueue.COMPONENT,
)
# Started only when asked for (`etj cluster up --kueue`, the `kueue` test fixture).
OPTIONAL_COMPONENTS = frozenset({kueue.COMPONENT})

Progress = Callable[[str], None]
START_ATTEMPTS = 3


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class ClusterStartError(RuntimeError):
    """The cluster did not become ready; the message names the component and its log."""


def default_dir(name: str | None = None) -> Path:
    """The state directory of the cluster `name` (None: the one cluster of `etj cluster
    up`); several named clusters run side by side (MultiKueue: a manager and workers)."""
    if name is not None:
        return cache_dir() / f"cluster-{name}"
    return Path(os.environ.get("ETJ_CLUSTER_DIR") or cache_dir() / "cluster")


@dataclass(frozen=True)
class ClusterConfig:
    dir: Path = field(default_factory=default_dir)
    tpu_pools: tuple[TpuPoolSpec, ...] = DEFAULT_TPU_POOLS
    cpu_nodes: int = DEFAULT_CPU_NODES
    timeout: float = 180.0  # seconds for the whole start
    # Components get SIGKILL when the process that started them dies (the pytest
    # fixture uses this; `etj cluster up` must not, its cluster outlives the command).
    die_with_parent: bool = False
    # Also run Kueue (admission by quota; devtools/elastic_devtools/localcluster/kueue.py).
    kueue: bool = False
    # Kueue as a MultiKueue manager, with this origin name (implies kueue): it dispatches
    # ElasticTrainingJobs to worker clusters (kueue_queues.multikueue names them).
    multikueue_origin: str | None = None


@dataclass(frozen=True)
class Cluster:
    """A handle on a running cluster (what `up` returns and the pytest fixture yields)."""

    dir: Path

    @property
    def layout(self) -> Layout:
        return Layout(self.dir)

    @property
    def kubeconfig(self) -> Path:
        return self.layout.kubeconfig

    @property
    def logs_dir(self) -> Path:
        return self.layout.logs

    @property
    def state(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.layout.state_file.read_text())
        return data

    @property
    def server(self) -> str:
        return str(self.state["server"])

    def api_client(self) -> ApiClient:
        """A new kubernetes.client.ApiClient authenticated as cluster admin."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))


# ------------------------------------------------------------------------------ helpers

@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """Serialise up/down on one directory (parallel test workers share a cluster)."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def free_ports(count: int) -> list[int]:
    """Distinct free loopback ports (all sockets held open until every port is chosen)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _port_taken(err: BaseException) -> bool:
    """A component failed to start because a port picked free was taken before it bound
    it (another process, e.g. a parallel test worker's): start again on new ports."""
    return "address already in use" in str(err)


def free_port() -> int:
    """One free loopback port."""
    return free_ports(1)[0]


def _write(path: Path, data: bytes | str, private: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode() if isinstance(data, str) else data
    path.write_bytes(raw)
    if private:
        path.chmod(0o600)


def _records(layout: Layout) -> list[procs.PidRecord]:
    out = []
    for component in COMPONENTS:
        record = procs.read_pid_file(component, layout.pid(component))
        if record is not None:
            out.append(record)
    return out


_INSECURE = ssl.create_default_context()
_INSECURE.check_hostname = False
_INSECURE.verify_mode = ssl.CERT_NONE  # loopback health endpoints with self-signed certs


def _http_ok(url: str, context: ssl.SSLContext | None = None, expect: str = "ok") -> bool:
    try:
        with urllib.request.urlopen(url, context=context, timeout=2) as resp:
            return expect in resp.read().decode(errors="replace")
    except OSError:
        return False


def _admin_api(layout: Layout, server: str) -> KubeApi:
    pki_dir = layout.pki
    return KubeApi(server, pki_dir / "ca.crt", pki_dir / "admin.crt", pki_dir / "admin.key")


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


# ---------------------------------------------------------------------------- status

@dataclass(frozen=True)
class ComponentStatus:
    name: str
    pid: int | None
    alive: bool
    rss_bytes: int


@dataclass(frozen=True)
class ClusterStatus:
    dir: Path
    components: tuple[ComponentStatus, ...]
    apiserver_ready: bool
    server: str | None

    @property
    def running(self) -> bool:
        """Ready, and every component alive (an optional one only if it was started)."""
        return self.apiserver_ready and all(
            c.alive for c in self.components
            if c.name not in OPTIONAL_COMPONENTS or c.pid is not None)

    @property
    def any_alive(self) -> bool:
        return any(c.alive for c in self.components)

    @property
    def rss_total(self) -> int:
        return sum(c.rss_bytes for c in self.components)


def status(directory: Path | str | None = None) -> ClusterStatus:
    layout = Layout(Path(directory) if directory else default_dir())
    records = {r.component: r for r in _records(layout)}
    components = []
    for name in COMPONENTS:
        record = records.get(name)
        alive = record is not None and procs.is_alive(record)
        rss = procs.rss_bytes(record.pid) if record is not None and alive else 0
        components.append(ComponentStatus(name, record.pid if record else None, alive, rss))
    server = None
    ready = False
    if layout.state_file.exists() and (layout.pki / "admin.crt").exists():
        server = json.loads(layout.state_file.read_text())["server"]
        if any(c.alive for c in components if c.name == "kube-apiserver"):
            try:
                ready = _admin_api(layout, server).request("GET", "/readyz") == "ok"
            except (ApiError, OSError, ssl.SSLError):
                ready = False
    return ClusterStatus(layout.root, tuple(components), ready, server)


# -------------------------------------------------------------------------------- down

def down(directory: Path | str | None = None, progress: Progress = _stderr) -> int:
    """Stop every component of the cluster in `directory`; returns how many were running."""
    layout = Layout(Path(directory) if directory else default_dir())
    if not layout.root.exists():
        return 0
    with _locked(layout.root):
        return _down(layout, progress)


def _down(layout: Layout, progress: Progress) -> int:
    records = _records(layout)
    running = [r for r in records if procs.is_alive(r)]
    t0 = time.monotonic()
    procs.stop_all(records)
    for component in COMPONENTS:
        layout.pid(component).unlink(missing_ok=True)
    if running:
        names = ", ".join(r.component for r in running)
        progress(f"stopped {names} in {time.monotonic() - t0:.1f}s")
    return len(running)


# ------------------------------------------------------------ one component (fault tests)

def _component_argv(component: str, binaries: Binaries, layout: Layout,
                    ports: Ports) -> list[str]:
    if component == "etcd":
        return cluster_config.etcd_args(binaries.etcd, layout, ports)
    if component == "kube-apiserver":
        return cluster_config.apiserver_args(binaries.kube_apiserver, layout, ports)
    if component == "kube-controller-manager":
        return cluster_config.controller_manager_args(binaries.kube_controller_manager, layout,
                                                      ports)
    if component == "kube-scheduler":
        return cluster_config.scheduler_args(binaries.kube_scheduler, layout, ports)
    if component == "kwok":
        return cluster_config.kwok_args(binaries.kwok, layout, ports)
    if component == "jobset-controller":
        return cluster_config.jobset_args(binaries.jobset_controller, layout)
    raise ValueError(f"unknown component {component!r}; one of {', '.join(COMPONENTS)}")


def stop_component(directory: Path | str, component: str) -> bool:
    """Stop one component of a running cluster (SIGTERM, SIGKILL after 5 s), as when the
    API server restarts; False if it was not running."""
    layout = Layout(Path(directory))
    record = procs.read_pid_file(component, layout.pid(component))
    if record is None or not procs.is_alive(record):
        return False
    procs.stop_all([record])
    return True


def start_component(directory: Path | str, component: str, timeout: float = 60.0) -> None:
    """Start a stopped component again, with the arguments and ports it had (its log is
    appended to). For the API server, returns once it is ready."""
    layout = Layout(Path(directory))
    state = json.loads(layout.state_file.read_text())
    ports = Ports(**state["ports"])
    # The versions it was started with (another ETJ_VERSIONS_FILE may be in effect now).
    argv = _component_argv(component, Binaries.locate(state.get("versions") or load_versions()),
                           layout, ports)
    record = procs.start(component, argv, layout.pid(component), layout.log(component),
                         layout.root, die_with_parent=bool(state.get("die_with_parent")))
    if component != "kube-apiserver":
        return
    api = _admin_api(layout, state["server"])
    deadline = time.monotonic() + timeout
    while True:
        if not procs.is_alive(record):
            log = layout.log(component)
            raise ClusterStartError(f"{component} exited; log {log}:\n{_tail(log)}")
        try:
            if api.request("GET", "/readyz") == "ok":
                return
        except (ApiError, OSError, ssl.SSLError):
            pass
        if time.monotonic() > deadline:
            raise ClusterStartError(f"{component} not ready after {timeout:.0f}s")
        time.sleep(0.2)


# ---------------------------------------------------------------------------------- up

def up(config: ClusterConfig | None = None, progress: Progress = _stderr) -> Cluster:
    """Start the cluster (a fast no-op if it already runs) and return once it is ready:
    API server ready, JobSet webhooks answering, every node Ready and untainted, and the
    `default` ServiceAccount present."""
    cfg = config or ClusterConfig()
    layout = Layout(Path(cfg.dir).absolute())
    with _locked(layout.root):
        current = status(layout.root)
        if current.running:
            state = json.loads(layout.state_file.read_text())
            have = state.get("tpu_pools")
            if have != [str(p) for p in cfg.tpu_pools] or state.get("cpu_nodes") != cfg.cpu_nodes:
                progress(f"note: the cluster in {layout.root} already runs with TPU pools {have}; "
                         f"run `etj cluster down --dir {layout.root}` first to change them")
            progress(f"cluster already running ({layout.root}); kubeconfig: {layout.kubeconfig}")
            if (cfg.kueue or cfg.multikueue_origin) and not kueue.running(layout.root):
                _start_kueue(layout, progress, cfg.timeout, cfg.die_with_parent,
                             multikueue_origin=cfg.multikueue_origin)
            return Cluster(layout.root)
        if current.any_alive:
            progress("cluster partly running; stopping what is left")
            _down(layout, progress)
        binaries = Binaries.locate(load_versions())
        binaries.require()
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                _start(cfg, layout, binaries, progress)
                return Cluster(layout.root)
            except ClusterStartError as err:
                _down(layout, lambda _line: None)
                if not _port_taken(err) or attempt == START_ATTEMPTS:
                    raise
                progress(f"a port was taken during start ({err}); retrying")
            except BaseException:
                _down(layout, lambda _line: None)
                raise
        raise AssertionError("unreachable")


def _prepare(cfg: ClusterConfig, layout: Layout, binaries: Binaries, ports: Ports) -> str:
    """Write certificates, kubeconfigs and configs for a fresh start; returns the server URL."""
    for sub in (layout.etcd_data, layout.run, layout.pki, layout.root / "jobset",
                layout.root / "kwok", layout.logs):
        shutil.rmtree(sub, ignore_errors=True)
    layout.state_file.unlink(missing_ok=True)
    layout.kubeconfig.unlink(missing_ok=True)
    for sub in (layout.logs, layout.run, layout.pki):
        sub.mkdir(parents=True)

    now = dt.datetime.now(dt.UTC)
    server = f"https://127.0.0.1:{ports.apiserver}"
    ca = pki.new_ca("etj-local-ca", now)
    _write(layout.pki / "ca.crt", ca.cert_pem)
    _write(layout.pki / "ca.key", ca.key_pem, private=True)
    serving = pki.issue(
        ca, "kube-apiserver", now, server=True,
        dns_names=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                   "kubernetes.default.svc.cluster.local"),
        ips=("127.0.0.1", cluster_config.SERVICE_IP),
    )
    _write(layout.pki / "apiserver.crt", serving.cert_pem)
    _write(layout.pki / "apiserver.key", serving.key_pem, private=True)
    front_ca = pki.new_ca("etj-front-proxy-ca", now)
    front_client = pki.issue(front_ca, "front-proxy-client", now, client=True)
    _write(layout.pki / "front-proxy-ca.crt", front_ca.cert_pem)
    _write(layout.pki / "front-proxy-client.crt", front_client.cert_pem)
    _write(layout.pki / "front-proxy-client.key", front_client.key_pem, private=True)
    sa = pki.new_signing_key()
    _write(layout.pki / "sa.pub", sa.cert_pem)
    _write(layout.pki / "sa.key", sa.key_pem, private=True)

    # (kubeconfig name, CN, groups): the controller-manager and scheduler get the
    # identities RBAC's bootstrap policy grants; kwok and JobSet run as admins.
    identities = [
        ("admin", "etj-admin", ("system:masters",)),
        ("kube-controller-manager", "system:kube-controller-manager", ()),
        ("kube-scheduler", "system:kube-scheduler", ()),
        ("kwok", "kwok-controller", ("system:masters",)),
        ("jobset-controller", "jobset-controller", ("system:masters",)),
    ]
    for name, cn, groups in identities:
        pair = pki.issue(ca, cn, now, orgs=groups, client=True)
        kc = yaml.safe_dump(cluster_config.kubeconfig(server, ca.cert_pem, pair.cert_pem,
                                                      pair.key_pem, cn))
        if name == "admin":
            _write(layout.pki / "admin.crt", pair.cert_pem)
            _write(layout.pki / "admin.key", pair.key_pem, private=True)
            _write(layout.kubeconfig, kc, private=True)
        else:
            _write(layout.component_kubeconfig(name), kc, private=True)

    webhook = pki.issue(ca, "jobset-webhook", now, server=True, dns_names=("localhost",),
                        ips=("127.0.0.1",))
    _write(layout.jobset_certs / "tls.crt", webhook.cert_pem)
    _write(layout.jobset_certs / "tls.key", webhook.key_pem, private=True)
    _write(layout.jobset_config, yaml.safe_dump(
        cluster_config.jobset_config(ports.jobset_webhook, ports.jobset_health,
                                     layout.jobset_certs)))

    _write(layout.audit_policy, yaml.safe_dump(cluster_config.audit_policy()))

    stages = cluster_config.kwok_stages(yaml.safe_load((binaries.kwok_stages / rel).read_text())
                                for rel in cluster_config.KWOK_STAGE_FILES)
    _write(layout.kwok_stages, yaml.safe_dump_all(stages))

    state = {
        "server": server,
        "ports": ports.__dict__,
        "tpu_pools": [str(p) for p in cfg.tpu_pools],
        "cpu_nodes": cfg.cpu_nodes,
        "versions": load_versions(),
        "started_at": now.isoformat(),
        "die_with_parent": cfg.die_with_parent,
    }
    _write(layout.state_file, json.dumps(state, indent=2))
    return server


class _Starter:
    """Starts components and waits on readiness checks, one progress line each."""

    def __init__(self, layout: Layout, progress: Progress, timeout: float,
                 die_with_parent: bool) -> None:
        self.layout = layout
        self.die_with_parent = die_with_parent
        self.progress = progress
        self.t0 = time.monotonic()
        self.deadline = self.t0 + timeout
        self.started: dict[str, procs.PidRecord] = {}
        self.started_at: dict[str, float] = {}

    def start(self, component: str, argv: list[str]) -> None:
        self.started[component] = procs.start(
            component, argv, self.layout.pid(component), self.layout.log(component),
            self.layout.root, die_with_parent=self.die_with_parent)
        self.started_at[component] = time.monotonic()

    def _check_alive(self) -> None:
        for component, record in self.started.items():
            if not procs.is_alive(record):
                log = self.layout.log(component)
                raise ClusterStartError(
                    f"{component} exited during start; log {log}:\n{_tail(log)}")

    def wait(self, checks: dict[str, Callable[[], bool]]) -> None:
        """Poll every check until all pass; print each as it does."""
        pending = dict(checks)
        waited_from = time.monotonic()
        while pending:
            for name, check in list(pending.items()):
                if check():
                    since = self.started_at.get(name, waited_from)
                    now = time.monotonic()
                    self.progress(
                        f"  {name:<24} ready in {now - since:5.1f}s  (t={now - self.t0:5.1f}s)")
                    del pending[name]
            if not pending:
                return
            self._check_alive()
            if time.monotonic() > self.deadline:
                logs = ", ".join(str(self.layout.log(n)) for n in pending if n in COMPONENTS)
                raise ClusterStartError(
                    f"timed out waiting for: {', '.join(pending)}"
                    + (f"; see {logs}" if logs else f"; logs in {self.layout.logs}"))
            time.sleep(0.1)


def _start(cfg: ClusterConfig, layout: Layout, binaries: Binaries, progress: Progress) -> None:
    ports = Ports.from_list(free_ports(len(Ports.__dataclass_fields__)))
    progress(f"starting local cluster in {layout.root} (logs: {layout.logs})")
    server = _prepare(cfg, layout, binaries, ports)
    api = _admin_api(layout, server)
    s = _Starter(layout, progress, cfg.timeout, cfg.die_with_parent)

    _start_etcd_and_apiserver(s, api, binaries, layout, ports)
    s.start("kube-controller-manager",
            cluster_config.controller_manager_args(binaries.kube_controller_manager, layout, ports))
    s.start("kube-scheduler", cluster_config.scheduler_args(binaries.kube_scheduler, layout, ports))
    s.start("kwok", cluster_config.kwok_args(binaries.kwok, layout, ports))
    # Nodes and webhook registrations first: the node lifecycle controller and kwok
    # work on the nodes while the CRD is applied.
    expected = _register_nodes_and_webhooks(api, cfg, layout, ports)
    _start_jobset(s, api, binaries, layout)
    _wait_for_the_rest(s, api, ports, expected)
    if cfg.kueue or cfg.multikueue_origin:
        _start_kueue(layout, progress, max(s.deadline - time.monotonic(), 60.0),
                     cfg.die_with_parent, multikueue_origin=cfg.multikueue_origin)
    progress(f"cluster ready in {time.monotonic() - s.t0:.1f}s; kubeconfig: {layout.kubeconfig}")


def _start_etcd_and_apiserver(s: _Starter, api: KubeApi, binaries: Binaries, layout: Layout,
                              ports: Ports) -> None:
    s.start("etcd", cluster_config.etcd_args(binaries.etcd, layout, ports))
    etcd_health = f"http://127.0.0.1:{ports.etcd_client}/health"
    s.wait({"etcd": lambda: _http_ok(etcd_health, expect="true")})

    s.start("kube-apiserver", cluster_config.apiserver_args(binaries.kube_apiserver, layout, ports))

    def apiserver_ready() -> bool:
        try:
            return api.request("GET", "/readyz") == "ok"
        except (ApiError, OSError, ssl.SSLError):
            return False

    s.wait({"kube-apiserver": apiserver_ready})


def _register_nodes_and_webhooks(api: KubeApi, cfg: ClusterConfig, layout: Layout,
                                 ports: Ports) -> set[str]:
    """The fake nodes and JobSet's webhook registrations; the names of the nodes."""
    pools = cluster_config.node_pools(cfg.tpu_pools, cfg.cpu_nodes)
    nodes = cluster_config.node_manifests(pools)
    for node in nodes:
        try:
            api.create("/api/v1/nodes", node)
        except ApiError as err:
            if err.status != 409:
                raise
    ca_pem = (layout.pki / "ca.crt").read_bytes()
    for hook in cluster_config.jobset_webhook_configurations(ports.jobset_webhook, ca_pem):
        plural = hook["kind"].lower() + "s"
        name = hook["metadata"]["name"]
        api.apply(f"/apis/admissionregistration.k8s.io/v1/{plural}/{name}", hook)
    return {n["metadata"]["name"] for n in nodes}


def _start_jobset(s: _Starter, api: KubeApi, binaries: Binaries, layout: Layout) -> None:
    # JobSet's informers need its CRD served before the controller starts.
    crd_name = "jobsets.jobset.x-k8s.io"
    api.apply(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd_name}",
              binaries.jobset_crd.read_text())

    def crd_established() -> bool:
        crd = api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd_name}")
        conditions = (crd.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    s.wait({"jobset CRD": crd_established})
    s.start("jobset-controller", cluster_config.jobset_args(binaries.jobset_controller, layout))


def _wait_for_the_rest(s: _Starter, api: KubeApi, ports: Ports, expected: set[str]) -> None:
    """The controllers, kwok and JobSet healthy, every node Ready, the default
    ServiceAccount made."""

    def nodes_ready() -> bool:
        ready = set()
        for node in api.get("/api/v1/nodes")["items"]:
            conditions = (node.get("status") or {}).get("conditions") or []
            is_ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
            # New nodes carry not-ready taints until the node lifecycle controller lifts them.
            tainted = any(t["key"].startswith("node.kubernetes.io/")
                          for t in node.get("spec", {}).get("taints", []) or [])
            if is_ready and not tainted:
                ready.add(node["metadata"]["name"])
        return expected <= ready

    def default_sa() -> bool:
        try:
            api.get("/api/v1/namespaces/default/serviceaccounts/default")
            return True
        except ApiError:
            return False

    def webhook_answers() -> bool:
        if not _http_ok(f"http://127.0.0.1:{ports.jobset_health}/readyz"):
            return False
        try:
            api.create("/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets",
                       cluster_config.jobset_probe(), dry_run=True)
            return True
        except ApiError:
            return False

    s.wait({
        "kube-controller-manager": lambda: _http_ok(
            f"https://127.0.0.1:{ports.controller_manager}/healthz", _INSECURE),
        "kube-scheduler": lambda: _http_ok(
            f"https://127.0.0.1:{ports.scheduler}/healthz", _INSECURE),
        "kwok": lambda: _http_ok(f"http://127.0.0.1:{ports.kwok}/healthz"),
        "jobset-controller": webhook_answers,
        f"nodes ({len(expected)})": nodes_ready,
        "default ServiceAccount": default_sa,
    })


# --------------------------------------------------------------------------------- Kueue

def _start_kueue(layout: Layout, progress: Progress, timeout: float,
                 die_with_parent: bool, settings: kueue.KueueSettings | None = None,
                 multikueue_origin: str | None = None) -> None:
    """Kueue on the running cluster, with an admin identity of its own (as JobSet has)."""
    server = json.loads(layout.state_file.read_text())["server"]
    ca = pki.KeyPair((layout.pki / "ca.crt").read_bytes(), (layout.pki / "ca.key").read_bytes())
    pair = pki.issue(ca, kueue.COMPONENT, dt.datetime.now(dt.UTC), orgs=("system:masters",),
                     client=True)
    kubeconfig = yaml.safe_dump(cluster_config.kubeconfig(server, ca.cert_pem, pair.cert_pem,
                                                  pair.key_pem, kueue.COMPONENT))
    for attempt in range(1, START_ATTEMPTS + 1):
        webhook_port, health_port = free_ports(2)
        try:
            kueue.start(layout.root, _admin_api(layout, server), kubeconfig,
                        ports=(webhook_port, health_port), progress=progress,
                        timeout=timeout, die_with_parent=die_with_parent, settings=settings,
                        multikueue_origin=multikueue_origin)
            return
        except (RuntimeError, TimeoutError, ApiError) as err:
            kueue.stop(layout.root, _admin_api(layout, server))
            if not _port_taken(err) or attempt == START_ATTEMPTS:
                raise ClusterStartError(f"Kueue did not start: {err}") from None
            progress(f"a port was taken during Kueue's start; retrying ({attempt})")


def start_kueue(cluster: Cluster, progress: Progress = _stderr,
                die_with_parent: bool = False, timeout: float = 180.0,
                settings: kueue.KueueSettings | None = None,
                multikueue_origin: str | None = None) -> bool:
    """Add Kueue to a running cluster, with `settings` (None: the release's defaults; a
    MultiKueue manager with `multikueue_origin`); returns False (and does nothing) if it
    runs already with those settings. One running with other settings is restarted with
    these (its objects stay)."""
    layout = cluster.layout
    wanted = settings or kueue.KueueSettings()
    with _locked(layout.root):
        current = kueue.running_settings(layout.root)
        if current == wanted:
            return False
        if current is not None:
            progress(f"restarting Kueue with other settings ({wanted.to_json()})")
            kueue.stop(layout.root, _admin_api(layout, cluster.server))
        _start_kueue(layout, progress, timeout, die_with_parent, wanted,
                     multikueue_origin=multikueue_origin)
        return True


def kueue_settings(cluster: Cluster) -> kueue.KueueSettings | None:
    """The settings of the Kueue running on `cluster` (None: not running)."""
    return kueue.running_settings(cluster.layout.root)


def stop_kueue(cluster: Cluster) -> bool:
    """Stop Kueue and remove its webhooks, leaving the rest of the cluster as `up` made
    it without Kueue (its CRDs and objects stay). Returns whether it was running."""
    layout = cluster.layout
    with _locked(layout.root):
        return kueue.stop(layout.root, _admin_api(layout, cluster.server))
