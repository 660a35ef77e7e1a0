"""Chaos: a simulated ElasticTrainingJob trains to completion with the real operator and
the real trainer (both subprocesses) while a seeded random sequence of faults hits it.

Faults: a worker pod failed, a worker pod force-deleted, a node NotReady then Ready, two
slices failed at once, the operator SIGKILLed and restarted. The short run (in `make test`)
injects each kind once, in a seeded order on seeded slices. ETJ_SOAK_SECONDS=<n> turns it
into the soak (`make soak`): random faults for about n seconds of a longer run.
ETJ_CHAOS_SEED=<int> replays a sequence (the seed is printed either way).

Asserts: the trainer exits 0 with the parameters of an undisturbed run of the same steps;
the JobSet never restarted; the job's counters never went backwards; every slice the
trainer lost was one we hit, and the operator counted each elastic event; every slice we
hit shows up in a SliceDown event on the job.
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from test_operator import OperatorProcess  # the same `etj operator` subprocess harness

from elastic_operator.api import GROUP, PLURAL, VERSION
from elastic_operator.demo.run import _head_command, _stop
from elastic_operator.localcluster import Cluster, faults
from elastic_operator.localcluster.crds import install_crd
from elastic_operator.localcluster.faults import wait_for

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
JOB = "chaos"
JOB_LABEL = "elastic.pathways.dev/job-name"
SLICES = 3
STEP_SECONDS = 0.05
SOAK_SECONDS = float(os.environ.get("ETJ_SOAK_SECONDS") or 0)
# Short run: ~25 s of paced steps, plenty for five faults gated on progress (the trainer
# pauses while a slice is down, so steps are consumed only between faults). A fault with
# its recovery and the 25 steps after it took ~13 s here (~3 steps/s of soak): 4 steps per
# soak second keeps faults coming for the whole soak without a long quiet tail.
STEPS = max(500, int(SOAK_SECONDS * 4)) if SOAK_SECONDS else 500
STEPS_BETWEEN_FAULTS = 25  # at least two checkpoints / five snapshots between faults
# The Job controller delays a worker Job's replacement pod 10 s x 2^(failures - 1), up to
# 6 min; a soak hits the same slice often enough to reach that cap.
RECOVERY_TIMEOUT = 420 if SOAK_SECONDS else 180
KINDS = ("fail_pod", "delete_pod", "node_not_ready", "two_slices", "operator_kill")


@dataclass
class Fault:
    kind: str
    slices: list[int]
    at_step: int = -1
    detail: str = ""


@dataclass
class Sampler:
    """Samples the job's counters, slice restarts and the JobSet's restarts all through
    the run, to check that nothing ever goes backwards."""

    api: client.ApiClient
    ns: str
    samples: list[dict[str, int]] = field(default_factory=list)
    latest: dict[str, Any] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="chaos-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        custom = client.CustomObjectsApi(self.api)
        while not self._stop.wait(0.25):
            try:
                job = custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, JOB)
                jobset = custom.get_namespaced_custom_object(
                    "jobset.x-k8s.io", "v1alpha2", self.ns, "jobsets", JOB)
            except client.ApiException:
                continue  # not created yet, or the API server briefly busy
            status = job.get("status") or {}
            self.latest = status
            sample = {f"counters.{k}": int(v) for k, v in (status.get("counters") or {}).items()}
            for s in status.get("slices") or []:
                sample[f"slices[{s['index']}].restarts"] = int(s.get("restarts") or 0)
            sample["jobset.restarts"] = int((jobset.get("status") or {}).get("restarts") or 0)
            self.samples.append(sample)

    def regressions(self) -> list[str]:
        seen: dict[str, tuple[int, int]] = {}
        problems = []
        for i, sample in enumerate(self.samples):
            for key, value in sample.items():
                if key in seen and value < seen[key][1]:
                    problems.append(f"{key} went from {seen[key][1]} (sample {seen[key][0]}) "
                                    f"to {value} (sample {i})")
                seen[key] = (i, max(value, seen.get(key, (i, value))[1]))
        return problems


def plan_faults(rng: random.Random, soak: bool) -> list[Fault]:
    kinds = list(KINDS)
    rng.shuffle(kinds)
    if soak:  # a long random tail after one of each; the soak stops drawing when time is up
        kinds += [rng.choice(KINDS) for _ in range(1000)]
    plan = []
    for kind in kinds:
        if kind == "two_slices":
            plan.append(Fault(kind, sorted(rng.sample(range(SLICES), 2))))
        elif kind == "operator_kill":
            plan.append(Fault(kind, []))
        else:
            plan.append(Fault(kind, [rng.randrange(SLICES)]))
    return plan


@pytest.fixture
def api(cluster: Cluster) -> Iterator[client.ApiClient]:
    api_client = cluster.api_client()
    install_crd(api_client, timeout=30)
    yield api_client
    api_client.close()


@pytest.fixture
def operator(cluster: Cluster, api: client.ApiClient,
             tmp_path: Path) -> Iterator[OperatorProcess]:
    proc = OperatorProcess(Path(cluster.kubeconfig), tmp_path / "operator.log")
    proc.start()
    yield proc
    proc.stop()


def job_manifest(ns: str, checkpoint_dir: Path) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ElasticTrainingJob",
        "metadata": {"name": JOB, "namespace": ns},
        "spec": {
            "backend": "simulated",
            "tpu": {"type": "v5e", "topology": "4x4", "numSlices": SLICES},
            "elastic": {"timeoutSeconds": RECOVERY_TIMEOUT, "maxRetries": 1000,
                        "maxSliceRestarts": 1000},
            "checkpoint": {"directory": str(checkpoint_dir), "periodSteps": 10, "keep": 3},
            "snapshot": {"periodSteps": 5},
            "trainer": {"image": "trainer:test", "model": "tiny", "steps": STEPS, "batch": 24,
                        "args": ["--min-step-seconds", str(STEP_SECONDS),
                                 "--report-interval", "0.5"]},
        },
    }


def _cli(command: list[str]) -> list[str]:
    assert command[0] == "etj", command
    return [sys.executable, "-m", "elastic_operator.cli", *command[1:]]


def _flag(command: list[str], flag: str, value: str) -> list[str]:
    out = list(command)
    out[out.index(flag) + 1] = value
    return out


def worker_pods(api: client.ApiClient, ns: str, index: int) -> list[client.V1Pod]:
    pods = client.CoreV1Api(api).list_namespaced_pod(
        ns, label_selector=f"{JOB_LABEL}={JOB},jobset.sigs.k8s.io/replicatedjob-name=worker,"
                           f"jobset.sigs.k8s.io/job-index={index}").items
    return sorted((p for p in pods if p.metadata.deletion_timestamp is None
                   and p.status.phase == "Running"), key=lambda p: p.metadata.name)


def _condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), {})


def _healthy(status: dict[str, Any]) -> bool:
    return (status.get("slicesReady") == SLICES
            and _condition(status, "SliceDown").get("status") != "True"
            and _condition(status, "Recovering").get("status") != "True")


def _step(status: dict[str, Any]) -> int:
    return int((status.get("training") or {}).get("step") or 0)


@pytest.mark.timeout(int(SOAK_SECONDS * 3) + 900 if SOAK_SECONDS else 600)
def test_chaos_training_survives_random_faults(
        cluster: Cluster, api: client.ApiClient, namespace: str, operator: OperatorProcess,
        tmp_path: Path) -> None:
    seed = int(os.environ.get("ETJ_CHAOS_SEED") or random.SystemRandom().randrange(2**31))
    print(f"\nchaos seed {seed} (replay: ETJ_CHAOS_SEED={seed}); steps {STEPS}; "
          f"soak {SOAK_SECONDS:.0f}s")
    rng = random.Random(seed)
    plan = plan_faults(rng, soak=SOAK_SECONDS > 0)
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)

    manifest = job_manifest(namespace, tmp_path / "checkpoints")
    command = _cli(_head_command(manifest))
    # The reference: the same run without faults and without the cluster, in parallel.
    reference_cmd = _flag(_flag(command, "--slice-health", "schedule"),
                          "--checkpoint-dir", str(tmp_path / "reference-checkpoints"))
    reference_env = {k: v for k, v in os.environ.items()
                     if not k.startswith("ETJ_JOB") and k != "KUBECONFIG"}
    reference_log = (tmp_path / "reference.log").open("wb")
    reference = subprocess.Popen(
        [*reference_cmd, "--summary", str(tmp_path / "reference.json")], env=reference_env,
        stdout=reference_log, stderr=subprocess.STDOUT, start_new_session=True)

    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, manifest)

    def status() -> dict[str, Any]:
        got: dict[str, Any] = custom.get_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, JOB).get("status") or {}
        return got

    wait_for(lambda: status().get("slicesReady") == SLICES, RECOVERY_TIMEOUT,
             "3 ready slices", interval=0.5)
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "PYTHONUNBUFFERED": "1",
           "ETJ_JOB_NAME": JOB, "ETJ_JOB_NAMESPACE": namespace}
    trainer_log = (tmp_path / "trainer.log").open("wb")
    trainer = subprocess.Popen([*command, "--summary", str(tmp_path / "trainer.json")],
                               env=env, stdout=trainer_log, stderr=subprocess.STDOUT,
                               start_new_session=True)
    sampler = Sampler(api, namespace)
    sampler.start()
    injected: list[Fault] = []
    started = time.monotonic()
    not_ready_nodes: list[str] = []
    try:
        for fault in plan:
            if SOAK_SECONDS and time.monotonic() - started > SOAK_SECONDS:
                break
            # Gate on progress: the trainer has trained a while since the last fault and
            # the job is healthy (no fault lands in the middle of another's recovery).
            floor = (injected[-1].at_step if injected else 0) + STEPS_BETWEEN_FAULTS
            ready = wait_for(lambda floor=floor: trainer.poll() is not None or (
                _healthy(s := status()) and _step(s) >= floor and s), RECOVERY_TIMEOUT,
                f"step >= {floor} with the job healthy before fault {len(injected) + 1}",
                interval=0.25)
            if trainer.poll() is not None:
                break
            fault.at_step = _step(ready)
            if fault.at_step > STEPS - STEPS_BETWEEN_FAULTS:
                break  # too close to the end for the trainer to notice
            _inject(api, namespace, operator, fault, status, not_ready_nodes)
            injected.append(fault)
            print(f"  fault {len(injected)}: {fault.kind} slices {fault.slices} at step "
                  f"{fault.at_step} {fault.detail}", flush=True)
        rc = wait_for(lambda: trainer.poll() is not None and [trainer.returncode],
                      RECOVERY_TIMEOUT + STEPS * STEP_SECONDS * 2,
                      "the trainer to finish", interval=0.5)[0]
        wait_for(lambda: reference.poll() is not None, 300 + STEPS * STEP_SECONDS * 2,
                 "the reference run")
    finally:
        for node in not_ready_nodes:
            faults.make_node_ready(api, node)
        if operator.proc is None or operator.proc.poll() is not None:
            operator.start()
        sampler.stop()
        _stop(trainer)
        _stop(reference)
        trainer_log.close()
        reference_log.close()

    logs = f"(logs: {tmp_path}/trainer.log, operator.log)"
    wanted = len(KINDS) if not SOAK_SECONDS else 1
    assert len(injected) >= wanted, \
        f"only {[f.kind for f in injected]} injected before the trainer finished {logs}"
    assert rc == 0, f"trainer exited {rc} {logs}"
    assert reference.returncode == 0, f"reference run failed (log: {tmp_path}/reference.log)"
    summary = json.loads((tmp_path / "trainer.json").read_text())
    expected = json.loads((tmp_path / "reference.json").read_text())
    assert summary["final_step"] == expected["final_step"] == STEPS
    assert summary["params_digest"] == expected["params_digest"], \
        f"parameters differ from the undisturbed run {logs}"

    # The trainer lost only slices we hit, and the operator counted each elastic event.
    hit = {i for f in injected for i in f.slices}
    trainer_events = summary["elastic_events"]
    for event in trainer_events:
        assert set(event["slices_down"]) <= hit, (event, [f.kind for f in injected])
        assert event["resumed_step"] is not None, event
    pod_faults = [f for f in injected if f.kind in ("fail_pod", "two_slices", "delete_pod")]
    if pod_faults:
        assert trainer_events, f"the trainer noticed none of {pod_faults} {logs}"
    # (The simulated head pod never exits under kwok, so the job's phase stays Running;
    # the trainer's final report is what the operator has to take in.)
    final = wait_for(lambda: (s := status()).get("training", {}).get("state") == "Succeeded"
                     and s.get("counters", {}).get("elasticEvents") == len(trainer_events)
                     and s, 60, f"the operator to count {len(trainer_events)} elastic events")
    assert final["counters"]["elasticEvents"] == len(trainer_events), final["counters"]

    # Nothing went backwards; the JobSet never restarted.
    assert sampler.samples, "the sampler saw no status"
    assert sampler.regressions() == []
    assert max(s["jobset.restarts"] for s in sampler.samples) == 0
    assert final["counters"]["jobSetRestarts"] == 0

    # Every slice failure shows up as a SliceDown event naming the slice.
    slice_down = [e.message for e in core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={JOB},reason=SliceDown").items]
    for fault in injected:
        for index in fault.slices:
            assert any(f"slice {index} " in m for m in slice_down), (fault, slice_down)
    # Each injection waited for the operator to count its slices as restarted.
    slice_faults = sum(len(f.slices) for f in injected)
    assert final["counters"]["sliceFailures"] >= slice_faults, final["counters"]


def _inject(api: client.ApiClient, ns: str, operator: OperatorProcess, fault: Fault,
            status: Callable[[], dict[str, Any]], not_ready_nodes: list[str]) -> None:
    """Inject one fault and wait until the operator has seen it (SliceDown naming the
    slices, or a healthy restart)."""
    if fault.kind == "operator_kill":
        operator.kill()
        operator.start()
        return
    before = _restarts(status())
    victims = {i: worker_pods(api, ns, i)[0] for i in fault.slices}
    if fault.kind == "node_not_ready":
        (pod,) = victims.values()
        node = pod.spec.node_name
        # Every slice with a worker on that node goes down with it.
        fault.slices = sorted({i for i in range(SLICES)
                               if any(p.spec.node_name == node for p in worker_pods(api, ns, i))})
        fault.detail = f"node {node}"
        not_ready_nodes.append(node)
        faults.make_node_not_ready(api, node)
        _wait_slice_down(status, before, fault.slices)
        faults.make_node_ready(api, node)
        not_ready_nodes.remove(node)
        faults.wait_for_node_ready(api, node, True)
        return
    for pod in victims.values():
        fault.detail += f"pod {pod.metadata.name} "
        if fault.kind == "delete_pod":
            faults.delete_pod(api, ns, pod.metadata.name, force=True)
        else:
            faults.fail_pod(api, ns, pod.metadata.name)
    _wait_slice_down(status, before, fault.slices)


def _restarts(status: dict[str, Any]) -> dict[int, int]:
    return {s["index"]: int(s.get("restarts") or 0) for s in status.get("slices") or []}


def _wait_slice_down(status: Callable[[], dict[str, Any]], before: dict[int, int],
                     slices: list[int]) -> None:
    """The operator counts a slice failure as a restart of that slice (never undone)."""
    wait_for(lambda: all(_restarts(status()).get(i, 0) > before.get(i, 0) for i in slices),
             60, f"the operator to see slices {slices} down", interval=0.1)
