"""The scenario of `etj maxtext e2e` on the local control plane: real MaxText in a job's
`main`, a worker slice failed mid-run, a SIGKILL during a save.

For each of tests/fixtures/maxtext-0.2.5/scenario-{local,gcs}.yaml (checkpoints in the
head's /tmp, then on gs:// through fake-gcs-server):

1. the job is created on the local control plane (kwok plays two v5e 2x4 slices and a
   spare; the operator runs as deployed); once it runs, MaxText 0.2.5 is started exactly
   as the head pod's `main` (runner.py: the rendered command, args and env with the head
   pod's own name and uid, JAX_PLATFORMS=cpu and the tiny model's flags), and the
   progress sidecar beside it (the head pod's rendered `etj progress` command, the pod's
   identity, the job's ServiceAccount), both following one directory as the head's /tmp;
2. once the STEP column moves, a worker of slice 1 fails (kwok's chaos stage): the job
   shows SliceDown, Recovering, then RecoveredUnconfirmed when the slice is back (MaxText
   reports no elastic events), then Recovered when the sidecar reports a later step;
3. at a save after step 0's, MaxText is frozen (SIGSTOP) while the save is in flight
   (a save that never returns: a hung MaxText): the job shows Progressing=False with
   reason ProgressDeadlineExceeded naming the hung MaxText behind the sidecar, and its
   Warning Event, within the job's short progress deadline; with the default onStall
   Recover the operator deletes the head pod (TrainerRestarting); the scenario plays the
   kubelet: MaxText and the sidecar are killed with their pod (SIGKILL), and
   status.checkpoint.incompleteSteps shows the step it was saving;
4. the head Job's new pod runs: its /tmp a new emptyDir but for the checkpoints (the
   metrics and the sidecar's state files go), its sidecar and MaxText started as that
   pod's; MaxText resumes from its newest committed checkpoint (its own log says which),
   Progressing is True again, status.checkpoint.lastRestore is the sidecar's measure of
   that restore (measuredBy ProgressSidecar, the step MaxText restored, its bytes as the
   scan counts them, seconds at least Orbax's own restore time); MaxText finishes: the
   incomplete step is gone (saved again, or abandoned by the commit rule),
   latestCommittedStep is MaxText's newest committed step (steps-1), and the STEP column
   is MaxText's last step.

The operator shares the head's /tmp of the local run (it runs in a mount namespace where
that directory is /tmp), as any operator shares a checkpoint directory it lists.
"""
from __future__ import annotations

import ast
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from elastic_api import maxtext
from elastic_api.conditions import ConditionType as C
from elastic_api.conditions import Reason
from elastic_api.models import ElasticTrainingJob
from elastic_api.names import (
    GROUP,
    PLURAL,
    PROGRESS_CONTAINER,
    VERSION,
    worker_pods_selector,
)
from elastic_devtools.maxtext.env import MaxTextEnv
from elastic_devtools.maxtext.pod import PodProcesses
from elastic_devtools.maxtext.runner import POD_TMP, cpu_process, main_process, start
from elastic_devtools.maxtext.scenario_cluster import (
    NAMESPACE,
    Cluster,
    head_pod,
    step_column,
    token_kubeconfig,
)
from elastic_devtools.maxtext.timeline import Sample, Timeline, job_stream

SCENARIOS = {"local": "scenario-local.yaml", "gcs": "scenario-gcs.yaml"}
FAILED_SLICE = 1
# Waits on a loaded 2-core machine: scheduling, kwok's readiness, MaxText's compile.
JOB_TIMEOUT, RECOVERY_TIMEOUT, SCAN_TIMEOUT, RUN_TIMEOUT = 180, 180, 60, 900
# The stall: the job's spec.elastic.progressDeadlineSeconds (the fixtures') plus the
# operator's wake-up and a status write on a loaded machine.
STALL_TIMEOUT = 180
# MaxText's own log: the step it restores, and Orbax's timing of that restore.
RESTORING = re.compile(r"restoring from this run's directory step (\d+)")
ORBAX_EVENT = re.compile(r"standard_logger\.py:\d+\] (\{.*'event_type': 'restore'.*\})\s*$")


