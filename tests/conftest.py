"""Shared fixtures.

`cluster` (session): a real local control plane (etcd, kube-apiserver, controller-manager,
scheduler, kwok with fake GKE node pools, JobSet controller), started in a fresh temp dir
and stopped at the end. Each pytest-xdist worker (`make test` runs several) is a session
of its own, so each has its own control plane: tests share fake TPU nodes, quarantine
labels and cluster-scoped objects only with the tests of their own worker. With
ETJ_TEST_CLUSTER_DIR=<dir> the cluster there is reused (or started) and left running, for
fast iteration (a worker's is <dir>-<worker>).

`namespace` (function): a fresh namespace per test, deleted afterwards;
`another_namespace` a second one, for tests of two tenants.

`crd_api` (function): an admin API client on `cluster` with the ElasticTrainingJob CRD
installed (and established).

`kueue` (module): Kueue added to `cluster` for one test module, removed afterwards;
`kueue_settings` (module), which a module overrides, configures it.

Tests that use `cluster` get the `cluster` marker automatically; a failing one names the
component log directory in its report. Missing binaries fail (never skip) with the command
to run.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings

if TYPE_CHECKING:
    from kubernetes import client

    from elastic_devtools.localcluster import Cluster, KueueSettings
    from elastic_devtools.localcluster.gcs import FakeGcsServer

# Property tests check behaviour, never speed: Hypothesis' default 200 ms deadline per
# example fails a test on a loaded machine (a shared CI runner, `make test` beside a
# build) by slowness alone, and then reports it as flaky. Derandomized: a property test
# explores the same examples on every run and every machine, so it never fails by chance
# (a random seed found a real bug once, in one checkout only: such finds become examples).
settings.register_profile("etj", deadline=None, derandomize=True)
settings.load_profile("etj")

_LOGS_DIRS: list[Path] = []

# Two control planes take minutes to start: tests/multicluster runs only with
# `make test-multicluster` (which sets ETJ_MULTICLUSTER=1), not in `make test`.
collect_ignore = [] if os.environ.get("ETJ_MULTICLUSTER") else ["multicluster"]
# An operator upgraded and downgraded under a running job takes minutes: tests/upgrade
# runs only with `make test-upgrade` (ETJ_UPGRADE=1); its guard is in `make test`.
if not os.environ.get("ETJ_UPGRADE"):
    collect_ignore.append("upgrade")
# The multi-tenant soak runs only with `make soak SOAK_JOBS=K` (K >= 2: ETJ_SOAK_JOBS).
if int(os.environ.get("ETJ_SOAK_JOBS") or 1) < 2:
    collect_ignore.append("integration/test_soak_tenants.py")


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    from elastic_devtools import localcluster as lc

    reuse = os.environ.get("ETJ_TEST_CLUSTER_DIR")
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if reuse and worker:
        reuse = f"{reuse}-{worker}"
    directory = Path(reuse) if reuse else Path(tempfile.mkdtemp(prefix="etj-cluster-"))
    error = None
    try:
        # A private cluster dies with this process even if pytest is killed.
        # ETJ_TEST_TPU_POOLS (`make soak SOAK_JOBS=K`: 3K + 1 one-host pools) replaces
        # the default TPU pools: TYPE:TOPOLOGY:COUNT, comma-separated.
        pools = tuple(lc.parse_tpu_pool(p) for p in
                      filter(None, os.environ.get("ETJ_TEST_TPU_POOLS", "").split(",")))
        handle = lc.up(lc.ClusterConfig(dir=directory, die_with_parent=not reuse,
                                        **({"tpu_pools": pools} if pools else {})))
    except lc.MissingBinaryError as err:
        error = str(err)
    except lc.ClusterStartError as err:
        error = f"local cluster did not start: {err}\nlogs: {directory / 'logs'}"
    if error is not None:  # fail (never skip), outside the except: no chained traceback
        if not reuse and not any((directory / "logs").glob("*.log")):
            shutil.rmtree(directory, ignore_errors=True)
        pytest.fail(error, pytrace=False)
    _LOGS_DIRS.append(handle.logs_dir)
    yield handle
    if reuse:
        return
    lc.down(directory)
    if request.session.testsfailed == 0:
        shutil.rmtree(directory, ignore_errors=True)
    else:
        print(f"\nlocal cluster logs kept in {handle.logs_dir}")


@pytest.fixture
def crd_api(cluster: Cluster) -> Iterator[client.ApiClient]:
    from elastic_devtools.localcluster.crds import install_crd

    api_client = cluster.api_client()
    install_crd(api_client, timeout=30)
    yield api_client
    api_client.close()


@pytest.fixture
def namespace(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A unique namespace whose `default` ServiceAccount exists (pods need it)."""
    with _fresh_namespace(cluster, request.node.name,
                          request.node.get_closest_marker("stalls") is not None) as name:
        yield name


