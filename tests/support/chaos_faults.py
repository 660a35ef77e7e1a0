"""The chaos soak's faults (tests/integration/test_chaos.py; per job in the multi-tenant
soak): what each kind is, a seeded plan of them, and how each is injected into one job and
waited for until the operator has seen it (`inject`). The module docstring of
test_chaos.py says what each kind does and what is checked after."""
from __future__ import annotations

import json
import os
import random
import re
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import urllib3
from kubernetes import client

from elastic_api import progress_rules as progress_rule
from elastic_api.conditions import Reason
from elastic_api.names import HEAD_REPLICATED_JOB
from elastic_devtools.localcluster import faults
from elastic_devtools.localcluster.faults import wait_for
from elastic_devtools.localcluster.tcpproxy import TcpProxy
from tests.builders import etj
from tests.support.chaos_watch import CheckpointWatcher, condition
from tests.support.ha_faults import HaFaults
from tests.support.trainer_run import TrainerProcesses

T = TypeVar("T")
JOB_LABEL = "elastic.pathways.dev/job-name"
SLICES = 3
STEPS_BETWEEN_FAULTS = 25  # at least two checkpoints / five snapshots between faults
KINDS = ("fail_pod", "delete_pod", "node_not_ready", "two_slices", "operator_kill",
         "connections_dropped", "slice_down_during_checkpoint_write",
         "trainer_killed_during_checkpoint_write",
         # What the chart's two replicas add (tests/support/ha_faults.py):
         "leader_killed", "leader_stopped", "apiserver_throttled", "apiserver_restarted",
         # The silent ones (issue 32): nothing announces them.
         "slice_hung", "slice_slow", "trainer_frozen")
HA_KINDS = KINDS[-7:-3]
SILENT_KINDS = KINDS[-3:]
WITHOUT_SLICES = ("operator_kill", "trainer_killed_during_checkpoint_write", "trainer_frozen")
# A slow slice makes each step take this many times the mesh's usual step (the trainer's
# faults.slow_part): between the SlowSteps rule's 2x (progress_rule) and the trainer's hang
# watchdog's 10x its steps' p99, so only SlowSteps can fire (the steps run ~4x the job's
# best; tests/unit/test_chaos_slow_fault.py). At 20x, a product of a step's own time then,
# a step under load ran past the watchdog's 5 s floor and the slice was replaced as hung.
SLOW_FACTOR = 5
WRITE_FAULT_TRIES = 3  # a write fault that missed its write (too late) is tried again
# The chaos job's trainer (chaos_job): paced steps, a checkpoint every 10 steps, keep 3.
STEP_SECONDS = 0.05
CHECKPOINT_PERIOD, CHECKPOINT_KEEP = 10, 3
# The simulated slices take this share of a checkpoint period to write their shards:
# long enough for the fault to land inside the write (and for the trainer to learn of
# it), short enough that a write ends before the next one starts. 0.3 s at the single
# job's 0.05 s steps; 0.9 s at the multi-tenant soak's 0.15 s, where a fixed 0.3 s left
# the fault too small a window under load (seed 148101308, load 28: 3 tries, all too late).
WRITE_SHARE = 0.6