class ScenarioFailure(AssertionError):
    """A check of the scenario failed; the message says which and what was seen."""


def say(message: str) -> None:
    print(f"[maxtext-e2e {time.strftime('%H:%M:%S')}] {message}", flush=True)


def load(path: Path) -> tuple[dict[str, Any], ElasticTrainingJob]:
    from elastic_api.validation import validate_job

    obj: dict[str, Any] = yaml.safe_load(path.read_text())
    obj["metadata"]["namespace"] = NAMESPACE
    return obj, validate_job(obj)


def host_path(pod_tmp: Path, path_in_pod: str) -> Path:
    if not path_in_pod.startswith(POD_TMP + "/"):
        raise ScenarioFailure(f"{path_in_pod} is not under the head's {POD_TMP}")
    return pod_tmp / path_in_pod[len(POD_TMP) + 1:]


def sidecar(pod: Any, pod_tmp: Path, kubeconfig: Path, log: Path,
            gcs_env: dict[str, str], processes: PodProcesses) -> subprocess.Popen[bytes]:
    """`etj progress` as the head pod's `progress` container runs it (its /tmp paths on
    `pod_tmp`), with the pod's identity (and `gcs_env`, fake-gcs-server's, where a pod
    would have its Google credentials), in the pod's process namespace (it samples
    MaxText there)."""
    (spec,) = [c for c in pod.spec.init_containers or [] if c.name == PROGRESS_CONTAINER]
    if spec.command[:2] != ["etj", "progress"]:
        raise ScenarioFailure(f"the progress container runs {spec.command}")
    argv = [sys.executable, "-m", "elastic_api.etj_cli", "progress",
            *[str(host_path(pod_tmp, a)) if a.startswith(POD_TMP + "/") else a
              for a in spec.command[2:]]]
    env = {"KUBECONFIG": str(kubeconfig), "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
           "ETJ_JOB_NAME": pod.metadata.labels.get("elastic.pathways.dev/job-name", ""),
           "ETJ_JOB_NAMESPACE": pod.metadata.namespace, "ETJ_POD_NAME": pod.metadata.name,
           "ETJ_POD_UID": pod.metadata.uid, "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.environ.get("PYTHONPATH", ""), **gcs_env}
    with log.open("ab") as out:
        return subprocess.Popen(processes.enter(argv), env=env, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)


def newest_metrics_step(path: Path) -> int | None:
    """The step of the last complete train line of MaxText's metrics file."""
    try:
        with path.open("rb") as f:
            f.seek(max(0, path.stat().st_size - 16384))
            lines = f.read().split(b"\n")[:-1]
    except OSError:
        return None
    for raw in reversed(lines):
        try:
            obj = json.loads(raw)
        except ValueError:
            continue
        if isinstance(obj, dict) and "learning/loss" in obj and "step" in obj:
            return int(obj["step"])
    return None


def scan(directory: str, pod_tmp: Path, gcs_env: dict[str, str]) -> Any:
    """The operator's own scan of the job's checkpoint directory, from here."""
    from datetime import UTC, datetime

    from elastic_devtools.localcluster.gcs import client_environ
    from elastic_operator.checkpoints.listing import scan_checkpoints_detailed

    local = directory.startswith("/")
    with client_environ({} if local else gcs_env):
        return scan_checkpoints_detailed(str(host_path(pod_tmp, directory)) if local
                                         else directory, now=datetime.now(UTC))


@dataclass
class Run:
    """One scenario: the job, its MaxText and its sidecar, the timeline, and the figures."""

    name: str
    cluster: Cluster
    env: MaxTextEnv
    job_obj: dict[str, Any]
    job: ElasticTrainingJob
    work: Path
    timeline: Timeline | None = None
    maxtext_proc: subprocess.Popen[bytes] | None = None
    sidecar_proc: subprocess.Popen[bytes] | None = None
    processes: PodProcesses | None = None  # the head pod's process namespace
    figures: dict[str, str] = field(default_factory=dict)
    sidecar_only: bool = False  # the operator's stall rule does not read the phases yet

    @property
    def pod_tmp(self) -> Path:
        return self.work / "pod-tmp"

    @property
    def directory(self) -> str:
        return self.job.spec.checkpoint.directory

    @property
    def metrics(self) -> Path:
        path = maxtext.metrics_file(self.job.spec.trainer)
        if path is None:
            raise ScenarioFailure(f"{self.name}: the job has no progress sidecar")
        return host_path(self.pod_tmp, path)

    @property
    def last_step(self) -> int:
        return int(maxtext.flag_value(self.job.spec.trainer.args, "steps") or 0) - 1

    @property
    def tl(self) -> Timeline:
        assert self.timeline is not None
        return self.timeline

    @property
    def pod(self) -> PodProcesses:
        assert self.processes is not None
        return self.processes


def submit(run: Run) -> Any:
    """Create the job and wait until it runs (every slice Ready); the head pod."""
    from elastic_devtools.localcluster.faults import wait_for

    cluster, name = run.cluster, run.job.metadata.name
    cluster.custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL,
                                                   run.job_obj)
    run.timeline = Timeline(job_stream(cluster.custom, NAMESPACE, name),
                            run.job.spec.tpu.num_slices, lambda m: say(f"{run.name}: {m}"),
                            lambda: newest_metrics_step(run.metrics))
    run.tl.start()
    run.tl.wait(lambda s: s.status.get("phase") == "Running", JOB_TIMEOUT,
                "the job Running (every slice Ready)")
    pod = wait_for(lambda: head_pod(cluster, name), JOB_TIMEOUT, "the head pod Running")
    run.tl.note(f"job {name} runs; head pod {pod.metadata.name} (uid {pod.metadata.uid})")
    return pod


