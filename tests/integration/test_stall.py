"""A frozen trainer on the local control plane (issue 32): the bundled trainer, run as the
head pod's main runs it, SIGSTOP'd while every pod stays Ready. The operator sees no new
step for the progress deadline: Progressing=False (ProgressDeadlineExceeded, "a frozen
trainer") and a Warning Event within the deadline; with onStall Recover it restarts the
trainer by deleting the head pod after raising its Job's backoffLimit, and its Job makes a
new one: the JobSet is the same, not restarted; the new process (started here, as the new
pod's main would) is a TrainerRestarted and Progressing is True again.

Every other cluster test checks, in its namespace's teardown (tests/conftest.py), that
no ProgressDeadlineExceeded Event was posted: no Progressing=False anywhere else."""
from __future__ import annotations

import os
import signal
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from elastic_api.conditions import ConditionType as C
from elastic_api.conditions import Reason
from elastic_api.names import GROUP, HEAD_REPLICATED_JOB, PLURAL, VERSION
from elastic_devtools.localcluster import Cluster
from elastic_devtools.localcluster.faults import wait_for
from tests.builders import etj
from tests.support.article_job import JOB, condition, events
from tests.support.trainer_run import TrainerProcesses, head_command
from tests.support.waiting import wait_running, wait_status

# One operator for the module's tests (integration/conftest.py).
pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("running_operator")]

DEADLINE = 8  # spec.elastic.progressDeadlineSeconds


def manifest(checkpoint_dir: Path, *args: str, **elastic: Any) -> dict[str, Any]:
    """The article's shape on simulated slices, the real trainer (`args` more flags)."""
    return (etj(JOB, namespace=None).backend("simulated").tpu("v5e", "4x4", 3)
            .spec(elastic=elastic,
                  checkpoint={"directory": str(checkpoint_dir), "periodSteps": 20})
            .trainer("trainer:test", 100000, model="tiny", batch=24,
                     args=["--min-step-seconds", "0.05", "--report-interval", "0.5", *args])
            .without("pathways").obj())


def trainer_of(obj: dict[str, Any], cluster: Cluster, ns: str,
               tmp_path: Path) -> TrainerProcesses:
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "PYTHONUNBUFFERED": "1",
           "ETJ_JOB_NAME": JOB, "ETJ_JOB_NAMESPACE": ns}
    return TrainerProcesses(head_command(obj), env, tmp_path)


def head_pods(api: client.ApiClient, ns: str) -> list[client.V1Pod]:
    pods = client.CoreV1Api(api).list_namespaced_pod(
        ns, label_selector=f"jobset.sigs.k8s.io/replicatedjob-name={HEAD_REPLICATED_JOB}").items
    return [p for p in pods if p.metadata.deletion_timestamp is None]


def progressing(status: dict[str, Any]) -> tuple[str, str]:
    c = condition(status, C.PROGRESSING)
    return c.get("status", ""), c.get("reason", "")


