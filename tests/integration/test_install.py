"""Install from manifests/install.yaml on the local control plane and run the operator with
exactly the chart's RBAC.

The operator runs as a subprocess with a token of the chart's ServiceAccount (TokenRequest
API), so every request it makes is authorized by the installed ClusterRole and nothing
else. Its arguments are the chart Deployment's own (with the namespace narrowed to the
test's), so the chart and `etj operator` are checked together. The Deployment itself is
only validated (server-side dry run): kwok would "run" its pod without running anything.
"""
from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from elastic_devtools.localcluster.cluster import free_port
from elastic_devtools.localcluster.faults import wait_for
from tests.service_accounts import token_kubeconfig
from tests.support.chart import chart_rbac, helm_template, only, operator_args, unique_release

if TYPE_CHECKING:
    from elastic_devtools.localcluster import Cluster

ROOT = Path(__file__).resolve().parents[2]
INSTALL = ROOT / "manifests" / "install.yaml"
ETJ = Path(sys.executable).with_name("etj")
GROUP, VERSION, PLURAL = "elastic.pathways.dev", "v1alpha1", "elastictrainingjobs"
WORKER_SLICE_LABEL = "jobset.sigs.k8s.io/job-index"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
FAILED_SLICE = 2
# Full RBAC reaches SliceDown within seconds of the fault; a crippled operator gets this
# long to prove it cannot (the only bounded wait here: a negative cannot be polled).
NEGATIVE_WINDOW_S = 15.0


# --- helpers ----------------------------------------------------------------------------


def kubectl(cluster: Cluster, *args: str, stdin: str | None = None,
            kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(kubeconfig or cluster.kubeconfig)}
    return subprocess.run(["kubectl", *args], input=stdin, capture_output=True, text=True,
                          timeout=120, env=env)


def apply_docs(cluster: Cluster, docs: list[dict[str, Any]], *extra: str) -> None:
    stream = yaml.safe_dump_all(docs)
    result = kubectl(cluster, "apply", "--server-side", "--force-conflicts",
                     "--field-manager=etj-install-test", "-f", "-", *extra, stdin=stream)
    assert result.returncode == 0, f"kubectl apply failed:\n{result.stderr}"


def client_for(kubeconfig: Path) -> Any:
    from kubernetes import config

    return config.new_client_from_config(config_file=str(kubeconfig))


@contextlib.contextmanager
def running_operator(args: list[str], kubeconfig: Path, log: Path) -> Iterator[Path]:
    liveness, metrics, readiness = free_port(), free_port(), free_port()
    # `args` last: a port they name wins.
    argv = [str(ETJ), "operator", f"--liveness-port={liveness}", f"--metrics-port={metrics}",
            f"--readiness-port={readiness}", *args]
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env["KUBECONFIG"] = str(kubeconfig)
    with log.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    try:
        def alive() -> bool:
            if proc.poll() is not None:
                raise AssertionError(
                    f"operator exited {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{liveness}/healthz", timeout=2) as r:
                    return bool(r.status == 200)
            except OSError:
                return False

        wait_for(alive, 60, "the operator's liveness endpoint")
        yield log
    except BaseException:
        # The log lives in a temporary directory: show its end with the failure.
        print(f"--- last lines of the operator log {log} ---", file=sys.stderr)
        print("\n".join(log.read_text().splitlines()[-60:]), file=sys.stderr)
        raise
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def article_job(name: str, namespace: str) -> dict[str, Any]:
    """The article's job (backend pathways, v5e 4x4 x 3 slices) from examples/article.yaml."""
    job: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "article.yaml").read_text())
    job["metadata"] = {"name": name, "namespace": namespace}
    job["spec"]["checkpoint"]["directory"] = f"/tmp/etj-install-test/{namespace}/checkpoints"
    return job


# kopf probes these without needing them (it falls back to the namespaces it was given and
# to the resources discovered at start); a 403 on them is expected under least privilege.
KOPF_OPTIONAL = re.compile(
    r"customresourcedefinitions|/api/v1/namespaces(?:[?'\"\s]|$)|Not enough permissions")


