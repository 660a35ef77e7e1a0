"""The operator under Kueue (v0.19.2; v0.17.0 in make test-compat) on the real local
control plane (kube-apiserver, Job, JobSet, GC, scheduler, Kueue; kwok plays 12 fake TPU
v5e hosts = one article job).

A ClusterQueue whose quota fits exactly one article-shaped ElasticTrainingJob: a second
job waits (its JobSet suspended, no pods, Admitted=False/WaitingForAdmission) and runs
once the first is deleted; a higher-priority job preempts a running one, which is
reported as a preemption (not a slice failure, no restart charged) and readmitted; the
user's spec.suspend deactivates the Workload, which frees the quota for a waiting job,
and resume queues it again. (Without Kueue, suspend and resume are
tests/integration/test_operator.py::test_suspend_and_resume.)

With the real trainer (`etj train` as the head pod's main container runs it): preempted
twice, each time its process loses the slices (a retry used) and is stopped with its pod;
the next process, on the readmitted job, gives the retry back (the eviction caused the
loss: elastic_api.queueing.caused_by_eviction), so spec.elastic.maxRetries is untouched,
and the job ends with the parameters of an undisturbed run.
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from elastic_api.conditions import ConditionType as C
from elastic_api.conditions import Phase, Reason
from elastic_api.names import (
    GROUP,
    JOBSET_GROUP,
    JOBSET_PLURAL,
    JOBSET_VERSION,
    KUEUE_PRIORITY_CLASS_LABEL,
    KUEUE_QUEUE_NAME_LABEL,
    PLURAL,
    SUSPENDED_BY_OPERATOR_ANNOTATION,
    VERSION,
    job_pods_selector,
)
from elastic_api.queueing import (
    ADMITTED,
    REASON_ADMITTED,
    REASON_PREEMPTED,
    REASON_SUSPENDED_BY_USER,
    REASON_WAITING_FOR_ADMISSION,
)
from elastic_api.validation import validate_job
from elastic_devtools.localcluster import Cluster
from elastic_devtools.localcluster import kueue_queues as kq
from elastic_devtools.localcluster.crds import install_crd
from elastic_devtools.localcluster.faults import wait_for
from elastic_devtools.localcluster.operator_process import OperatorProcess
from elastic_operator.render import render_jobset
from tests.builders import etj
from tests.support.article_job import condition
from tests.support.trainer_run import Reference, TrainerProcesses, head_command

pytestmark = pytest.mark.cluster

TIMEOUT = 120  # 13 pods scheduled, Kueue's admission and eviction, GC
MAX_RETRIES = 3
POD_COUNT = 1 + 3 * 4
JOBSETS = (JOBSET_GROUP, JOBSET_VERSION, JOBSET_PLURAL)


@pytest.fixture(scope="module")
def api(kueue: Cluster) -> Iterator[client.ApiClient]:
    api_client = kueue.api_client()
    install_crd(api_client, timeout=30)
    yield api_client
    api_client.close()


@pytest.fixture(scope="module")
def operator(kueue: Cluster, api: client.ApiClient) -> Iterator[OperatorProcess]:
    """Started after Kueue, so it finds Kueue's Workload API and watches Workloads."""
    with OperatorProcess(Path(kueue.kubeconfig),
                         Path(kueue.logs_dir) / "operator-kueue.log") as proc:
        yield proc


def manifest(name: str, queue: str, *, priority_class: str | None = None,
             suspend: bool = False) -> dict[str, Any]:
    """The article's job (v5e 4x4 x 3 slices), labelled for a Kueue LocalQueue."""
    obj = (etj(name, namespace=None).backend("pathways").max_restarts(0)
           .spec(elastic={"maxSliceRestarts": 5},
                 checkpoint={"directory": "/tmp/etj-kueue-test/no-checkpoints-here"},
                 pathways={"gcsScratch": "gs://test-bucket/scratch"})
           .trainer("trainer:test", 1000).suspend(suspend).obj())
    labels = {KUEUE_QUEUE_NAME_LABEL: queue}
    if priority_class is not None:
        labels[KUEUE_PRIORITY_CLASS_LABEL] = priority_class
    obj["metadata"]["labels"] = labels
    return obj


def one_job_of_quota() -> dict[str, str]:
    obj = manifest("x", "q")
    obj["metadata"]["namespace"] = "x"
    requests = kq.jobset_requests(render_jobset(validate_job(obj)))
    return {k: str(int(v)) for k, v in requests.items()}


