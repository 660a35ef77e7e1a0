"""The multi-tenant chaos soak (issue 33, point 2): `make soak SOAK_JOBS=K` (K >= 2; the
single job is tests/integration/test_chaos.py, whose faults and checks this reuses).

K jobs of two teams (job i of team a when i is even, else b: tests/support/chaos_tenants.py)
in two namespaces, each team with a LocalQueue on one ClusterQueue under real Kueue, team
a at the high WorkloadPriorityClass, team b at the low one. The ClusterQueue's quota fits
the K jobs; the cluster has 3K + 1 one-host TPU pools (ETJ_TEST_TPU_POOLS, the Makefile
sets it): every job's replacement slice has the spare. The operator runs as the chart's
two replicas watching both namespaces, through the TCP proxy like the trainers.

Faults: each job gets its own seeded plan (test_chaos.py's kinds, on its slices) and one
seed interleaves them; a fault waits only for its own job to be healthy, so the others
train on through it. Once, after the first round: a new high-priority job of team a
preempts the low-priority job of team b (Kueue's LowerPriority preemption), runs, and is
deleted; the preempted job is readmitted and its trainer resumes from its newest
committed checkpoint.

Asserts: every job's invariants (tests/support/chaos_checks.py, the preemption taken as
elastic_api.queueing says: no fault, no restart); across jobs: slice failures counted once
per job; no job short of a slice for longer than CAPACITY_BOUND_S while a pool stood free
(the clock stops while a fault keeps the API server from serving the operator: APF
throttling it, a restart);
every quarantine names only jobs with faults of their own on the pool; the preemption as
the contract says; the HA audit. soak-summary.json as test_chaos.py's, per job.
"""
from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from kubernetes import client

from elastic_api import GROUP, PLURAL, VERSION
from elastic_api.names import (
    JOB_NAME_LABEL,
    KUEUE_PRIORITY_CLASS_LABEL,
    KUEUE_QUEUE_NAME_LABEL,
    TPU_TOPOLOGY_LABEL,
)
from elastic_api.queueing import REASON_ADMITTED, REASON_PREEMPTED
from elastic_api.validation import validate_job
from elastic_devtools.localcluster import Cluster, faults
from elastic_devtools.localcluster import kueue_queues as kq
from elastic_devtools.localcluster.faults import wait_for
from elastic_devtools.localcluster.tcpproxy import TcpProxy, proxied_kubeconfig
from elastic_operator.render import render_jobset
from tests.support.chaos_checks import JobRun, job_violations, soak_summary
from tests.support.chaos_faults import (
    CHECKPOINT_KEEP,
    KINDS,
    STEP_SECONDS,
    STEPS_BETWEEN_FAULTS,
    Chaos,
    Fault,
    chaos_job,
    inject_when_ready,
    plan_faults,
    retrying,
    started_from,
    step_of,
    wait_ready,
)
from tests.support.chaos_tenants import (
    PRIORITIES,
    PoolFault,
    Preemption,
    Tenant,
    TenantSampler,
    capacity_left_idle,
    counted_once_per_job,
    interleave,
    preempted_as_the_contract_says,
    quarantined_for_own_faults,
    tenants,
)
from tests.support.chaos_watch import CheckpointWatcher, Sampler
from tests.support.chart import ChartReplicas
from tests.support.ha_faults import HaFaults
from tests.support.trainer_run import Reference, TrainerProcesses, head_command, with_flag

pytestmark = pytest.mark.cluster

