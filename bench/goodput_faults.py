"""The goodput runs' faults on one side's job (bench/goodput_side.py), at real speed: each
fault done the way the cluster or the hardware would do it, and the recovery waited for.

    hard         a worker pod of the slice fails (kwok: its container exits 1)
    crash        the training program crashes: its process is killed, its head pod fails
    hang         the slice's part of the next step never returns (`--fault-inbox`); the
                 baseline's program then dies as by its collective timeout, at once (the
                 timeout is the model's parameter, bench/goodput_model.py)
    notice       GKE announces a maintenance of the slice's node pool: ours checkpoints
                 and moves the slice; the baseline ignores it
    maintenance  it begins: the pool's label and taint; a host of this side still there
                 is taken (its pod fails)
    maintenance_end, slow, slow_off   the signals removed; the slice `factor` times
                 slower, then at speed again (`--fault-inbox`)

A recovery is over at the trainer's first step after its restore (its log's `attempt`
line); what each part cost is read from the log afterwards (bench/goodput_phases.py).
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from bench.goodput_account import Recovery, SlowEpisode
from bench.goodput_logs import Logs
from bench.goodput_phases import Phases, phases
from bench.goodput_side import NAMESPACE, HeadContainer, SideSpec, job_manifest, trainer_command
from elastic_api.names import GROUP, PLURAL, VERSION, job_pods_selector, worker_pods_selector
from elastic_devtools.localcluster import faults

RECOVERY_TIMEOUT = 300.0  # the trainer's own elastic timeout
NOTICE_LEAD_SECONDS = 600.0  # within the default spec.maintenance.leadSeconds (900)


def _log(msg: str) -> None:
    import sys

    print(f"[goodput] {msg}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Action:
    """What to do to a side: `what` (a kind above) on `slice`, for event `event`."""

    what: str
    slice: int
    event: int = 0
    factor: float = 1.0


@dataclass
class Injected:
    kind: str
    at: float
    resumed: float | None = None


class Side:
    """One job of a run: created, trained, hit, and what each hit cost."""

    def __init__(self, spec: SideSpec, api: Any, env: dict[str, str]) -> None:
        self.spec, self.api = spec, api
        self.core: Any = client.CoreV1Api(api)
        self.custom: Any = client.CustomObjectsApi(api)
        self.manifest = job_manifest(spec)
        self.logs = Logs()
        self.head = HeadContainer(self.core, spec.job, trainer_command(self.manifest),
                                  {**env, "ETJ_JOB_NAME": spec.job,
                                   "ETJ_JOB_NAMESPACE": NAMESPACE},
                                  spec.workdir / spec.job, self.logs,
                                  on_start=self._resend_slow)
        self.injected: list[Injected] = []
        self.episodes: list[SlowEpisode] = []
        self._slow: dict[int, tuple[int, float, float]] = {}  # event -> slice, factor, start
        self._maintained: dict[int, str] = {}  # event -> pool
        self._faults = 0
        self._lock = threading.Lock()
        # A replay's next action (goodput_check.play): no recovery is waited for past it,
        # or a notice that moved nothing held the maintenance it announced for 300 s.
        self.wait_until: float | None = None

    # --- the job -----------------------------------------------------------------------

    def create(self) -> None:
        """The job created (its pools carry the side's label: goodput_cluster.py)."""
        self.spec.inbox.mkdir(parents=True, exist_ok=True)
        (self.spec.workdir / self.spec.job).mkdir(parents=True, exist_ok=True)
        self.custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL,
                                                    self.manifest)

    def start(self, warm_steps: int, timeout: float = 600) -> None:
        """Its slices Ready, the trainer running, `warm_steps` steps done."""
        faults.wait_for(lambda: self.status().get("slicesReady") == self.spec.slices,
                        300, f"{self.spec.job}: every slice Ready")
        self.head.start()

        def enough() -> bool:
            self.logs.refresh()
            return self.logs.count("step") >= warm_steps

        faults.wait_for(enough, timeout, f"{self.spec.job}: {warm_steps} steps", 1.0)

    def wait_whole(self, timeout: float = 300) -> None:
        """Every slice Ready and trained on again (after a recovery on fewer)."""
        def whole() -> bool:
            status = self.status()
            active = (status.get("training") or {}).get("activeSlices")
            return status.get("slicesReady") == self.spec.slices == active

        try:
            faults.wait_for(whole, timeout, f"{self.spec.job}: every slice trained on", 0.5)
        except TimeoutError:
            _log(f"{self.spec.job}: not every slice trained on {timeout:.0f} s on")

    def delete(self) -> None:
        """The trainer stopped, the job deleted, its pods gone (its pools free again)."""
        self.head.stop()
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL,
                                                    self.spec.job)
        faults.wait_for(lambda: not self._pods(), 180, f"{self.spec.job}: pods gone", 0.5)

    def status(self) -> dict[str, Any]:
        job = self.custom.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL,
                                                       self.spec.job)
        return dict(job.get("status") or {})

    def _pods(self) -> list[Any]:
        return list(self.core.list_namespaced_pod(
            NAMESPACE, label_selector=job_pods_selector(self.spec.job)).items)

    # --- the actions -------------------------------------------------------------------

    def act(self, action: Action) -> float:
        """Do `action`; returns when the next gap of training starts counting (after the
        recovery, if it called for one)."""
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
        at = time.time()
        faults.fail_pod(self.api, NAMESPACE, victim)
        return self._recover("hard", at)

    def _crash(self, action: Action) -> float | None:
        return self._recover("crash", self._kill_program())

    def _kill_program(self) -> float:
        at = self.head.crash()
        head = self.head.current_pod()
        if head is not None:
            faults.fail_pod(self.api, NAMESPACE, head)
        return at

    def _hang(self, action: Action) -> float | None:
        if not self.spec.ours:  # its collective timeout ends it (the model's parameter):
            # the program killed at once, no hang sent (a new process would read it too)
            return self._recover("hang", self._kill_program())
        return self._recover("hang", self._inbox(f"{self._local(action)}:hang"))

    def _notice(self, action: Action) -> float | None:
        pool = self._pool_of(self._local(action))
        self._maintained[action.event] = pool
        at = time.time()
        faults.schedule_maintenance(self.api, pool, NOTICE_LEAD_SECONDS)
        return self._recover("maintenance", at) if self.spec.ours else None

    def _maintenance(self, action: Action) -> float | None:
        pool = self._maintained[action.event]
        faults.start_maintenance(self.api, pool)
        victims = self._workers_on(pool)
        if not victims:  # ours moved away at the notice
            return None
        at = time.time()
        faults.fail_pod(self.api, NAMESPACE, victims[0])
        return self._recover("maintenance", at)

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
        """A new trainer process on the same hosts: the slow ones are still slow."""
        for slice_, factor, _ in list(self._slow.values()):
            self._inbox(f"{slice_}:slow={factor:g}")

    # --- recoveries --------------------------------------------------------------------

    def _recover(self, kind: str, at: float) -> float | None:
        fault = Injected(kind, at)
        self.injected.append(fault)
        deadline = time.time() + RECOVERY_TIMEOUT
        if self.wait_until is not None and self.wait_until < deadline:
            deadline = self.wait_until
        while time.time() < deadline:
            self.logs.refresh()
            attempt = self.logs.first("attempt", at)
            step = self.logs.first("step", attempt.at) if attempt is not None else None
            if step is not None:
                fault.resumed = step.at
                return step.at
            time.sleep(0.1)
        _log(f"{self.spec.job}: {kind} at {at:.1f}: training did not resume within "
             f"{deadline - at:.0f} s")
        return None

    def phases(self, step: float) -> list[Phases]:
        """What each fault cost, part by part."""
        self.logs.refresh()
        started = [p.started_at for p in self.head.processes]
        killed = self.head.kill_times()
        out = [phases(f.kind, f.at, self.logs.records, started, killed, step)
               for f in self.injected]
        return [p for p in out if p is not None]

    def recoveries(self) -> list[Recovery]:
        """The faults as the account reads them (bench/goodput_account.py)."""
        self.logs.refresh()
        kills = self.head.kill_times()
        out = []
        for f in self.injected:
            said = self.logs.first("noticed", f.at)
            killed = min((k for k in kills if k >= f.at), default=None)
            noticed = min((t for t in (said.at if said else None, killed) if t is not None),
                          default=None)
            attempt = self.logs.first("attempt", f.at)
            out.append(Recovery(f.kind, f.at, noticed, attempt.at if attempt else None,
                                f.resumed))
        return out

    def counters(self) -> dict[str, Any]:
        """The job's status counters and budgets at the end."""
        status = self.status()
        return {"counters": status.get("counters"), "budgets": status.get("budgets")}

    # --- the cluster -------------------------------------------------------------------

    def _inbox(self, text: str) -> float:
        with self._lock:
            self._faults += 1
            path = self.spec.inbox / f"{self.spec.job}-{self._faults:06d}.fault"
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
        slices = self.status().get("slices") or []
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

