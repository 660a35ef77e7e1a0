"""What a benchmark on the local control plane does first: the CRD installed, the
jobs' namespace made with its default ServiceAccount (pods wait for it), and the
operator started with the benchmark's settings (localcluster's operator_settings)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from elastic_devtools.localcluster.crds import install_crd
from elastic_devtools.localcluster.faults import wait_for
from elastic_devtools.localcluster.operator_process import OperatorProcess
from elastic_devtools.localcluster.operator_settings import SETTINGS


def prepare_namespace(api: Any, namespace: str) -> Any:
    """The CRD installed and `namespace` ready for pods; its CoreV1Api."""
    from kubernetes import client

    install_crd(api)
    core = client.CoreV1Api(api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    wait_for(lambda: core.list_namespaced_service_account(
        namespace, field_selector="metadata.name=default").items, 60,
        "the namespace's default ServiceAccount")
    return core


def start_operator(kubeconfig: Path, workdir: Path, settings: str) -> OperatorProcess:
    """`etj operator` with SETTINGS[settings], logging to workdir/operator.log."""
    operator = OperatorProcess(kubeconfig, workdir / "operator.log", args=SETTINGS[settings])
    operator.start(timeout=120)
    return operator