def start_head(run: Run, log_name: str) -> Any:
    """The job submitted and its head pod played: the pod's namespaces, the progress
    sidecar as the job's ServiceAccount, MaxText as `main` logging to `log_name`."""
    pod = submit(run)
    kubeconfig = token_kubeconfig(run.cluster, run.work / "trainer.kubeconfig")
    run.processes = PodProcesses().start()
    run.sidecar_proc = sidecar(pod, run.pod_tmp, kubeconfig, run.work / "progress.log",
                               run.cluster.gcs_env, run.pod)
    run.tl.note(f"progress sidecar started (pid {run.sidecar_proc.pid}) for pod "
                f"{pod.metadata.name}, as the job's ServiceAccount")
    start_main(run, pod, log_name)
    return pod


def start_main(run: Run, pod: Any, log_name: str) -> None:
    """MaxText as the head pod's `main` (that pod's name and uid in its downward API)."""
    process = cpu_process(main_process(run.job, NAMESPACE, pod.metadata.name, pod.metadata.uid),
                          extra_env=run.cluster.gcs_env if run.directory.startswith("gs://")
                          else None)
    run.maxtext_proc = start(run.env, process, run.pod_tmp, run.work / log_name,
                             enter=run.pod.enter)
    run.tl.note(f"MaxText started as `main` (pid {run.maxtext_proc.pid}): "
                f"{' '.join(process.argv[:3])} ... {len(process.argv) - 3} flags "
                f"(log {run.work / log_name})")


def fail_a_slice(run: Run) -> float:
    """Once the STEP column moves, a worker of slice 1 fails; the time of the fault."""
    from elastic_devtools.localcluster import faults

    run.tl.wait(lambda s: (s.step or 0) >= 2, RUN_TIMEOUT,
                "the STEP column at 2 (MaxText training, the sidecar reporting)")
    pods = run.cluster.core.list_namespaced_pod(
        NAMESPACE, label_selector=worker_pods_selector(run.job.metadata.name, FAILED_SLICE))
    victim = sorted(p.metadata.name for p in pods.items if p.status.phase == "Running")[0]
    at = time.monotonic()
    faults.fail_pod(run.cluster.api, NAMESPACE, victim)
    run.tl.note(f"worker pod {victim} of slice {FAILED_SLICE} fails (kwok: container exits 1)")
    return at


