"""The goodput replay's faults on one side's job (bench/goodput_side.py), and the waits
between them: each trace action done the way the cluster or the hardware would do it.

    hard         a worker pod of the slice fails (kwok: its container exits 1)
    crash        the training program crashes: its process is killed, its head pod fails
    hang         the slice's part of the next step never returns (`--fault-inbox`); the
                 baseline's program then dies of the collective timeout (held first)
    notice       GKE announces a maintenance of the slice's node pool
    maintenance  it begins: the pool's label and taint; a host of this side still there
                 is taken (its pod fails)
    slow, slow_off   the slice runs `factor` times slower, then at speed (`--fault-inbox`)

Before a fault whose recovery needs new pods, the side's nodes are tainted: the new pods
wait, once created, for what only hardware knows (goodput_trace.INPUTS / compression),
then the taint goes and they start. A recovery is over at the trainer's first step
after its restore (its log's `attempt` line).
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client

from bench.goodput_account import Recovery, SlowEpisode
from bench.goodput_side import (
    HOLD_TAINT,
    NAMESPACE,
    HeadContainer,
    SideSpec,
    job_manifest,
    trainer_command,
)
from bench.goodput_trace import INPUTS, NOTICE_LEAD_SECONDS, Action, inputs_of
from elastic_api.names import GROUP, PLURAL, VERSION, worker_pods_selector
from elastic_devtools.localcluster import faults

HOLD_TIMEOUT = 120.0  # no new pod by then: nothing to hold (logged)
RECOVERY_TIMEOUT = 300.0  # the trainer's own elastic timeout


def _log(msg: str) -> None:
    import sys

    print(f"[goodput] {msg}", file=sys.stderr, flush=True)


class Side:
    """One job of the replay: created, trained, hit, and what each hit cost recorded."""

    def __init__(self, spec: SideSpec, api: Any, env: dict[str, str],
                 compression: float) -> None:
        self.spec, self.api, self.compression = spec, api, compression
        self.core: Any = client.CoreV1Api(api)
        self.custom: Any = client.CustomObjectsApi(api)
        self.nodes = [n for pool in spec.pools for n in faults.pool_nodes(api, pool)]
        self.manifest = job_manifest(spec)
        from bench.goodput_logs import Logs

        self.logs = Logs()
        self.head = HeadContainer(self.core, spec.job, trainer_command(self.manifest),
                                  {**env, "ETJ_JOB_NAME": spec.job,
                                   "ETJ_JOB_NAMESPACE": NAMESPACE},
                                  spec.workdir, self.logs, on_start=self._resend_slow)
        self.injected: list[tuple[str, float, dict[str, float]]] = []
        self.episodes: list[SlowEpisode] = []
        self._slow: dict[int, tuple[int, float, float]] = {}  # event -> slice, factor, start
        self._maintained: dict[int, str] = {}  # event -> pool
        self._faults = 0
        self._lock = threading.Lock()

    # --- setting up --------------------------------------------------------------------

    def create(self) -> None:
        for name in {n for pool in self.spec.pools for n in faults.pool_nodes(self.api, pool)}:
            self.core.patch_node(name, {"metadata": {"labels": {self.spec.node_label: "true"}}})
        self.spec.inbox.mkdir(parents=True, exist_ok=True)
        self.custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL,
                                                    self.manifest)

    def wait_ready(self, timeout: float = 300) -> None:
        faults.wait_for(lambda: (self._status().get("slicesReady") == self.spec.slices),
                        timeout, f"{self.spec.job}: every slice Ready")

    def wait_steps(self, steps: int, timeout: float = 600) -> None:
        def enough() -> bool:
            self.logs.refresh()
            return self.logs.count("step") >= steps

        faults.wait_for(enough, timeout, f"{self.spec.job}: {steps} steps logged", 1.0)

    def _status(self) -> dict[str, Any]:
        job = self.custom.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL,
                                                       self.spec.job)
        status: dict[str, Any] = job.get("status") or {}
        return status

    # --- the actions -------------------------------------------------------------------

    def act(self, action: Action) -> float:
        """Do `action`; returns when the next gap of training starts counting (after
        the recovery, if it called for one)."""
        handlers: dict[str, Callable[[Action], float | None]] = {
            "hard": self._hard, "crash": self._crash, "hang": self._hang,
            "notice": self._notice, "maintenance": self._maintenance,
            "maintenance_end": self._maintenance_end, "slow": self._slow_on,
            "slow_off": self._slow_off}
        done = handlers[action.what](action)
        return done if done is not None else time.time()

    def _local(self, action: Action) -> int:
        return action.slice % self.spec.slices

    def _hard(self, action: Action) -> float | None:
        victim = self._worker(self._local(action))
        self._taint(True)
        at = time.time()
        faults.fail_pod(self.api, NAMESPACE, victim)
        return self._recover("hard", at, inputs_of("hard", self.spec.ours))

    def _crash(self, action: Action) -> float | None:
        self._taint(True)
        return self._recover("crash", self._kill_program(), inputs_of("crash", True))

    def _kill_program(self) -> float:
        at = self.head.crash()
        head = self.head.current_pod()
        if head is not None:
            faults.fail_pod(self.api, NAMESPACE, head)
        return at

    def _hang(self, action: Action) -> float | None:
        names = inputs_of("hang", self.spec.ours)
        if self.spec.ours:
            self._taint(True)
            at = self._inbox(f"{self._local(action)}:hang")
            return self._recover("hang", at, names)
        at = self._inbox(f"{self._local(action)}:hang")
        timeout = INPUTS["collective_timeout"].seconds / self.compression
        time.sleep(timeout)
        self._taint(True)
        self._kill_program()
        return self._recover("hang", at, names, slept={"collective_timeout": timeout})

    def _notice(self, action: Action) -> float | None:
        pool = self._pool_of(self._local(action))
        self._maintained[action.event] = pool
        if self.spec.ours:
            self._taint(True)
        at = time.time()
        faults.schedule_maintenance(self.api, pool, NOTICE_LEAD_SECONDS / self.compression)
        if not self.spec.ours:
            return None
        return self._recover("maintenance", at, inputs_of("maintenance", True))

    def _maintenance(self, action: Action) -> float | None:
        pool = self._maintained[action.event]
        faults.start_maintenance(self.api, pool)
        victims = self._workers_on(pool)
        if not victims:
            return None
        self._taint(True)
        at = time.time()
        faults.fail_pod(self.api, NAMESPACE, victims[0])
        return self._recover("maintenance", at, inputs_of("maintenance", self.spec.ours))

    def _maintenance_end(self, action: Action) -> float | None:
        faults.end_maintenance(self.api, self._maintained[action.event])
        return None

    def _slow_on(self, action: Action) -> float | None:
        slice_ = self._local(action)
        self._slow[action.event] = (slice_, action.factor, self._inbox(
            f"{slice_}:slow={action.factor:g}"))
        return None

    def _slow_off(self, action: Action) -> float | None:
        slice_, factor, start = self._slow.pop(action.event)
        end = self._inbox(f"{slice_}:slow=off")
        self.episodes.append(SlowEpisode(start, end, factor))
        return None

    def _resend_slow(self) -> None:
        """A new trainer process (after a restart) on the same hosts: the slow ones are
        still slow."""
        for slice_, factor, _ in list(self._slow.values()):
            self._inbox(f"{slice_}:slow={factor:g}")

    # --- recoveries --------------------------------------------------------------------

    def _recover(self, kind: str, at: float, names: tuple[str, ...],
                 slept: dict[str, float] | None = None) -> float | None:
        """Hold the new pods for the hardware's inputs, then wait for training again."""
        held = dict(slept or {})
        back = [n for n in names if n not in held]
        held.update(self._hold(back, at))
        self.injected.append((kind, at, held))
        resumed = self._wait_resumed(at)
        if resumed is None:
            _log(f"{self.spec.job}: {kind} at {at:.1f}: training did not resume within "
                 f"{RECOVERY_TIMEOUT:.0f} s")
        return resumed

    def _hold(self, names: list[str], since: float) -> dict[str, float]:
        seconds = {n: INPUTS[n].seconds / self.compression for n in names}
        try:
            faults.wait_for(self._new_pods, HOLD_TIMEOUT, "new worker pods", 0.1)
        except TimeoutError:
            _log(f"{self.spec.job}: no new worker pod {HOLD_TIMEOUT:.0f} s after the "
                 "fault: nothing held")
            seconds = {}
        time.sleep(sum(seconds.values()))
        self._taint(False)
        return seconds

    def _new_pods(self) -> bool:
        pods = self.core.list_namespaced_pod(
            NAMESPACE, label_selector=worker_pods_selector(self.spec.job)).items
        return any(p.metadata.deletion_timestamp is None and not p.spec.node_name
                   for p in pods)

    def _wait_resumed(self, after: float) -> float | None:
        deadline = time.time() + RECOVERY_TIMEOUT
        while time.time() < deadline:
            self.logs.refresh()
            attempt = self.logs.first("attempt", after)
            step = self.logs.first("step", attempt.at) if attempt is not None else None
            if step is not None:
                return step.at
            time.sleep(0.1)
        return None

    def recoveries(self) -> list[Recovery]:
        """What each fault cost, read back from the logs and the kill times."""
        self.logs.refresh()
        kills = self.head.kill_times()
        out = []
        for kind, at, held in self.injected:
            said = self.logs.first("noticed", at)
            killed = min((k for k in kills if k >= at), default=None)
            noticed = min((t for t in (said.at if said else None, killed) if t is not None),
                          default=None)
            attempt = self.logs.first("attempt", at)
            resumed = self.logs.first("step", attempt.at) if attempt is not None else None
            hang = kind == "hang" and self.spec.ours
            out.append(Recovery(kind, at, noticed, attempt.at if attempt else None,
                                resumed.at if resumed else None, held,
                                unnoticed_until=noticed if hang else None))
        return out

    def counters(self) -> dict[str, Any]:
        """The job's status counters and its JobSet's restarts, at the end."""
        from elastic_api.names import JOBSET_GROUP, JOBSET_PLURAL, JOBSET_VERSION

        status = self._status()
        jobset = self.custom.get_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, NAMESPACE, JOBSET_PLURAL,
            status.get("jobSetName") or self.spec.job)
        return {"jobset_restarts": int((jobset.get("status") or {}).get("restarts") or 0),
                "counters": status.get("counters")}

    # --- the cluster -------------------------------------------------------------------

    def _taint(self, on: bool) -> None:
        with self._lock:
            for name in self.nodes:
                spec = self.core.read_node(name).spec
                taints = [self.api.sanitize_for_serialization(t) for t in
                          (spec.taints or []) if t.key != HOLD_TAINT]
                if on:
                    taints.append({"key": HOLD_TAINT, "effect": "NoSchedule"})
                self.core.patch_node(name, {"spec": {"taints": taints}})

    def _inbox(self, text: str) -> float:
        self._faults += 1
        path = self.spec.inbox / f"{self._faults:06d}.fault"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.rename(path)
        return time.time()

    def _worker(self, slice_: int) -> str:
        pods = self.core.list_namespaced_pod(
            NAMESPACE, label_selector=worker_pods_selector(self.spec.job, slice_)).items
        running = sorted(p.metadata.name for p in pods if p.metadata.deletion_timestamp
                         is None and p.status is not None and p.status.phase == "Running")
        if not running:
            raise RuntimeError(f"{self.spec.job}: no Running worker pod in slice {slice_}")
        return running[0]

    def _pool_of(self, slice_: int) -> str:
        slices = self._status().get("slices") or []
        pool = next((s.get("pool") for s in slices if s.get("index") == slice_), None)
        if not pool:
            raise RuntimeError(f"{self.spec.job}: slice {slice_} has no node pool")
        return str(pool)

    def _workers_on(self, pool: str) -> list[str]:
        nodes = set(faults.pool_nodes(self.api, pool))
        pods = self.core.list_namespaced_pod(
            NAMESPACE, label_selector=worker_pods_selector(self.spec.job)).items
        return sorted(p.metadata.name for p in pods if p.spec.node_name in nodes
                      and p.metadata.deletion_timestamp is None
                      and p.status is not None and p.status.phase == "Running")
