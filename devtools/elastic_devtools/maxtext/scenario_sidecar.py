"""The sidecar-restart scenario of `etj maxtext e2e` (issue 68): the progress sidecar
restarted, as the kubelet restarts a crashed container, while real MaxText 0.2.5
evaluates (tests/fixtures/maxtext-0.2.5/scenario-evaluation.yaml).

MaxText cuts its metrics file at an evaluation's first line, so a sidecar started during
the evaluation finds no train line in it. Before issue 68 it reported `Initializing`, step
0, until the evaluation ended: `kubectl get etj` showed the job's STEP go from 309 to 0 for
six minutes. Now it goes on from what status.training held for the same trainer process
(elastic_api.forward).

1. the job runs as the evaluation scenario runs it (scenario_phases.py);
2. once MaxText logs "Starting eval after train step N" and the sidecar reports the
   evaluation, the sidecar is killed (SIGKILL) and started again with the pod's identity
   (its state file on the head's /tmp kept: the same trainer process);
3. checked until the new sidecar has reported three heartbeats of the evaluation (so it
   reads the cut file): in every status version from before the kill on, the step is the
   one shown before it and the state Training; `kubectl get etj` shows that STEP; the
   operator's TrainingReportValid stays True (the sidecar held the figures itself) and,
   where its rule reads the phases, Progressing stays True; the new sidecar's log says it
   went on from the step reported before.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from elastic_api.conditions import ConditionType as C
from elastic_api.names import GROUP, PLURAL, VERSION
from elastic_devtools.maxtext.env import MaxTextEnv
from elastic_devtools.maxtext.scenario import (
    JOB_TIMEOUT,
    RUN_TIMEOUT,
    SCAN_TIMEOUT,
    Run,
    ScenarioFailure,
    load,
    say,
    sidecar,
    start_head,
    stop,
)
from elastic_devtools.maxtext.scenario_cluster import NAMESPACE, Cluster, step_column
from elastic_devtools.maxtext.scenario_phases import FIXTURE, STARTED, wait_log
from elastic_devtools.maxtext.timeline import Sample

GONE_ON = "going on from what this process reported before"
HEARTBEATS = 3  # of the evaluation, reported by the new sidecar


def activity(s: Sample) -> dict[str, str]:
    found: dict[str, str] = (s.status.get("training") or {}).get("activity") or {}
    return found


def evaluating(s: Sample) -> bool:
    return activity(s).get("phase") == "Evaluation"


def restart_sidecar(run: Run, pod: object) -> float:
    """SIGKILL, then the same container again: the pod's identity, its /tmp kept."""
    proc = run.sidecar_proc
    assert proc is not None
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    killed = time.monotonic()
    run.tl.note(f"progress sidecar killed (SIGKILL, pid {proc.pid}) mid-evaluation")
    run.sidecar_proc = sidecar(pod, run.pod_tmp, run.work / "trainer.kubeconfig",
                               run.work / "progress.log", run.cluster.gcs_env, run.pod)
    run.tl.note(f"progress sidecar started again (pid {run.sidecar_proc.pid}), as the "
                "kubelet restarts a crashed container")
    return killed


def check_restart(run: Run, shown: int, killed: float) -> None:
    """The step and state held from before the kill through the new sidecar's reports."""
    beats: set[str] = set()

    def heard(s: Sample) -> bool:
        if evaluating(s) and activity(s).get("lastActivityAt"):
            beats.add(activity(s)["lastActivityAt"])
        return len(beats) >= HEARTBEATS
    run.tl.wait(lambda s: evaluating(s) and heard(s), SCAN_TIMEOUT,
                f"{HEARTBEATS} heartbeats of the evaluation from the new sidecar",
                since=killed)
    log = (run.work / "progress.log").read_text(errors="replace")
    if GONE_ON not in log:
        raise ScenarioFailure(f"{run.name}: the new sidecar's log lacks '{GONE_ON}'")
    seen = run.tl.between(killed, time.monotonic())
    steps = [(s.step, (s.status.get("training") or {}).get("state")) for s in seen]
    if any(step != shown or state != "Training" for step, state in steps):
        raise ScenarioFailure(f"{run.name}: step and state across the sidecar's restart: "
                              f"{steps} (shown before: {shown})")
    column = step_column(run.cluster, run.job.metadata.name)
    if column != shown:
        raise ScenarioFailure(f"{run.name}: kubectl get etj shows STEP {column}, not {shown}")
    invalid = [s.condition(C.TRAINING_REPORT_VALID) for s in seen
               if s.condition(C.TRAINING_REPORT_VALID)[0] == "False"]
    progressing = {s.condition(C.PROGRESSING)[0] for s in seen}
    if invalid or (not run.sidecar_only and progressing != {"True"}):
        raise ScenarioFailure(f"{run.name}: across the restart TrainingReportValid "
                              f"{invalid}, Progressing {progressing}")
    run.figures["across the sidecar's restart"] = (
        f"step {shown}, state Training in all {len(steps)} status versions; STEP column "
        f"{column}; {len(beats)} heartbeats of the evaluation from the new sidecar")


def run_sidecar_restart(cluster: Cluster, env: MaxTextEnv, fixtures: Path, work: Path,
                        sidecar_only: bool) -> Run:
    from elastic_devtools.localcluster.faults import wait_for

    obj, job = load(fixtures / FIXTURE)
    run = Run("sidecar-restart", cluster, env, obj, job, work / "scenario-sidecar-restart",
              sidecar_only=sidecar_only)
    run.pod_tmp.mkdir(parents=True, exist_ok=True)
    say(f"sidecar-restart: job {job.metadata.name}, the progress sidecar restarted while "
        "MaxText evaluates")
    try:
        pod = start_head(run, "main.log")
        wait_log(run, STARTED, RUN_TIMEOUT, "'Starting eval after train step'")
        run.tl.note("MaxText: Starting eval")
        first = run.tl.wait(lambda s: evaluating(s) and s.step is not None, SCAN_TIMEOUT,
                            "the evaluation reported, with a step")
        # One more heartbeat: the train lines MaxText wrote before its cut are reported.
        run.tl.wait(lambda s: evaluating(s) and activity(s).get("lastActivityAt")
                    != activity(first).get("lastActivityAt"), SCAN_TIMEOUT,
                    "a heartbeat of the evaluation", since=first.at)
        killed = restart_sidecar(run, pod)
        shown = run.tl.between(0.0, killed)[-1].step
        if shown is None:
            raise ScenarioFailure(f"{run.name}: no step shown before the restart")
        run.figures["step shown when the sidecar was killed"] = str(shown)
        check_restart(run, shown, killed)
    finally:
        stop(run)
        if run.timeline is not None:
            run.timeline.stop()
        cluster.custom.delete_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL,
                                                       job.metadata.name)
        wait_for(lambda: not cluster.core.list_namespaced_pod(NAMESPACE).items, JOB_TIMEOUT,
                 f"the pods of {job.metadata.name} gone")
    return run