def check_recovery(run: Run, fault: float) -> None:
    """SliceDown, Recovering, RecoveredUnconfirmed with the slice back, then Recovered."""
    tl = run.tl
    down = tl.wait(lambda s: s.condition(C.SLICE_DOWN)[0] == "True", RECOVERY_TIMEOUT,
                   "SliceDown True", since=fault)
    back = tl.wait(lambda s: all(x.get("state") == "Ready" for x in s.status.get("slices", []))
                   and s.condition(C.SLICE_DOWN)[0] == "False", RECOVERY_TIMEOUT,
                   f"slice {FAILED_SLICE} Ready again", since=down.at)
    closed = tl.wait(lambda s: s.condition(C.RECOVERING)[1] == Reason.RECOVERED_UNCONFIRMED,
                     RECOVERY_TIMEOUT, "Recovering False/RecoveredUnconfirmed", since=fault)
    confirmed = tl.wait(lambda s: s.condition(C.RECOVERING)[1] == Reason.RECOVERED,
                        RECOVERY_TIMEOUT, "Recovering False/Recovered (confirmed)",
                        since=closed.at)
    seen = tl.transitions(C.RECOVERING, fault)
    expected = [("True", Reason.SLICE_DOWN), ("False", Reason.RECOVERED_UNCONFIRMED),
                ("False", Reason.RECOVERED)]
    if [v for v in seen if v[1] != Reason.NO_FAILURE] != expected:
        raise ScenarioFailure(f"{run.name}: Recovering went {seen}, not {expected}")
    record = confirmed.status.get("lastRecovery") or {}
    unknown = [k for k in ("resumedAt", "downtimeSeconds", "stepsLost", "restoredFromStep",
                           "restoreSource") if k in record]
    # Confirmed by whichever came first after the closure: the sidecar's next step, or a
    # listing with a checkpoint newer than the failure.
    if record.get("closedBy") != "Operator" or unknown or \
            record.get("confirmedBy") not in ("TrainingReport", "Checkpoint"):
        raise ScenarioFailure(f"{run.name}: lastRecovery {record}")
    if closed is not back:  # one reconcile sees the slice back and closes the recovery
        raise ScenarioFailure(f"{run.name}: the recovery closed at {tl.t(closed.at)}, not in "
                              f"the status write that showed every slice Ready "
                              f"({tl.t(back.at)})")
    run.figures.update({
        "SliceDown after the fault": f"{down.at - fault:.1f} s",
        "slice Ready again after the fault": f"{back.at - fault:.1f} s",
        "RecoveredUnconfirmed after the slice was Ready": f"{closed.at - back.at:.1f} s",
        "Recovered after that": f"{confirmed.at - closed.at:.1f} s (confirmed by "
                                f"{record.get('confirmedBy')}, step "
                                f"{record.get('confirmedStep')})",
    })


def in_flight(run: Run) -> list[int]:
    """The saves in flight now: uncommitted steps newer than the newest committed one."""
    return list(scan(run.directory, run.pod_tmp, run.cluster.gcs_env).status.incomplete_steps)


def freeze_during_a_save(run: Run) -> tuple[int, float]:
    """At a save after a trained step's checkpoint has committed (so that the restart
    restores a trained step, not the step 0 MaxText saves at its start), freeze MaxText
    (SIGSTOP) while the save is in flight, and keep it so (a save that never returns):
    the step it was saving, and when."""
    proc = run.maxtext_proc
    assert proc is not None
    run.tl.wait(lambda s: (s.checkpoint.get("latestCommittedStep") or 0) > 0, RUN_TIMEOUT,
                "a trained step's checkpoint committed (latestCommittedStep > 0)")
    deadline = time.monotonic() + RUN_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ScenarioFailure(f"{run.name}: MaxText ended (exit {proc.returncode}) before "
                                  "a save could be interrupted; give it more steps")
        if in_flight(run):
            os.killpg(proc.pid, signal.SIGSTOP)
            steps = in_flight(run)
            if steps:
                run.tl.note(f"MaxText frozen (SIGSTOP) while saving step {steps[-1]}")
                return steps[-1], time.monotonic()
            os.killpg(proc.pid, signal.SIGCONT)  # the save committed meanwhile: next one
        time.sleep(0.01)
    raise ScenarioFailure(f"{run.name}: no save to interrupt within {RUN_TIMEOUT}s")


