"""Goodput over a week of failures at the published rates, this operator against plain
JobSet / xpk, side by side in one run (issue 59, docs/benchmarks.md section 7).

1. The trace (bench/goodput_trace.py): a week of a large job (JOB: 16 slices of v5e
   16x16, 1,024 hosts: every baseline restart starts a trainer process, 15-60 s here,
   so the week's 28 interruptions keep the run within the hour) at Llama 3's
   interruption rate and mix, FALCON's slow hosts, maintenance notices; seeded.
2. The replay, COMPRESSION times faster, on the local control plane: two jobs of
   LOCAL_SLICES slices (slice k of the large job is slice k mod LOCAL_SLICES here), each
   with the bundled trainer run as its head's `main` (`etj train`, simulated backend on
   CPU, paced at STEP_SECONDS a step, so that a trace step is 100 s): **ours** and the
   **baseline** (bench/goodput_side.py). Both get the same actions, each on its own
   clock: it trains for the compressed time between two actions, counted from the end
   of the recovery before (bench/goodput_faults.py).
3. The account (bench/goodput_account.py), from the trainers' logs: goodput as replayed
   and at trace scale, and the badput by cause.
"""
from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from statistics import mean
from typing import Any

from bench import goodput_trace as trace
from bench.cluster_prep import prepare_namespace, start_operator
from bench.common import ratio, write_json
from bench.goodput_account import account
from bench.goodput_faults import Side
from bench.goodput_side import NAMESPACE, SideSpec
from elastic_devtools.background import BackgroundLoop
from elastic_devtools.localcluster.operator_process import OperatorProcess

JOB = trace.JobShape(slices=16, hosts_per_slice=64)
JOB_TPU = "v5e 16x16"
COMPRESSION = 1000.0
SEED = 59
STEP_SECONDS = 0.1
LOCAL_SLICES, TOPOLOGY, HOSTS_PER_SLICE = 4, "2x4", 2
SPARES = {"ours": 2, "baseline": 1}  # ours moves slices; the baseline's restart may too
QUICK_JOB = trace.JobShape(slices=4, hosts_per_slice=2, days=0.25)


def _log(msg: str) -> None:
    print(f"[goodput] {msg}", file=sys.stderr, flush=True)


@dataclass
class LoadSampler(BackgroundLoop):
    """The machine's 1-minute load average every 10 s: what the run shared the CPUs with."""

    THREAD_NAME = "goodput-load"
    samples: list[float] | None = None

    def _run(self) -> None:
        self.samples = []
        while True:
            self.samples.append(os.getloadavg()[0])
            if self._stop.wait(10.0):
                return


def checkpoint_steps(compression: float) -> int:
    return max(1, round(trace.CHECKPOINT_PERIOD_SECONDS / (compression * STEP_SECONDS)))


def side_specs(pools: list[str], workdir: Path, compression: float) -> list[SideSpec]:
    specs, start = [], 0
    for name in ("ours", "baseline"):
        count = LOCAL_SLICES + SPARES[name]
        specs.append(SideSpec(name, LOCAL_SLICES, TOPOLOGY, tuple(pools[start:start + count]),
                              checkpoint_steps(compression), STEP_SECONDS, workdir / name))
        start += count
    return specs


def replay(side: Side, actions: list[trace.Action], gaps: list[float],
           t0: float) -> float:
    """The actions on `side`, each after its gap of training; returns the end."""
    clock = t0
    for action, gap in zip(actions, gaps, strict=False):
        time.sleep(max(0.0, clock + gap - time.time()))
        try:
            clock = side.act(action)
        except Exception as err:  # recorded; the replay goes on with the next action
            _log(f"{side.spec.job}: {action.what} failed: {type(err).__name__}: {err}")
            clock = time.time()
    time.sleep(max(0.0, clock + gaps[-1] - time.time()))
    return time.time()


