"""The cheap part of each long target, in `make test` (issue 36): `make e2e-maxtext`,
`make e2e-kind`, `make test-multicluster` and `make test-compat` run outside it, and
`make e2e-maxtext` broke unseen when the checkpoint-roots guard landed (its operator may
not list its gs:// root). What runs here in seconds, on the local control plane:

- e2e-maxtext: the scenario's operator started as the e2e starts it
  (scenario_cluster.scenario_operator: its settings, fake-gcs-server, the head's /tmp as
  its /tmp where this runs as root), both scenario jobs rendered and created in the
  scenario's namespace, and one listing of each root: the committed step written there is
  in the status, CheckpointRootAllowed True;
- e2e-kind: the chart rendered with the target's values (operator_settings), the
  operator run with the Deployment's own arguments, hack/kind/job.yaml rendered and its
  root allowed;
- test-multicluster: its job admitted by the API server (schema, CEL) and rendered; its
  operator's settings are checked with every row in tests/unit/test_operator_settings.py;
- test-compat: its versions file has every pin the build reads (same unit test module);
- test-upgrade: the commit hack/upgrade/previous-release names is in the git history,
  its chart and this checkout's render with the test's values, its code imports with
  today's pinned dependencies; and the test's kubelet (tests/support/operator_kubelet.py)
  on a tiny case: the previous release installed with one replica, its pod run as that
  release's operator, `helm upgrade` to this checkout's chart rolling it over, the Lease
  handed from the old process to the new one.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from elastic_api.conditions import ConditionType as C
from elastic_api.conditions import Reason
from elastic_api.names import GROUP, PLURAL, VERSION
from elastic_api.validation import validate_job
from elastic_devtools import localcluster as lc
from elastic_devtools.localcluster import Cluster
from elastic_devtools.localcluster.faults import wait_for
from elastic_devtools.localcluster.gcs import FakeGcsServer, create_bucket
from elastic_devtools.localcluster.operator_process import OperatorProcess
from elastic_devtools.localcluster.operator_settings import SETTINGS
from elastic_devtools.maxtext import scenario
from elastic_devtools.maxtext.e2e import FIXTURES
from elastic_devtools.maxtext.scenario_cluster import NAMESPACE as MAXTEXT_NAMESPACE
from elastic_devtools.maxtext.scenario_cluster import scenario_operator
from elastic_operator.checkpoints.listing import COMMIT_MARKER
from elastic_operator.render import render
from tests.support import upgrade as releases
from tests.support.chart import helm_template, only, operator_args, unique_release
from tests.support.multicluster import manifest as multicluster_manifest
from tests.support.operator_kubelet import OperatorKubelet
from tests.support.upgrade import Helm, Revision, Timeline

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
STEP = 25  # a committed step written into each root before the operator lists it
TIMEOUT = 60


@pytest.fixture
def api(crd_api: client.ApiClient) -> client.ApiClient:
    return crd_api


def fixed_namespace(api: client.ApiClient, name: str) -> Iterator[str]:
    """A long target's own namespace (its roots are per namespace), deleted after."""
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": name}})
    wait_for(lambda: core.list_namespaced_service_account(
        name, field_selector="metadata.name=default").items, 30,
        f"ServiceAccount {name}/default")
    yield name
    core.delete_namespace(name)
    wait_for(lambda: not _exists(core, name), 120, f"namespace {name} gone")


def _exists(core: client.CoreV1Api, name: str) -> bool:
    try:
        core.read_namespace(name)
    except client.ApiException as err:
        if err.status == 404:
            return False
        raise
    return True


def create_suspended(api: client.ApiClient, obj: dict[str, Any]) -> str:
    """The job as the target writes it, suspended (its JobSet rendered, no pods: the
    session cluster's nodes are not the target's); rendered here too."""
    obj = json.loads(json.dumps(obj))
    obj["spec"]["suspend"] = True
    render(validate_job(obj))
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, obj["metadata"]["namespace"], PLURAL, obj)
    return str(obj["metadata"]["name"])


