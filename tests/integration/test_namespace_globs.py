"""`etj operator --namespace 'team-*'` on the local control plane: kopf watches nothing,
so a namespace glob is served by the operator's own informers (cluster-wide list and
watch, kept to the namespaces that match). A job in a matching namespace is reconciled,
one in a namespace created after the operator started too, and a job elsewhere is not
even kept in the cache."""
from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from elastic_api.names import GROUP, PLURAL, VERSION
from elastic_devtools.localcluster import Cluster
from elastic_devtools.localcluster.crds import install_crd
from elastic_devtools.localcluster.faults import wait_for
from elastic_devtools.localcluster.operator_process import OperatorProcess
from elastic_devtools.localcluster.operator_settings import DEFAULTS
from tests.builders import etj

pytestmark = pytest.mark.cluster
TIMEOUT = 60


class Namespaces:
    """Namespaces made for one test (each with its default ServiceAccount), deleted after."""

    def __init__(self, api: client.ApiClient) -> None:
        self.core = client.CoreV1Api(api)
        self.made: list[str] = []

    def make(self, name: str) -> str:
        self.core.create_namespace({"metadata": {"name": name}})
        self.made.append(name)
        wait_for(lambda: any(sa.metadata.name == "default" for sa in
                             self.core.list_namespaced_service_account(name).items),
                 30, f"ServiceAccount {name}/default")
        return name

    def delete(self) -> None:
        for name in self.made:
            self.core.delete_namespace(name)


@pytest.fixture
def api(cluster: Cluster) -> Iterator[client.ApiClient]:
    api_client = cluster.api_client()
    install_crd(api_client, timeout=30)
    yield api_client
    api_client.close()


@pytest.fixture
def namespaces(api: client.ApiClient) -> Iterator[Namespaces]:
    made = Namespaces(api)
    yield made
    made.delete()


def submit(api: client.ApiClient, namespace: str) -> None:
    """A suspended job: reconciled (JobSet created suspended, status written) without
    taking a fake TPU node from other tests."""
    job = (etj("globbed", namespace=None).backend("pathways")
           .spec(checkpoint={"directory": "/tmp/etj-globs-test/no-checkpoints-here"},
                 pathways={"gcsScratch": "gs://test-bucket/scratch"}, suspend=True)
           .trainer("trainer:test", 1000).obj())
    client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, namespace,
                                                                 PLURAL, job)


def status(api: client.ApiClient, namespace: str) -> dict[str, Any]:
    job = client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "globbed")
    found: dict[str, Any] = job.get("status") or {}
    return found


def test_a_namespace_glob_serves_the_namespaces_that_match(
        cluster: Cluster, api: client.ApiClient, namespaces: Namespaces) -> None:
    unique = uuid.uuid4().hex[:6]
    team_a = namespaces.make(f"globs-{unique}-team-a")
    other = namespaces.make(f"globs-{unique}-other")
    submit(api, team_a)
    submit(api, other)
    op = OperatorProcess(Path(cluster.kubeconfig), Path(cluster.logs_dir) / "globs.log",
                         args=replace(DEFAULTS, namespaces=(f"globs-{unique}-team-*",),
                                      resync_seconds=5).with_args(
                             "--leader-election-name", f"globs-{unique}"))
    op.start()
    try:
        wait_for(lambda: status(api, team_a).get("phase") == "Suspended", TIMEOUT,
                 "the job in the matching namespace reconciled")
        # A namespace made after the start: kopf's namespace scanning used to find it.
        team_b = namespaces.make(f"globs-{unique}-team-b")
        submit(api, team_b)
        wait_for(lambda: status(api, team_b).get("phase") == "Suspended", TIMEOUT,
                 "the job in a namespace that matches since the start")
        # The other job is not even in the cache (cluster-wide watch, kept to the glob):
        # nothing can reconcile it. (The gauge, not /healthz: kopf caches probe results.)
        assert op.metrics()['etj_cache_objects{resource="jobs"}'] == 2
        assert status(api, other) == {}
        jobsets = client.CustomObjectsApi(api).list_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", other, "jobsets")["items"]
        assert jobsets == []
    finally:
        op.stop()