@pytest.mark.stalls
def test_a_frozen_trainer_is_stalled_and_restarted(
        api: client.ApiClient, ns: str, cluster: Cluster, tmp_path: Path) -> None:
    obj = manifest(tmp_path / "checkpoints", progressDeadlineSeconds=DEADLINE,
                   onStall="Recover")
    trainer = trainer_of(obj, cluster, ns, tmp_path)
    custom = client.CustomObjectsApi(api)
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, obj)
    wait_running(api, ns)
    jobset_uid = custom.get_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", ns, "jobsets", JOB)["metadata"]["uid"]
    [head] = head_pods(api, ns)
    trainer.start()
    try:
        st = wait_status(api, ns, lambda s: progressing(s) == ("True", Reason.STEPS_ADVANCING)
                         and (s.get("training") or {}).get("step", 0) >= 30,
                         "steps advancing past 30", timeout=180)
        first = st["training"]["processStartedAt"]

        assert trainer.proc is not None
        os.killpg(trainer.proc.pid, signal.SIGSTOP)  # frozen: alive, silent
        frozen_at = time.monotonic()
        st = wait_status(api, ns, lambda s: progressing(s)[0] == "False",
                         "Progressing False", timeout=DEADLINE + 30)
        waited = time.monotonic() - frozen_at
        c = condition(st, C.PROGRESSING)
        assert c["reason"] == Reason.PROGRESS_DEADLINE_EXCEEDED, c
        assert "a frozen trainer: it has reported nothing since" in c["message"], c
        assert waited >= DEADLINE - 1, f"stalled after {waited:.1f} s, deadline {DEADLINE} s"
        # Found by the reconcile's own wake-up at the deadline, not by a resync (30 s):
        # the operator's clock (status.progress.since) to the condition's transition.
        since = datetime.fromisoformat(st["progress"]["since"])
        late = (datetime.fromisoformat(c["lastTransitionTime"]) - since).total_seconds()
        assert late < DEADLINE + 10, f"stalled {late:.1f} s after the last step was seen"
        wait_for(lambda: events(api, ns, Reason.PROGRESS_DEADLINE_EXCEEDED), 30,
                 "a ProgressDeadlineExceeded Event")
        wait_for(lambda: events(api, ns, Reason.TRAINER_RESTARTING), 30,
                 "a TrainerRestarting Event")

        # The head pod is replaced by its own Job; the JobSet is the same one, unrestarted.
        wait_for(lambda: [p for p in head_pods(api, ns) if p.metadata.uid != head.metadata.uid],
                 90, "a new head pod")
        head_job = client.BatchV1Api(api).read_namespaced_job(f"{JOB}-{HEAD_REPLICATED_JOB}-0",
                                                              ns)
        assert head_job.spec.backoff_limit == 1 and not head_job.status.conditions, head_job
        jobset = custom.get_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", ns,
                                                     "jobsets", JOB)
        assert jobset["metadata"]["uid"] == jobset_uid
        assert (jobset.get("status") or {}).get("restarts", 0) == 0

        # The new pod's main: a new trainer process, resumed from the newest checkpoint.
        trainer.kill()
        trainer.start()
        st = wait_status(api, ns, lambda s: s.get("counters", {}).get("trainerRestarts") == 1
                         and progressing(s) == ("True", Reason.STEPS_ADVANCING),
                         "the new trainer process counted and advancing", timeout=180)
        assert st["training"]["processStartedAt"] != first
        assert st["counters"]["stallRestarts"] == 1  # against maxStallRestarts
        # Posted after the status write that carries it (core/status_events.py): wait for it.
        wait_for(lambda: events(api, ns, Reason.TRAINER_RESTARTED), 30,
                 "the TrainerRestarted Event")
        assert len(events(api, ns, Reason.PROGRESS_DEADLINE_EXCEEDED)) == 1
    finally:
        if trainer.proc is not None and trainer.poll() is None:
            trainer.kill()


@pytest.mark.stalls
def test_a_frozen_trainer_with_its_stall_restarts_spent_is_reported_not_restarted(
        api: client.ApiClient, ns: str, cluster: Cluster, tmp_path: Path) -> None:
    obj = manifest(tmp_path / "checkpoints", progressDeadlineSeconds=DEADLINE,
                   onStall="Recover", maxStallRestarts=0)
    trainer = trainer_of(obj, cluster, ns, tmp_path)
    client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL,
                                                                 obj)
    wait_running(api, ns)
    [head] = head_pods(api, ns)
    trainer.start()
    try:
        wait_status(api, ns, lambda s: progressing(s) == ("True", Reason.STEPS_ADVANCING),
                    "steps advancing", timeout=180)
        assert trainer.proc is not None
        os.killpg(trainer.proc.pid, signal.SIGSTOP)
        st = wait_status(api, ns, lambda s: progressing(s)[0] == "False",
                         "Progressing False", timeout=DEADLINE + 30)
        c = condition(st, C.PROGRESSING)
        assert "the stall restart budget is spent" in c["message"], c
        wait_for(lambda: events(api, ns, Reason.STALL_RESTARTS_EXHAUSTED), 30,
                 "a StallRestartsExhausted Event")
        # The write that stalled it records no restart (it would be recorded there,
        # before any delete), and none is counted.
        assert (st.get("progress") or {}).get("restart") is None, st.get("progress")
        assert (st.get("counters") or {}).get("stallRestarts", 0) == 0
        assert not events(api, ns, Reason.TRAINER_RESTARTING)
        assert [p.metadata.uid for p in head_pods(api, ns)] == [head.metadata.uid]
    finally:
        if trainer.proc is not None and trainer.poll() is None:
            trainer.kill()


