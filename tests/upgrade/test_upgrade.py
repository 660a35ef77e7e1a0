"""`make test-upgrade` (issues 61, 68): the operator upgraded, restarted and downgraded
under a running job, on the local control plane, this test playing the kubelet of the
operator's pods (tests/support/operator_kubelet.py: each pod is Ready as its
readinessProbe says). Needs the git history: the previous release is a commit
(hack/upgrade/previous-release), archived from it.

1. The previous release is installed with its own chart (`helm install`; the CRD from its
   crds/), two replicas electing a leader, each pod run as a local process of that
   release's code (tests/support/upgrade.py) with the pod's arguments and a token of the
   chart's ServiceAccount.
2. A job of the bundled trainer starts (3 simulated slices of v5e 4x4). Its trainer runs as
   the head pod's `main` container would: the command the previous release rendered into
   the pod, that release's trainer code, the pod's environment and ServiceAccount; an
   undisturbed reference run of the same command beside it.
3. A worker slice fails before the upgrade. `helm upgrade` to this checkout's chart stops
   before applying anything, with the one command that makes the CRD the release's (the
   old chart left it unowned); that command, run as printed, then the same upgrade: the
   new CRD, and the Deployment rolled (each new pod Ready, its caches synced, before an
   old one stops; the leader hands the Lease over on SIGTERM). A slice fails as the
   leading pod is deleted, before its SIGTERM; another after.
4. Two rolling restarts of this checkout's operator (`helm upgrade`, a new pod
   annotation), a slice failing at another point of a handover in each: between the old
   leader's release and the new one's acquisition (the other replicas frozen, SIGSTOP,
   from the leader's deletion until the failed pod is Failed: the window held open on
   purpose), and the moment a new leader is seen holding the Lease.
5. `helm rollback` to the previous release (the CRD stays: kept), a slice failing as its
   leader's pod is deleted, another after.

Checked: the JobSet's uid never changed and it never restarted; the trainer ran in one
process (counters.trainerRestarts 0, the same head pod); every failure was counted exactly
once (counters.sliceFailures and each slice's restarts equal the failures injected, and
each slice's exactly-once evidence, slices[].counted, matches its worker Job's own count of
failed pods); each failure disrupted the slice once (no pod of the failed worker Job
turned Ready after the failure: a leader recreated the Job before the Job controller
brought the slice back on it; not asked of the downgrade's, whose new pods have no
readiness probe); each handover into this checkout's pods (but the one held open) had its
new leader within 2 s of the old leader's exit; no counter ever went backwards (sampled
all through); each elastic event of the trainer counted; the status fields the current
CRD adds filled in on the old job after the upgrade (those under status.training are the
trainer's: this job's trainer is the previous release's, which an operator upgrade does
not replace); the current CRD served after the upgrade and kept by the downgrade; no
operator process crashed; no false stall (the namespace fixture's check); and the
trainer's final parameters equal the undisturbed run's, bit for bit. A timeline, every
handover's leaderless time and the total time are printed.
"""
from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from elastic_api.names import GROUP, PLURAL, VERSION, job_pods_selector, worker_job_name
from elastic_devtools.localcluster import Cluster, faults
from elastic_devtools.localcluster.crds import install_crd
from elastic_devtools.localcluster.faults import wait_for
from tests.builders import etj
from tests.service_accounts import token_kubeconfig
from tests.support import upgrade as releases
from tests.support.chaos_faults import healthy, slice_restarts, step_of, worker_pods
from tests.support.chaos_watch import Sampler
from tests.support.chart import unique_release
from tests.support.handover import ReadyPods, came_back_once
from tests.support.leases import RELEASED, Holding, LeaseWatch
from tests.support.operator_kubelet import OperatorKubelet, downward_env
from tests.support.trainer_run import Reference, TrainerProcesses
from tests.support.upgrade import Helm, Revision, Timeline

pytestmark = pytest.mark.cluster

