"""The progress sidecar on the local control plane: a MaxText job's head pod gets it, and
`etj progress`, run as that pod's sidecar would be (its rendered command, the pod's name
and uid, the job's ServiceAccount and its RBAC), turns MaxText's metrics file into
status.training: `kubectl get etj` shows the STEP while the file is written. A restart of
the sidecar is the same trainer process; a new pod is a new one (TrainerRestarted).

kwok plays the kubelet, so no container runs: the test runs the sidecar itself, on this
machine, with a temporary directory for the pod's /tmp, and writes MaxText 0.2.5's own
metrics lines (tests/fixtures/maxtext-0.2.5) into it."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from elastic_api.conditions import Reason
from elastic_api.names import (
    GROUP,
    HEAD_REPLICATED_JOB,
    PLURAL,
    PROGRESS_CONTAINER,
    REPLICATED_JOB_LABEL,
    VERSION,
    job_pods_selector,
)
from elastic_devtools.localcluster import Cluster
from elastic_devtools.localcluster.crds import install_crd
from elastic_devtools.localcluster.faults import wait_for
from elastic_devtools.localcluster.operator_process import OperatorProcess
from tests.service_accounts import token_kubeconfig
from tests.support.printed import printed_jobs

# One operator for the module's tests (integration/conftest.py).
pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("running_operator")]

JOB = "mt-progress"
TIMEOUT = 120
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "maxtext-0.2.5"
LINES = (FIXTURES / "metrics-local.jsonl").read_text().splitlines(keepends=True)
# Two running_eval lines as MaxText 0.2.5 writes them (an evaluation's first line, step 0,
# cuts the file first: here it is appended, the follower reads both ways).
EVAL_LINES = "".join(json.dumps({"eval/avg_loss": 5.85, "eval/step_time_seconds": 0.01,
                                 "step": float(i), "run_name": "r"}) + "\n" for i in (1, 2))

@pytest.fixture(scope="module")
def api(cluster: Cluster) -> Iterator[client.ApiClient]:
    api_client = cluster.api_client()
    install_crd(api_client, timeout=30)
    yield api_client
    api_client.close()


def maxtext_job() -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ElasticTrainingJob",
        "metadata": {"name": JOB},
        "spec": {
            "tpu": {"type": "v5e", "topology": "4x4", "numSlices": 1},
            "checkpoint": {"directory": "/tmp/etj-progress-test/no-checkpoints-here"},
            "trainer": {"image": "maxtext-runner:test",
                        "command": ["python3", "-m", "maxtext.trainers.pre_train.train"],
                        "args": ["run_name=r", "steps=30"],
                        "progress": {"image": "trainer:test"}},
            "pathways": {"gcsScratch": "gs://test-bucket/scratch"},
        },
    }


def job_status(api: client.ApiClient, ns: str) -> dict[str, Any]:
    obj: dict[str, Any] = client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, JOB)
    return obj.get("status") or {}


def step_column(api: client.ApiClient, ns: str) -> Any:
    """What `kubectl get etj` prints under STEP."""
    return printed_jobs(api, ns, JOB)[JOB]["Step"]


def head_pod(api: client.ApiClient, ns: str) -> client.V1Pod | None:
    pods = client.CoreV1Api(api).list_namespaced_pod(
        ns, label_selector=f"{job_pods_selector(JOB)},{REPLICATED_JOB_LABEL}={HEAD_REPLICATED_JOB}"
    ).items
    running = [p for p in pods if p.status and p.status.phase == "Running"]
    return running[0] if running else None


class Sidecar:
    """`etj progress` as the head pod runs it: the rendered command with the pod's /tmp
    mapped to `pod_tmp`, the pod's identity in its environment, the job's ServiceAccount."""

    def __init__(self, pod: client.V1Pod, pod_tmp: Path, kubeconfig: Path, log: Path) -> None:
        (spec,) = [c for c in pod.spec.init_containers if c.name == PROGRESS_CONTAINER]
        assert spec.command[:2] == ["etj", "progress"]
        self.argv = [sys.executable, "-m", "elastic_api.etj_cli", "progress",
                     *[str(pod_tmp / a[len("/tmp/"):]) if a.startswith("/tmp/") else a
                       for a in spec.command[2:]],
                     "--poll-interval", "0.1", "--report-interval", "0.5"]
        self.metrics = Path(self.argv[self.argv.index("--metrics-file") + 1])
        self.env = {"KUBECONFIG": str(kubeconfig), "ETJ_JOB_NAME": JOB,
                    "ETJ_JOB_NAMESPACE": pod.metadata.namespace,
                    "ETJ_POD_NAME": pod.metadata.name, "ETJ_POD_UID": pod.metadata.uid,
                    "PATH": "/usr/bin:/bin", "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(self.argv, env=self.env, stdout=out,
                                         stderr=subprocess.STDOUT)

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        return self.proc.wait(timeout=30)

    def write(self, text: str) -> None:
        with self.metrics.open("a") as f:
            f.write(text)


def wait_step(api: client.ApiClient, ns: str, step: int) -> dict[str, Any]:
    status: dict[str, Any] = wait_for(
        lambda: (s := job_status(api, ns)) and (s.get("training") or {}).get("step") == step
        and s, TIMEOUT, f"status.training.step {step}")
    return status


def reconciled_twice(api: client.ApiClient, ns: str, operator: OperatorProcess) -> None:
    """Until the operator has reconciled the job twice from now (it read what is there)."""
    key = "etj_reconcile_duration_seconds_count"
    count = operator.metrics()[key]
    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, JOB, {"metadata": {"annotations": {"test/poke": str(count)}}},
        _content_type="application/merge-patch+json")
    wait_for(lambda: operator.metrics()[key] >= count + 2, 30, "two reconciles after the poke")


def test_the_step_column_follows_maxtexts_metrics_file(
        api: client.ApiClient, operator: OperatorProcess, namespace: str,
        cluster: Cluster, tmp_path: Path) -> None:
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, maxtext_job())
    pod = wait_for(lambda: head_pod(api, namespace), TIMEOUT, "the head pod Running")
    (main,) = pod.spec.containers
    assert main.args[-1] == "metrics_file=/tmp/etj-metrics.jsonl"
    kubeconfig = token_kubeconfig(cluster, namespace, "default", tmp_path / "trainer.kubeconfig")
    sidecar = Sidecar(pod, tmp_path, kubeconfig, tmp_path / "progress.log")
    assert sidecar.metrics == tmp_path / "etj-metrics.jsonl"
    sidecar.start()
    wait_for(lambda: (job_status(api, namespace).get("training") or {}).get("state")
             == "Initializing", TIMEOUT, "the sidecar's Initializing report")
    sidecar.write("".join(LINES[:10]))
    wait_step(api, namespace, 9)
    assert step_column(api, namespace) == 9
    sidecar.write("a line that is no metrics line\n" + LINES[10][:25])  # garbage, a partial
    sidecar.write(LINES[10][25:] + "".join(LINES[11:20]))
    status = wait_step(api, namespace, 19)
    assert step_column(api, namespace) == 19
    training = status["training"]
    assert training["loss"] == json.loads(LINES[19])["learning/loss"]
    assert training["hostName"] == pod.metadata.name and training["totalSteps"] == 30

    # The sidecar dies and the kubelet restarts it: the same trainer process.
    assert sidecar.stop(signal.SIGKILL) == -signal.SIGKILL
    sidecar.start()
    sidecar.write("".join(LINES[20:]))
    status = wait_step(api, namespace, 29)
    assert status["training"]["processStartedAt"] == training["processStartedAt"]
    reconciled_twice(api, namespace, operator)
    status = job_status(api, namespace)
    assert status["trainerProcess"]["hostName"] == pod.metadata.name
    assert status["counters"]["trainerRestarts"] == 0
    assert sidecar.stop() == 0
    log = (tmp_path / "progress.log").read_text()
    assert "skipped 1 line(s) that are not metrics lines" in log, log


def test_a_sidecar_restarted_mid_evaluation_never_shows_the_step_go_back(
        api: client.ApiClient, operator: OperatorProcess, namespace: str,
        cluster: Cluster, tmp_path: Path) -> None:
    """Issue 68: the sidecar restarted while MaxText evaluates. MaxText cut the metrics
    file at the evaluation's first line, so the new sidecar finds no train line in it; it
    goes on from what status.training held for the same process (elastic_api.forward):
    STEP stays 19 through the restart and the rest of the evaluation, never 0, and moves
    on with the next train line. The operator holds the same step (etj_training_step)."""
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, maxtext_job())
    pod = wait_for(lambda: head_pod(api, namespace), TIMEOUT, "the head pod Running")
    kubeconfig = token_kubeconfig(cluster, namespace, "default", tmp_path / "trainer.kubeconfig")
    sidecar = Sidecar(pod, tmp_path, kubeconfig, tmp_path / "progress.log")
    sidecar.start()
    sidecar.write("".join(LINES[:20]))
    before = wait_step(api, namespace, 19)["training"]
    sidecar.metrics.write_text(EVAL_LINES)  # the evaluation's first line cut the file
    assert sidecar.stop(signal.SIGKILL) == -signal.SIGKILL
    seen: list[tuple[Any, Any]] = []

    def restarted_and_reported() -> bool:
        training = job_status(api, namespace).get("training") or {}
        seen.append((training.get("step"), training.get("state")))
        return training.get("observedAt", "") > before["observedAt"] and \
            "going on from what this process reported before" in sidecar.log.read_text()

    sidecar.start()
    wait_for(restarted_and_reported, TIMEOUT, "the restarted sidecar's report", interval=0.1)
    sidecar.write(EVAL_LINES)  # more of the evaluation: still no train line
    reconciled_twice(api, namespace, operator)
    seen.append(((s := job_status(api, namespace)["training"])["step"], s["state"]))
    assert set(seen) == {(19, "Training")}, seen
    held = operator.metrics()[f'etj_training_step{{job="{JOB}",namespace="{namespace}"}}']
    assert held == 19
    sidecar.write("".join(LINES[20:]))
    wait_step(api, namespace, 29)
    assert sidecar.stop() == 0


def test_a_new_head_pod_is_a_new_trainer_process(
        api: client.ApiClient, operator: OperatorProcess, namespace: str,
        cluster: Cluster, tmp_path: Path) -> None:
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, maxtext_job())
    pod = wait_for(lambda: head_pod(api, namespace), TIMEOUT, "the head pod Running")
    kubeconfig = token_kubeconfig(cluster, namespace, "default", tmp_path / "trainer.kubeconfig")
    first = Sidecar(pod, tmp_path / "first", kubeconfig, tmp_path / "first.log")
    first.metrics.parent.mkdir()
    first.start()
    first.write("".join(LINES[:5]))
    wait_step(api, namespace, 4)
    wait_for(lambda: job_status(api, namespace).get("trainerProcess"), TIMEOUT,
             "status.trainerProcess")
    assert first.stop() == 0
    # What a JobSet restart brings: another pod (name, uid), a fresh emptyDir; MaxText
    # resumes from its checkpoint and appends to a new metrics file.
    pod.metadata.name, pod.metadata.uid = f"{pod.metadata.name}-2", "another-pod-uid"
    second = Sidecar(pod, tmp_path / "second", kubeconfig, tmp_path / "second.log")
    second.metrics.parent.mkdir()
    second.start()
    second.write("".join(LINES[3:8]))
    status = wait_for(lambda: (s := job_status(api, namespace))["counters"].get(
        "trainerRestarts") == 1 and s, TIMEOUT, "counters.trainerRestarts 1")
    assert status["trainerProcess"]["hostName"] == pod.metadata.name

    def restarted_events() -> list[str]:
        events = client.CoreV1Api(api).list_namespaced_event(
            namespace,
            field_selector=f"involvedObject.name={JOB},reason={Reason.TRAINER_RESTARTED}")
        return [e.message for e in events.items if pod.metadata.name in e.message]

    # Posted after the status write that carries it (core/status_events.py): wait for it.
    wait_for(restarted_events, TIMEOUT, "a TrainerRestarted Event naming the new pod")
    assert second.stop() == 0


FAKE_TRAINER = """
import time
def train_step():
    time.sleep(3600)