def chaos_job(name: str, ns: str, tpu: tuple[str, str], slices: int, steps: int,
              recovery_timeout: float, checkpoint_dir: Path, inbox: Path,
              labels: dict[str, str] | None = None,
              step_seconds: float = STEP_SECONDS) -> dict[str, Any]:
    """The soak's ElasticTrainingJob (one of the multi-tenant soak's, with its Kueue
    `labels` and its slower pace): the simulated trainer, its faults through `inbox`."""
    obj = (etj(name, ns).backend("simulated").tpu(*tpu, slices)
           # Every budget out of reach: each fault, a long soak's many freezes included
           # (3 an hour by default at this size), must be recovered, not end the job. A
           # slow slice is reported (the report path checked), not moved as by default.
           .spec(elastic={"timeoutSeconds": recovery_timeout, "maxRetries": 1000,
                          "maxSliceRestarts": 1000, "maxStallRestarts": 1000,
                          "onSlowSlice": "Report"},
                 checkpoint={"directory": str(checkpoint_dir),
                             "periodSteps": CHECKPOINT_PERIOD, "keep": CHECKPOINT_KEEP},
                 snapshot={"periodSteps": 5})
           .trainer("trainer:test", steps, model="tiny", batch=24,
                    args=["--min-step-seconds", str(step_seconds), "--report-interval", "0.5",
                          "--simulate-checkpoint-write-seconds",
                          str(round(WRITE_SHARE * CHECKPOINT_PERIOD * step_seconds, 3)),
                          "--fault-inbox", str(inbox)])
           .without("pathways").obj())
    obj["metadata"].setdefault("labels", {}).update(labels or {})
    return obj


@dataclass
class Fault:
    kind: str
    slices: list[int]
    at_step: int = -1
    detail: str = ""
    hits: int = 0  # slice failures injected, over all its tries


def plan_faults(rng: random.Random, soak: bool, slices: int = SLICES,
                kinds: Sequence[str] = KINDS) -> list[Fault]:
    """Every kind of `kinds` once in a seeded order (the soak: the HA kinds again, then a
    random tail), each on seeded slices of a job of `slices` (the multi-tenant soak's jobs
    have fewer than the single job's)."""
    kinds = list(kinds)
    rng.shuffle(kinds)
    if soak:  # the HA kinds twice, then a long random tail (drawn until time is up)
        again = list(HA_KINDS)
        rng.shuffle(again)
        kinds += again + [rng.choice(KINDS) for _ in range(1000)]
    plan = []
    for kind in kinds:
        if kind == "two_slices":
            plan.append(Fault(kind, sorted(rng.sample(range(slices), 2))))
        elif kind in WITHOUT_SLICES:
            plan.append(Fault(kind, []))
        else:
            plan.append(Fault(kind, [rng.randrange(slices)]))
    return plan


def worker_pods(api: client.ApiClient, ns: str, job: str, index: int) -> list[client.V1Pod]:
    pods = client.CoreV1Api(api).list_namespaced_pod(
        ns, label_selector=f"{JOB_LABEL}={job},jobset.sigs.k8s.io/replicatedjob-name=worker,"
                           f"jobset.sigs.k8s.io/job-index={index}").items
    return sorted((p for p in pods if p.metadata.deletion_timestamp is None
                   and p.status.phase == "Running"), key=lambda p: p.metadata.name)


def healthy(status: dict[str, Any], slices: int = SLICES) -> bool:
    return (status.get("slicesReady") == slices
            and condition(status, "SliceDown").get("status") != "True"
            and condition(status, "Recovering").get("status") != "True")


def step_of(status: dict[str, Any]) -> int:
    return int((status.get("training") or {}).get("step") or 0)


@dataclass
class Chaos:
    """What a fault needs to reach: the cluster, the processes, the proxy, the disk."""

    api: client.ApiClient
    ns: str
    job: str
    ha: HaFaults
    trainer: TrainerProcesses
    proxy: TcpProxy
    checkpoints: CheckpointWatcher
    status: Callable[[], dict[str, Any]]
    inbox: Path  # the trainer's --fault-inbox
    recovery_timeout: float = 180
    slices: int = SLICES  # the job's numSlices
    not_ready_nodes: list[str] = field(default_factory=list)
    # (frozen, running again) in time.monotonic, per trainer freeze: Progressing may be
    # False only inside one.
    freezes: list[list[float]] = field(default_factory=list)
    slow_windows: list[tuple[float, float]] = field(default_factory=list)  # the same
    _injected: int = 0

    def inject_silent(self, fault: str) -> None:
        """Hand the trainer a silent fault (--fault-inbox): written aside, then renamed
        into place, so the trainer never reads half a file."""
        self._injected += 1
        staged = self.inbox / f"{self._injected}.staged"
        staged.write_text(fault)
        staged.rename(self.inbox / f"{self._injected}.fault")