SOAK_SECONDS = float(os.environ.get("ETJ_SOAK_SECONDS") or 0)
SOAK_JOBS = int(os.environ.get("ETJ_SOAK_JOBS") or 2)
SLICES = 3  # per job: two_slices leaves one slice training
TPU = ("v6e", "2x2")  # one host per slice: 3K + 1 nodes, not 4 x that
# K trainers share two cores with the cluster: each at 1/K of the single job's pace, so
# together they ask for what one does. At 12 steps a soak second (test_chaos's rule) a
# 1,800 s run at K = 3 gave each job 21,600 steps: hours of training on two cores after
# the faults had ended.
PACE_S = round(STEP_SECONDS * SOAK_JOBS, 3)
# Faults run by time (fault_loop stops at SOAK_SECONDS), so the steps only need to last
# that long: the soak's seconds at this pace, less a fifth for the recoveries' downtime.
# The floor keeps a short probe's jobs training through a few faults.
STEPS = max(2000, int(SOAK_SECONDS * 0.8 / PACE_S))
RECOVERY_TIMEOUT = 900
# A replacement takes the free pool within a few scheduling rounds; under a loaded
# machine's recovery (detection, the worker Job recreated, kwok's pod Running) well
# inside this.
CAPACITY_BOUND_S = 90.0
# The operator's default spec.recovery.quarantineWindowSeconds (elastic_api.models).
QUARANTINE_WINDOW_S = 3600.0


@dataclass
class Slot:
    """One job of the soak: who it is, its processes and what watches it."""

    tenant: Tenant
    trainer: TrainerProcesses
    checkpoints: CheckpointWatcher
    sampler: Sampler
    chaos: Chaos
    injected: list[Fault] = field(default_factory=list)
    preemptions: int = 0

    def status(self) -> dict[str, Any]:
        return self.chaos.status()


def job_manifest(t: Tenant, checkpoint_dir: Path, inbox: Path) -> dict[str, Any]:
    return chaos_job(t.job, t.namespace, TPU, SLICES, STEPS, RECOVERY_TIMEOUT,
                     checkpoint_dir, inbox, {KUEUE_QUEUE_NAME_LABEL: t.local_queue,
                                             KUEUE_PRIORITY_CLASS_LABEL: t.priority_class},
                     step_seconds=PACE_S)


def quota(obj: dict[str, Any], jobs: int) -> dict[str, str]:
    requests = kq.jobset_requests(render_jobset(validate_job(obj)))
    return {k: str(int(v * jobs)) for k, v in requests.items()}


@contextmanager
def team_queues(api: client.ApiClient, prefix: str, namespaces: dict[str, str],
                one_job: dict[str, Any]) -> Iterator[dict[str, str]]:
    """The priority classes, a ClusterQueue of K jobs' quota (preempting lower priority)
    and a LocalQueue per team, all deleted afterwards. LocalQueue names by team."""
    custom = client.CustomObjectsApi(api)
    with ExitStack() as stack:
        stack.enter_context(kq.priority_classes(api, dict(PRIORITIES.values())))
        made = stack.enter_context(kq.queues(api, namespaces["team-a"],
                                             quota(one_job, SOAK_JOBS), prefix=prefix))
        other = f"{prefix}-lq"
        custom.create_namespaced_custom_object(
            kq.KUEUE_GROUP, kq.KUEUE_VERSION, namespaces["team-b"], "localqueues",
            kq.local_queue(namespaces["team-b"], other, made.cluster_queue))
        stack.callback(lambda: custom.delete_namespaced_custom_object(
            kq.KUEUE_GROUP, kq.KUEUE_VERSION, namespaces["team-b"], "localqueues", other))
        yield {"team-a": made.local_queue, "team-b": other}


@pytest.fixture
def proxy(cluster: Cluster) -> Iterator[TcpProxy]:
    server = urlsplit(cluster.server)
    with TcpProxy(server.hostname or "127.0.0.1", server.port or 443) as tcp_proxy:
        yield tcp_proxy