def trainer_manifest(name: str, queue: str, priority_class: str, checkpoint_dir: Path,
                     steps: int) -> dict[str, Any]:
    """An article-shaped job on simulated slices (no Pathways) that the real trainer runs:
    paced steps, checkpoints every 10, a snapshot every 5, MAX_RETRIES retries."""
    obj = (etj(name, namespace=None).backend("simulated").tpu("v5e", "4x4", 3)
           .spec(elastic={"maxRetries": MAX_RETRIES},
                 checkpoint={"directory": str(checkpoint_dir), "periodSteps": 10, "keep": 3},
                 snapshot={"periodSteps": 5})
           .trainer("trainer:test", steps, model="tiny", batch=24,
                    args=["--min-step-seconds", "0.05", "--report-interval", "0.5"])
           .without("pathways").obj())
    obj["metadata"]["labels"] = {KUEUE_QUEUE_NAME_LABEL: queue,
                                 KUEUE_PRIORITY_CLASS_LABEL: priority_class}
    return obj


def quota_of(obj: dict[str, Any]) -> dict[str, str]:
    obj = {**obj, "metadata": {**obj["metadata"], "namespace": "x"}}
    requests = kq.jobset_requests(render_jobset(validate_job(obj)))
    return {k: str(int(v)) for k, v in requests.items()}