def inject(chaos: Chaos, fault: Fault) -> bool:
    """Inject one fault and wait until it has been seen (SliceDown naming the slices, a
    failed checkpoint write, a new trainer process started from the newest committed
    checkpoint). False when a fault meant for a checkpoint write came too late for it."""
    chaos.ha.next_fault()
    if fault.kind == "operator_kill":
        fault.detail = chaos.ha.operator_kill()
        return True
    if fault.kind == "trainer_killed_during_checkpoint_write":
        return _trainer_killed(chaos, fault)
    if fault.kind in SILENT_KINDS:
        return {"slice_hung": _slice_hung, "slice_slow": _slice_slow,
                "trainer_frozen": _trainer_frozen}[fault.kind](chaos, fault)
    before = slice_restarts(chaos.status())
    victims = {i: _running_pod(chaos, fault, i) for i in fault.slices}
    if fault.kind == "node_not_ready":
        return _node_not_ready(chaos, fault, before, next(iter(victims.values())))
    if fault.kind in HA_KINDS:
        return _ha_fault(chaos, fault, before, victims)
    return _slice_fault(chaos, fault, before, victims)


def wait_ready(chaos: Chaos, floor: int, what: str) -> dict[str, Any] | None:
    """The job's status once it is healthy and trained to `floor`: no fault lands in the
    middle of another's recovery. None when the trainer has ended."""
    got: dict[str, Any] | Any = wait_for(lambda: chaos.trainer.poll() is not None or (
        healthy(s := chaos.status(), chaos.slices) and step_of(s) >= floor and s),
        chaos.recovery_timeout, f"{chaos.job}: step >= {floor}, healthy, before {what}",
        interval=0.25)
    return None if chaos.trainer.poll() is not None else got


def inject_when_ready(chaos: Chaos, fault: Fault, floor: int,
                      steps: int) -> dict[str, Any] | None:
    """`fault` injected once the job is healthy and trained to `floor` (one test's loop
    body, per job in the multi-tenant soak); a write fault that came after its write is
    tried again later, WRITE_FAULT_TRIES in all. Returns the status it was injected at;
    None when the trainer ended first or is too close to its last step (`steps`) to
    notice a fault."""
    ready = wait_ready(chaos, floor, fault.kind)
    if ready is None or (at := step_of(ready)) > steps - STEPS_BETWEEN_FAULTS:
        return None
    fault.at_step = at
    for attempt in range(WRITE_FAULT_TRIES):
        if attempt and wait_ready(chaos, step_of(chaos.status()) + STEPS_BETWEEN_FAULTS,
                                  f"try {attempt + 1} of {fault.kind}") is None:
            return None
        if inject(chaos, fault):
            return ready
    raise AssertionError(f"{chaos.job} {fault.kind}: none of {WRITE_FAULT_TRIES} tries "
                         "landed inside a checkpoint write")


def _running_pod(chaos: Chaos, fault: Fault, index: int) -> client.V1Pod:
    """A Running worker pod of the slice to hit. The job's status (slicesReady) and this
    list are two reads: a short run (seed 2105217213) once listed none for a slice its
    status called Ready. Waited for, and printed when it happens."""
    started = time.monotonic()
    pods: list[client.V1Pod] = wait_for(
        lambda: worker_pods(chaos.api, chaos.ns, chaos.job, index), 60,
        f"a running worker pod of slice {index}", interval=0.1)
    if (waited := time.monotonic() - started) > 0.5:
        print(f"  ({fault.kind}: waited {waited:.1f} s for a running pod of slice {index},"
              " which the job's status called Ready)", flush=True)
    return pods[0]