# What a refused request leaves in the log: the API server's answer (its Status code or
# reason), as kube.ApiError ("HTTP 403 Forbidden: {...}") and kopf (APIForbiddenError(...,
# {'code': 403, ...})) print it. Never a bare 403: log timestamps end in milliseconds
# (12:00:01,403) and namespace names carry random hex.
REFUSED = re.compile(
    r"HTTP 403\b|[\"']code[\"']:\s*403\b|\bAPIForbiddenError\b|[\"']reason[\"']:\s*[\"']Forbidden")


def forbidden_lines(log_text: str) -> list[str]:
    """Log lines where a request of the operator was refused (403), minus kopf's optional
    cluster scans."""
    return [
        line for line in log_text.splitlines()
        if REFUSED.search(line) and not KOPF_OPTIONAL.search(line)
    ]


def test_refused_requests_are_told_by_the_api_answer_not_any_403() -> None:
    """The filter itself (no cluster): the answers it must catch, and the 403s that are
    only a log timestamp's milliseconds or part of a namespace name."""
    refused = [
        "elastic_operator.client.kube.ApiError: HTTP 403 Forbidden: "
        "{\"kind\":\"Status\",\"code\":403}",
        "[2026-11-29 10:12:32,118] kopf._cogs.clients.w [ERROR   ] Request attempt #1/9 "
        "failed; will retry: GET https://127.0.0.1:6443/api/v1/namespaces/ns/pods?watch=true"
        " -> APIForbiddenError('pods is forbidden: User \"system:serviceaccount:ns:op\" '"
        "'cannot watch resource \"pods\"', {'kind': 'Status', 'code': 403})",
        '{"kind": "Status", "reason": "Forbidden", "code": 403}',
    ]
    harmless = [
        "[2026-11-29 10:12:32,403] elastic_operator   [INFO    ] ns-403ab/install-e2e: "
        "SliceDown: slice 2 is down",
        "[2026-11-29 10:12:32,403] elastic_operator   [INFO    ] created JobSet "
        "test-namespace-403/install-e2e",
    ]
    assert forbidden_lines("\n".join(refused + harmless)) == refused


def get_job(api: Any, namespace: str, name: str) -> dict[str, Any]:
    from kubernetes import client

    obj = client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name)
    assert isinstance(obj, dict)
    return obj


def condition(api: Any, namespace: str, name: str, kind: str) -> dict[str, Any] | None:
    status = get_job(api, namespace, name).get("status") or {}
    return next((c for c in status.get("conditions", []) if c["type"] == kind), None)


def slice_down_events(api: Any, namespace: str, name: str) -> list[str]:
    """Messages of the SliceDown Events posted on the job."""
    from kubernetes import client

    events = client.CoreV1Api(api).list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name},reason=SliceDown")
    return [e.message or "" for e in events.items]


def worker_pod(api: Any, namespace: str, slice_index: int) -> Any:
    from kubernetes import client

    pods = client.CoreV1Api(api).list_namespaced_pod(
        namespace,
        label_selector=f"{REPLICATED_JOB_LABEL}=worker,{WORKER_SLICE_LABEL}={slice_index}")
    running = [p for p in pods.items if p.status is not None and p.status.phase == "Running"]
    return running[0] if running else None


def trainer_report(detected_at: datetime, now: datetime) -> dict[str, Any]:
    """A trainer's report after an elastic event, as docs/status-contract.md describes."""
    from elastic_api.models import ElasticEventReport, TrainingReport

    report = TrainingReport(
        observed_at=now, state="Training", step=130, total_steps=10000, loss=2.5,
        attempt=1, active_slices=3, last_committed_checkpoint_step=100,
        elastic_events_total=1, retries_remaining=9,
        elastic_event=ElasticEventReport(
            id=1, phase="Resumed", detected_at=detected_at,
            error=f"DATA_LOSS: slice {FAILED_SLICE} is down", failed_step=121,
            slices_down=[FAILED_SLICE], restored_from_step=100, restore_source="checkpoint",
            restored_at=now, resumed_at=now, resumed_step=101,
        ),
    )
    return {"status": {"training": report.to_wire()}}