JOB = "upgrade"
SLICES = 3
REPLICAS = 2  # the chart's default: a rolling update hands the Lease over
# Paced steps: seven faults, each 25 steps of training after the last recovery, and four
# rollouts (the upgrade, two restarts, the downgrade: the trainer trains on through them,
# about a minute each at load 20-40, each new replica syncing before an old one stops);
# the rest is the tail after the last fault (at least 350 s of training in all; at load
# 30-40 the trainer made 4.7 steps a second and the faults took 2,500 steps).
STEPS, STEP_SECONDS, STEPS_BETWEEN_FAULTS = 3500, 0.1, 25
RECOVERY_TIMEOUT = ROLLOUT_TIMEOUT = 180
CRD_NAME = f"{PLURAL}.{GROUP}"
# Where in a handover a slice fails (roll_over).
BEFORE_THE_STOP, RELEASED_NOT_ACQUIRED, ACQUIRED = "before-the-stop", "released", "acquired"
# The new leader takes the Lease this soon after the old one's exit (issue 68).
HANDOVER_S = 2.0


@dataclass(frozen=True)
class Failure:
    """One injected failure: its slice, the worker Job it failed, when (time.monotonic),
    and whether the slice must have come back once (a leader able to act at once)."""

    index: int
    job_uid: str
    at: float
    when: str
    once: bool


def job_manifest(namespace: str, checkpoints: Path) -> dict[str, Any]:
    """The bundled trainer on simulated slices, paced, a checkpoint every 10 steps; every
    budget out of reach."""
    return (etj(JOB, namespace).backend("simulated").tpu("v5e", "4x4", SLICES)
            .spec(elastic={"timeoutSeconds": RECOVERY_TIMEOUT, "maxRetries": 100,
                           "maxSliceRestarts": 100},
                  checkpoint={"directory": str(checkpoints), "periodSteps": 10, "keep": 3},
                  snapshot={"periodSteps": 5})
            .trainer("trainer:test", STEPS, model="tiny", batch=24,
                     args=["--min-step-seconds", str(STEP_SECONDS), "--report-interval", "0.5"])
            .without("pathways").obj())


@dataclass
class Run:
    """One run: the cluster, the two releases, the kubelet, the job's processes, and the
    failures injected by slice."""

    cluster: Cluster
    api: client.ApiClient
    ns: str
    work: Path
    timeline: Timeline
    previous: Revision
    current: Revision
    helm: Helm
    kubelet: OperatorKubelet
    leases: LeaseWatch
    pods: ReadyPods
    injected: dict[int, int] = field(default_factory=lambda: dict.fromkeys(range(SLICES), 0))
    failures_seen: list[Failure] = field(default_factory=list)
    held_open: set[str] = field(default_factory=set)  # leaders whose handover was held
    twice: int = 0  # failures the previous release let come back twice (came_back)
    restarts: int = 0  # rolling restarts of the operator so far
    trainer: TrainerProcesses | None = None
    reference: Reference | None = None
    sampler: Sampler | None = None
    jobset_uid: str = ""
    head_uid: str = ""

    def job(self) -> dict[str, Any]:
        obj: dict[str, Any] = client.CustomObjectsApi(self.api).get_namespaced_custom_object(
            GROUP, VERSION, self.ns, PLURAL, JOB)
        return obj

    def status(self) -> dict[str, Any]:
        return dict(self.job().get("status") or {})

    def jobset(self) -> dict[str, Any]:
        obj: dict[str, Any] = client.CustomObjectsApi(self.api).get_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", self.ns, "jobsets", JOB)
        return obj

    @property
    def failures(self) -> int:
        return sum(self.injected.values())


