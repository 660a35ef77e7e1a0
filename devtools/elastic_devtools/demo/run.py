"""Orchestration of `etj demo` (all the I/O of the demo lives here).

1. bring up the local control plane (fake v5e node pools), install the CRD, start the
   operator;
2. apply examples/demo.yaml (3 slices x 4 hosts, simulated backend) and run the trainer
   as the job's head would: the exact command the renderer puts in the `main` container,
   attached to the job (slice health from the worker pods, progress into the status);
3. once the trainer has chosen its cadences (the job gives no period) and committed a
   checkpoint, a TPU host of slice 2 dies (its node goes NotReady and its
   kubelet stops: faults.kill_node); the operator replaces the slice on the hot spare node
   pool at once, and the demo prints what `kubectl get etj -w` and the conditions show;
4. write demo-output/ (summary.json, events.log, logs) and end with what a user sees of
   the job: `kubectl etj status` and `kubectl etj timeline`, whose `-w --png` has followed
   the job since the trainer started and drew demo-output/timeline.png (the plugin's
   code, elastic_kubectl: the demo has no table or picture of its own);
5. stop everything it started.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from elastic_api.names import (
    GROUP,
    NODE_POOL_LABEL,
    PLURAL,
    TPU_ACCELERATOR_LABEL,
    VERSION,
    worker_pods_selector,
)
from elastic_devtools.background import BackgroundLoop
from elastic_devtools.demo.summary import cadence_chosen, cadence_lines, summarize
from elastic_devtools.localcluster.faults import wait_for
from elastic_devtools.localcluster.operator_process import OperatorProcess
from elastic_devtools.localcluster.operator_settings import SETTINGS

DEMO_NAMESPACE = SETTINGS["demo"].namespaces[0]
KILL_SLICE = 2


class DemoError(RuntimeError):
    pass


def say(message: str) -> None:
    print(message, flush=True)


@dataclass
class Watch(BackgroundLoop):
    """Watches the job like `kubectl get etj -w` and remembers when things first happened.

    A watch, not polling: a SliceDown that lasts less than a poll interval is still seen.
    """

    THREAD_NAME = "demo-watch"
    JOIN_SECONDS = 5.0
    stream: Callable[[], Iterator[dict[str, Any]]]
    lines: list[str] = field(default_factory=list)
    first_seen: dict[str, float] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)
    latest: dict[str, Any] = field(default_factory=dict)
    _last_row: str | None = None
    _conditions: dict[str, tuple[str, str]] = field(default_factory=dict)


    def _run(self) -> None:
        say(f"{'NAME':<6} {'SLICES':<7} {'STEP':>6} {'CHECKPOINT':>10}  STATUS")
        while not self._stop.is_set():
            try:
                for job in self.stream():  # every version written, none skipped
                    self._observe(job)
                    if self._stop.is_set():
                        break
            except Exception:  # the API server may be briefly busy; keep watching
                time.sleep(0.2)

    def _observe(self, job: dict[str, Any]) -> None:
        now = time.time()
        self.latest = job
        status = job.get("status") or {}
        training = status.get("training") or {}
        row = (
            f"{job['metadata']['name']:<6} "
            f"{status.get('slicesReady', 0)}/{job['spec']['tpu']['numSlices']:<5} "
            f"{training.get('step', '-'):>6} "
            f"{_checkpoint(status):>10}  {status.get('phase', '-')}"
        )
        if row != self._last_row:
            say(row)
            self._last_row = row
        for cond in status.get("conditions") or []:
            key = (cond["status"], cond.get("reason", ""))
            before = self._conditions.get(cond["type"])
            if before == key:
                continue
            self._conditions[cond["type"]] = key
            if before is None and cond["status"] != "True":
                continue  # a quiet start: show what is true, then every change
            line = (f"    condition {cond['type']}={cond['status']} "
                    f"({cond.get('reason', '')}): {cond.get('message', '')}")
            say(line)
            self.lines.append(line)
            tag = f"{cond['type']}={cond['status']}:{cond.get('reason', '')}"
            self.first_seen.setdefault(tag, now)
            turned_true = cond["status"] == "True" and (before is None or before[0] != "True")
            # A condition that stays True with a new reason (the stuck pod deleted) is
            # the same episode, not a new step of the story.
            if cond["type"] in ("SliceDown", "Recovering") and turned_true:
                self._note(cond["type"])
            if cond.get("reason") == "Recovered":
                self._note("Recovered")

    def _note(self, reason: str) -> None:
        if not self.reasons or self.reasons[-1] != reason:
            self.reasons.append(reason)

    def seen_after(self, tag: str, after: float) -> float | None:
        at = self.first_seen.get(tag)
        return at if at is not None and at >= after else None


def _checkpoint(status: dict[str, Any]) -> str:
    # The trainer knows first; the operator's storage scan confirms it a little later.
    values = [v for v in ((status.get("checkpoint") or {}).get("latestCommittedStep"),
                          (status.get("training") or {}).get("lastCommittedCheckpointStep"))
              if isinstance(v, int)]
    return str(max(values)) if values else "-"


def _head_command(job_obj: dict[str, Any]) -> list[str]:
    """The command the renderer gives the head's `main` container."""
    from elastic_api.models import ElasticTrainingJob
    from elastic_operator.render import render

    job = ElasticTrainingJob.model_validate(job_obj)
    for obj in render(job):
        if obj["kind"] != "JobSet":
            continue
        for rjob in obj["spec"]["replicatedJobs"]:
            pod = rjob["template"]["spec"]["template"]["spec"]
            for container in pod["containers"]:
                if container["name"] == "main":
                    return [*container.get("command", []), *container.get("args", [])]
    raise DemoError("the rendered JobSet has no `main` container")