def run(quick: bool = False) -> dict[str, Any]:
    from elastic_devtools import localcluster as lc

    job = QUICK_JOB if quick else JOB
    events = trace.generate(job, SEED)
    actions = trace.actions(events, job.seconds)
    gaps = trace.gaps([a.at for a in actions], job.seconds, COMPRESSION)
    workdir = Path(tempfile.mkdtemp(prefix="etj-bench-goodput-"))
    pools = LOCAL_SLICES * 2 + sum(SPARES.values())
    _log(f"trace: {len(events)} events ({trace.counts_of(job)}) over {job.days:g} days of "
         f"{job.hosts} hosts, replayed in {sum(gaps):.0f} s of training per side")
    cluster = lc.up(lc.ClusterConfig(
        dir=workdir / "cluster", tpu_pools=(lc.parse_tpu_pool(f"v5e:{TOPOLOGY}:{pools}"),),
        cpu_nodes=2, die_with_parent=True), progress=_log)
    operator: OperatorProcess | None = None
    sides: list[Side] = []
    load = LoadSampler()
    try:
        api = cluster.api_client()
        operator = _start(cluster, api, workdir)
        names = _pools(api)
        env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "PYTHONUNBUFFERED": "1"}
        env.pop("XLA_FLAGS", None)
        sides = [Side(s, api, env, COMPRESSION) for s in side_specs(names, workdir,
                                                                      COMPRESSION)]
        _label_cpu_nodes(api, sides)
        for side in sides:
            side.create()
        for side in sides:
            side.wait_ready()
            side.head.start()
        warm = 3 * checkpoint_steps(COMPRESSION) + 30
        for side in sides:
            side.wait_steps(warm)
        load.start()
        t0 = time.time()
        ends = _replay_both(sides, actions, gaps, t0)
        load.stop()
        _save_replay(workdir / "replay.json", sides, t0, ends)
        return summarize(job, events, sides, t0, ends, load.samples or [], quick)
    finally:
        load.stop()
        for side in sides:
            side.head.stop()
        if operator is not None:
            operator.stop()
        lc.down(workdir / "cluster", progress=_log)


def _start(cluster: Any, api: Any, workdir: Path) -> OperatorProcess:
    prepare_namespace(api, NAMESPACE)
    return start_operator(cluster.kubeconfig, workdir, "bench-goodput")


def _pools(api: Any) -> list[str]:
    from kubernetes import client

    from elastic_api.names import NODE_POOL_LABEL, TPU_ACCELERATOR_LABEL

    core: Any = client.CoreV1Api(api)
    nodes = core.list_node(label_selector=TPU_ACCELERATOR_LABEL).items
    return sorted({n.metadata.labels[NODE_POOL_LABEL] for n in nodes},
                  key=lambda name: int(name.rsplit("-", 1)[1]))


def _label_cpu_nodes(api: Any, sides: list[Side]) -> None:
    """The heads run on the CPU pool: its nodes carry every side's label."""
    from kubernetes import client

    from elastic_api.names import TPU_ACCELERATOR_LABEL

    core: Any = client.CoreV1Api(api)
    for node in core.list_node().items:
        if TPU_ACCELERATOR_LABEL not in (node.metadata.labels or {}):
            core.patch_node(node.metadata.name, {"metadata": {"labels": {
                s.spec.node_label: "true" for s in sides}}})


def _replay_both(sides: list[Side], actions: list[trace.Action], gaps: list[float],
                 t0: float) -> dict[str, float]:
    ends: dict[str, float] = {}

    def one(side: Side) -> None:
        ends[side.spec.name] = replay(side, actions, gaps, t0)
        _log(f"{side.spec.job}: replay done after {ends[side.spec.name] - t0:.0f} s")

    # Daemons: an interrupted run stops at once (its clean-up takes the cluster down).
    threads = [threading.Thread(target=one, args=(s,), name=f"goodput-{s.spec.name}",
                                daemon=True) for s in sides]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return ends