def events(run: Run, reason: str) -> list[Any]:
    selector = f"involvedObject.name={run.job.metadata.name},reason={reason},type=Warning"
    return list(run.cluster.core.list_namespaced_event(NAMESPACE,
                                                       field_selector=selector).items)


def check_stall(run: Run, frozen: float) -> Sample:
    """Progressing=False/ProgressDeadlineExceeded naming the hung MaxText behind the
    sidecar, its Warning Event, and (onStall Recover) the trainer's restart recorded."""
    from elastic_devtools.localcluster.faults import wait_for

    tl = run.tl
    stopped = check_stopped(run, frozen)
    stalled = tl.wait(lambda s: s.condition(C.PROGRESSING)[:2] ==
                      ("False", Reason.PROGRESS_DEADLINE_EXCEEDED), STALL_TIMEOUT,
                      "Progressing False/ProgressDeadlineExceeded", since=frozen)
    message = stalled.condition(C.PROGRESSING)[2]
    if run.sidecar_only:  # the rule of issue 32: no new step
        if "a hung MaxText: the metrics file the progress sidecar follows" not in message:
            raise ScenarioFailure(f"{run.name}: Progressing says {message!r}, not a hung "
                                  "MaxText behind the progress sidecar")
    else:
        names_stop(run, message, stopped)
    (event, *_) = wait_for(lambda: events(run, Reason.PROGRESS_DEADLINE_EXCEEDED),
                           SCAN_TIMEOUT, "the ProgressDeadlineExceeded Warning Event")
    restarting = wait_for(lambda: events(run, Reason.TRAINER_RESTARTING), SCAN_TIMEOUT,
                          "the TrainerRestarting Warning Event (onStall Recover)")
    deadline = run.job.spec.elastic.progress_deadline_seconds
    run.figures.update({
        "Progressing=False after the SIGSTOP": f"{stalled.at - frozen:.1f} s (deadline "
                                               f"{deadline} s): {message}",
        "Warning Events": f"{event.reason}; {restarting[0].reason}: {restarting[0].message}",
    })
    return stalled


def check_stopped(run: Run, frozen: float) -> dict[str, Any]:
    """status.training.activity: the sidecar saw MaxText stopped, and where."""
    seen = run.tl.wait(lambda s: s.activity.get("phase") == "Stopped", STALL_TIMEOUT,
                       "status.training.activity Stopped (the sidecar's sample)", since=frozen)
    activity = seen.activity
    if activity.get("processState") != "Stopped" or not activity.get("frame") or \
            activity.get("source") != "Sampled":
        raise ScenarioFailure(f"{run.name}: activity {activity}: not a sampled stop with "
                              "its frame")
    run.figures["activity Stopped after the SIGSTOP"] = (
        f"{seen.at - frozen:.1f} s: {activity['frame']}")
    return activity


def names_stop(run: Run, message: str, activity: dict[str, Any]) -> None:
    """Progressing=False names the stopped process and the frame it stopped in."""
    function = str(activity["frame"]).split(",")[0].split(" at ")[0]
    if "stopped" not in message.lower() or function not in message:
        raise ScenarioFailure(f"{run.name}: Progressing says {message!r}: not the stopped "
                              f"process and its frame ({activity['frame']})")