def _trainer_killed(chaos: Chaos, fault: Fault) -> bool:
    writing = chaos.checkpoints.wait_for_write(60)
    chaos.trainer.kill()
    committed = chaos.checkpoints.latest()
    fault.detail = f"during the write of step {writing}; newest committed {committed}"
    chaos.trainer.start()
    started = wait_for(lambda: started_from(chaos.trainer.log), 120,
                       f"the new trainer process to start (log {chaos.trainer.log})")
    assert started == (committed, "checkpoint"), \
        f"the new process started from {started}, not the newest committed step " \
        f"{committed} (the write of {writing} was cut)"
    fault.detail += f"; the new process started from {started[0]}"
    return True


def _slice_hung(chaos: Chaos, fault: Fault) -> bool:
    """The slice's part of the next step never returns, its pods Ready: the trainer's
    watchdog blames it and asks for its replacement; the operator counts it as one slice
    failure (reason SliceHung) and recreates its worker Job."""
    [index] = fault.slices
    before = slice_restarts(chaos.status())
    fault.hits += 1
    chaos.inject_silent(f"{index}:hang")
    _wait_seen(chaos, before, fault.slices, {})

    def reason() -> str | None:
        one = next((s for s in chaos.status().get("slices") or [] if s["index"] == index), {})
        return one.get("reason") or (one.get("lastReplacement") or {}).get("reason")

    wait_for(lambda: reason() == Reason.SLICE_HUNG, 60,
             f"slice {index} replaced as {Reason.SLICE_HUNG}", interval=0.1)
    stall = (chaos.status().get("training") or {}).get("stall") or {}
    fault.detail = (f"replaced as {Reason.SLICE_HUNG}; the trainer's evidence: "
                    f"{stall.get('evidence', '(not in status any more)')}")
    return True


def _slice_slow(chaos: Chaos, fault: Fault) -> bool:
    """The slice makes each step take SLOW_FACTOR x the usual step from the next one:
    Degraded SlowSteps once the steps have run slow for the rule's window, and nothing
    replaced (onSlowSlice Report, the default); then back to its own speed."""
    [index] = fault.slices
    wait_for(lambda: (chaos.status().get("progress") or {}).get("baselineStepSeconds"),
             chaos.recovery_timeout, "the job's own best step time learned", interval=0.5)
    st = chaos.status()
    before, failures = slice_restarts(st), (st.get("counters") or {}).get("sliceFailures", 0)
    slowed = time.monotonic()
    chaos.inject_silent(f"{index}:slow={SLOW_FACTOR}")
    st = wait_for(lambda: condition(s := chaos.status(), "Degraded").get("reason")
                  == Reason.SLOW_STEPS and s, progress_rule.SLOW_SECONDS + 240,
                  f"Degraded {Reason.SLOW_STEPS} for slow slice {index}", interval=0.5)
    took = time.monotonic() - slowed
    chaos.inject_silent(f"{index}:slow=off")
    cleared = _slow_steps_cleared(chaos, index)
    chaos.slow_windows.append((slowed, time.monotonic() + 1))  # the sampler's lag
    after = chaos.status()
    assert slice_restarts(after) == before, f"a slow slice was replaced: {before} -> " \
        f"{slice_restarts(after)} (spec.elastic.onSlowSlice is Report)"
    assert (after.get("counters") or {}).get("sliceFailures", 0) == failures, after["counters"]
    fault.detail = (f"Degraded {Reason.SLOW_STEPS} {took:.0f} s after: "
                    f"{condition(st, 'Degraded').get('message')}; {cleared}")
    return True