@pytest.mark.stalls  # the trainers freeze: the per-job checks look at Progressing
@pytest.mark.timeout(int(SOAK_SECONDS * 3) + 1200 * SOAK_JOBS)
def test_jobs_of_two_teams_survive_random_faults_and_a_preemption(
        kueue: Cluster, crd_api: client.ApiClient, namespace: str, another_namespace: str,
        proxy: TcpProxy, tmp_path: Path) -> None:
    assert SOAK_JOBS >= 2, "one job is tests/integration/test_chaos.py"
    seed = int(os.environ.get("ETJ_CHAOS_SEED") or random.SystemRandom().randrange(2**31))
    print(f"\nmulti-tenant chaos seed {seed} (replay: ETJ_CHAOS_SEED={seed}); "
          f"{SOAK_JOBS} jobs of {STEPS} steps at {PACE_S:.2f} s; soak {SOAK_SECONDS:.0f}s")
    rng = random.Random(seed)
    api, cluster = crd_api, kueue
    tpu_nodes = [n for n in client.CoreV1Api(api).list_node().items
                 if (n.metadata.labels or {}).get(TPU_TOPOLOGY_LABEL) == TPU[1]]
    assert len(tpu_nodes) >= SLICES * SOAK_JOBS + 1, \
        f"{len(tpu_nodes)} {TPU} nodes: run with ETJ_TEST_TPU_POOLS=v6e:2x2:" \
        f"{SLICES * SOAK_JOBS + 1} (make soak sets it)"
    namespaces = {"team-a": namespace, "team-b": another_namespace}
    proxied = proxied_kubeconfig(cluster.kubeconfig, proxy, tmp_path / "proxied-kubeconfig")

    def through_proxy(kubeconfig: Path) -> Path:
        return proxied_kubeconfig(kubeconfig, proxy, kubeconfig.with_suffix(".proxied"))

    probe = tenants(1, namespaces, {"team-a": "x", "team-b": "x"})[0]
    with ExitStack() as stack:
        queues = stack.enter_context(team_queues(
            api, "mt" + namespace.rsplit("-", 1)[-1], namespaces,
            job_manifest(probe, tmp_path / "x", tmp_path / "x")))
        operators = stack.enter_context(ChartReplicas(
            cluster, api, namespace, tmp_path, kubeconfig=through_proxy,
            also_watch=(another_namespace,)).running())
        run_soak(seed, rng, cluster, api, operators, proxy, proxied,
                 tenants(SOAK_JOBS, namespaces, queues), queues, tmp_path)


def run_soak(seed: int, rng: random.Random, cluster: Cluster, api: client.ApiClient,
             operators: ChartReplicas, proxy: TcpProxy, proxied: Path, jobs: list[Tenant],
             queues: dict[str, str], tmp_path: Path) -> None:
    custom = client.CustomObjectsApi(api)
    slots: list[Slot] = []
    ha = HaFaults(cluster, api, operators.namespace, operators, lambda: {})
    reference = undisturbed_run(jobs, tmp_path / "reference")
    for t in jobs:
        slots.append(start_job(custom, api, ha, proxy, proxied, t, tmp_path / t.job))
    ha.status = slots[0].status
    sampler = TenantSampler(api, lambda: {s.tenant.name: s.status() for s in slots}, SLICES,
                            held_back=ha.holding_back.is_set)
    sampler.start()
    pool_faults: list[PoolFault] = []
    preemption: Preemption | None = None
    try:
        plans = [plan_faults(random.Random(rng.getrandbits(32)), soak=SOAK_SECONDS > 0,
                             slices=SLICES) for _ in slots]
        preemption = fault_loop(rng, slots, plans, pool_faults, queues, custom, tmp_path)
        for s in slots:
            wait_for(lambda s=s: s.trainer.poll() is not None, RECOVERY_TIMEOUT
                     + STEPS * PACE_S * 2, f"{s.tenant.name}'s trainer to finish",
                     interval=0.5)
        reference.wait(300 + STEPS * PACE_S * 2)
    finally:
        for s in slots:
            for node in s.chaos.not_ready_nodes:
                faults.make_node_ready(api, node)
        for proc in operators.procs:
            proc.resume()
            if not proc.running:
                proc.start()
        sampler.stop()
        for s in slots:
            s.sampler.stop()
            s.checkpoints.stop()
            s.trainer.stop()
        reference.stop()
    ha.next_fault()
    finish(seed, slots, reference, sampler, pool_faults, preemption, ha, tmp_path)