def kubelet_kills(run: Run, old_pod: Any) -> float:
    """The head pod the operator deleted: its containers go (MaxText and the sidecar
    SIGKILLed, as a kubelet does past a frozen process's grace period); when."""
    from elastic_devtools.localcluster.faults import wait_for

    def going() -> bool:
        pods = run.cluster.core.list_namespaced_pod(
            NAMESPACE, field_selector=f"metadata.name={old_pod.metadata.name}").items
        return not any(p.metadata.uid == old_pod.metadata.uid
                       and p.metadata.deletion_timestamp is None for p in pods)

    wait_for(going, SCAN_TIMEOUT, f"head pod {old_pod.metadata.name} deleted by the operator",
             interval=0.5)
    at = time.monotonic()
    run.pod.kill()
    for proc in (run.maxtext_proc, run.sidecar_proc):
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # its launcher, outside the pod
        if proc is not None:
            proc.wait(timeout=60)
    run.tl.note(f"head pod {old_pod.metadata.name} deleted: MaxText and its sidecar killed")
    return at


def new_pod(run: Run, old_pod: Any) -> Any:
    """The head Job's new pod, running; its /tmp as a new emptyDir would be but for the
    checkpoints (kept: the local scenario's stand for a volume), its sidecar and
    MaxText started as that pod's."""
    from elastic_devtools.localcluster.faults import wait_for

    pod = wait_for(lambda: (p := head_pod(run.cluster, run.job.metadata.name)) is not None
                   and p.metadata.uid != old_pod.metadata.uid and p, JOB_TIMEOUT,
                   "the head Job's new pod Running")
    run.metrics.unlink(missing_ok=True)
    (run.pod_tmp / ".etj-progress.json").unlink(missing_ok=True)
    kubeconfig = token_kubeconfig(run.cluster, run.work / "trainer.kubeconfig")
    run.processes = PodProcesses().start()
    run.sidecar_proc = sidecar(pod, run.pod_tmp, kubeconfig, run.work / "progress-2.log",
                               run.cluster.gcs_env, run.pod)
    start_main(run, pod, "main-2.log")
    run.tl.note(f"new head pod {pod.metadata.name} (uid {pod.metadata.uid}): sidecar "
                f"(pid {run.sidecar_proc.pid}) and MaxText started as its own")
    return pod


def orbax_restore(log_text: str) -> tuple[int | None, dict[str, Any] | None]:
    """From MaxText's log: the step it says it restores, and Orbax's record of the
    restore (its 'event_type': 'restore' line, a Python dict)."""
    steps = [int(m.group(1)) for m in RESTORING.finditer(log_text)]
    records = [ast.literal_eval(m.group(1)) for line in log_text.splitlines()
               if (m := ORBAX_EVENT.search(line))]
    return (steps[-1] if steps else None), (records[-1] if records else None)


def check_resumed(run: Run, killed_at: float, newest: int | None,
                  newest_bytes: int | None) -> None:
    """Progressing True again; status.checkpoint.lastRestore the sidecar's measure of the
    step MaxText restored (its own log), the step's bytes as the scan counts them, and
    seconds no shorter than Orbax's own timing."""
    from elastic_api.restores import PROGRESS_SIDECAR

    def restored(s: Sample) -> bool:
        last = s.checkpoint.get("lastRestore") or {}
        return (s.condition(C.PROGRESSING)[:2] == ("True", Reason.STEPS_ADVANCING)
                and last.get("measuredBy") == PROGRESS_SIDECAR)

    back = run.tl.wait(restored, RUN_TIMEOUT, "Progressing True again and "
                       "status.checkpoint.lastRestore from the sidecar", since=killed_at)
    last = back.checkpoint["lastRestore"]
    said, orbax = orbax_restore((run.work / "main-2.log").read_text(errors="replace"))
    if said is None or orbax is None or said != newest or last.get("step") != said:
        raise ScenarioFailure(f"{run.name}: MaxText says it restored step {said} (Orbax: "
                              f"{orbax}); newest committed at the kill {newest}; "
                              f"lastRestore {last}")
    orbax_seconds = float(orbax["checkpoint_manager_duration_secs"])
    expected = newest_bytes  # listed before the restart: keep 3 may delete it since
    if last.get("bytes") != expected or last["seconds"] < orbax_seconds or \
            last.get("gibPerSecond") is None:
        raise ScenarioFailure(f"{run.name}: lastRestore {last}; the step's listing holds "
                              f"{expected} bytes, Orbax restored it in {orbax_seconds:.3f} s")
    run.figures.update({
        "Progressing=True after the kill": f"{back.at - killed_at:.1f} s",
        "lastRestore (status.checkpoint)": f"step {said}, {last.get('bytes')} bytes, "
                                           f"{last['seconds']} s, {last['gibPerSecond']:.3g} "
                                           f"GiB/s, measuredBy {last['measuredBy']} (Orbax's "
                                           f"own restore: {orbax_seconds:.3f} s)",
    })