def patch_status_as(api: Any, namespace: str, name: str, body: dict[str, Any]) -> None:
    from kubernetes import client

    client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, PLURAL, name, body)


# --- fixtures ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def installed(cluster: Cluster) -> Iterator[list[dict[str, Any]]]:
    """manifests/install.yaml applied (the Deployment only dry-run on the server); its
    admission policies deleted afterwards: cluster-wide, the status policy would refuse
    the status writes of the operators later modules run as admin."""
    docs = [d for d in yaml.safe_load_all(INSTALL.read_text()) if d]
    deployment = [d for d in docs if d["kind"] == "Deployment"]
    assert len(deployment) == 1
    apply_docs(cluster, [d for d in docs if d["kind"] != "Deployment"])
    apply_docs(cluster, deployment, "--dry-run=server")

    from kubernetes import client

    api = cluster.api_client()
    try:
        ext = client.ApiextensionsV1Api(api)

        def established() -> bool:
            crd = ext.read_custom_resource_definition(f"{PLURAL}.{GROUP}")
            conditions = (crd.status.conditions if crd.status else None) or []
            return any(c.type == "Established" and c.status == "True" for c in conditions)

        wait_for(established, 30, "the ElasticTrainingJob CRD to be established")
    finally:
        api.close()
    yield docs
    policies = [d for d in docs if d["kind"].startswith("ValidatingAdmissionPolicy")]
    result = kubectl(cluster, "delete", "--ignore-not-found", "-f", "-",
                     stdin=yaml.safe_dump_all(policies))
    assert result.returncode == 0, result.stderr


@pytest.fixture
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="etj-install-") as d:
        yield Path(d)


# --- the flow ---------------------------------------------------------------------------


def take_job_through_slice_failure(cluster: Cluster, namespace: str, operator_log: Path) -> None:
    """Submit the article's job; fail a worker of slice 2; SliceDown names it; the slice is
    replaced; the trainer (with its own per-job token) reports the resumed step; Recovered."""
    from kubernetes import client

    from elastic_devtools.localcluster.faults import fail_pod

    admin = cluster.api_client()
    name = "install-e2e"
    try:
        client.CustomObjectsApi(admin).create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, article_job(name, namespace))

        def workers_running() -> bool:
            return all(worker_pod(admin, namespace, s) is not None for s in range(3))

        wait_for(workers_running, 90,
                 f"a running worker pod in each slice (operator log: {operator_log})")

        # The fault must come after the operator has seen every slice Ready: a pod that
        # fails and is replaced before the operator looks leaves no trace to report.
        def all_slices_ready() -> bool:
            status = get_job(admin, namespace, name).get("status") or {}
            return bool(status.get("slicesReady") == 3)

        wait_for(all_slices_ready, 90, f"status.slicesReady=3 (operator log: {operator_log})")
        victim = worker_pod(admin, namespace, FAILED_SLICE)
        detected_at = datetime.now(UTC)
        fail_pod(admin, namespace, victim.metadata.name)
        slice_down_counted_once_and_back(admin, namespace, name, operator_log)
        report_as_the_trainer(cluster, admin, namespace, name, detected_at, operator_log)

        def recovered() -> dict[str, Any] | None:
            cond = condition(admin, namespace, name, "Recovering")
            return cond if cond and cond["status"] == "False" and cond["reason"] == "Recovered" \
                else None

        done = wait_for(recovered, 60, f"Recovering=False reason Recovered "
                                       f"(operator log: {operator_log})")
        assert done["message"], done
        refused = forbidden_lines(operator_log.read_text())
        assert not refused, "the operator was refused requests:\n" + "\n".join(refused[:10])
        # The chart lets it list and watch its CRD by name (resourceNames: the field
        # selector), which KOPF_OPTIONAL's filter would hide a refusal of.
        assert "schema current" in operator_log.read_text(), "the CRD was not read"
    finally:
        admin.close()