def _slow_steps_cleared(chaos: Chaos, index: int) -> str:
    """Degraded leaves SlowSteps once the slice is fast again, in words. Not a violation
    when it does not within 120 s: the rule compares with the job's own best, and on a
    machine whose load grew since that best was learned the steps may still run 2x it
    (a 600 s soak, seed 1623782278, load ~20: still SlowSteps 120 s later, most likely
    so; its replay cleared, its steps after the slow slice at ~1.7x the best). The slow
    window stays open until it clears or the wait ends (Sampler.slow_steps counts the
    samples after it, a figure)."""
    started = time.monotonic()
    try:
        wait_for(lambda: condition(chaos.status(), "Degraded").get("reason")
                 != Reason.SLOW_STEPS, 120, "", interval=0.5)
    except TimeoutError:
        now = chaos.status()
        print(f"  (slice {index} fast again, still {Reason.SLOW_STEPS} 120 s later: "
              f"{condition(now, 'Degraded').get('message')}; steps "
              f"{json.dumps((now.get('progress') or {}).get('stepGaps'))} s over "
              f"{json.dumps((now.get('progress') or {}).get('stepCounts'))})", flush=True)
        return f"still {Reason.SLOW_STEPS} 120 s after the slice was fast again"
    return f"cleared {time.monotonic() - started:.0f} s after the slice was fast again"


def _trainer_frozen(chaos: Chaos, fault: Fault) -> bool:
    """The trainer SIGSTOPped between two checkpoint writes (a save in flight lengthens
    the deadline fivefold): Progressing False at the learned deadline, naming a frozen
    trainer; with onStall Recover (the default) the operator deletes the head pod and its
    Job makes a new one, whose main (a new process, started here as the pod would) resumes
    from the newest committed checkpoint; Progressing True again."""
    st = chaos.status()
    restarts = (st.get("counters") or {}).get("trainerRestarts", 0)
    deadline = float((st.get("progress") or {}).get("deadlineSeconds") or 0)
    head = _head_pod_uids(chaos)
    window = [_freeze_between_writes(chaos), 0.0]
    chaos.freezes.append(window)
    committed = chaos.checkpoints.latest()
    st = wait_for(lambda: condition(s := chaos.status(), "Progressing").get("status")
                  == "False" and s, deadline * progress_rule.EXTENDED_FACTOR + 120,
                  f"Progressing False for the frozen trainer (deadline {deadline:.0f} s)",
                  interval=0.5)
    stalled = condition(st, "Progressing")
    assert stalled["reason"] == Reason.PROGRESS_DEADLINE_EXCEEDED, stalled
    assert "a frozen trainer" in stalled["message"], stalled
    took = time.monotonic() - window[0]
    wait_for(lambda: _head_pod_uids(chaos) - head, 120, "a new head pod (onStall Recover)",
             interval=0.5)
    chaos.trainer.kill()  # the old pod's container goes with it
    chaos.trainer.start()
    started = wait_for(lambda: started_from(chaos.trainer.log), 120,
                       f"the new trainer process to start (log {chaos.trainer.log})")
    assert started == (committed, "checkpoint"), (started, committed)
    wait_for(lambda: (s := chaos.status()).get("counters", {}).get("trainerRestarts", 0)
             == restarts + 1 and condition(s, "Progressing").get("reason")
             == Reason.STEPS_ADVANCING, 180, "the new trainer process counted and advancing",
             interval=0.5)
    window[1] = time.monotonic()
    fault.detail = (f"Progressing False after {took:.0f} s (deadline {deadline:.0f} s); "
                    f"head pod replaced, the new process started from step {started[0]}")
    return True


def _freeze_between_writes(chaos: Chaos) -> float:
    """SIGSTOP the trainer while no checkpoint write is in flight (seen on disk after the
    stop, so none began in between); when (time.monotonic)."""
    proc = chaos.trainer.proc
    assert proc is not None
    for _ in range(100):
        wait_for(lambda: not chaos.checkpoints.writing_now(), 60,
                 "a moment between checkpoint writes", interval=0.005)
        os.killpg(proc.pid, signal.SIGSTOP)
        frozen = time.monotonic()
        wait_for(lambda: _process_state(proc.pid) == "T", 10, "the trainer stopped",
                 interval=0.01)
        if not chaos.checkpoints.rescan_writing():
            return frozen
        os.killpg(proc.pid, signal.SIGCONT)  # a write had begun: again
    raise AssertionError("no moment between checkpoint writes in 100 tries")