def listed(api: client.ApiClient, namespace: str, name: str,
           done: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The job's status once a listing of its root is in it and `done` holds; a refused
    root fails at once, with what the job says."""
    custom = client.CustomObjectsApi(api)

    def status() -> dict[str, Any] | None:
        st: dict[str, Any] = custom.get_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name).get("status") or {}
        checkpoint = st.get("checkpoint") or {}
        if checkpoint.get("reason") == Reason.CHECKPOINT_ROOT_NOT_ALLOWED:
            pytest.fail(f"{namespace}/{name}: the operator may not list its checkpoint root: "
                        f"{checkpoint.get('error')}", pytrace=False)
        return st if checkpoint.get("observedAt") and done(st) else None

    found: dict[str, Any] = wait_for(status, TIMEOUT, f"{namespace}/{name}: a listing of its "
                                     "checkpoint root in its status", interval=0.5)
    return found


def condition(st: dict[str, Any], type_: str) -> tuple[str, str]:
    c = next(c for c in st.get("conditions", []) if c["type"] == type_)
    return c["status"], c["reason"]


# --- make e2e-maxtext ------------------------------------------------------------------------


@pytest.fixture
def maxtext_namespace(api: client.ApiClient) -> Iterator[str]:
    yield from fixed_namespace(api, MAXTEXT_NAMESPACE)


def write_step(fake_gcs: FakeGcsServer, directory: str, local_tmp: Path) -> None:
    """A committed step in the root, on fake-gcs-server or in the head's /tmp."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from elastic_operator.checkpoints.listing import parse_gcs_url

    if directory.startswith("gs://"):
        bucket, prefix = parse_gcs_url(directory)
        gcs = storage.Client(project="etj-test", credentials=AnonymousCredentials(),
                             client_options={"api_endpoint": fake_gcs.endpoint})
        if gcs.lookup_bucket(bucket) is None:
            create_bucket(fake_gcs.endpoint, bucket)
        for name in ("_CHECKPOINT_METADATA", COMMIT_MARKER):
            gcs.bucket(bucket).blob(f"{prefix}{STEP}/{name}").upload_from_string("x")
        return
    step = local_tmp / directory.removeprefix("/tmp/") / str(STEP)
    step.mkdir(parents=True)
    (step / COMMIT_MARKER).write_text("x")


def test_make_e2e_maxtext_operator_lists_the_scenarios_roots(
        cluster: Cluster, api: client.ApiClient, fake_gcs: FakeGcsServer,
        maxtext_namespace: str, tmp_path: Path) -> None:
    # The head's /tmp/maxtext is the operator's only in a mount namespace (root);
    # otherwise the local scenario's root is checked for the refusal alone. Its kubeconfig
    # and TMPDIR live outside /tmp, as the e2e's do (in the cache directory); the checkout
    # may be under /tmp (a CI clone): the namespace covers the root alone.
    share_tmp = os.geteuid() == 0
    local_tmp = tmp_path / "pod-tmp"
    outside = Path(tempfile.mkdtemp(prefix="guard-", dir=lc.default_dir().parent))
    kubeconfig = outside / "kubeconfig"
    shutil.copyfile(cluster.kubeconfig, kubeconfig)
    operator = scenario_operator(kubeconfig, tmp_path / "operator.log", local_tmp,
                                 outside / "operator-tmp", fake_gcs.env, share_tmp=share_tmp)
    names = []
    try:
        operator.start(timeout=120)
        for fixture in scenario.SCENARIOS.values():  # the ones the e2e runs
            obj, job = scenario.load(ROOT / FIXTURES / fixture)
            directory = job.spec.checkpoint.directory
            lists = directory.startswith("gs://") or share_tmp
            if lists:
                write_step(fake_gcs, directory, local_tmp)
            names.append(create_suspended(api, obj))
            st = listed(api, maxtext_namespace, names[-1], lambda s, lists=lists: (
                not lists or (s.get("checkpoint") or {}).get("latestCommittedStep") == STEP))
            assert condition(st, C.CHECKPOINT_ROOT_ALLOWED) == ("True", Reason.ROOT_ALLOWED)
    finally:
        custom = client.CustomObjectsApi(api)
        for name in names:
            custom.delete_namespaced_custom_object(GROUP, VERSION, maxtext_namespace, PLURAL,
                                                   name)
        operator.stop()
        shutil.rmtree(outside, ignore_errors=True)


# --- make e2e-kind ---------------------------------------------------------------------------


def kind_job() -> dict[str, Any]:
    text = (ROOT / "hack" / "kind" / "job.yaml").read_text().replace("@E2E_TAG@", "guard")
    job: dict[str, Any] = yaml.safe_load(text)
    return job


@pytest.fixture
def kind_namespace(api: client.ApiClient) -> Iterator[str]:
    yield from fixed_namespace(api, kind_job()["metadata"]["namespace"])


def test_make_e2e_kind_chart_operator_lists_its_jobs_root(
        cluster: Cluster, api: client.ApiClient, kind_namespace: str, tmp_path: Path) -> None:
    """The chart with the target's values (hack/kind/steps.sh installs it so), its
    Deployment's arguments run as a local operator (on this namespace only: the cluster
    is shared), the target's job rendered and its root allowed."""
    values = tmp_path / "operator-values.yaml"
    values.write_text(json.dumps(SETTINGS["kind-e2e"].helm_values()))
    release = unique_release()
    deployment = only(helm_template(release, kind_namespace, values_file=values),
                      "Deployment")
    proc = OperatorProcess(Path(cluster.kubeconfig), tmp_path / "operator.log",
                           args=operator_args(deployment, kind_namespace),
                           identity=f"{release}-{uuid.uuid4().hex[:5]}")
    proc.start()
    try:
        name = create_suspended(api, kind_job())
        started = time.monotonic()
        st = listed(api, kind_namespace, name, lambda s: bool(s.get("jobSetName")))
        assert condition(st, C.CHECKPOINT_ROOT_ALLOWED) == ("True", Reason.ROOT_ALLOWED), (
            f"after {time.monotonic() - started:.0f}s")
        assert condition(st, C.SPEC_APPLIED) == ("True", Reason.APPLIED)
        client.CustomObjectsApi(api).delete_namespaced_custom_object(
            GROUP, VERSION, kind_namespace, PLURAL, name)
    finally:
        proc.stop()


# --- make test-multicluster ------------------------------------------------------------------


def test_make_test_multicluster_job_is_admitted_and_renders(
        api: client.ApiClient, namespace: str) -> None:
    """Its job, as the manager's user writes it: admitted (a server-side dry run: schema
    and CEL), and rendered: the Workload the manager's operator makes of it, and the
    JobSet the worker's makes of MultiKueue's copy (the same, without managedBy)."""
    obj = multicluster_manifest("guard", "mk-queue")
    obj["metadata"]["namespace"] = namespace
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, obj, dry_run="All")
    assert [doc["kind"] for doc in render(validate_job(obj))] == ["Workload"]
    copy = json.loads(json.dumps(obj))
    del copy["spec"]["managedBy"]
    kinds = [doc["kind"] for doc in render(validate_job(copy))]
    assert "JobSet" in kinds, kinds