@pytest.mark.timeout(2400)
def test_upgrade_and_downgrade_under_a_running_job(cluster: Cluster, namespace: str,
                                                   tmp_path: Path) -> None:
    timeline = Timeline()
    try:
        previous = releases.previous(tmp_path / "previous")
    except releases.MissingHistory as err:
        pytest.fail(str(err), pytrace=False)
    current = releases.current()
    timeline.note(f"the {previous.label} release archived from git into {previous.tree}")
    release = unique_release()
    kubelet = OperatorKubelet(cluster, namespace, release,
                              {r.tag: r for r in (previous, current)}, tmp_path, timeline)
    api = cluster.api_client()
    run = Run(cluster, api, namespace, tmp_path, timeline, previous, current,
              Helm(cluster, release, namespace, tmp_path), kubelet,
              LeaseWatch(api, release, namespace), ReadyPods(api, namespace,
                                                             job_pods_selector(JOB)))
    for loop in (kubelet, run.leases, run.pods):
        loop.start()
    try:
        install_the_previous_release(run)
        start_the_job(run)
        fail_and_count(run, 0, "before the upgrade")
        roll_over(run, current, 1, "upgrade", BEFORE_THE_STOP)
        fail_and_count(run, 2, "after the upgrade")
        new_status_fields_filled_in(run)
        roll_over(run, current, 0, "restart", RELEASED_NOT_ACQUIRED)
        roll_over(run, current, 1, "restart", ACQUIRED)
        roll_over(run, previous, 2, "downgrade", BEFORE_THE_STOP)
        fail_and_count(run, 0, "after the downgrade")
        problems = finish(run)
    finally:
        tear_down(run)
    timeline.note(f"total {timeline.elapsed():.0f} s")
    assert not problems, "\n".join(problems)


# --- the steps ----------------------------------------------------------------------------


def served_crd(run: Run) -> dict[str, Any]:
    crd: dict[str, Any] = client.CustomObjectsApi(run.api).get_cluster_custom_object(
        "apiextensions.k8s.io", "v1", "customresourcedefinitions", CRD_NAME)
    return crd


def crd_exists(run: Run) -> bool:
    try:
        client.ApiextensionsV1Api(run.api).read_custom_resource_definition(CRD_NAME)
    except client.ApiException as err:
        if err.status == 404:
            return False
        raise
    return True


def install_the_previous_release(run: Run) -> None:
    """`helm install` of the previous release's chart (its crds/ gives the CRD), its two
    replicas running and one leading."""
    if crd_exists(run):  # a reused cluster: what the previous chart would have installed
        install_crd(run.api, run.previous.crd())
        run.timeline.note("the CRD existed (a reused cluster): replaced with the previous "
                          "release's, as its chart installs it")
    run.helm.install(run.previous, REPLICAS)
    run.timeline.note(f"helm install {run.helm.release}: the {run.previous.label} chart, "
                      f"{REPLICAS} replicas, its CRD from crds/")
    wait_for(lambda: run.kubelet.serving(run.previous, REPLICAS), ROLLOUT_TIMEOUT,
             f"{REPLICAS} replicas of the previous release running, one leading")
    served = releases.schema_fields(served_crd(run))
    assert served == releases.schema_fields(run.previous.crd()), \
        "the served CRD is not the previous release's"


def head_pod(run: Run) -> Any:
    pods = client.CoreV1Api(run.api).list_namespaced_pod(
        run.ns, label_selector=job_pods_selector(JOB)).items
    heads = [p for p in pods if p.status.phase == "Running" and p.metadata.deletion_timestamp
             is None and any(c.name == "main" for c in p.spec.containers)]
    return heads[0] if heads else None