def _save_replay(path: Path, sides: list[Side], t0: float, ends: dict[str, float]) -> None:
    """What the account reads, beside the trainers' logs in the run's directory: to
    account for a run again without running it."""
    write_json(path, {"t0": t0, "ends": ends, "compression": COMPRESSION, "sides": {
        s.spec.name: {"logs": [str(p) for p in s.logs.paths],
                      "recoveries": [r.__dict__ for r in s.recoveries()],
                      "episodes": [e.__dict__ for e in s.episodes]} for s in sides}})
    _log(f"the replay's logs and {path.name} are in {path.parent}")


def summarize(job: trace.JobShape, events: list[trace.TraceEvent], sides: list[Side],
              t0: float, ends: dict[str, float], load: list[float],
              quick: bool) -> dict[str, Any]:
    per_side = {}
    for side in sides:
        name = side.spec.name
        result = account(side.logs.steps(), side.recoveries(), side.episodes, t0,
                         ends[name], COMPRESSION)
        result["trainer_processes"] = len(side.head.processes)
        result["status_counters"] = side.counters()
        per_side[name] = result
    ours, base = per_side["ours"], per_side["baseline"]
    return {
        "quick": quick, "seed": SEED, "compression": COMPRESSION,
        "job": {"slices": job.slices, "hosts_per_slice": job.hosts_per_slice,
                "hosts": job.hosts, "days": job.days, "tpu": JOB_TPU},
        "replayed_as": {"slices": LOCAL_SLICES, "topology": f"v5e {TOPOLOGY}",
                        "hosts_per_slice": HOSTS_PER_SLICE, "spare_pools": SPARES,
                        "step_seconds": STEP_SECONDS,
                        "trace_step_seconds": STEP_SECONDS * COMPRESSION,
                        "checkpoint_period_steps": checkpoint_steps(COMPRESSION)},
        "rates": _rates(job),
        "counts": trace.counts_of(job),
        "expected_counts": {k: round(v, 2) for k, v in trace.expected_counts(job).items()},
        "events": [e.__dict__ for e in events],
        "inputs": {name: {"seconds": i.seconds, "replay_seconds": i.seconds / COMPRESSION,
                          "source": i.source} for name, i in trace.INPUTS.items()},
        "assumptions": {"checkpoint_period_seconds": trace.CHECKPOINT_PERIOD_SECONDS,
                        "maintenance_seconds": trace.MAINTENANCE_SECONDS,
                        "notice_lead_seconds": trace.NOTICE_LEAD_SECONDS,
                        "slow_per_1000_host_days": trace.SLOW_PER_1000_HOST_DAYS},
        "sides": per_side,
        "ratio_goodput_trace_ours_vs_baseline": ratio(ours["goodput_trace"],
                                                      base["goodput_trace"]),
        "ratio_goodput_replay_ours_vs_baseline": ratio(ours["goodput_replay"],
                                                       base["goodput_replay"]),
        "load_average_1m": {"mean": round(mean(load), 2) if load else None,
                            "max": round(max(load), 2) if load else None,
                            "samples": len(load)},
    }


def _rates(job: trace.JobShape) -> dict[str, Any]:
    return {
        "unplanned_per_1000_host_days": round(trace.UNPLANNED_PER_1000_HOST_DAYS, 3),
        "unplanned_source": "Llama 3 (Meta, 2024): 419 unplanned interruptions in 54 days "
                            "on 16,384 GPUs (2,048 hosts)",
        "shares_percent": trace.LLAMA3_SHARES,
        "meta_rsc_per_1000_node_days": trace.META_RSC_PER_1000_NODE_DAYS,
        "meta_rsc_counts": {k: round(v, 1) for k, v in trace.meta_counts(job).items()},
        "slow": {"seconds_range": trace.SLOW_SECONDS_RANGE, "factor": trace.SLOW_FACTOR,
                 "source": "Alibaba FALCON (arXiv 2410.12588): tens of seconds to nearly "
                           "ten hours, jobs 1.34x slower on average; the rate is assumed"},
    }
