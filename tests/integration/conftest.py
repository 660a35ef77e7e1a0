"""Fixtures the operator's integration tests share (tests/conftest.py has the cluster).

`api` (module): an admin API client on `cluster` with the ElasticTrainingJob CRD installed.

`killed` (function): the nodes a test kills, revived afterwards whatever happened.

`ns` (function): the test's namespace; afterwards its jobs are deleted and their pods are
gone (the garbage collector does it, no operator needed), so the fake TPU nodes are free.

A module that runs one operator for all its tests (test_operator, test_replacement) has
its own `ns`, which also restarts that operator if a test stopped it.
"""
from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from elastic_devtools.localcluster import Cluster, faults
from elastic_devtools.localcluster.crds import install_crd
from tests.support.article_job import delete_jobs_and_wait_for_pods


@pytest.fixture(scope="module")
def api(cluster: Cluster) -> Iterator[client.ApiClient]:
    api_client = cluster.api_client()
    install_crd(api_client, timeout=30)
    yield api_client
    api_client.close()


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