def start_the_job(run: Run) -> None:
    """The job created under the previous release; once its slices are Ready, its
    trainer as the head pod's `main` would run it, and the undisturbed reference."""
    client.CustomObjectsApi(run.api).create_namespaced_custom_object(
        GROUP, VERSION, run.ns, PLURAL, job_manifest(run.ns, run.work / "checkpoints"))
    run.timeline.note(f"job {JOB} created ({SLICES} slices of v5e 4x4, {STEPS} steps)")
    wait_for(lambda: run.status().get("slicesReady") == SLICES, RECOVERY_TIMEOUT,
             f"{SLICES} slices Ready", interval=0.5)
    run.jobset_uid = run.jobset()["metadata"]["uid"]
    pod = wait_for(lambda: head_pod(run), RECOVERY_TIMEOUT, "the head pod Running")
    run.head_uid = pod.metadata.uid
    (main,) = [c for c in pod.spec.containers if c.name == "main"]
    command = [*(main.command or []), *(main.args or [])]
    assert command[0] == "etj", f"the head's main runs {command}"
    argv = [*run.previous.etj(), *command[1:]]
    kubeconfig = token_kubeconfig(run.cluster, run.ns, pod.spec.service_account_name,
                                  run.work / "trainer.kubeconfig")
    pod_env = downward_env(pod, main)
    env = {**os.environ, **pod_env, **run.previous.env(), "KUBECONFIG": str(kubeconfig),
           "PYTHONUNBUFFERED": "1"}
    run.reference = Reference(argv, run.work, env={
        **{k: v for k, v in pod_env.items() if not k.startswith("ETJ_JOB")},
        **run.previous.env()})
    run.trainer = TrainerProcesses(argv, env, run.work)
    run.trainer.start()
    run.sampler = Sampler(run.api, run.ns, JOB)
    run.sampler.start()
    run.timeline.note(f"slices Ready (JobSet uid {run.jobset_uid}); the {run.previous.label} "
                      f"trainer started as head pod {pod.metadata.name}'s main, the "
                      "reference beside it")


def trainer(run: Run) -> TrainerProcesses:
    assert run.trainer is not None
    return run.trainer


def ready(run: Run, what: str) -> None:
    """Healthy and STEPS_BETWEEN_FAULTS steps on from now, the trainer still short of
    its last steps (else STEPS is too few for this machine's pace)."""
    floor = step_of(run.status()) + STEPS_BETWEEN_FAULTS

    def healthy_at_floor() -> bool:
        if trainer(run).poll() is not None:
            raise AssertionError(f"the trainer exited {trainer(run).poll()} before {what} "
                                 f"(log {trainer(run).log})")
        st = run.status()
        return healthy(st, SLICES) and step_of(st) >= floor

    wait_for(healthy_at_floor, RECOVERY_TIMEOUT, f"the job healthy at step {floor}, before "
             f"{what}", interval=0.25)
    assert step_of(run.status()) < STEPS - 4 * STEPS_BETWEEN_FAULTS, \
        f"the trainer is about to finish before {what}: raise STEPS"


def fail_slice(run: Run, index: int, when: str, *, once: bool = True,
               landed: bool = False) -> None:
    """A worker pod of slice `index` fails; `landed`: until the pod is Failed."""
    pods = worker_pods(run.api, run.ns, JOB, index)
    assert pods, f"no running worker pod of slice {index} {when}"
    job = client.BatchV1Api(run.api).read_namespaced_job(worker_job_name(JOB, index), run.ns)
    at = time.monotonic()
    faults.fail_pod(run.api, run.ns, pods[0].metadata.name)
    run.injected[index] += 1
    run.failures_seen.append(Failure(index, job.metadata.uid, at, when, once))
    run.timeline.note(f"failure {run.failures} ({when}): worker pod {pods[0].metadata.name} "
                      f"of slice {index} fails (exit 1)")
    if landed:
        faults.wait_for_pod_phase(run.api, run.ns, pods[0].metadata.name, "Failed")


def counted(run: Run, when: str) -> None:
    """Until every failure so far is counted once, in sliceFailures and by slice, and
    the job healthy again; a count above the failures fails at once."""
    want = run.failures

    def done() -> bool:
        st = run.status()
        got = (st.get("counters") or {}).get("sliceFailures", 0)
        assert got <= want, f"sliceFailures {got} for {want} failures ({when})"
        assert all(n <= run.injected[i] for i, n in slice_restarts(st).items()), \
            f"slice restarts {slice_restarts(st)} for failures {run.injected} ({when})"
        return got == want and slice_restarts(st) == run.injected and healthy(st, SLICES)

    wait_for(done, RECOVERY_TIMEOUT, f"failure {want} ({when}) counted once, slices Ready",
             interval=0.25)
    run.timeline.note(f"counted once: sliceFailures {want}, restarts by slice "
                      f"{run.injected}; every slice Ready; {run.kubelet.holder} leads")