def slice_down_counted_once_and_back(admin: Any, namespace: str, name: str,
                                     operator_log: Path) -> None:
    """After a worker of FAILED_SLICE failed: SliceDown names the slice, the failure is
    counted once, and SliceDown is False again once the Job replaced the pod."""
    # SliceDown=True can last less than a poll (kwok starts the replacement at once),
    # so its Event, which stays, counts as seeing it too.
    def slice_down() -> str | None:
        cond = condition(admin, namespace, name, "SliceDown")
        if cond and cond["status"] == "True":
            return str(cond["message"])
        events = slice_down_events(admin, namespace, name)
        return events[0] if events else None

    message = wait_for(slice_down, 90, f"SliceDown (operator log: {operator_log})")
    assert f"slice {FAILED_SLICE}" in message, message

    # Counted once: wait for the count (the Event comes after the status write that
    # counts it, but do not lean on that), then check it is exactly one.
    def counted() -> dict[str, Any] | None:
        status = get_job(admin, namespace, name).get("status") or {}
        counters: dict[str, Any] = status.get("counters", {})
        return counters if counters.get("sliceFailures", 0) >= 1 else None

    counters = wait_for(counted, 30, f"counters.sliceFailures (operator log: {operator_log})")
    assert counters["sliceFailures"] == 1, counters

    def slice_back() -> bool:
        cond = condition(admin, namespace, name, "SliceDown")
        return bool(cond and cond["status"] == "False")

    wait_for(slice_back, 90, f"SliceDown=False after the Job replaced the pod "
                             f"(operator log: {operator_log})")


def report_as_the_trainer(cluster: Cluster, admin: Any, namespace: str, name: str,
                          detected_at: datetime, operator_log: Path) -> None:
    """The trainer's report of the resumed step, sent with the head pod's own
    ServiceAccount token."""
    from kubernetes import client

    from elastic_api.names import HEAD_REPLICATED_JOB

    jobset: Any = client.CustomObjectsApi(admin).get_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", name)
    head = next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == HEAD_REPLICATED_JOB)
    trainer_sa = head["template"]["spec"]["template"]["spec"]["serviceAccountName"]
    kubeconfig = token_kubeconfig(cluster, namespace, trainer_sa,
                                  operator_log.with_name("trainer.kubeconfig"))
    trainer = client_for(kubeconfig)
    try:
        patch_status_as(trainer, namespace, name,
                        trainer_report(detected_at, datetime.now(UTC)))
    finally:
        trainer.close()


def test_install_manifest_operator_takes_a_job_through_a_slice_failure(
    cluster: Cluster, installed: list[dict[str, Any]], namespace: str, workdir: Path,
) -> None:
    sa = only(installed, "ServiceAccount")["metadata"]
    kubeconfig = token_kubeconfig(cluster, sa["namespace"], sa["name"],
                                  workdir / "operator.kubeconfig")
    args = operator_args(only(installed, "Deployment"), namespace)
    with running_operator(args, kubeconfig, workdir / "operator.log") as log:
        take_job_through_slice_failure(cluster, namespace, log)


@contextlib.contextmanager
def installed_release(cluster: Cluster, docs: list[dict[str, Any]]) -> Iterator[None]:
    """A second release over one namespace. The first (`installed`, every namespace) binds
    its status policy everywhere, which refuses any other operator's status writes: two
    releases never serve one namespace (each binds its policy to its own watchNamespaces),
    so the first's binding is set aside while this one runs."""
    first = [d for d in yaml.safe_load_all(INSTALL.read_text())
             if d and d["kind"] == "ValidatingAdmissionPolicyBinding"
             and d["metadata"]["name"].endswith("-status-writers")]
    assert len(first) == 1
    kubectl(cluster, "delete", "--ignore-not-found", "-f", "-", stdin=yaml.safe_dump_all(first))
    apply_docs(cluster, docs)
    try:
        yield
    finally:
        for doc in docs:
            if doc["kind"] in ("ClusterRole", "ClusterRoleBinding"):
                kubectl(cluster, "delete", doc["kind"].lower(), doc["metadata"]["name"],
                        "--ignore-not-found")
        apply_docs(cluster, first)