def undisturbed_run(jobs: list[Tenant], workdir: Path) -> Reference:
    """The jobs' one undisturbed run. Their trainers' commands differ only in their
    paths, so one run gives every job's expected parameters; unpaced (pacing changes no
    parameter) and with no simulated write time, so it is done early and leaves the CPU
    to the jobs' trainers (one reference per job, paced, beside them made 2K trainers on
    two cores)."""
    def command(t: Tenant) -> list[str]:
        return head_command(job_manifest(t, workdir / "checkpoints", workdir / "no-faults"))

    assert all(command(t) == command(jobs[0]) for t in jobs), "the jobs' trainers differ"
    workdir.mkdir(parents=True)
    # Nor does the simulated write's length (0.9 s a checkpoint at the jobs' pace).
    unpaced = with_flag(command(jobs[0]), "--min-step-seconds", "0")
    return Reference(with_flag(unpaced, "--simulate-checkpoint-write-seconds", "0"), workdir)


def start_job(custom: client.CustomObjectsApi, api: client.ApiClient, ha: HaFaults,
              proxy: TcpProxy, proxied: Path, t: Tenant, workdir: Path) -> Slot:
    """Create the job, wait for it admitted with its slices Ready, start its trainer and
    its watchers."""
    workdir.mkdir(parents=True)
    checkpoint_dir, inbox = workdir / "checkpoints", workdir / "fault-inbox"
    inbox.mkdir()
    manifest = job_manifest(t, checkpoint_dir, inbox)
    command = head_command(manifest)
    custom.create_namespaced_custom_object(GROUP, VERSION, t.namespace, PLURAL, manifest)

    def status() -> dict[str, Any]:
        got: dict[str, Any] = retrying(lambda: custom.get_namespaced_custom_object(
            GROUP, VERSION, t.namespace, PLURAL, t.job)).get("status") or {}
        return got

    wait_for(lambda: status().get("slicesReady") == SLICES, RECOVERY_TIMEOUT,
             f"{t.name} admitted, {SLICES} ready slices", interval=0.5)
    env = {**os.environ, "KUBECONFIG": str(proxied), "PYTHONUNBUFFERED": "1",
           "ETJ_JOB_NAME": t.job, "ETJ_JOB_NAMESPACE": t.namespace}
    trainer = TrainerProcesses(command, env, workdir)
    checkpoints = CheckpointWatcher(checkpoint_dir, CHECKPOINT_KEEP)
    checkpoints.start()
    trainer.start()
    sampler = Sampler(api, t.namespace, t.job)
    sampler.start()
    chaos = Chaos(api, t.namespace, t.job, ha, trainer, proxy, checkpoints, status, inbox,
                  recovery_timeout=RECOVERY_TIMEOUT, slices=SLICES)
    return Slot(t, trainer, checkpoints, sampler, chaos)


def fault_loop(rng: random.Random, slots: list[Slot], plans: list[list[Fault]],
               pool_faults: list[PoolFault], queues: dict[str, str],
               custom: client.CustomObjectsApi, tmp_path: Path) -> Preemption | None:
    """Every (job, fault) of the interleaved plans, each when its own job is healthy and
    trained past its last fault; the preemption once every job had a round of faults or
    the low-priority job is half done, whichever comes first.
    Stops at the soak's end or when a job is too close to its last step."""
    started, preemption = time.monotonic(), None
    sequence = interleave(rng, plans)
    preempt_after = len(KINDS) * len(slots)
    for n, (index, fault) in enumerate(sequence):
        if SOAK_SECONDS and time.monotonic() - started > SOAK_SECONDS:
            break
        if preemption is None and (n == preempt_after or past_half(slots)):
            preemption = preempt(slots, queues, custom, tmp_path)
        slot = slots[index]
        if not inject_into(slot, fault, pool_faults, started):
            break
    if preemption is None:  # a short run: the preemption after its faults
        preemption = preempt(slots, queues, custom, tmp_path)
    return preemption