def fail_and_count(run: Run, index: int, when: str) -> None:
    ready(run, f"the failure {when}")
    fail_slice(run, index, when)
    counted(run, when)


def roll_over(run: Run, to: Revision, index: int, how: str, point: str) -> None:
    """`helm upgrade` to `to` (how="upgrade": first the one command its check stops with;
    "restart": the same chart, a new pod annotation) or `helm rollback` to the first
    revision (how="downgrade"): slice `index` fails at `point` of the first handover of
    the leading pod; until the rollout is done and that failure counted."""
    ready(run, f"the {how}")
    fired = threading.Event()
    once = how != "downgrade"  # the previous release's pods are Ready before they sync

    def at_the_point(pod: str, leading: bool) -> None:
        if not leading or fired.is_set():
            return
        fired.set()
        when = f"during the {how}, {point}: leading pod {pod}"
        if point == BEFORE_THE_STOP:
            fail_slice(run, index, f"{when} deleted", once=once)
        elif point == RELEASED_NOT_ACQUIRED:
            hold_the_window_open(run, pod, index, when)
        else:
            fail_when_acquired(run, pod, index, when)

    run.kubelet.on_terminating = at_the_point
    replaced = frozenset(run.kubelet.pods)  # every pod so far: the rollout replaces them
    try:
        helm_roll(run, to, how)
        wait_for(lambda: run.kubelet.serving(to, REPLICAS, replaced), ROLLOUT_TIMEOUT,
                 f"the {how} rolled out ({REPLICAS} new replicas of {to.label}, one leading)")
    finally:
        run.kubelet.on_terminating = None
        run.leases.on_change = None
        resume_all(run)
    run.timeline.note(f"the {how} rolled out: {run.kubelet.holder} leads")
    assert fired.is_set(), f"no leading pod was deleted during the {how}"
    counted(run, f"during the {how}")
    crd = served_crd(run)
    assert releases.schema_fields(crd) == releases.schema_fields(run.current.crd()), \
        f"after the {how}, the served CRD is not the current one"
    revision = {k: v for k, v in (crd["metadata"].get("annotations") or {}).items()
                if "schema" in k}
    run.timeline.note(f"the CRD served is the current release's {revision or ''}".rstrip())


def helm_roll(run: Run, to: Revision, how: str) -> None:
    if how == "downgrade":
        run.timeline.note(f"helm rollback to revision 1 (the {to.label} chart)")
        run.helm("rollback", run.helm.release, "1")
    elif how == "restart":
        run.restarts += 1
        run.timeline.note(f"helm upgrade: a rolling restart of the {to.label} operator")
        run.helm.upgrade(to, REPLICAS, podAnnotations={"restart": str(run.restarts)})
    else:
        run.timeline.note(f"helm upgrade to the {to.label} chart")
        try:
            run.helm.upgrade(to, REPLICAS)
            raise AssertionError("helm upgrade from a chart that left the CRD unowned went "
                                 "through without the chart's check")
        except AssertionError as err:
            (line,) = [t.strip() for t in str(err).splitlines()
                       if t.strip().startswith("kubectl patch crd")]
        run.timeline.note(f"the chart's check stopped it, naming: {line}")
        ran = subprocess.run(shlex.split(line), capture_output=True, text=True, timeout=60,
                             env={**os.environ, "KUBECONFIG": str(run.cluster.kubeconfig)})
        assert ran.returncode == 0, ran.stderr
        run.timeline.note(f"ran it ({ran.stdout.strip()}); helm upgrade again")
        run.helm.upgrade(to, REPLICAS)
    run.timeline.note(f"helm {'rollback' if how == 'downgrade' else 'upgrade'} returned")


def paused(run: Run) -> list[str]:
    return [p.name for p in run.kubelet.pods.values() if p.paused]