def test_namespace_scoped_chart_rbac_is_enough(
    cluster: Cluster, installed: list[dict[str, Any]], namespace: str, workdir: Path,
) -> None:
    """watchNamespaces=[ns]: only a RoleBinding in ns plus read-only nodes."""
    release = unique_release()
    docs = chart_rbac(release, namespace, f"watchNamespaces={{{namespace}}}")
    assert not [d for d in docs if d["kind"] == "ClusterRoleBinding"
                and d["roleRef"]["name"] == release]
    with installed_release(cluster, docs):
        sa = only(docs, "ServiceAccount")["metadata"]
        kubeconfig = token_kubeconfig(cluster, namespace, sa["name"],
                                      workdir / "operator.kubeconfig")
        deployment = only(helm_template(release, namespace, f"watchNamespaces={{{namespace}}}"),
                          "Deployment")
        with running_operator(operator_args(deployment, namespace), kubeconfig,
                              workdir / "operator.log") as log:
            take_job_through_slice_failure(cluster, namespace, log)


def without_verb(
    docs: list[dict[str, Any]], role: str, resource: str, verb: str,
) -> list[dict[str, Any]]:
    docs = copy.deepcopy(docs)
    cluster_role = only(docs, "ClusterRole", role)
    hits = 0
    for rule in cluster_role["rules"]:
        if resource in rule["resources"] and verb in rule["verbs"]:
            rule["verbs"] = [v for v in rule["verbs"] if v != verb]
            hits += 1
    assert hits, f"the chart's ClusterRole {role} does not grant {verb} on {resource}"
    return docs


@contextlib.contextmanager
def crippled_operator(cluster: Cluster, namespace: str, workdir: Path, resource: str,
                      verb: str, *extra_args: str) -> Iterator[Path]:
    """The operator with the chart's namespace-scoped RBAC minus one verb."""
    release = unique_release()
    values = f"watchNamespaces={{{namespace}}}"
    docs = without_verb(chart_rbac(release, namespace, values), release, resource, verb)
    with installed_release(cluster, docs):
        sa = only(docs, "ServiceAccount")["metadata"]
        kubeconfig = token_kubeconfig(cluster, namespace, sa["name"],
                                      workdir / "operator.kubeconfig")
        deployment = only(helm_template(release, namespace, values), "Deployment")
        args = [*operator_args(deployment, namespace), *extra_args]
        with running_operator(args, kubeconfig, workdir / "operator.log") as log:
            yield log


@pytest.mark.parametrize(
    ("resource", "verb"),
    [
        # RBAC escalation prevention: the operator may not create the trainer Role, which
        # grants this, so it stops before the JobSet.
        (f"{PLURAL}/status", "patch"),
        # The JobSet itself is refused.
        ("jobsets", "create"),
    ],
)
def test_a_verb_missing_from_the_rbac_keeps_the_job_from_slice_down(
    cluster: Cluster, installed: list[dict[str, Any]], namespace: str, workdir: Path,
    resource: str, verb: str,
) -> None:
    """The chart's RBAC minus one verb: the operator's request is refused (403 in its log)
    and the job never reaches SliceDown, even after a worker pod fails."""
    from kubernetes import client

    from elastic_devtools.localcluster.faults import fail_pod

    with crippled_operator(cluster, namespace, workdir, resource, verb) as log:
        admin = cluster.api_client()
        try:
            name = "missing-verb"
            client.CustomObjectsApi(admin).create_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, article_job(name, namespace))
            refused = wait_for(lambda: forbidden_lines(log.read_text()), 90,
                               f"a refused request in the operator log ({log})")
            assert any("HTTP 403" in line for line in refused), refused[:5]
            # Fail a worker if one runs at all; either way SliceDown cannot show.
            victim = worker_pod(admin, namespace, FAILED_SLICE)
            if victim is not None:
                fail_pod(admin, namespace, victim.metadata.name)
            deadline = time.monotonic() + NEGATIVE_WINDOW_S
            while time.monotonic() < deadline:
                cond = condition(admin, namespace, name, "SliceDown")
                seen = (cond and cond["status"] == "True") or \
                    slice_down_events(admin, namespace, name)
                assert not seen, (
                    f"SliceDown was reported without {verb} on {resource}: the verb is not "
                    "needed, remove it from the chart"
                )
                time.sleep(1)
        finally:
            admin.close()