def step_bytes(run: Run, step: int) -> int | None:
    """`step`'s bytes as the operator's scan counts them (its own listing, from here)."""
    from elastic_api.checkpoints import list_local_step, step_size
    from elastic_devtools.localcluster.gcs import client_environ
    from elastic_operator.checkpoints.listing import (
        list_gcs_step,
        storage_client_from_env,
    )

    if run.directory.startswith("/"):
        files = list_local_step(str(host_path(run.pod_tmp, run.directory)), step)
    else:
        with client_environ(run.cluster.gcs_env):
            files = list_gcs_step(run.directory, step, storage_client_from_env())
    return step_size(files).bytes


def check_incomplete(run: Run, killed: int, at: float) -> None:
    """The job's status, read after the kill, says the step is incomplete (a scan may have
    shown it already while the save was in flight: the operator writes only changes)."""
    from elastic_devtools.localcluster.faults import wait_for

    def current() -> list[int]:
        obj = run.cluster.custom.get_namespaced_custom_object(
            GROUP, VERSION, NAMESPACE, PLURAL, run.job.metadata.name)
        steps: list[int] = ((obj.get("status") or {}).get("checkpoint") or {}).get(
            "incompleteSteps") or []
        return steps

    steps = wait_for(lambda: killed in current() and current(), SCAN_TIMEOUT,
                     f"status.checkpoint.incompleteSteps with {killed}", interval=0.5)
    run.figures["incompleteSteps after the SIGKILL"] = (
        f"{steps}, read {time.monotonic() - at:.1f} s after it")


def finish(run: Run, killed: int) -> None:
    """MaxText (on the new pod) until it ends; the incomplete step gone by the commit rule,
    latestCommittedStep and STEP at MaxText's last step."""
    proc = run.maxtext_proc
    assert proc is not None
    code = proc.wait(timeout=RUN_TIMEOUT)
    if code != 0:
        raise ScenarioFailure(f"{run.name}: MaxText exited {code} after the restart; log "
                              f"{run.work / 'main-2.log'}")
    run.tl.note("MaxText finished (exit 0)")
    mine = scan(run.directory, run.pod_tmp, run.cluster.gcs_env)
    newest = mine.status.latest_committed_step
    if newest != run.last_step:
        raise ScenarioFailure(f"{run.name}: MaxText's newest committed step is {newest}, not "
                              f"steps-1 = {run.last_step}")

    def final(s: Sample) -> bool:
        ckpt = s.checkpoint
        return (ckpt.get("latestCommittedStep") == newest and s.step == run.last_step
                and killed not in (ckpt.get("incompleteSteps") or []))

    done = run.tl.wait(final, SCAN_TIMEOUT, f"latestCommittedStep {newest} and STEP "
                       f"{run.last_step}, step {killed} no longer incomplete")
    ckpt = done.checkpoint
    expected = (mine.status.incomplete_steps, mine.status.abandoned_steps)
    if (ckpt.get("incompleteSteps", []), ckpt.get("abandonedSteps", [])) != expected:
        raise ScenarioFailure(f"{run.name}: the status says incomplete "
                              f"{ckpt.get('incompleteSteps')}, abandoned "
                              f"{ckpt.get('abandonedSteps')}; the rule on the directory: "
                              f"{expected}")
    size = (mine.status.latest_committed_bytes, mine.status.latest_committed_files)
    if (ckpt.get("latestCommittedBytes"), ckpt.get("latestCommittedFiles")) != size:
        raise ScenarioFailure(f"{run.name}: the status says step {newest} holds "
                              f"{ckpt.get('latestCommittedBytes')} bytes in "
                              f"{ckpt.get('latestCommittedFiles')} files; its listing: {size}")
    risk = done.condition(C.RESTORE_AT_RISK)
    if step_column(run.cluster, run.job.metadata.name) != run.last_step:
        raise ScenarioFailure(f"{run.name}: the STEP column is not {run.last_step}")
    how = (f"abandoned (abandonedSteps {ckpt['abandonedSteps']})" if killed in
           ckpt.get("abandonedSteps", []) else "saved again and committed")
    run.figures.update({
        f"step {killed} after the restart": how,
        "latestCommittedStep = MaxText's newest committed": f"{newest} (committed "
                                                             f"{mine.committed_steps})",
        "STEP column (status.training.step)": f"{run.last_step}, seen "
                                               f"{len(run.tl.steps(0))} values on the way",
        "step size (status.checkpoint)": f"{size[0]} bytes in {size[1]} files",
        "RestoreAtRisk": f"{risk[0]}/{risk[1]}: {risk[2]}",
    })