def resume_all(run: Run) -> None:
    for known in run.kubelet.pods.values():
        if known.paused:
            known.proc.resume()
            known.paused = False


def hold_the_window_open(run: Run, leader: str, index: int, when: str) -> None:
    """Every other replica frozen (SIGSTOP) before the leader's SIGTERM: nobody can take
    the Lease it releases until the failure has landed; then they go on."""
    for known in run.kubelet.pods.values():
        if known.name != leader and known.stopping is None and known.proc.running:
            known.proc.pause()
            known.paused = True
    run.held_open.add(leader)
    run.timeline.note(f"replicas {paused(run)} frozen: the Lease {leader} releases stays free")

    def released(holding: Holding) -> None:
        if holding.holder != RELEASED or run.leases.on_change is None:
            return
        run.leases.on_change = None
        try:
            fail_slice(run, index, f"{when} released the Lease, nobody acquired it",
                       landed=True)
        finally:
            resume_all(run)
            run.timeline.note("the frozen replicas go on")

    run.leases.on_change = released


def fail_when_acquired(run: Run, leader: str, index: int, when: str) -> None:
    """The failure the moment the Lease is seen held by another replica than `leader`."""
    def acquired(holding: Holding) -> None:
        if holding.holder in (RELEASED, leader) or run.leases.on_change is None:
            return
        run.leases.on_change = None
        fail_slice(run, index, f"{when} stopped, {holding.holder} just acquired the Lease")

    run.leases.on_change = acquired


def counted_evidence(run: Run) -> list[str]:
    """Each failed slice's exactly-once evidence (slices[].counted) names its worker Job,
    that Job's own count of failed pods and its pods' container restarts (issue 66: a
    restart in place no look saw)."""
    problems = []
    batch, core = client.BatchV1Api(run.api), client.CoreV1Api(run.api)
    for one in run.status().get("slices") or []:
        if not one.get("restarts"):
            continue
        job = batch.read_namespaced_job(worker_job_name(JOB, one["index"]), run.ns)
        uncounted = job.status.uncounted_terminated_pods
        failed = (job.status.failed or 0) + len((uncounted.failed if uncounted else None) or [])
        pods = core.list_namespaced_pod(
            run.ns, label_selector=f"batch.kubernetes.io/controller-uid={job.metadata.uid}")
        restarts = sum(c.restart_count for p in pods.items
                       for c in (p.status.container_statuses or []))
        want = {"jobUid": job.metadata.uid, "failedPods": failed}
        # Counted by this release's operator; one before issue 66 (the downgrade's) does
        # not count container restarts, and the field says so by its absence.
        if "containerRestarts" in (one.get("counted") or {}):
            want["containerRestarts"] = restarts
        if one.get("counted") != want:
            problems.append(f"slice {one['index']}: counted {one.get('counted')}, its "
                            f"worker Job's {want}")
    return problems


FROM_THE_TRAINERS_PHASE = {".status.progress.phase", ".status.progress.phaseSince"}


def new_status_fields_filled_in(run: Run) -> None:
    """The status fields the current CRD adds, on the old job now that the current
    operator writes its status; and every slice's exactly-once evidence."""
    added = releases.added_status_fields(run.previous.crd(), run.current.crd())
    trainers = [p for p in added if p.startswith(".status.training.")]
    operators = [p for p in added if p not in trainers]
    job = run.job()
    # The operator writes the phase under judgement only from the trainer's phase report
    # (status.training.activity), which the previous release's trainer does not send.
    if not releases.has_field(job, ".status.training.activity"):
        operators = [p for p in operators if p not in FROM_THE_TRAINERS_PHASE]
    # A field added inside an object the operator writes only on an event, absent here
    # (status.progress.restart: a stall restart asked), has nothing to be filled into;
    # the object itself, if new, is judged as any field.
    absent = [p for p in operators if not releases.has_field(job, p.rsplit(".", 1)[0])]
    missing = [p for p in operators if p not in absent and not releases.has_field(job, p)]
    run.timeline.note(f"status fields the current CRD adds: {added or 'none'}; the "
                      f"operator's {operators or 'none'}, missing {missing or 'none'}, "
                      f"inside an object absent here {absent or 'none'}; "
                      f"the trainer's (not expected of the previous trainer) "
                      f"{trainers or 'none'}")
    assert not missing, f"not filled in after the upgrade: {missing}"
    problems = counted_evidence(run)
    assert not problems, problems
    run.timeline.note("slices[].counted on every failed slice matches its worker Job")