def train_loop():
    while True:
        train_step()
train_loop()
"""


@pytest.mark.stalls  # the trainer is stopped: no new step
@pytest.mark.skipif(os.geteuid() != 0, reason="a pod's process namespace needs root (unshare)")
def test_the_sidecar_says_what_the_trainer_does(
        api: client.ApiClient, operator: OperatorProcess, namespace: str,
        cluster: Cluster, tmp_path: Path) -> None:
    """In the pod's shared process namespace the sidecar finds the trainer, and the API
    server takes what it says of it: an evaluation from the metrics file, then the
    process stopped (SIGSTOP) with the frame it stopped in (where py-spy is installed)."""
    from elastic_devtools.maxtext.pod import PodProcesses
    from elastic_trainer.stacks import find_py_spy

    client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, maxtext_job())
    pod = wait_for(lambda: head_pod(api, namespace), TIMEOUT, "the head pod Running")
    kubeconfig = token_kubeconfig(cluster, namespace, "default", tmp_path / "trainer.kubeconfig")
    py_spy = find_py_spy()
    with PodProcesses() as processes:
        trainer = subprocess.Popen(processes.enter([sys.executable, "-c", FAKE_TRAINER]),
                                   start_new_session=True)
        sidecar = Sidecar(pod, tmp_path, kubeconfig, tmp_path / "progress.log")
        sidecar.argv = processes.enter([*sidecar.argv, "--sample-interval", "0.5",
                                        *(["--py-spy", py_spy] if py_spy else [])])
        sidecar.start()
        sidecar.write("".join(LINES[:10]))

        def activity() -> dict[str, Any]:
            return (job_status(api, namespace).get("training") or {}).get("activity") or {}

        def evaluating() -> dict[str, Any] | None:
            """An evaluation step's line now and then, as MaxText's evaluation writes
            them (a main thread that neither moves nor writes would be DeviceWait)."""
            sidecar.write(EVAL_LINES)
            time.sleep(0.3)
            a = activity()
            return a if a.get("phase") == "Evaluation" else None

        seen = wait_for(evaluating, TIMEOUT, "activity Evaluation")
        assert seen["source"] == "MetricsFile" and seen["processState"] == "Sleeping"
        os.killpg(trainer.pid, signal.SIGSTOP)
        stopped = wait_for(lambda: (a := activity()).get("phase") == "Stopped" and a,
                           TIMEOUT, "activity Stopped")
        assert stopped["processState"] == "Stopped" and stopped["source"] == "Sampled"
        if py_spy is not None:
            assert stopped["frame"] == "train_step at <string>:4, called from train_loop " \
                "at <string>:7", stopped
        sidecar.stop()
        os.killpg(trainer.pid, signal.SIGKILL)
        trainer.wait(timeout=30)
    log = (tmp_path / "progress.log").read_text()
    assert "sampling the trainer: pid" in log, log