def _process_state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]


def _head_pod_uids(chaos: Chaos) -> set[str]:
    pods = retrying(lambda: client.CoreV1Api(chaos.api).list_namespaced_pod(
        chaos.ns, label_selector=f"{JOB_LABEL}={chaos.job},jobset.sigs.k8s.io/replicatedjob-name="
                                 f"{HEAD_REPLICATED_JOB}").items)
    return {p.metadata.uid for p in pods if p.metadata.deletion_timestamp is None}


def _node_not_ready(chaos: Chaos, fault: Fault, before: dict[int, int],
                    pod: client.V1Pod) -> bool:
    api, ns = chaos.api, chaos.ns
    node = pod.spec.node_name
    # Every slice with a worker on that node goes down with it.
    fault.slices = sorted({i for i in range(chaos.slices) if any(
        p.spec.node_name == node for p in worker_pods(api, ns, chaos.job, i))})
    fault.detail = f"node {node}"
    chaos.not_ready_nodes.append(node)
    fault.hits += len(fault.slices)
    faults.make_node_not_ready(api, node)
    _wait_seen(chaos, before, fault.slices, {})
    faults.make_node_ready(api, node)
    chaos.not_ready_nodes.remove(node)
    faults.wait_for_node_ready(api, node, True)
    return True


def _fail_pods(chaos: Chaos, fault: Fault, victims: dict[int, client.V1Pod],
               delete: bool = False) -> str:
    fault.hits += len(victims)
    for pod in victims.values():
        name = pod.metadata.name
        if delete:
            faults.delete_pod(chaos.api, chaos.ns, name, force=True)
        else:
            retrying(lambda name=name: faults.fail_pod(chaos.api, chaos.ns, name))
    return " ".join(f"pod {p.metadata.name}" for p in victims.values())


def _slice_fault(chaos: Chaos, fault: Fault, before: dict[int, int],
                 victims: dict[int, client.V1Pod]) -> bool:
    write_failures = chaos.trainer.write_failures()
    resumed = chaos.trainer.resumed_after_slice_loss()
    if fault.kind == "connections_dropped":
        cut = chaos.proxy.drop_connections()
        assert cut > 0, "nothing was connected through the proxy"
        fault.detail = f"{cut} connections cut, then "
    elif fault.kind == "slice_down_during_checkpoint_write":
        fault.detail += ("; " if fault.detail else "") + \
            f"during the write of step {chaos.checkpoints.wait_for_write(60)}, "
    fault.detail += _fail_pods(chaos, fault, victims, delete=fault.kind == "delete_pod")
    _wait_seen(chaos, before, fault.slices, victims)
    if fault.kind == "slice_down_during_checkpoint_write":
        # The trainer fails the write (the slice's shards are lost) once it settles its
        # checkpoints for the recovery, before it resumes; a fault that came after the
        # write ended fails none. A miss is known once the trainer resumed: waiting 20 s
        # for a failure that would not come let it train ~360 steps on per miss (seed
        # 556057493 ran out of steps before its last three faults).
        wait_for(lambda: chaos.trainer.write_failures() > write_failures
                 or chaos.trainer.resumed_after_slice_loss() > resumed,
                 chaos.recovery_timeout,  # it resumes once the slice is back (pause mode)
                 "the trainer to fail the checkpoint write or resume", interval=0.1)
        if chaos.trainer.write_failures() == write_failures:
            fault.detail += " (came after the write: tried again)"
            return False
    return True