def finish(run: Run) -> list[str]:
    """Until the trainer ends; what went wrong, in words."""
    rc = wait_for(lambda: trainer(run).poll() is not None and [trainer(run).poll()],
                  RECOVERY_TIMEOUT + STEPS * STEP_SECONDS * 4, "the trainer to finish",
                  interval=0.5)[0]
    assert run.reference is not None and run.sampler is not None
    run.reference.wait(timeout=RECOVERY_TIMEOUT)
    run.sampler.stop()
    run.timeline.note(f"the trainer finished (exit {rc}); the reference too")
    if rc != 0:
        return [f"the trainer exited {rc} (log {trainer(run).log})"]
    got, want = json.loads(trainer(run).summary.read_text()), run.reference.summary()
    problems = the_job_kept(run) + operator_logs(run) + came_back(run) + handovers(run)
    if (got["final_step"], got["params_digest"]) != (want["final_step"], want["params_digest"]):
        problems.append(f"parameters differ from the undisturbed run's: step "
                        f"{got['final_step']} digest {got['params_digest']}, the "
                        f"reference's {want['final_step']} {want['params_digest']}")
    counters = run.status().get("counters") or {}
    # Each failure disrupted the trainer once: one elastic event (two for one that came
    # back twice, which only the previous release's replicas allow).
    if got["elastic_events_total"] != run.failures + run.twice:
        problems.append(f"the trainer had {got['elastic_events_total']} elastic events for "
                        f"{run.failures} failures ({run.twice} came back twice)")
    if counters.get("elasticEvents") != got["elastic_events_total"]:
        problems.append(f"elastic events: the trainer had {got['elastic_events_total']}, "
                        f"the operator counted {counters}")
    run.timeline.note(
        f"checked: JobSet uid {run.jobset_uid} throughout, jobSetRestarts "
        f"{counters.get('jobSetRestarts', 0)}; one trainer process, trainerRestarts "
        f"{counters.get('trainerRestarts', 0)}, the same head pod; sliceFailures "
        f"{counters.get('sliceFailures')} for {run.failures} failures, restarts by slice "
        f"{slice_restarts(run.status())}, slices[].counted = the worker Jobs' counts; "
        f"elasticEvents {counters.get('elasticEvents')} = the trainer's "
        f"{got['elastic_events_total']} (one a failure, {run.twice} came back twice); "
        f"{len(run.sampler.samples)} samples, none went backwards; "
        f"{len(run.kubelet.pods)} operator processes, none crashed; parameters "
        f"{got['params_digest'][:16]} at step {got['final_step']}, the undisturbed run's "
        f"{want['params_digest'][:16]} ({len(problems)} problems)")
    return problems


def came_back(run: Run) -> list[str]:
    """Each failure (but the downgrade's) disrupted its slice once."""
    problems = []
    for failure in run.failures_seen:
        found = came_back_once(run.pods, failure.job_uid, failure.at)
        if found and not failure.once:
            run.twice += 1
            run.timeline.note(f"failure {failure.when}: came back twice ({found[0]}); the "
                              "previous release's replicas are Ready before they sync")
        elif found:
            problems += [f"failure {failure.when}: {p}" for p in found]
    return problems