@pytest.fixture
def another_namespace(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A second one, for a test of two tenants (deleted first)."""
    with _fresh_namespace(cluster, f"b-{request.node.name}",
                          request.node.get_closest_marker("stalls") is not None) as name:
        yield name


@contextlib.contextmanager
def _fresh_namespace(cluster: Cluster, test_name: str, stalls: bool = False
                     ) -> Iterator[str]:
    from kubernetes import client

    from elastic_devtools.localcluster.cluster_config import namespace_name
    from elastic_devtools.localcluster.faults import wait_for

    name = namespace_name(test_name, uuid.uuid4().hex[:6])
    api = cluster.api_client()
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": name, "labels": {"etj.test/namespace": "true"}}})

    def has_default_sa() -> bool:
        return any(sa.metadata.name == "default"
                   for sa in core.list_namespaced_service_account(name).items)

    wait_for(has_default_sa, 30, f"ServiceAccount {name}/default")
    stalled: list[str] = []
    try:
        yield name
        if not stalls:
            stalled = _stalls(core, name)
    finally:
        core.delete_namespace(name)
        # Wait until its pods are gone, so the next test finds the fake TPU nodes free
        # (JobSets place exclusively). A terminating namespace admits no new pods, so
        # deleting them now (rather than when the namespace controller gets to them)
        # is final. Objects kept by finalizers may outlive this.
        core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
        deadline = time.monotonic() + 60
        while core.list_namespaced_pod(name).items:
            if time.monotonic() > deadline:
                warnings.warn(f"pods of namespace {name} still exist 60s after its deletion",
                              stacklevel=1)
                break
            time.sleep(0.2)
        _release_quarantined_pools(core)
        api.close()
    # No false alarm (issue 32): a job of a test not marked `stalls` never had
    # Progressing=False, whose first transition posts this Warning Event (once per stall).
    assert not stalled, f"Progressing=False in {test_name}, not marked stalls: {stalled}"


def _stalls(core: client.CoreV1Api, namespace: str) -> list[str]:
    """The ProgressDeadlineExceeded Events of the namespace, in words."""
    from elastic_api.conditions import Reason

    events = core.list_namespaced_event(
        namespace, field_selector=f"reason={Reason.PROGRESS_DEADLINE_EXCEEDED}").items
    return [f"{e.involved_object.name}: {e.message}" for e in events]


def _release_quarantined_pools(core: client.CoreV1Api) -> None:
    """The next test finds every node pool usable: an operator that quarantined a pool
    (and was stopped before releasing it) leaves no label behind."""
    from elastic_api.names import (
        QUARANTINE_CAUSE_ANNOTATION,
        QUARANTINE_LABEL,
        QUARANTINED_AT_ANNOTATION,
    )

    for node in core.list_node(label_selector=QUARANTINE_LABEL).items:
        core.patch_node(node.metadata.name, {"metadata": {
            "labels": {QUARANTINE_LABEL: None},
            "annotations": {QUARANTINED_AT_ANNOTATION: None,
                            QUARANTINE_CAUSE_ANNOTATION: None}}})


def _interrupted(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    # SIGTERM (`timeout`, CI cancelling a run) ends the session as Ctrl-C does, so the
    # fixtures' finalizers run: without this the chart's operator replicas, the trainer
    # processes and the control plane a fixture started outlive the killed pytest.
    signal.signal(signal.SIGTERM, _interrupted)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    from tests.support.schedule import load_seconds, longest_first

    for item in items:
        if "cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cluster)
    # The longest modules first: `make test`'s workers take whole modules in this order.
    items[:] = longest_first(items, load_seconds(),
                             lambda item: item.get_closest_marker("cluster") is not None)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if report.failed and item.get_closest_marker("cluster") is not None and _LOGS_DIRS:
        logs = _LOGS_DIRS[-1]
        files = ", ".join(sorted(p.name for p in logs.glob("*.log")))
        report.sections.append(("local cluster", f"component logs in {logs}: {files}"))


@pytest.fixture(scope="module")
def fake_gcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeGcsServer]:
    """A real GCS API (fake-gcs-server) on loopback; fails, never skips, if not built."""
    from elastic_devtools.localcluster.gcs import start_fake_gcs
    from elastic_devtools.localcluster.versions import MissingBinaryError

    try:
        server = start_fake_gcs(log_dir=tmp_path_factory.mktemp("fake-gcs"))
    except MissingBinaryError as e:
        pytest.fail(str(e), pytrace=False)
    with server:
        yield server


@pytest.fixture(scope="module")
def kueue_settings() -> KueueSettings:
    """The Kueue configuration a module's `kueue` runs with: the release's defaults. A
    test module overrides this fixture to run Kueue otherwise (a short
    waitForPodsReady.recoveryTimeout, say)."""
    from elastic_devtools.localcluster import KueueSettings

    return KueueSettings()


@pytest.fixture(scope="module")
def kueue(cluster: Cluster, kueue_settings: KueueSettings) -> Iterator[Cluster]:
    """Kueue running on `cluster` with `kueue_settings` for the tests of one module (one
    running with other settings is restarted), then stopped with its webhooks removed
    (or, if it ran before, restarted as it was), so later tests see the cluster as they
    found it. Queues come from elastic_devtools.localcluster.kueue_queues."""
    from elastic_devtools import localcluster as lc

    before = lc.kueue_settings(cluster)
    try:
        lc.start_kueue(cluster, die_with_parent=True, settings=kueue_settings)
    except lc.MissingBinaryError as err:
        pytest.fail(str(err), pytrace=False)
    except lc.ClusterStartError as err:
        pytest.fail(f"{err}\nlogs: {cluster.logs_dir}", pytrace=False)
    yield cluster
    if before is None:
        lc.stop_kueue(cluster)
    elif before != kueue_settings:
        lc.start_kueue(cluster, die_with_parent=True, settings=before)