def test_without_pods_watch_the_operator_is_refused_its_pod_watch(
    cluster: Cluster, installed: list[dict[str, Any]], namespace: str, workdir: Path,
) -> None:
    """The chart's RBAC minus `watch` on pods: the pod cache's watch (how a failed pod is
    seen at once, before its Job or JobSet changes) is refused with 403."""
    with crippled_operator(cluster, namespace, workdir, "pods", "watch") as log:
        lines = wait_for(lambda: [line for line in forbidden_lines(log.read_text())
                                  if "pods" in line and "watch" in line], 90,
                         f"a 403 on the pods watch in the operator log ({log})")
        assert lines


def test_an_operator_that_cannot_list_pods_is_alive_but_never_ready(
    cluster: Cluster, installed: list[dict[str, Any]], namespace: str, workdir: Path,
) -> None:
    """The chart's RBAC minus `list` on pods: the pod cache never syncs, so the replica
    could never lead. /healthz answers (it is alive: no restart would help), /readyz
    answers 503 naming the cache, so a rolling update never stops an old replica for it
    and the PodDisruptionBudget does not count it."""
    port = free_port()
    with crippled_operator(cluster, namespace, workdir, "pods", "list",
                           f"--readiness-port={port}") as log:
        wait_for(lambda: [line for line in forbidden_lines(log.read_text()) if "pods" in line],
                 90, f"a 403 on listing pods in the operator log ({log})")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as r:
                code, body = r.status, json.loads(r.read())
        except urllib.error.HTTPError as err:
            code, body = err.code, json.loads(err.read())
        assert code == 503 and body["ready"] is False, (code, body)
        assert body["why"].startswith("caches not synced yet:") and "pods" in body["why"]
        assert body["synced"] is False


# --- the per-job trainer identity ---------------------------------------------------------


def access_review(api: Any, namespace: str, verb: str, resource: str, *, group: str = "",
                  subresource: str = "", name: str = "") -> bool:
    from kubernetes import client

    review = client.V1SelfSubjectAccessReview(spec=client.V1SelfSubjectAccessReviewSpec(
        resource_attributes=client.V1ResourceAttributes(
            namespace=namespace, verb=verb, group=group, resource=resource,
            subresource=subresource or None, name=name or None)))
    result = client.AuthorizationV1Api(api).create_self_subject_access_review(review)
    return bool(result.status is not None and result.status.allowed)