def past_half(slots: list[Slot]) -> bool:
    """The low-priority job is half done: preempt it now, while it trains. A first run
    (seed 1, 240 s) preempted it after its last step, as the other job's slow-slice fault
    took two minutes: readmission and a resume, but no training interrupted."""
    return step_of(low_priority(slots).status()) >= STEPS // 2


def low_priority(slots: list[Slot]) -> Slot:
    """The job the preemption takes: team b's."""
    return next(s for s in slots if s.tenant.team == "team-b")


def inject_into(slot: Slot, fault: Fault, pool_faults: list[PoolFault],
                started: float) -> bool:
    """One fault into one job, as test_chaos.py's run_faults; False: the job is too close
    to its end for more faults."""
    floor = (slot.injected[-1].at_step if slot.injected else 0) + STEPS_BETWEEN_FAULTS
    print(f"  t={time.monotonic() - started:.0f}s {slot.tenant.name}: {fault.kind} next, "
          f"at step >= {floor}", flush=True)
    ready = inject_when_ready(slot.chaos, fault, floor, STEPS)
    if ready is None:
        return False
    pools = {s["index"]: s.get("pool") for s in ready.get("slices") or []}
    t = time.monotonic() - started
    pool_faults += [PoolFault(slot.tenant.name, pools[i], t) for i in fault.slices
                    if pools.get(i) and fault.kind != "slice_slow"]
    slot.injected.append(fault)
    # With the time: a first run (seed 1, 2026-12-02) went 9 min between two faults and
    # its output could not say which wait took them.
    print(f"  t={t:.0f}s {slot.tenant.name} fault {len(slot.injected)}: {fault.kind} "
          f"slices {fault.slices} at step {fault.at_step} {fault.detail}", flush=True)
    return True


def preempt(slots: list[Slot], queues: dict[str, str], custom: client.CustomObjectsApi,
            tmp_path: Path) -> Preemption:
    """A new high-priority job of team a takes the low-priority job's quota: the low one
    is preempted (its pods go, then its trainer, SIGTERM as the kubelet would), the new
    one runs and is deleted, the low one is readmitted and a new trainer process starts
    from its newest committed checkpoint."""
    low = low_priority(slots)
    high_t = Tenant("preemptor", "team-a", next(s.tenant.namespace for s in slots
                                                if s.tenant.team == "team-a"),
                    queues["team-a"], PRIORITIES["team-a"][0])
    wait_ready(low.chaos, step_of(low.status()) + STEPS_BETWEEN_FAULTS, "the preemption")
    custom.create_namespaced_custom_object(GROUP, VERSION, high_t.namespace, PLURAL,
                                           job_manifest(high_t, tmp_path / "unused",
                                                        tmp_path / "unused"))
    wait_for(lambda: admitted(low.status()) == REASON_PREEMPTED, 300,
             f"{low.tenant.name} preempted by {high_t.name}", interval=0.25)
    low.preemptions += 1
    core = client.CoreV1Api(low.chaos.api)
    wait_for(lambda: not core.list_namespaced_pod(
        low.tenant.namespace, label_selector=f"{JOB_NAME_LABEL}={low.tenant.job}").items,
             300, f"{low.tenant.name}'s pods gone")
    low.trainer.stop()
    committed = low.checkpoints.latest()
    wait_for(lambda: (retrying(lambda: custom.get_namespaced_custom_object(
        GROUP, VERSION, high_t.namespace, PLURAL, high_t.job)).get("status") or {})
        .get("slicesReady") == SLICES, 300, f"{high_t.name} running")
    custom.delete_namespaced_custom_object(GROUP, VERSION, high_t.namespace, PLURAL,
                                           high_t.job)
    wait_for(lambda: admitted(s := low.status()) == REASON_ADMITTED
             and s.get("slicesReady") == SLICES, 300, f"{low.tenant.name} readmitted")
    low.trainer.start()
    resumed = wait_for(lambda: started_from(low.trainer.log), 120,
                       f"{low.tenant.name}'s new trainer process to start")
    print(f"  {low.tenant.name} preempted by {high_t.name} (newest committed {committed}),"
          f" resumed from {resumed}", flush=True)
    return Preemption(low.tenant.name, (), {}, 1, 0, committed, resumed)