def _ha_fault(chaos: Chaos, fault: Fault, before: dict[int, int],
              victims: dict[int, client.V1Pod]) -> bool:
    def fail() -> str:
        return _fail_pods(chaos, fault, victims)

    def slice_down() -> None:
        _wait_seen(chaos, before, fault.slices, victims, chaos.recovery_timeout)

    def replacing() -> bool:
        """The leader recorded the replacement of every slice hit; not done yet."""
        slices = {s["index"]: s for s in chaos.status().get("slices") or []}
        return all(slices.get(i, {}).get("restarts", 0) > before.get(i, 0)
                   and slices[i].get("replacement") is not None for i in fault.slices)

    ha = chaos.ha
    if fault.kind == "leader_killed":
        fault.detail = ha.leader_killed(fail, slice_down)
    elif fault.kind == "leader_stopped":
        fault.detail = ha.leader_stopped(fail, replacing)
    elif fault.kind == "apiserver_throttled":
        fault.detail = ha.apiserver_throttled(fail, slice_down,
                                              lambda: healthy(chaos.status(), chaos.slices),
                                              chaos.recovery_timeout)
    else:
        assert fault.kind == "apiserver_restarted", fault.kind
        fault.detail = ha.apiserver_restarted(fail, slice_down)
    return True


def retrying(call: Callable[[], T], timeout: float = 60) -> T:
    """`call()`, again while the API server is not answering (restarting: refused
    connections, 503s, a custom resource not served yet) for up to `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except (client.ApiException, urllib3.exceptions.HTTPError, OSError) as err:
            status = getattr(err, "status", None)
            if status not in (None, 404, 429, 500, 502, 503, 504) \
                    or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


_STARTED = re.compile(r"attempt 0: .* start at step (\d+) \((\w+),")


def started_from(log: Path) -> tuple[int, str] | None:
    m = _STARTED.search(log.read_text(errors="replace"))
    return (int(m.group(1)), m.group(2)) if m else None


def slice_restarts(status: dict[str, Any]) -> dict[int, int]:
    return {s["index"]: int(s.get("restarts") or 0) for s in status.get("slices") or []}


def _wait_seen(chaos: Chaos, before: dict[int, int], slices: list[int],
               victims: dict[int, client.V1Pod], timeout: float = 60) -> None:
    """_wait_slice_down; on a timeout, the message says where the failure got stuck:
    whether each victim pod reached the API server as failed (kwok's part), what the
    job's status says of the slices, and what each replica says of itself (its role,
    its caches, its queue)."""
    try:
        _wait_slice_down(chaos.status, before, slices, timeout)
    except TimeoutError as timed_out:
        raise TimeoutError(f"{timed_out}; {_where_stuck(chaos, slices, victims)}") from None


def _where_stuck(chaos: Chaos, slices: list[int], victims: dict[int, client.V1Pod]) -> str:
    core = client.CoreV1Api(chaos.api)
    facts = []
    for pod in victims.values():
        try:
            now = core.read_namespaced_pod(pod.metadata.name, chaos.ns)
            facts.append(f"pod {pod.metadata.name} {now.status.phase}"
                         f"{' (deleting)' if now.metadata.deletion_timestamp else ''}")
        except client.ApiException as err:
            facts.append(f"pod {pod.metadata.name}: HTTP {err.status}")
    slices_now = {s["index"]: s for s in chaos.status().get("slices") or []}
    facts += [f"slice {i} {slices_now.get(i, {}).get('state')} restarts "
              f"{slices_now.get(i, {}).get('restarts')}" for i in slices]
    facts.append(f"Lease holder {chaos.ha.operators.holder()}")
    for i, proc in enumerate(chaos.ha.operators.procs):
        try:
            facts.append(f"replica {i} {json.dumps(proc.health(), sort_keys=True)}")
        except OSError as err:
            facts.append(f"replica {i}: {err}")
    return "; ".join(facts)


def _wait_slice_down(status: Callable[[], dict[str, Any]], before: dict[int, int],
                     slices: list[int], timeout: float = 60) -> None:
    """The operator counts a slice failure as a restart of that slice (never undone)."""
    wait_for(lambda: all(slice_restarts(status()).get(i, 0) > before.get(i, 0) for i in slices),
             timeout, f"the operator to see slices {slices} down", interval=0.1)