def run_demo(repo: Path, out: Path, keep_cluster: bool, step_seconds: float) -> int:
    from elastic_devtools import localcluster as lc

    demo = DemoRun(out, Path(os.environ.get("ETJ_DEMO_CLUSTER_DIR")
                             or lc.default_dir().parent / "demo"))
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    try:
        demo.start_cluster_and_operator()
        job_obj = demo.apply_job(repo, step_seconds)
        trainer = demo.start_trainer(job_obj)
        demo.follow_timeline()
        watch = demo.watch_job()
        status_before = demo.wait_for_cadences()
        death = demo.kill_a_host(status_before)
        recovery = demo.wait_for_recovery(death, trainer, watch)
        return demo.report(death, recovery, watch, status_before)
    finally:
        demo.stop(keep_cluster)


@dataclass
class HostDeath:
    """The TPU host the demo killed: the worker pod on it, its node, and when."""

    victim: str
    node: str
    killed_at: float


@dataclass
class Recovery:
    """What the demo waited for after the host died."""

    moved: dict[str, Any]  # the slice's lastReplacement, Ready again on the spare pool
    rc: int  # the trainer's exit code
    status_after: dict[str, Any]


@dataclass
class DemoRun:
    """The demo's five stages, and what it started (all stopped by `stop`, whatever
    happened)."""

    out: Path
    cluster_dir: Path
    t_start: float = field(default_factory=time.time)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    operator: OperatorProcess | None = None
    dead_nodes: list[str] = field(default_factory=list)
    # The client's generated types add nothing over the JSON we pass; keep them loose.
    api: Any = None
    core: Any = None
    custom: Any = None
    env: dict[str, str] = field(default_factory=dict)
    name: str = ""
    timeline: subprocess.Popen[bytes] | None = None  # kubectl etj timeline -w --png
    _resource_version: str | None = None

    def stage(self, n: int, text: str) -> None:
        say(f"\n[{n}/5] {text}  (t={time.time() - self.t_start:.0f}s)")

    def get_job(self) -> dict[str, Any]:
        obj: dict[str, Any] = self.custom.get_namespaced_custom_object(
            GROUP, VERSION, DEMO_NAMESPACE, PLURAL, self.name)
        return obj

    def start_cluster_and_operator(self) -> None:
        from kubernetes import client

        from elastic_devtools import localcluster as lc
        from elastic_devtools.localcluster.crds import install_crd

        self.stage(1, "Local control plane: etcd, kube-apiserver, controllers, scheduler, kwok, "
                      "JobSet")
        lc.down(self.cluster_dir, progress=lambda _: None)  # a clean start, whatever ran before
        cluster = lc.up(lc.ClusterConfig(dir=self.cluster_dir),
                        progress=lambda line: say("  " + line))
        self.api = cluster.api_client()
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        nodes = self.core.list_node(label_selector="cloud.google.com/gke-tpu-accelerator").items
        say(f"  {len(nodes)} fake TPU nodes: " + ", ".join(sorted(n.metadata.name for n in nodes)))

        install_crd(self.api, timeout=30)
        self.core.create_namespace({"metadata": {"name": DEMO_NAMESPACE}})
        wait_for(lambda: self.core.list_namespaced_service_account(
            DEMO_NAMESPACE, field_selector="metadata.name=default").items, 30,
            "the namespace's default ServiceAccount")
        self.env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "PYTHONUNBUFFERED": "1"}
        self.operator = OperatorProcess(cluster.kubeconfig, self.out / "operator.log",
                                        args=SETTINGS["demo"],
                                        env={"PYTHONUNBUFFERED": "1"}, new_session=True)
        self.operator.start()
        say(f"  operator started (pid {self.operator.pid}, log {self.out / 'operator.log'})")

    def apply_job(self, repo: Path, step_seconds: float) -> dict[str, Any]:
        self.stage(2, "Apply examples/demo.yaml: 3 slices x 4 hosts (v5e 4x4 shape, simulated "
                      "backend)")
        job_obj: dict[str, Any] = yaml.safe_load((repo / "examples" / "demo.yaml").read_text())
        job_obj["metadata"]["namespace"] = DEMO_NAMESPACE
        job_obj["spec"]["checkpoint"]["directory"] = str((self.out / "checkpoints").resolve())
        if step_seconds > 0:
            job_obj["spec"]["trainer"].setdefault("args", []).extend(
                ["--min-step-seconds", str(step_seconds)])
        self.name = job_obj["metadata"]["name"]
        self.custom.create_namespaced_custom_object(GROUP, VERSION, DEMO_NAMESPACE, PLURAL,
                                                    job_obj)
        wait_for(lambda: (self.get_job().get("status") or {}).get("slicesReady") == 3, 120,
                 "3 ready slices (12 worker pods Running on kwok nodes)")
        say("  JobSet created by the operator; 12 worker pods Ready")
        return job_obj

    def start_trainer(self, job_obj: dict[str, Any]) -> subprocess.Popen[bytes]:
        self.stage(3, "Start the trainer as the head's `main` container would (same command)")
        command = _head_command(job_obj)
        if command[0] == "etj":
            command = [sys.executable, "-m", "elastic_api.etj_cli", *command[1:]]
        command += ["--summary", str(self.out / "trainer-summary.json")]
        say("  $ etj " + " ".join(command[3:]))
        trainer_env = {**self.env, "ETJ_JOB_NAME": self.name, "ETJ_JOB_NAMESPACE": DEMO_NAMESPACE}
        trainer = subprocess.Popen(command, env=trainer_env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(trainer)
        threading.Thread(target=_tee, args=(trainer, self.out / "trainer.log"),
                         daemon=True).start()
        return trainer

    def follow_timeline(self) -> None:
        """`kubectl etj timeline JOB -w --png timeline.png`, from now until the report: the
        watch records the trainer's step at each report, the picture's step line."""
        args = ["timeline", self.name, "-w", "--png", str(self.out / "timeline.png")]
        with (self.out / "timeline-watch.log").open("wb") as log:
            self.timeline = subprocess.Popen(_kubectl_etj(args, DEMO_NAMESPACE), env=self.env,
                                             stdout=log, stderr=subprocess.STDOUT,
                                             start_new_session=True)
        self.procs.append(self.timeline)
        say(f"  $ kubectl etj {' '.join(args)} -n {DEMO_NAMESPACE} &")

    def plugin(self, *args: str) -> None:
        """Run `kubectl etj ARGS` on the demo's job and print what it prints."""
        say(f"\n$ kubectl etj {' '.join(args)} -n {DEMO_NAMESPACE}")
        done = subprocess.run(_kubectl_etj(list(args), DEMO_NAMESPACE), env=self.env,
                              capture_output=True, text=True, timeout=60, check=False)
        say((done.stdout + done.stderr).rstrip())
        if done.returncode != 0:
            raise DemoError(f"kubectl etj {args[0]} exited with {done.returncode}")

    def end_timeline(self) -> None:
        """Stop the timeline's watch (SIGTERM, as Ctrl-C): it draws the picture last."""
        proc = self.timeline
        if proc is None:
            raise DemoError("kubectl etj timeline -w was not started")
        os.killpg(proc.pid, signal.SIGTERM)
        rc = proc.wait(timeout=120)
        if rc != 0 or not (self.out / "timeline.png").exists():
            raise DemoError(f"kubectl etj timeline -w --png exited with {rc}; see "
                            f"{self.out / 'timeline-watch.log'}")

    def watch_job(self) -> Watch:
        watch = Watch(self._job_versions)
        watch.start()
        return watch

    def _job_versions(self) -> Iterator[dict[str, Any]]:
        from kubernetes import watch as kube_watch

        # Resume from the last version seen, so a reconnect skips nothing.
        kwargs = {"resource_version": self._resource_version} if self._resource_version else {}
        for event in kube_watch.Watch().stream(
                self.custom.list_namespaced_custom_object, GROUP, VERSION, DEMO_NAMESPACE,
                PLURAL, field_selector=f"metadata.name={self.name}", timeout_seconds=5,
                **kwargs):
            obj: dict[str, Any] = event["object"]
            if event["type"] == "ERROR":  # e.g. 410 Gone: start again from a fresh list
                self._resource_version = None
                return
            self._resource_version = obj["metadata"]["resourceVersion"]
            yield obj

    def wait_for_cadences(self) -> dict[str, Any]:
        """The job's status once the trainer has chosen its cadences and committed a
        checkpoint. The job gives no period: the trainer measures what a snapshot and a
        save cost and chooses both (status.training.*Cadence); the host dies then, not a
        whole checkpoint period later (a save that costs much against a short step gets a
        period longer than the demo's run)."""
        def chosen() -> bool:
            training = (self.get_job().get("status") or {}).get("training") or {}
            return all(cadence_chosen(training.get(k))
                       for k in ("snapshotCadence", "checkpointCadence")) and \
                bool(training.get("lastCommittedCheckpointStep"))

        wait_for(chosen, 300, "the trainer to choose its snapshot and checkpoint cadence",
                 interval=0.5)
        status: dict[str, Any] = self.get_job().get("status") or {}
        for line in cadence_lines(status.get("training") or {}):
            say(f"  {line}")
        return status

    def kill_a_host(self, status_before: dict[str, Any]) -> HostDeath:
        from elastic_devtools.localcluster import faults

        self.stage(4, f"A TPU host of slice {KILL_SLICE} dies (its node goes NotReady, its "
                      "kubelet stops answering)")
        victim = _worker_pod(self.core, self.name, KILL_SLICE)
        node = self.core.read_namespaced_pod(victim, DEMO_NAMESPACE).spec.node_name
        pools = {s.get("pool") for s in status_before.get("slices") or []}
        say(f"  slices run on node pools {', '.join(sorted(p for p in pools if p))}; "
            f"hot spare: {', '.join(_spares(self.core, pools)) or 'none'}")
        killed_at = time.time()
        faults.kill_node(self.api, node)
        self.dead_nodes.append(node)
        say(f"  node {node} (pod {victim}) died at step "
            f"{(status_before.get('training') or {}).get('step')}")
        return HostDeath(victim, node, killed_at)

    def wait_for_recovery(self, death: HostDeath, trainer: subprocess.Popen[bytes],
                          watch: Watch) -> Recovery:
        """Recovered, the slice Ready on the spare pool, the trainer done with its steps."""
        killed_at = death.killed_at
        wait_for(lambda: watch.seen_after("Recovering=False:Recovered", killed_at), 300,
                 "the job to report Recovered")
        moved = wait_for(lambda: _replacement(self.get_job(), KILL_SLICE, killed_at), 120,
                         f"slice {KILL_SLICE} Ready again on a new worker Job")
        say(f"  slice {KILL_SLICE} moved from node pool {moved.get('fromPool')} to "
            f"{moved.get('toPool')} (the hot spare), Ready "
            f"{_unix(moved['readyAt']) - killed_at:.1f} s after the host died")
        rc = wait_for(lambda: trainer.poll() is not None and [trainer.returncode], 600,
                      "the trainer to finish its steps", interval=0.5)[0]
        time.sleep(0.5)  # one more watch round for the final status
        watch.stop()
        return Recovery(moved, rc, self.get_job().get("status") or {})

    def report(self, death: HostDeath, recovery: Recovery, watch: Watch,
               status_before: dict[str, Any]) -> int:
        """Writes demo-output/ and the summary table; 0 if the demo showed what it claims."""
        self.stage(5, "Summary")
        out, rc, status_after = self.out, recovery.rc, recovery.status_after
        summary_file = out / "trainer-summary.json"
        if not summary_file.exists():
            raise DemoError(f"the trainer wrote no summary (exit code {rc}); see "
                            f"{out / 'trainer.log'}")
        trainer_summary = json.loads(summary_file.read_text())
        jobset = self.custom.get_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", DEMO_NAMESPACE, "jobsets",
            status_after.get("jobSetName") or self.name)
        restarts = int((jobset.get("status") or {}).get("restarts") or 0)
        result = summarize(
            killed_at=death.killed_at, replacement=recovery.moved,
            slice_down_at=watch.seen_after("SliceDown=True:SliceDown", death.killed_at)
            or _first_true_after(watch, "SliceDown=True", death.killed_at),
            trainer_summary=trainer_summary, status_before=status_before,
            status_after=status_after, jobset_restarts=restarts,
            condition_reasons=watch.reasons)
        _write_events(self.core, self.name, out / "events.log")
        data = {**result.to_json(), "killed_pod": death.victim, "killed_node": death.node,
                "trainer_exit_code": rc,
                "last_recovery": status_after.get("lastRecovery"),
                "counters": status_after.get("counters")}
        (out / "summary.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        self.end_timeline()
        self.plugin("status", self.name)
        self.plugin("timeline", self.name)
        say(f"\nWrote {out}/summary.json, events.log, trainer.log, operator.log and "
            f"timeline.png (drawn by `kubectl etj timeline {self.name} -w --png`)")
        ok = rc == 0 and result.same_process and restarts == 0 and result.steps_lost is not None \
            and result.moved_to_pool not in (None, result.moved_from_pool)
        if not ok:
            say("The demo did NOT show an in-process recovery on a hot spare; see the logs "
                "above.")
        return 0 if ok else 1

    def stop(self, keep_cluster: bool) -> None:
        from elastic_devtools import localcluster as lc
        from elastic_devtools.localcluster import faults

        for proc in reversed(self.procs):
            _stop(proc)
        if keep_cluster and self.dead_nodes:
            for node in self.dead_nodes:
                faults.revive_node(self.api, node)
        if self.operator is not None:
            self.operator.stop(timeout=10)
        if not keep_cluster:
            lc.down(self.cluster_dir, progress=lambda _: None)
            say(f"Stopped the operator, the trainer and the local control plane "
                f"(t={time.time() - self.t_start:.0f}s).")


def _kubectl_etj(args: list[str], namespace: str) -> list[str]:
    """The command kubectl runs for `kubectl etj ARGS -n NAMESPACE` (the plugin on PATH,
    here the package's module in this Python)."""
    return [sys.executable, "-m", "elastic_kubectl", *args, "-n", namespace]


def _spares(core: Any, in_use: set[str | None]) -> list[str]:
    """TPU node pools no slice runs on."""
    nodes = core.list_node(label_selector=TPU_ACCELERATOR_LABEL).items
    return sorted({n.metadata.labels[NODE_POOL_LABEL] for n in nodes} - in_use)


def _replacement(job: dict[str, Any], index: int, after: float) -> dict[str, Any] | None:
    """The slice's last replacement, once it is Ready again after `after`."""
    slices: list[dict[str, Any]] = (job.get("status") or {}).get("slices") or []
    found: dict[str, Any] = next((s for s in slices if s.get("index") == index), {})
    last = found.get("lastReplacement")
    if found.get("state") != "Ready" or not last or _unix(last["readyAt"]) < after:
        return None
    return dict(last)


def _unix(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _first_true_after(watch: Watch, prefix: str, after: float) -> float | None:
    times = [t for tag, t in watch.first_seen.items() if tag.startswith(prefix) and t >= after]
    return min(times) if times else None


def _worker_pod(core: Any, job: str, slice_index: int) -> str:
    pods = core.list_namespaced_pod(
        DEMO_NAMESPACE,
        label_selector=worker_pods_selector(job, slice_index)).items
    running = sorted(p.metadata.name for p in pods if p.status.phase == "Running")
    if not running:
        raise DemoError(f"no running worker pod in slice {slice_index}")
    return running[0]


def _write_events(core: Any, job: str, path: Path) -> None:
    events = core.list_namespaced_event(DEMO_NAMESPACE).items
    rows = []
    for e in sorted(events, key=lambda e: (e.last_timestamp or e.event_time or e.metadata
                                             .creation_timestamp)):
        when = e.last_timestamp or e.event_time or e.metadata.creation_timestamp
        rows.append(f"{when:%H:%M:%S} {e.type:<8} {e.involved_object.kind}/"
                    f"{e.involved_object.name} {e.reason}: {e.message}")
    path.write_text("\n".join(rows) + "\n")
    say(f"\nEvents on the job ({len([r for r in rows if f'/{job} ' in r])}):")
    for row in rows:
        if f"ElasticTrainingJob/{job} " in row:
            say("  " + row)


def _tee(proc: subprocess.Popen[bytes], path: Path) -> None:
    """Copy the trainer's output to a file and its progress/elastic lines to the screen."""
    assert proc.stdout is not None
    with path.open("wb") as log:
        for raw in proc.stdout:
            log.write(raw)
            log.flush()
            line = raw.decode(errors="replace").rstrip()
            if "elastic" in line.lower() or " step " in line or "slice" in line.lower():
                say("  [trainer] " + line.split(": ", 1)[-1])


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        with_kill = proc.poll() is None
        if with_kill:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