# --- make test-upgrade -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def previous_release(tmp_path_factory: pytest.TempPathFactory) -> Revision:
    try:
        return releases.previous(tmp_path_factory.mktemp("previous-release"))
    except releases.MissingHistory as err:
        pytest.fail(str(err), pytrace=False)


def test_make_test_upgrade_previous_release_renders_and_imports(
        previous_release: Revision, tmp_path: Path) -> None:
    """Its chart and this checkout's render with the test's values, each Deployment's
    image naming its release; its code imports with today's dependencies, every module
    from its own tree; the status fields the current CRD adds are computed."""
    for revision in (previous_release, releases.current()):
        values = tmp_path / f"{revision.tag}.yaml"
        values.write_text(json.dumps(releases.chart_values(revision, "guard", 2)))
        deployment = only(helm_template(unique_release(), "guard", values_file=values,
                                        chart=revision.chart), "Deployment")
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert container["image"].endswith(f":{revision.tag}"), container["image"]
        assert "--namespace=guard" in container["args"], container["args"]
        assert deployment["spec"]["replicas"] == 2
    assert releases.import_problems(previous_release) == []
    added = releases.added_status_fields(previous_release.crd(), releases.current().crd())
    assert all(path.startswith(".status.") for path in added), added


def test_make_test_upgrade_kubelet_rolls_the_operator_over(
        cluster: Cluster, api: client.ApiClient, namespace: str, previous_release: Revision,
        tmp_path: Path) -> None:
    """The previous release installed with one replica (its crds/ skipped: the CRD is
    there), its pod run as that release's operator, which leads; `helm upgrade` to this
    checkout's chart (crds.enabled=false: the session's CRD stays) starts the new pod's
    process, stops the old one on SIGTERM, removes its pod, and the new one leads."""
    timeline, current = Timeline(), releases.current()
    helm = Helm(cluster, unique_release(), namespace, tmp_path)
    kubelet = OperatorKubelet(cluster, namespace, helm.release,
                              {r.tag: r for r in (previous_release, current)}, tmp_path,
                              timeline)
    kubelet.start()
    try:
        helm.install(previous_release, 1)
        wait_for(lambda: kubelet.serving(previous_release, 1), 120,
                 "the previous release's operator leading")
        helm.upgrade(current, 1, crds={"enabled": False})
        wait_for(lambda: kubelet.serving(current, 1), 120, "this checkout's operator leading")
        old, new = kubelet.pods.values()
        assert (old.revision, new.revision) == (previous_release, current)
        assert kubelet.holders == [old.name, new.name], kubelet.holders
        assert old.proc.proc is not None and old.proc.proc.returncode == 0, \
            f"the old operator exited {old.proc.proc and old.proc.proc.returncode} on SIGTERM"
        assert kubelet.crashes == []
    finally:
        with contextlib.suppress(AssertionError):
            helm("uninstall", helm.release)
        with contextlib.suppress(TimeoutError):
            wait_for(lambda: not client.CoreV1Api(api).list_namespaced_pod(
                namespace, label_selector=kubelet.selector).items, 60, "operator pods gone")
        kubelet.stop()