def stop(run: Run) -> None:
    """MaxText and the sidecar stopped: the sidecar first, with SIGTERM (it sends its
    newest report), then the pod's every process."""
    if run.sidecar_proc is not None and run.sidecar_proc.poll() is None:
        run.sidecar_proc.terminate()  # passed on into the pod
        with contextlib.suppress(subprocess.TimeoutExpired):
            run.sidecar_proc.wait(timeout=30)
    if run.processes is not None:
        run.processes.kill()
    for proc in (run.maxtext_proc, run.sidecar_proc):
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        if proc is not None:
            proc.wait(timeout=30)


def tear_down(cluster: Cluster, run: Run, job_name: str) -> None:
    """A scenario's end, whatever happened: the pod's processes stopped, the timeline
    closed, the job deleted and its pods gone."""
    from elastic_devtools.localcluster.faults import wait_for

    stop(run)
    if run.timeline is not None:
        run.timeline.stop()
    cluster.custom.delete_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, job_name)
    wait_for(lambda: not cluster.core.list_namespaced_pod(NAMESPACE).items, JOB_TIMEOUT,
             f"the pods of {job_name} gone")


def run_one(name: str, cluster: Cluster, env: MaxTextEnv, fixtures: Path, work: Path,
            sidecar_only: bool = False) -> Run:
    """One scenario, from the job's creation to its deletion."""

    obj, job = load(fixtures / SCENARIOS[name])
    run = Run(name, cluster, env, obj, job, work / f"scenario-{name}", sidecar_only=sidecar_only)
    run.pod_tmp.mkdir(parents=True, exist_ok=True)
    say(f"{name}: job {job.metadata.name}, {job.spec.tpu.num_slices} slices of "
        f"{job.spec.tpu.type} {job.spec.tpu.topology}, checkpoints in {run.directory}")
    try:
        pod = start_head(run, "main-1.log")
        check_recovery(run, fail_a_slice(run))
        killed, frozen = freeze_during_a_save(run)
        newest = scan(run.directory, run.pod_tmp, cluster.gcs_env).status.latest_committed_step
        newest_bytes = step_bytes(run, newest) if newest is not None else None
        check_stall(run, frozen)
        killed_at = kubelet_kills(run, pod)
        check_incomplete(run, killed, killed_at)
        new_pod(run, pod)
        check_resumed(run, killed_at, newest, newest_bytes)
        finish(run, killed)
    finally:
        tear_down(cluster, run, job.metadata.name)
    return run