def handovers(run: Run) -> list[str]:
    """Every handover, timed; those into this checkout's replicas (but the one held open
    on purpose) within HANDOVER_S of the old leader's exit."""
    problems = []
    by_name = {p.name: p for p in run.kubelet.pods.values()}
    for change in run.leases.handovers():
        old, new = by_name.get(change.old), by_name.get(change.new)
        exited = old.exited_at if old is not None else None
        after_exit = change.acquired_at - exited if exited is not None else None
        run.timeline.note(
            f"handover {change.old} -> {change.new}: "
            + (f"released, leaderless {change.leaderless_s:.2f} s" if change.released_at
               is not None else "not released")
            + (f", acquired {after_exit:+.2f} s from the old leader's exit"
               if after_exit is not None else "")
            + (" (held open on purpose)" if change.old in run.held_open else ""))
        if new is None or new.revision != run.current or change.old in run.held_open:
            continue
        if change.released_at is None or after_exit is None or after_exit > HANDOVER_S:
            problems.append(f"handover {change.old} -> {change.new}: not within "
                            f"{HANDOVER_S} s of the old leader's exit ({change})")
    return problems


def the_job_kept(run: Run) -> list[str]:
    """The JobSet, the head pod and the counts: nothing restarted, nothing lost."""
    st, jobset, head = run.status(), run.jobset(), head_pod(run)
    counters = st.get("counters") or {}
    problems = [f"sliceFailures {counters.get('sliceFailures')}, {run.failures} injected"
                ] if counters.get("sliceFailures") != run.failures else []
    if slice_restarts(st) != run.injected:
        problems.append(f"slice restarts {slice_restarts(st)}, injected {run.injected}")
    if jobset["metadata"]["uid"] != run.jobset_uid:
        problems.append(f"the JobSet was recreated: uid {run.jobset_uid} -> "
                        f"{jobset['metadata']['uid']}")
    if counters.get("jobSetRestarts") or (jobset.get("status") or {}).get("restarts"):
        problems.append(f"the JobSet restarted: {counters}, {jobset.get('status')}")
    if counters.get("trainerRestarts") or trainer(run).started != 1:
        problems.append(f"the trainer restarted: {counters}")
    if head is None or head.metadata.uid != run.head_uid:
        problems.append(f"the head pod {run.head_uid} was replaced")
    assert run.sampler is not None
    problems += run.sampler.regressions()
    problems += counted_evidence(run)
    problems += [f"an operator process crashed: {c}" for c in run.kubelet.crashes]
    return problems


# A status write refused because the trainer reported in between, more often in a row
# than the reconcile tries again at once: logged with its traceback, retried a second
# later (both releases do so; not an upgrade's doing).
RETRIED_CONFLICT = "ApiError: HTTP 409 Conflict"


def tracebacks(log: str) -> list[str]:
    """The exception line that ends each traceback in the log."""
    found, inside = [], False
    for line in log.splitlines():
        if line.startswith("Traceback (most recent call last)"):
            inside = True
        elif inside and line and not line[0].isspace():
            found.append(line)
            inside = False
    return found


def operator_logs(run: Run) -> list[str]:
    """No operator process, old or new, logged a traceback but a retried conflict."""
    return [f"{p.proc.log_path.name}: {line[:300]}" for p in run.kubelet.pods.values()
            for line in tracebacks(p.proc.log_path.read_text(errors="replace"))
            if RETRIED_CONFLICT not in line]


def tear_down(run: Run) -> None:
    """Every process stopped, the release uninstalled (the CRD stays: kept)."""
    for proc in (run.trainer, run.reference, run.sampler):
        if proc is not None:
            proc.stop()
    run.leases.on_change = None
    resume_all(run)
    for loop in (run.leases, run.pods):
        loop.stop()
    run.kubelet.on_terminating = None
    with contextlib.suppress(AssertionError):
        run.helm("uninstall", run.helm.release)
    with contextlib.suppress(TimeoutError):  # the kubelet stops each pod's process
        wait_for(lambda: not client.CoreV1Api(run.api).list_namespaced_pod(
            run.ns, label_selector=run.kubelet.selector).items, 60, "operator pods gone")
    run.kubelet.stop()
    run.api.close()
