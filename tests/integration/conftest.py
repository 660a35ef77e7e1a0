"""Fixtures the operator's integration tests share (tests/conftest.py has the cluster).

`api` (module): an admin API client on `cluster` with the ElasticTrainingJob CRD installed.

`killed` (function): the nodes a test kills, revived afterwards whatever happened.

`ns` (function): the test's namespace; afterwards its jobs are deleted and their pods are
gone (the garbage collector does it, no operator needed), so the fake TPU nodes are free.

`operator` (module): one `etj operator` for the module's tests, with `operator_args`
(TEST_ARGS; a module overrides `operator_args` to run it otherwise), its log
operator-<module>.log. A module whose tests all need it marks them
`pytest.mark.usefixtures("running_operator")`, which starts it again after a test that
stopped it.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from elastic_devtools.localcluster import Cluster, faults
from elastic_devtools.localcluster.crds import install_crd
from elastic_devtools.localcluster.operator_process import TEST_ARGS, OperatorProcess
from tests.support.article_job import delete_jobs_and_wait_for_pods


@pytest.fixture(scope="module")
def api(cluster: Cluster) -> Iterator[client.ApiClient]:
    api_client = cluster.api_client()
    install_crd(api_client, timeout=30)
    yield api_client
    api_client.close()


@pytest.fixture(scope="module")
def operator_args() -> tuple[str, ...]:
    return TEST_ARGS


@pytest.fixture(scope="module")
def operator(cluster: Cluster, api: client.ApiClient, operator_args: tuple[str, ...],
             request: pytest.FixtureRequest) -> Iterator[OperatorProcess]:
    log = Path(cluster.logs_dir) / f"operator-{request.module.__name__.rsplit('.', 1)[-1]}.log"
    with OperatorProcess(Path(cluster.kubeconfig), log, args=operator_args) as proc:
        yield proc


@pytest.fixture
def running_operator(operator: OperatorProcess) -> Iterator[OperatorProcess]:
    """The module's operator, started again after a test that stopped it: the module's
    next test needs it. (Not in `ns`: modules whose own `operator` fixture is per test,
    and needs `ns`, have it torn down before `ns`.)"""
    yield operator
    if not operator.running:
        operator.start()


@pytest.fixture
def ns(namespace: str, api: client.ApiClient) -> Iterator[str]:
    """The test's namespace; afterwards its job is deleted and its pods are gone (the
    garbage collector does it, no operator needed), so the fake TPU nodes are free."""
    yield namespace
    delete_jobs_and_wait_for_pods(api, namespace)


@pytest.fixture
def killed(api: client.ApiClient) -> Iterator[list[str]]:
    """Nodes a test kills (it appends them); revived afterwards, whatever happened."""
    nodes: list[str] = []
    yield nodes
    for node in nodes:
        faults.revive_node(api, node)
    for node in nodes:
        faults.wait_for_node_ready(api, node, True, timeout=60)