class Jobs:
    """The test's ElasticTrainingJobs in one namespace; deleted, pods gone, at the end."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.api, self.ns = api, namespace
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)

    def submit(self, name: str, queue: str, **kw: Any) -> None:
        self.create(manifest(name, queue, **kw))

    def create(self, obj: dict[str, Any]) -> None:
        self.custom.create_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, obj)

    def delete(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, name)

    def set_suspend(self, name: str, suspend: bool) -> None:
        self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, self.ns, PLURAL, name, {"spec": {"suspend": suspend}},
            _content_type="application/merge-patch+json")

    def status(self, name: str) -> dict[str, Any]:
        obj = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, name)
        status: dict[str, Any] = obj.get("status") or {}
        return status

    def wait(self, name: str, predicate: Callable[[dict[str, Any]], Any], what: str,
             timeout: float = TIMEOUT) -> dict[str, Any]:
        last: dict[str, Any] = {}

        def check() -> dict[str, Any] | None:
            nonlocal last
            last = self.status(name)
            return last if predicate(last) else None

        try:
            result: dict[str, Any] = wait_for(check, timeout, f"{name}: {what}", interval=0.25)
            return result
        except TimeoutError as err:
            conds = {c["type"]: (c["status"], c["reason"], c.get("message", ""))
                     for c in last.get("conditions", [])}
            raise TimeoutError(f"{err}; last phase {last.get('phase')}, conditions "
                               f"{conds}") from None

    def wait_running(self, name: str) -> dict[str, Any]:
        return self.wait(name, lambda s: s.get("phase") == Phase.RUNNING and
                         admission(s)[:2] == ("True", REASON_ADMITTED),
                         "admitted, Running with all 3 slices Ready")

    def wait_admission(self, name: str, reason: str, what: str) -> dict[str, Any]:
        return self.wait(name, lambda s: admission(s)[1] == reason, what)

    def jobset(self, name: str) -> dict[str, Any] | None:
        try:
            obj: dict[str, Any] = self.custom.get_namespaced_custom_object(
                *JOBSETS[:2], self.ns, JOBSETS[2], name)
            return obj
        except client.ApiException as err:
            if err.status == 404:
                return None
            raise

    def pods(self, name: str) -> list[client.V1Pod]:
        items: list[client.V1Pod] = self.core.list_namespaced_pod(
            self.ns, label_selector=job_pods_selector(name)).items
        return items

    def workload(self, name: str) -> dict[str, Any]:
        jobset = self.jobset(name)
        assert jobset is not None, f"{name} has no JobSet"
        (wl,) = kq.workloads_of(self.api, self.ns, jobset["metadata"]["uid"])
        return wl

    def events(self, name: str, reason: str) -> list[str]:
        items = self.core.list_namespaced_event(
            self.ns, field_selector=f"involvedObject.name={name},reason={reason}").items
        return [e.message for e in items]

    def clean_up(self) -> None:
        for item in self.custom.list_namespaced_custom_object(GROUP, VERSION, self.ns,
                                                              PLURAL)["items"]:
            self.delete(item["metadata"]["name"])
        wait_for(lambda: not self.core.list_namespaced_pod(self.ns).items, TIMEOUT,
                 f"pods of {self.ns} gone")


@pytest.fixture
def jobs(api: client.ApiClient, namespace: str, operator: OperatorProcess) -> Iterator[Jobs]:
    made = Jobs(api, namespace)
    yield made
    made.clean_up()


def admission(status: dict[str, Any]) -> tuple[str, str, str]:
    c = next((c for c in status.get("conditions", []) if c["type"] == ADMITTED), {})
    return c.get("status", ""), c.get("reason", ""), c.get("message", "")


def short(namespace: str) -> str:
    """A name unique to this test, short enough for a queue label."""
    return "k" + namespace.rsplit("-", 1)[-1]


def test_a_second_job_waits_for_quota_and_runs_when_the_first_is_deleted(
        jobs: Jobs, api: client.ApiClient) -> None:
    with kq.queues(api, jobs.ns, one_job_of_quota(), prefix=short(jobs.ns)) as queues:
        jobs.submit("first", queues.local_queue)
        st = jobs.wait_running("first")
        assert st["admission"]["clusterQueue"] == queues.cluster_queue
        assert st["admission"]["admittedAt"] == condition(st, ADMITTED)["lastTransitionTime"]
        wait_for(lambda: jobs.events("first", REASON_ADMITTED), 30, "an Admitted event")

        jobs.submit("second", queues.local_queue)
        st = jobs.wait("second", lambda s: "insufficient" in admission(s)[2],
                       "waiting, with Kueue's reason")
        assert admission(st)[:2] == ("False", REASON_WAITING_FOR_ADMISSION)
        assert f"queue {queues.local_queue}" in admission(st)[2]
        assert st["phase"] == Phase.QUEUED
        assert condition(st, C.READY)["reason"] == REASON_WAITING_FOR_ADMISSION
        assert {s["state"] for s in st["slices"]} == {"Pending"}
        held = jobs.jobset("second")
        assert held is not None and held["spec"]["suspend"] is True
        assert jobs.pods("second") == []
        assert jobs.status("first")["phase"] == Phase.RUNNING

        jobs.delete("first")
        st = jobs.wait_running("second")
        assert st["counters"]["sliceFailures"] == 0 and st["counters"]["preemptions"] == 0


def test_a_preempted_job_is_reported_charged_nothing_and_readmitted(
        jobs: Jobs, api: client.ApiClient, operator: OperatorProcess) -> None:
    low, high = f"{short(jobs.ns)}-low", f"{short(jobs.ns)}-high"
    with kq.priority_classes(api, {low: 100, high: 1000}), \
            kq.queues(api, jobs.ns, one_job_of_quota(), prefix=short(jobs.ns)) as queues:
        jobs.submit("low", queues.local_queue, priority_class=low)
        jobs.wait_running("low")
        jobs.submit("high", queues.local_queue, priority_class=high)

        st = jobs.wait_admission("low", REASON_PREEMPTED, "preempted")
        assert admission(st)[0] == "False" and "requeued in queue" in admission(st)[2]
        assert st["counters"]["preemptions"] == 1
        wait_for(lambda: not jobs.pods("low"), TIMEOUT, "low's pods gone")
        st = jobs.wait("low", lambda s: s["phase"] == Phase.QUEUED, "Queued")
        assert {(s["state"], s["reason"]) for s in st["slices"]} == {("Pending",
                                                                      REASON_PREEMPTED)}
        assert (st["counters"]["sliceFailures"], st["counters"]["jobSetRestarts"],
                st["counters"]["elasticEvents"]) == (0, 0, 0)
        assert [s["restarts"] for s in st["slices"]] == [0, 0, 0]
        assert condition(st, C.SLICE_DOWN)["status"] == "False"
        assert condition(st, C.RECOVERING)["status"] == "False"
        wait_for(lambda: jobs.events("low", REASON_PREEMPTED), 30, "a Preempted event")
        jobs.wait_running("high")

        jobs.delete("high")
        st = jobs.wait_running("low")  # the same JobSet, readmitted
        assert (st["counters"]["preemptions"], st["counters"]["sliceFailures"],
                st["counters"]["jobSetRestarts"]) == (1, 0, 0)
        assert jobs.events("low", Reason.SLICE_DOWN) == []
        jobset = jobs.jobset("low")
        assert jobset is not None and jobset.get("status", {}).get("restarts", 0) == 0
        metrics = operator.metrics()
        assert metrics[f'etj_preemptions_total{{job="low",namespace="{jobs.ns}"}}'] == 1
        # Exported at 0 from the job's first status write: never counted up.
        assert metrics.get(f'etj_slice_failures_total{{job="low",namespace="{jobs.ns}"}}', 0) == 0


def test_the_users_suspend_and_resume_under_kueue(jobs: Jobs, api: client.ApiClient) -> None:
    with kq.queues(api, jobs.ns, one_job_of_quota(), prefix=short(jobs.ns)) as queues:
        # Created suspended: no JobSet (so Kueue cannot start it), no quota asked.
        jobs.submit("mine", queues.local_queue, suspend=True)
        st = jobs.wait_admission("mine", REASON_SUSPENDED_BY_USER, "suspended")
        assert st["phase"] == Phase.SUSPENDED and jobs.jobset("mine") is None
        jobs.set_suspend("mine", False)
        jobs.wait_running("mine")
        jobs.submit("other", queues.local_queue)
        jobs.wait_admission("other", REASON_WAITING_FOR_ADMISSION, "waiting")

        # Suspended while running: its Workload is deactivated (the operator's mark), Kueue
        # suspends the JobSet and frees the quota, which admits the waiting job.
        jobs.set_suspend("mine", True)
        st = jobs.wait("mine", lambda s: s.get("phase") == Phase.SUSPENDED and
                       admission(s)[1] == REASON_SUSPENDED_BY_USER and
                       condition(s, C.SUSPENDED).get("reason") == Reason.SUSPENDED,
                       "suspended through its Workload")
        wl = jobs.workload("mine")
        assert wl["spec"]["active"] is False
        assert wl["metadata"]["annotations"][SUSPENDED_BY_OPERATOR_ANNOTATION] == "true"
        wait_for(lambda: not jobs.pods("mine"), TIMEOUT, "mine's pods gone")
        jobs.wait_running("other")
        st = jobs.status("mine")
        assert st["counters"]["sliceFailures"] == 0 and st["counters"]["preemptions"] == 0

        # Resumed: reactivated, it queues behind the job now holding the quota.
        jobs.set_suspend("mine", False)
        st = jobs.wait("mine", lambda s: s.get("phase") == Phase.QUEUED and
                       admission(s)[1] == REASON_WAITING_FOR_ADMISSION, "queued again")
        wl = jobs.workload("mine")
        assert wl["spec"]["active"] is True
        assert SUSPENDED_BY_OPERATOR_ANNOTATION not in (wl["metadata"].get("annotations")
                                                        or {})
        jobs.delete("other")
        st = jobs.wait_running("mine")
        assert st["counters"]["sliceFailures"] == 0


def test_a_preempted_trainer_gives_its_retry_back_and_ends_as_if_undisturbed(
        jobs: Jobs, api: client.ApiClient, kueue: Cluster, tmp_path: Path) -> None:
    steps, preemptions = 200, 2
    low, high = f"{short(jobs.ns)}-low", f"{short(jobs.ns)}-high"
    obj = trainer_manifest("low", "lq", low, tmp_path / "checkpoints", steps)
    command = head_command(obj)
    reference = Reference(command, tmp_path)
    env = {**os.environ, "KUBECONFIG": str(kueue.kubeconfig), "PYTHONUNBUFFERED": "1",
           "ETJ_JOB_NAME": "low", "ETJ_JOB_NAMESPACE": jobs.ns}
    trainer = TrainerProcesses(command, env, tmp_path)

    def training(s: dict[str, Any]) -> dict[str, Any]:
        return s.get("training") or {}

    def alive(s: dict[str, Any]) -> dict[str, Any]:
        assert trainer.poll() is None, f"trainer exited {trainer.poll()} (log {trainer.log})"
        return s

    with kq.priority_classes(api, {low: 100, high: 1000}), \
            kq.queues(api, jobs.ns, quota_of(obj), prefix=short(jobs.ns)) as queues:
        obj["metadata"]["labels"][KUEUE_QUEUE_NAME_LABEL] = queues.local_queue
        jobs.create(obj)
        try:
            jobs.wait_running("low")
            trainer.start()
            floor = 0
            for n in range(1, preemptions + 1):
                # Each process trains past where the last one was preempted.
                st = jobs.wait("low", lambda s, f=floor: training(alive(s)).get("step", 0)
                               >= f + 30, f"trained 30 steps past {floor}")
                started = training(st).get("processStartedAt")
                preemptor = trainer_manifest(f"high-{n}", queues.local_queue, high,
                                             tmp_path / "unused", steps)
                # Held until the preemption has taken its pods: on a quiet machine the
                # second process trained its last 58 steps (3 s) before the preemption
                # landed, and finished instead of losing its slices.
                trainer.pause()
                floor = _preempt_and_readmit(jobs, trainer, preemptor, n)
                # A new process reports, with the retry the preemption cost given back.
                jobs.wait("low", lambda s, t=started: training(alive(s)).get(
                    "processStartedAt") not in (None, t)
                    and training(s).get("retriesRemaining") == MAX_RETRIES,
                    f"a new trainer process after preemption {n}, its retries full")
            final = jobs.wait("low", lambda s: training(s).get("state") == "Succeeded",
                              "the trainer's last report", timeout=TIMEOUT + steps * 0.2)
            assert trainer.proc is not None and trainer.proc.wait(timeout=60) == 0, trainer.log
            reference.wait(timeout=300)
        finally:
            trainer.stop()
            reference.stop()

    summary = json.loads(trainer.summary.read_text())
    expected = reference.summary()
    assert summary["final_step"] == expected["final_step"] == steps
    assert summary["params_digest"] == expected["params_digest"], \
        f"parameters differ from the undisturbed run (logs {tmp_path}/trainer-*.log)"
    assert final["training"]["retriesRemaining"] == MAX_RETRIES, final["training"]
    spec = jobs.custom.get_namespaced_custom_object(GROUP, VERSION, jobs.ns, PLURAL, "low")
    assert spec["spec"]["elastic"]["maxRetries"] == MAX_RETRIES
    counters = final["counters"]
    assert counters["preemptions"] == preemptions, counters
    # Kueue stopped each process: no slice failure, no trainer restart to warn of.
    assert (counters["sliceFailures"], counters["trainerRestarts"],
            counters["jobSetRestarts"]) == (0, 0, 0), counters
    assert jobs.events("low", Reason.TRAINER_RESTARTED) == []
    assert trainer.started == preemptions + 1


def _preempt_and_readmit(jobs: Jobs, trainer: TrainerProcesses, obj: dict[str, Any],
                         n: int) -> int:
    """A higher-priority job of the same shape (`obj`, no trainer) takes the quota while
    the trainer is paused; resumed once the pods are gone, it finds its slices lost and
    reports the retry it used; its pod goes, and so does it
    (SIGTERM, as the kubelet stops the head's main container). The other job deleted, the
    readmitted job's new head pod runs a new trainer process. The step it was lost at."""
    def training(s: dict[str, Any]) -> dict[str, Any]:
        return s.get("training") or {}

    preemptor = obj["metadata"]["name"]
    jobs.create(obj)
    st = jobs.wait_admission("low", REASON_PREEMPTED, f"preempted by {preemptor}")
    assert st["counters"]["preemptions"] == n
    wait_for(lambda: not jobs.pods("low"), TIMEOUT, "low's pods gone")
    trainer.resume()  # paused by the caller: it finds its slices gone
    st = jobs.wait("low", lambda s: training(s).get("retriesRemaining") == MAX_RETRIES - 1
                   and (training(s).get("elasticEvent") or {}).get("slicesDown"),
                   "the trainer to report the slice loss (a retry used)")
    # Taken in by the operator: the job is Queued; the loss is no failure to recover from.
    st = jobs.wait("low", lambda s: s["counters"]["elasticEvents"] >= n,
                   "the operator to count the trainer's elastic event")
    assert st["phase"] == Phase.QUEUED and condition(st, C.RECOVERING)["status"] == "False", \
        (st["phase"], condition(st, C.RECOVERING))
    assert st["counters"]["sliceFailures"] == 0
    trainer.stop()
    jobs.wait_running(preemptor)
    jobs.delete(preemptor)
    # Readmitted, its slices back: the new head pod's trainer starts.
    jobs.wait("low", lambda s: admission(s)[:2] == ("True", REASON_ADMITTED)
              and s.get("slicesReady") == 3, "readmitted, all 3 slices Ready")
    trainer.start()
    lost_at: int = training(st)["step"]
    return lost_at