def admitted(status: dict[str, Any]) -> str:
    return next((c.get("reason", "") for c in status.get("conditions") or []
                 if c.get("type") == "Admitted"), "")


def finish(seed: int, slots: list[Slot], reference: Reference, sampler: TenantSampler,
           pool_faults: list[PoolFault], preemption: Preemption | None, ha: HaFaults,
           tmp_path: Path) -> None:
    """Each job's invariants, the cross-job ones, the summary; no violation."""
    runs: list[JobRun] = []
    violations: list[str] = []
    for s in slots:
        if (rc := s.trainer.poll()) != 0:
            violations.append(f"{s.tenant.name}: the trainer exited {rc} "
                              f"(logs {s.trainer.tmp_path})")
            continue
        summary = json.loads(s.trainer.summary.read_text())
        total = summary["elastic_events_total"]
        final = wait_for(lambda s=s, total=total: (st := s.status()).get("training", {})
                         .get("state") == "Succeeded" and st.get("counters", {})
                         .get("elasticEvents") == total and st, 60,
                         f"{s.tenant.name}: the operator to count {total} elastic events")
        run = JobRun(client.CoreV1Api(s.chaos.api), s.chaos, s.injected, summary,
                     reference.summary(), final, s.sampler, s.checkpoints, STEPS,
                     preemptions=s.preemptions)
        runs.append(run)
        violations += job_violations(run)
    if len(runs) == len(slots):
        violations += cross_job_violations(slots, runs, sampler, pool_faults, preemption)
    violations += [f"audit: {p}" for p in ha.audit_problems()]
    kinds = {f.kind for s in slots for f in s.injected}
    violations += [f"kind {k} never injected" for k in sorted(set(KINDS) - kinds)]
    summary = soak_summary(seed, runs, violations, ha=ha.figures(), tenants={
        s.tenant.name: {"team": s.tenant.team, "priority": s.tenant.priority_class,
                        "preemptions": s.preemptions} for s in slots},
        quarantines=[vars(q) for q in sampler.seen_quarantines])
    text = json.dumps(summary, indent=1, default=str)
    for path in filter(None, (tmp_path / "soak-summary.json",
                              os.environ.get("ETJ_SOAK_SUMMARY"))):
        Path(path).write_text(text)
    print(f"\nsoak summary ({tmp_path / 'soak-summary.json'}):\n{text}", flush=True)
    assert violations == [], f"logs: {tmp_path}"


def cross_job_violations(slots: list[Slot], runs: list[JobRun], sampler: TenantSampler,
                         pool_faults: list[PoolFault],
                         preemption: Preemption | None) -> list[str]:
    names = [s.tenant.name for s in slots]
    problems = counted_once_per_job(
        {n: sum(f.hits for f in s.injected) for n, s in zip(names, slots, strict=True)},
        {n: r.counters.get("sliceFailures", 0) for n, r in zip(names, runs, strict=True)})
    problems += capacity_left_idle(sampler.capacity, CAPACITY_BOUND_S)
    problems += quarantined_for_own_faults(sampler.seen_quarantines, pool_faults,
                                           {s.tenant.name: s.tenant.team for s in slots},
                                           QUARANTINE_WINDOW_S)
    if preemption is not None:
        run = runs[names.index(preemption.job)]
        problems += preempted_as_the_contract_says(Preemption(
            preemption.job, tuple(sampler.admitted.get(preemption.job, ())), run.counters,
            preemption.preempted, sum(f.hits for f in run.injected),
            preemption.committed_at_eviction, preemption.resumed_from))
    return [f"cross-job: {p}" for p in problems]