def test_a_hung_slice_is_replaced_and_the_trainer_recovers_in_process(
        api: client.ApiClient, ns: str, cluster: Cluster, tmp_path: Path) -> None:
    """Slice 1's part of step 40 never returns (`--fail-at 40:1:hang`) while its pods stay
    Ready: the trainer's watchdog blames it and asks; the operator recreates its worker
    Job (a slice failure, reason SliceHung); the pods going end the hung step (DATA_LOSS in
    the trainer) and the same process resumes on the new slice. No Progressing=False: the
    slice was down, and Recovering owned it (this test is not marked stalls)."""
    obj = manifest(tmp_path / "checkpoints", "--fail-at", "40:1:hang")
    trainer = trainer_of(obj, cluster, ns, tmp_path)
    custom = client.CustomObjectsApi(api)
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, obj)
    wait_running(api, ns)
    trainer.start()
    try:
        st = wait_status(api, ns, lambda s: (s.get("slices") or [{}, {}])[1].get("reason")
                         == Reason.SLICE_HUNG, "slice 1 down for a hang", timeout=240)
        one = st["slices"][1]
        assert one["state"] == "Down" and one["restarts"] == 1, one
        assert st["counters"]["sliceFailures"] == 1
        started = st["training"]["processStartedAt"]
        assert st["training"]["sliceReplacement"]["slices"] == [1]
        st = wait_status(api, ns, lambda s: condition(s, C.RECOVERING).get("reason")
                         == Reason.RECOVERED and s["slices"][1]["state"] == "Ready"
                         and (s.get("training") or {}).get("step", 0) >= 60,
                         "recovered in process, trained past step 60", timeout=240)
        assert st["training"]["processStartedAt"] == started  # the same process
        assert st["counters"].get("trainerRestarts", 0) == 0
        assert st["counters"]["sliceFailures"] == 1 and st["slices"][1]["restarts"] == 1
        assert st["slices"][1]["lastReplacement"]["reason"] == Reason.SLICE_HUNG
        assert st["handledSliceReplacement"]["replaced"] == [1]
        assert progressing(st) == ("True", Reason.STEPS_ADVANCING)
        assert events(api, ns, Reason.SLICE_REPLACING)
        assert trainer.poll() is None, f"trainer exited (log {trainer.log})"
    finally:
        if trainer.proc is not None and trainer.poll() is None:
            trainer.kill()


# --- the trainer's phase (issue 60) -------------------------------------------------------
# The bundled trainer reports what it is doing (status.training.activity) and how long
# each phase took (.phases); the operator's stall rule judges the phase by its own deadline.

def _phase(status: dict[str, Any]) -> str | None:
    return ((status.get("training") or {}).get("activity") or {}).get("phase")


def _record(status: dict[str, Any], phase: str) -> dict[str, Any]:
    return next((r for r in (status.get("training") or {}).get("phases") or []
                 if r["phase"] == phase), {})