def test_trainer_service_account_can_patch_only_its_own_jobs_status(
    cluster: Cluster, installed: list[dict[str, Any]], namespace: str, workdir: Path,
) -> None:
    """The per-job RBAC the operator creates (rendered by render_rbac): the trainer of job A
    patches A's status, and cannot patch B's status, A's spec, or read Secrets."""
    from kubernetes import client

    from elastic_api.models import ElasticTrainingJob
    from elastic_operator.render import render_rbac

    admin = cluster.api_client()
    try:
        custom = client.CustomObjectsApi(admin)
        objects = {}
        for name in ("job-a", "job-b"):
            body = article_job(name, namespace)
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
            objects[name] = body
        core = client.CoreV1Api(admin)
        core.create_namespaced_secret(namespace, client.V1Secret(
            metadata=client.V1ObjectMeta(name="not-for-trainers"), string_data={"k": "v"}))
        rbac = render_rbac(ElasticTrainingJob.model_validate(objects["job-a"]))
        apply_docs(cluster, [{**o, "metadata": {**o["metadata"], "namespace": namespace}}
                             for o in rbac])
        sa_name = only(rbac, "RoleBinding")["subjects"][0]["name"]
    finally:
        admin.close()

    trainer = client_for(
        token_kubeconfig(cluster, namespace, sa_name, workdir / "trainer.kubeconfig"))
    try:
        # The RBAC authorizer learns of a new RoleBinding from its informer: ask until it
        # has (a deadline, not one look), then the denials mean something.
        wait_for(lambda: access_review(trainer, namespace, "patch", PLURAL, group=GROUP,
                                       subresource="status", name="job-a"), 30,
                 "the trainer's RoleBinding seen by the RBAC authorizer")
        assert not access_review(trainer, namespace, "patch", PLURAL, group=GROUP,
                                 subresource="status", name="job-b")
        assert not access_review(trainer, namespace, "patch", PLURAL, group=GROUP, name="job-a")
        assert not access_review(trainer, namespace, "get", "secrets")
        assert not access_review(trainer, namespace, "list", "secrets")
        assert not access_review(trainer, namespace, "create", "pods")

        # And real requests, with the token: own status yes, the rest 403.
        now = datetime.now(UTC)
        patch_status_as(trainer, namespace, "job-a", trainer_report(now, now))
        stored = get_job(trainer, namespace, "job-a")["status"]["training"]
        assert stored["elasticEvent"]["phase"] == "Resumed"
        for attempt in (
            lambda: patch_status_as(trainer, namespace, "job-b", trainer_report(now, now)),
            lambda: client.CustomObjectsApi(trainer).patch_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, "job-a", {"spec": {"suspend": True}}),
            lambda: client.CoreV1Api(trainer).read_namespaced_secret("not-for-trainers", namespace),
            lambda: client.CoreV1Api(trainer).list_namespaced_secret(namespace),
        ):
            with pytest.raises(client.ApiException) as err:
                attempt()
            assert err.value.status == 403
    finally:
        trainer.close()


def test_operator_service_account_cannot_read_secrets(
    cluster: Cluster, installed: list[dict[str, Any]], namespace: str, workdir: Path,
) -> None:
    from kubernetes import client

    sa = only(installed, "ServiceAccount")["metadata"]
    operator = client_for(token_kubeconfig(cluster, sa["namespace"], sa["name"],
                                           workdir / "operator.kubeconfig"))
    try:
        for verb in ("get", "list", "watch"):
            assert not access_review(operator, namespace, verb, "secrets")
        assert not access_review(operator, namespace, "delete", "jobsets", group="jobset.x-k8s.io")
        # Slice replacement deletes worker Jobs and stuck pods, and labels nodes; nothing
        # else is deleted, and no node is deleted.
        assert access_review(operator, namespace, "delete", "pods")
        assert access_review(operator, namespace, "delete", "jobs", group="batch")
        assert not access_review(operator, namespace, "delete", "deployments", group="apps")
        assert not access_review(operator, "", "delete", "nodes")
        assert access_review(operator, "", "patch", "nodes")
        assert access_review(operator, namespace, "patch", PLURAL, group=GROUP,
                             subresource="status")
        assert access_review(operator, "", "watch", "nodes")
        with pytest.raises(client.ApiException) as err:
            client.CoreV1Api(operator).list_namespaced_secret(namespace)
        assert err.value.status == 403
    finally:
        operator.close()


def test_operator_pod_meets_the_restricted_pod_security_standard(
    cluster: Cluster, installed: list[dict[str, Any]],
) -> None:
    """The Deployment's pod, created (server-side dry run) in the install namespace, which
    enforces the `restricted` Pod Security Standard; a weakened copy is refused there, so
    the check is really enforced."""
    from kubernetes import client

    deployment = only(installed, "Deployment")
    namespace = deployment["metadata"]["namespace"]
    template = deployment["spec"]["template"]
    pod: Any = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"generateName": "psa-check-", "labels": template["metadata"]["labels"]},
           "spec": template["spec"]}
    api = cluster.api_client()
    try:
        core = client.CoreV1Api(api)
        core.create_namespaced_pod(namespace, pod, dry_run="All")

        weakened = copy.deepcopy(pod)
        weakened["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
        with pytest.raises(client.ApiException) as err:
            core.create_namespaced_pod(namespace, weakened, dry_run="All")
        assert err.value.status == 403 and "PodSecurity" in str(err.value.body)
    finally:
        api.close()
