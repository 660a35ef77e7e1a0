"""The local control plane of `etj maxtext e2e`'s scenario (scenario.py): two v5e 2x4
slices and a spare played by kwok, the CRD, a namespace, and the operator as deployed,
sharing the local run's head /tmp (it runs in a mount namespace where that directory is
/tmp, as an operator shares any checkpoint directory it lists); and what the scenario
reads from it (the head pod, a ServiceAccount's kubeconfig, the STEP column)."""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from elastic_api.names import (
    GROUP,
    HEAD_REPLICATED_JOB,
    PLURAL,
    REPLICATED_JOB_LABEL,
    VERSION,
    job_pods_selector,
)
from elastic_devtools.localcluster.operator_settings import (
    MAXTEXT_E2E_NAMESPACE,
    MAXTEXT_E2E_ROOTS,
    SETTINGS,
)

if TYPE_CHECKING:
    from elastic_devtools.localcluster.operator_process import OperatorProcess

NAMESPACE = MAXTEXT_E2E_NAMESPACE
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
# The scenario's operator (operator_settings.py): its namespace, a scan every 2 s, and
# the scenario's own checkpoint roots (the head's /tmp/maxtext, gs://maxtext-e2e/maxtext).
OPERATOR_SETTINGS = SETTINGS["maxtext-e2e"]


@dataclass
class Cluster:
    """The local control plane, the operator and the API clients the scenario uses."""

    kubeconfig: Path
    api: Any
    core: Any
    custom: Any
    operator: Any
    gcs_env: dict[str, str] = field(default_factory=dict)


@contextmanager
def control_plane(work: Path, local_tmp: Path, gcs_env: dict[str, str],
                  say: Callable[[str], None]) -> Iterator[Cluster]:
    """The local control plane (two v5e 2x4 slices and a spare), the CRD, the namespace,
    and the operator, which sees `local_tmp` as its /tmp; stopped on the way out."""
    from kubernetes import client

    from elastic_devtools import localcluster as lc
    from elastic_devtools.localcluster.crds import install_crd
    from elastic_devtools.localcluster.faults import wait_for

    directory = lc.default_dir().parent / "maxtext-e2e-cluster"
    lc.down(directory, progress=lambda _: None)
    started = time.monotonic()
    cluster = lc.up(lc.ClusterConfig(dir=directory, tpu_pools=(lc.TpuPoolSpec("v5e", "2x4", 3),),
                                     cpu_nodes=2), progress=lambda line: say("  " + line))
    say(f"local control plane up in {time.monotonic() - started:.0f}s ({directory})")
    api = cluster.api_client()
    operator = None
    try:
        core: Any = client.CoreV1Api(api)
        custom: Any = client.CustomObjectsApi(api)
        install_crd(api, timeout=60)
        core.create_namespace({"metadata": {"name": NAMESPACE}})
        wait_for(lambda: core.list_namespaced_service_account(
            NAMESPACE, field_selector="metadata.name=default").items, 60,
            "the namespace's default ServiceAccount")
        operator = scenario_operator(cluster.kubeconfig, work / "operator.log", local_tmp,
                                     directory / "operator-tmp", gcs_env)
        operator.start(timeout=120)
        say(f"operator running (pid {operator.pid}, log {work / 'operator.log'})")
        yield Cluster(cluster.kubeconfig, api, core, custom, operator, gcs_env)
    finally:
        if operator is not None:
            operator.stop()
        api.close()
        lc.down(directory, progress=lambda _: None)


def scenario_operator(kubeconfig: Path, log: Path, local_tmp: Path, scratch: Path,
                      gcs_env: dict[str, str], share_tmp: bool = True) -> OperatorProcess:
    """The scenario's operator (an OperatorProcess, not started), as `make e2e-maxtext`
    runs it and as its guard in `make test` does (tests/integration/test_long_targets.py):
    its settings (OPERATOR_SETTINGS), fake-gcs-server's environment, and (`share_tmp`,
    root only: a mount namespace of its own) the local run's head /tmp under each local
    checkpoint root (/tmp/maxtext: the head's /tmp/maxtext, where the local scenario
    writes); `scratch` is its own TMPDIR. Only the roots are covered, not the whole /tmp:
    a checkout, its venv or a cluster under /tmp stays visible to the operator."""
    from elastic_devtools.localcluster.operator_process import (
        OPERATOR_COMMAND,
        OperatorProcess,
    )

    local_tmp.mkdir(parents=True, exist_ok=True)
    scratch.mkdir(parents=True, exist_ok=True)
    command: tuple[str, ...] = OPERATOR_COMMAND
    if share_tmp:
        for root in (r for r in MAXTEXT_E2E_ROOTS if r.startswith("/tmp/")):
            source = local_tmp / root.removeprefix("/tmp/")
            source.mkdir(parents=True, exist_ok=True)
            # In the namespace: the mount point made (it is the host's /tmp too), bound.
            command = ("sh", "-c", 'mkdir -p "$1" && mount --bind "$0" "$1" && shift && '
                       'exec "$@"', str(source), root, *command)
        command = ("unshare", "-m", "--", *command)
    return OperatorProcess(kubeconfig, log, args=OPERATOR_SETTINGS, command=command,
                           env={**gcs_env, "TMPDIR": str(scratch), "PYTHONUNBUFFERED": "1"})


def head_pod(cluster: Cluster, name: str) -> Any:
    pods = cluster.core.list_namespaced_pod(
        NAMESPACE, label_selector=f"{job_pods_selector(name)},"
                                  f"{REPLICATED_JOB_LABEL}={HEAD_REPLICATED_JOB}").items
    running = [p for p in pods if p.status and p.status.phase == "Running"]
    return running[0] if running else None


def token_kubeconfig(cluster: Cluster, path: Path, service_account: str = "default") -> Path:
    """A kubeconfig of the namespace's ServiceAccount (the head pod's: the sidecar writes
    the status with the job's own RBAC)."""
    from kubernetes import client

    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600))
    token = cluster.core.create_namespaced_service_account_token(
        service_account, NAMESPACE, request).status.token
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    context = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])
    entry = next(c for c in admin["clusters"] if c["name"] == context["context"]["cluster"])
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "clusters": [entry],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": entry["name"], "user": "sa"}}],
        "current-context": "sa"}))
    path.chmod(0o600)
    return path


def step_column(cluster: Cluster, name: str) -> Any:
    """What `kubectl get etj` prints under STEP (the API server's Table of the job)."""
    api = cluster.api
    method, url, headers, body, post = api.param_serialize(
        "GET", f"/apis/{GROUP}/{VERSION}/namespaces/{NAMESPACE}/{PLURAL}/{name}",
        header_params={"Accept": TABLE}, auth_settings=["BearerToken"])
    response = api.call_api(method, url, headers, body, post, _request_timeout=30)
    response.read()
    table = json.loads(response.data)
    names = [c["name"] for c in table["columnDefinitions"]]
    return table["rows"][0]["cells"][names.index("Step")]