# Over a minute by its nature (an evaluation outlasting the 60 s deadline floor): `make
# test-long`. Its guard in `make test`: the phase rule's unit tests
# (tests/unit/test_status_phase_rule.py, an evaluation of minutes keeps Progressing True).
@pytest.mark.long
def test_an_evaluation_longer_than_the_step_deadline_is_no_stall(
        api: client.ApiClient, ns: str, cluster: Cluster, tmp_path: Path) -> None:
    """An evaluation after step 60 of 1,500 paced steps (75 s or more) outlasts the learned
    step deadline (its 60 s floor: the job gives none): Progressing stays True through it,
    its message naming the evaluation, and no trainer restart. Not marked stalls: the
    teardown fails on any ProgressDeadlineExceeded Event."""
    obj = manifest(tmp_path / "checkpoints", "--eval-every", "60", "--eval-steps", "1500")
    trainer = trainer_of(obj, cluster, ns, tmp_path)
    client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL,
                                                                 obj)
    wait_running(api, ns)
    trainer.start()
    seen: list[tuple[str | None, tuple[str, str], str]] = []

    def through_the_evaluation(s: dict[str, Any]) -> bool:
        seen.append((_phase(s), progressing(s), condition(s, C.PROGRESSING).get("message",
                                                                               "")))
        return _record(s, "Evaluation").get("count", 0) >= 1 and \
            (s.get("training") or {}).get("step", 0) >= 70
    try:
        wait_status(api, ns, lambda s: _phase(s) == "Evaluation", "evaluating", timeout=240)
        st = wait_status(api, ns, through_the_evaluation, "through the evaluation",
                         timeout=600)
        evaluation = _record(st, "Evaluation")
        deadline = st["progress"].get("deadlineSeconds")  # the step deadline, learned
        assert deadline is not None and deadline >= 60, st["progress"]
        assert evaluation["longestSeconds"] > deadline, (evaluation, st["progress"])
        assert all(p[0] == "True" for _, p, _ in seen if p[0]), seen
        during = [m for phase, p, m in seen if phase == "Evaluation" and p[0] == "True"]
        assert during and any(m.startswith("evaluation for ") for m in during), during
        assert (st.get("counters") or {}).get("trainerRestarts", 0) == 0
        assert not events(api, ns, Reason.PROGRESS_DEADLINE_EXCEEDED)
        assert trainer.poll() is None, f"trainer exited (log {trainer.log})"
    finally:
        if trainer.proc is not None and trainer.poll() is None:
            trainer.kill()


@pytest.mark.stalls
def test_a_device_call_blocked_past_the_step_deadline_is_named_with_its_frame(
        api: client.ApiClient, ns: str, cluster: Cluster, tmp_path: Path) -> None:
    """Reading step 33's loss waits 30 s in the runtime (`--fail-at 33:0:block=30`: a
    collective every slice waits in) while every pod stays Ready: the trainer's watchdog
    finds its main thread in the device call and reports DeviceWait with the frame; the
    operator's phase rule holds it to the step deadline: Progressing=False naming the
    frame. The call returns after all: steps advance again, in the same process. No
    snapshots: step 33 runs beside no copy, so the watchdog's is a plain step's deadline."""
    obj = manifest(tmp_path / "checkpoints", "--fail-at", "33:0:block=30",
                   "--snapshot-period", "0", progressDeadlineSeconds=DEADLINE,
                   onStall="Report")
    trainer = trainer_of(obj, cluster, ns, tmp_path)
    client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL,
                                                                 obj)
    wait_running(api, ns)
    trainer.start()
    try:
        st = wait_status(api, ns, lambda s: progressing(s)[0] == "False",
                         "Progressing False", timeout=300)
        c = condition(st, C.PROGRESSING)
        assert c["reason"] == Reason.PROGRESS_DEADLINE_EXCEEDED, c
        frame = "ArrayImpl.__float__, called from Trainer._finish_pending at loop.py:"
        assert c["message"].startswith("blocked ") and f" in {frame}" in c["message"], c
        assert "rule Phase: DeviceWait reported by the trainer" in c["message"], c
        activity = st["training"]["activity"]
        assert activity["phase"] == "DeviceWait" and activity["frame"].startswith(frame)
        assert st["training"]["step"] == 32  # the step before the blocked one
        wait_for(lambda: events(api, ns, Reason.PROGRESS_DEADLINE_EXCEEDED), 30,
                 "a ProgressDeadlineExceeded Event")
        st = wait_status(api, ns, lambda s: progressing(s)[0] == "True"
                         and (s.get("training") or {}).get("step", 0) >= 45,
                         "advancing again", timeout=180)
        assert _phase(st) == "TrainStep"
        assert (st.get("counters") or {}).get("trainerRestarts", 0) == 0
        assert trainer.poll() is None, f"trainer exited (log {trainer.log})"
    finally:
        if trainer.proc is not None and trainer.poll() is None:
            trainer.kill()
