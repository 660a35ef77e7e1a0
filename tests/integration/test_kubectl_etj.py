"""`kubectl etj` in a real terminal (tmux, 80 columns) on the local control plane, as a
user who may only get, list and watch ElasticTrainingJobs, Events, pods and nodes: the
article's job loses a host of slice 2 (its node dies, as in `make demo`) and the operator
moves the slice to the spare pool while `kubectl etj timeline -w` follows it; a second
job waits for Kueue's quota. Each command's screen fits 80 columns and says what
happened; -o json carries the same; a user with no access and a job that does not exist
get a plain error.

The terminal runs `kubectl-etj`, the console script kubectl runs for `kubectl etj`
(kubectl's plugin mechanism: the executable on PATH, every argument after `etj`)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from elastic_api.names import GROUP, KUEUE_QUEUE_NAME_LABEL, PLURAL, VERSION
from elastic_api.queueing import REASON_WAITING_FOR_ADMISSION
from elastic_api.validation import validate_job
from elastic_devtools.localcluster import Cluster, faults
from elastic_devtools.localcluster import kueue_queues as kq
from elastic_devtools.localcluster.crds import install_crd
from elastic_devtools.localcluster.faults import wait_for
from elastic_devtools.localcluster.operator_process import TEST_ARGS, OperatorProcess
from elastic_operator.render import render_jobset
from tests.service_accounts import token_kubeconfig
from tests.support.article_job import JOB, job_manifest, worker_pods
from tests.support.terminal import Terminal
from tests.support.waiting import wait_running, wait_status

pytestmark = pytest.mark.cluster

TIMEOUT = 120
PLUGIN = str(Path(sys.executable).parent / "kubectl-etj")
QUEUED = "waiting"


@pytest.fixture(scope="module")
def api(kueue: Cluster) -> Iterator[client.ApiClient]:
    api_client = kueue.api_client()
    install_crd(api_client, timeout=30)
    yield api_client
    api_client.close()


@pytest.fixture(scope="module")
def operator(kueue: Cluster, api: client.ApiClient) -> Iterator[OperatorProcess]:
    """Started after Kueue, so it serves the Workloads."""
    with OperatorProcess(Path(kueue.kubeconfig), Path(kueue.logs_dir) / "operator-etj.log",
                         args=TEST_ARGS) as proc:
        yield proc


def reader_kubeconfig(kueue: Cluster, api: client.ApiClient, ns: str, tmp: Path,
                      *, allowed: bool) -> Path:
    """A ServiceAccount's kubeconfig: with `allowed`, get/list/watch on the jobs, Events
    and pods of `ns` and on nodes; without, nothing at all."""
    name = "etj-reader" if allowed else "etj-nobody"
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    core.create_namespaced_service_account(ns, {"metadata": {"name": name}})
    if allowed:
        verbs = ["get", "list", "watch"]
        rbac.create_namespaced_role(ns, {"metadata": {"name": name}, "rules": [
            {"apiGroups": [GROUP], "resources": [PLURAL], "verbs": verbs},
            {"apiGroups": [""], "resources": ["events", "pods"], "verbs": verbs}]})
        subject = [{"kind": "ServiceAccount", "name": name, "namespace": ns}]
        rbac.create_namespaced_role_binding(ns, {
            "metadata": {"name": name}, "subjects": subject,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}})
        rbac.create_cluster_role({"metadata": {"name": f"{ns}-{name}"}, "rules": [
            {"apiGroups": [""], "resources": ["nodes"], "verbs": verbs}]})
        rbac.create_cluster_role_binding({
            "metadata": {"name": f"{ns}-{name}"}, "subjects": subject,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": f"{ns}-{name}"}})
    return token_kubeconfig(kueue, ns, name, tmp / f"{name}.kubeconfig")


@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[Terminal]:
    term = Terminal(tmp_path, {"PATH": f"{Path(PLUGIN).parent}:{os.environ['PATH']}",
                               "TERM": "xterm", "LANG": "C.UTF-8"})
    yield term
    term.close()


def fits(lines: list[str]) -> str:
    """The screen, checked to fit 80 columns (capture-pane joined what it wrapped)."""
    assert lines
    assert [line for line in lines if len(line) > 80] == []
    return "\n".join(lines)


def plugin_json(kubeconfig: Path, *args: str) -> dict[str, Any]:
    done = subprocess.run([PLUGIN, *args, "-o", "json", "--kubeconfig", str(kubeconfig)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def one_job_of_quota() -> dict[str, str]:
    obj = job_manifest()
    obj["metadata"]["namespace"] = "x"
    requests = kq.jobset_requests(render_jobset(validate_job(obj)))
    return {k: str(int(v)) for k, v in requests.items()}


def submit(api: client.ApiClient, ns: str, name: str, queue: str) -> None:
    obj = job_manifest()
    obj["metadata"] |= {"name": name, "labels": {KUEUE_QUEUE_NAME_LABEL: queue}}
    client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL,
                                                                 obj)


def test_a_failure_and_a_queued_job_in_a_real_terminal(
        kueue: Cluster, api: client.ApiClient, operator: OperatorProcess, ns: str,
        killed: list[str], terminal: Terminal, tmp_path: Path) -> None:
    kubeconfig = reader_kubeconfig(kueue, api, ns, tmp_path, allowed=True)
    flags = f"-n {ns} --kubeconfig {kubeconfig}"
    with kq.queues(api, ns, one_job_of_quota(), prefix="k" + ns.rsplit("-", 1)[-1]) as queues:
        submit(api, ns, JOB, queues.local_queue)
        wait_running(api, ns)
        submit(api, ns, QUEUED, queues.local_queue)

        # Follow the job live, then kill a host of slice 2 as `make demo` does.
        terminal.type(f"kubectl-etj timeline {JOB} -w {flags}")
        terminal.wait_for(f"{JOB} ({ns}):", 30)
        victim = worker_pods(api, ns, 2)[0]
        killed.append(victim.spec.node_name)
        faults.kill_node(api, victim.spec.node_name)
        moved = wait_status(api, ns, lambda s: s["slices"][2]["state"] == "Ready" and (
            s["slices"][2].get("lastReplacement") or {}).get("toPool"), "slice 2 moved",
            timeout=TIMEOUT)["slices"][2]["lastReplacement"]
        screen = terminal.wait_for("SliceReplaced: slice 2", 60)
        terminal.interrupt()
        live = fits(screen[-50:])
        assert "SliceDown: slice 2 is down" in live and "slice 2   |" in live

        rc, lines = terminal.run(f"kubectl-etj status {JOB} {flags}")
        text = fits(lines)
        assert rc == 0, text
        row = next(line for line in lines if line.startswith("2 ")).split()
        assert row[:6] == ["2", "Ready", moved["toPool"], "4/4", "1", "NodeNotReady"], text
        assert f"{moved['fromPool']} -> {moved['toPool']}" in text
        assert "counters:    slice failures 1" in text

        rc, lines = terminal.run(f"kubectl-etj timeline {JOB} --since 1h {flags}")
        text = fits(lines)
        assert rc == 0 and "failure     SliceDown: slice 2 is down" in text, text
        assert "replacement SliceReplacing: slice 2" in text
        assert "replacement PoolQuarantined: node pool " + moved["fromPool"] in text

        rc, lines = terminal.run(f"kubectl-etj why {JOB} {flags}")
        text = " ".join(fits(lines).split())
        assert rc == 0 and f"Node pool {moved['fromPool']} is quarantined (NodeNotReady)" \
            in text, text

        wait_for(lambda: [f["topic"] for f in plugin_json(kubeconfig, "why", QUEUED, "-n", ns)
                          ["waitingOn"]][:1] == ["Queued"], TIMEOUT,
                 "the queued job waiting on Kueue", interval=1)
        rc, lines = terminal.run(f"kubectl-etj why {QUEUED} {flags}")
        text = " ".join(fits(lines).split())
        assert rc == 0, text
        assert f"Kueue has not admitted the job: it waits in {queues.local_queue} for quota" \
            in text and REASON_WAITING_FOR_ADMISSION in text, text
        assert "insufficient" in text and "kubectl get workload " in text

        rc, lines = terminal.run(f"kubectl-etj goodput {JOB} {flags}")
        text = fits(lines)
        assert rc == 0 and "slice downtime (the operator's timeline):" in text, text

    status = plugin_json(kubeconfig, "status", JOB, "-n", ns)
    assert status["slices"][2]["lastReplacement"]["toPool"] == moved["toPool"]
    assert status["counters"]["sliceFailures"] == 1
    history = plugin_json(kubeconfig, "timeline", JOB, "-n", ns)
    reasons = [m["reason"] for m in history["moments"]]
    assert reasons.index("SliceDown") < reasons.index("SliceReplacing") \
        < reasons.index("SliceReplaced")
    assert [s["state"] for s in history["slices"]["2"]][-1] == "Ready"
    queued = plugin_json(kubeconfig, "why", QUEUED, "-n", ns)
    assert queued["phase"] == "Queued" and queued["waitingOn"][0]["topic"] == "Queued"


def test_no_access_and_no_such_job_are_plain_errors(
        kueue: Cluster, api: client.ApiClient, ns: str, terminal: Terminal,
        tmp_path: Path) -> None:
    nobody = reader_kubeconfig(kueue, api, ns, tmp_path, allowed=False)
    rc, lines = terminal.run(f"kubectl-etj status {JOB} -n {ns} --kubeconfig {nobody}")
    text = " ".join(" ".join(lines).split())
    assert rc == 1 and text.startswith(f"error: not allowed to read ElasticTrainingJob {JOB} "
                                       f"in namespace {ns}"), text
    assert "get, list and watch" in text
    reader = reader_kubeconfig(kueue, api, ns, tmp_path, allowed=True)
    rc, lines = terminal.run(f"kubectl-etj timeline nope -n {ns} --kubeconfig {reader}")
    text = " ".join(" ".join(lines).split())
    assert rc == 1 and text.startswith(f'error: no ElasticTrainingJob "nope" in namespace '
                                       f"{ns}"), text
