"""`helm upgrade` to this checkout's chart from every earlier shape of the chart (issue 68
item 4), with the pinned helm on the local control plane; kwok plays the operator pods, so
`--wait` sees each rollout through. The earlier charts come from this checkout's git
history (the last commit of main with each shape; `git log -- charts/`):

    no-lease     8b3f63f  one replica, no leader election (Recreate), the CRD in crds/
    lease-crds   941a895  two replicas on a Lease, the CRD in crds/ (Helm installs crds/
                          once and never owns it)
    template     a57c98c  the CRD a template the release owns (since f64ac40)

What a user runs (docs/operations.md, "Upgrade"), and what each shows:

1. `helm upgrade --reuse-values` (what the docs said before): the old chart's defaults
   would come along without this chart's additions; the chart's check stops before
   anything is applied, naming `--reset-then-reuse-values`.
2. `helm upgrade --reset-then-reuse-values`: from a chart that shipped the CRD in crds/,
   the check stops with the one command that makes the CRD the release's (Helm itself
   would refuse it as "exists and cannot be imported into the current release"); that
   command, run as printed, then the same upgrade: the current CRD served and owned by the
   release, the Deployment the current one. From a chart whose pods do not elect, this
   rollout recreates (the old pod stops before the new ones start: never two operators
   reconciling unelected), the next one rolls.
3. `helm uninstall` keeps the CRD.
"""
from __future__ import annotations

import os
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from elastic_api.names import GROUP, PLURAL
from elastic_devtools.localcluster import Cluster
from elastic_devtools.localcluster.crds import install_crd
from tests.support.chart import CHART, helm_binary, unique_release
from tests.support.upgrade import Helm, MissingHistory, archived

pytestmark = pytest.mark.cluster

CRD_NAME = f"{PLURAL}.{GROUP}"
CHART_PATH = "charts/elastic-operator"
WAIT = ("--wait", "--timeout", "120s")


@dataclass(frozen=True)
class EarlierChart:
    commit: str
    crd_in_crds: bool  # the chart shipped the CRD in crds/: no release owns it
    elects: bool  # its pods elect a leader on a Lease

    @property
    def short(self) -> str:
        return self.commit[:7]


EARLIER = {
    "no-lease": EarlierChart("8b3f63f701e83400a99f22e30c00018448456e54", True, False),
    "lease-crds": EarlierChart("941a89596bc6c9f6e6019f5389e95792c468cc7d", True, True),
    "template": EarlierChart("a57c98caa7757caa9af6d28b9ac30d17d636bb91", False, True),
}


def refused(helm: Helm, *args: str) -> str:
    """The error of a helm command that must stop (AssertionError: it went through)."""
    try:
        out = helm(*args)
    except AssertionError as err:
        return str(err)
    raise AssertionError(f"helm {' '.join(args)} went through:\n{out}")


def the_one_command(message: str) -> list[str]:
    (line,) = [line.strip() for line in message.splitlines()
               if line.strip().startswith("kubectl ")]
    return shlex.split(line)


def crd(api: client.ApiClient) -> dict[str, Any]:
    found: dict[str, Any] = client.CustomObjectsApi(api).get_cluster_custom_object(
        "apiextensions.k8s.io", "v1", "customresourcedefinitions", CRD_NAME)
    return found


def crd_exists(api: client.ApiClient) -> bool:
    try:
        crd(api)
    except client.ApiException as err:
        if err.status == 404:
            return False
        raise
    return True


def deployment(api: client.ApiClient, namespace: str, release: str) -> Any:
    return client.AppsV1Api(api).read_namespaced_deployment(release, namespace)


@pytest.mark.parametrize("shape", EARLIER)
def test_helm_upgrade_from_an_earlier_chart(cluster: Cluster, namespace: str,
                                            tmp_path: Path, shape: str) -> None:
    earlier = EARLIER[shape]
    try:
        old = archived(earlier.commit, tmp_path / "old", CHART_PATH) / CHART_PATH
    except MissingHistory as err:
        pytest.fail(str(err), pytrace=False)
    release = unique_release()
    helm = Helm(cluster, release, namespace, tmp_path)
    api = cluster.api_client()
    upgrade = ("upgrade", release, str(CHART), *WAIT)
    try:
        if earlier.crd_in_crds:  # what that chart left on a new cluster: its CRD, unowned
            install_crd(api, yaml.safe_load((old / "crds" / "elastictrainingjobs.yaml")
                                            .read_text()))
        elif crd_exists(api):  # another test's, as that chart's install leaves it
            client.ApiextensionsV1Api(api).patch_custom_resource_definition(CRD_NAME, {
                "metadata": {"labels": {"app.kubernetes.io/managed-by": "Helm"},
                             "annotations": {"meta.helm.sh/release-name": release,
                                             "meta.helm.sh/release-namespace": namespace}}})
        helm("install", release, str(old), "--set", f"watchNamespaces={{{namespace}}}",
             *WAIT)
        before = deployment(api, namespace, release)

        message = refused(helm, *upgrade, "--reuse-values")
        assert "--reset-then-reuse-values" in message, message
        assert deployment(api, namespace, release).metadata.generation == \
            before.metadata.generation, "the refused upgrade changed the Deployment"

        if earlier.crd_in_crds:
            message = refused(helm, *upgrade, "--reset-then-reuse-values")
            assert "no Helm release owns it" in message, message
            command = the_one_command(message)
            assert command[:3] == ["kubectl", "patch", "crd"], command
            env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
            ran = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)
            assert ran.returncode == 0, ran.stderr
        helm(*upgrade, "--reset-then-reuse-values")

        served = crd(api)
        annotations = served["metadata"].get("annotations") or {}
        assert annotations.get("meta.helm.sh/release-name") == release
        assert served["metadata"]["labels"].get("app.kubernetes.io/managed-by") == "Helm"
        current = yaml.safe_load((CHART.parents[1] / "crds" / "elastictrainingjobs.yaml")
                                 .read_text())
        assert served["spec"]["versions"] == current["spec"]["versions"], \
            "the served CRD is not this checkout's"
        upgraded = deployment(api, namespace, release)
        (container,) = upgraded.spec.template.spec.containers
        assert upgraded.spec.replicas == 2 and container.readiness_probe is not None
        assert f"--namespace={namespace}" in container.args, "the user's values were lost"
        # Pods that did not elect are stopped before the new ones start, once.
        want = "RollingUpdate" if earlier.elects else "Recreate"
        assert upgraded.spec.strategy.type == want, upgraded.spec.strategy

        helm(*upgrade, "--reset-then-reuse-values", "--set", "podAnnotations.again=yes")
        assert deployment(api, namespace, release).spec.strategy.type == "RollingUpdate"

        helm("uninstall", release, *WAIT)
        assert crd(api)["spec"]["versions"] == current["spec"]["versions"], \
            "helm uninstall took the CRD"
    finally:
        subprocess.run([str(helm_binary()), "uninstall", release, "--namespace", namespace,
                        "--ignore-not-found"], capture_output=True, timeout=120,
                       env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)})
        install_crd(api)  # the current CRD, unowned, for the tests after this one
        api.close()

