"""Goodput over a month of failures at the published rates: this operator with the API's
defaults against plain JobSet and xpk's defaults (issue 67; docs/benchmarks.md, section 7).

1. The costs (bench/goodput_costs.py): each kind of fault ROUNDS times on both sides at
   real speed on the local control plane, side by side, each recovery's parts read from
   the trainer's log.
2. The month (bench/goodput_model.py, goodput_timeline.py): for jobs of 1,024, 4,096 and
   16,384 hosts at Llama 3's and Meta's rates, SEEDS seeded months of interruptions played
   on each policy's timeline from those costs and what only hardware knows (named
   parameters with their sources): goodput by cause, with its spread over the seeds, the
   restart budgets of the API's defaults spent as the operator spends them.

The hour-long check of the model against a replay is its own benchmark (goodput_check).
"""
from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import goodput_costs as costs
from bench.goodput_cluster import STEP_SECONDS, LoadSampler, local_cluster
from bench.goodput_faults import Side
from bench.goodput_model import (
    RATES,
    UNITS,
    VARIANTS,
    Hardware,
    Job,
    Local,
    hardware_table,
    modelled,
)
from bench.goodput_timeline import months

SIZES = (16, 64, 256)  # slices of v5e 16x16 (64 hosts): 1,024, 4,096, 16,384 hosts
SEEDS = 20
CHECKPOINT_STEPS = 100  # the local jobs' checkpoint period (10 s at 0.1 s a step)


@dataclass(frozen=True)
class Setup:
    rounds: int
    kinds: tuple[str, ...]
    sizes: tuple[int, ...]
    seeds: int


FULL = Setup(costs.ROUNDS, costs.KINDS, SIZES, SEEDS)
QUICK = Setup(1, ("hard", "crash"), (16,), 3)


def _log(msg: str) -> None:
    print(f"[goodput] {msg}", file=sys.stderr, flush=True)


def run(quick: bool = False) -> dict[str, Any]:
    setup = QUICK if quick else FULL
    workdir = Path(tempfile.mkdtemp(prefix="etj-bench-goodput-"))
    faults = costs.schedule(setup.rounds, setup.kinds, 4)
    load = LoadSampler()
    started = time.time()
    with local_cluster(workdir, CHECKPOINT_STEPS) as cluster:
        load.start()
        try:
            measured = costs.measure(cluster.specs,
                                     lambda spec: Side(spec, cluster.api, cluster.env),
                                     faults, STEP_SECONDS)
        finally:
            load.stop()
    _log(f"costs measured in {time.time() - started:.0f} s; the runs' logs are in {workdir}")
    local = costs.local_params(measured)
    return {"quick": quick, "costs": measured, "rounds": setup.rounds,
            "kinds": list(setup.kinds), "local": _local_json(local),
            "hardware": hardware_table(Hardware()),
            "rates": {n: {"per_1000_host_days": round(r, 3), "source": s}
                      for n, (r, s) in RATES.items()},
            "months": month_table(setup.sizes, range(setup.seeds), Hardware(), local),
            "seeds": setup.seeds, "measure_seconds": round(time.time() - started, 1),
            "load_average_1m": load.summary(), "workdir": str(workdir)}


def remodel(saved: dict[str, Any]) -> dict[str, Any]:
    """A saved run's months modelled again from its measured costs (`--reuse-costs`): for
    a change to the model, not to what the control plane does; says when the costs were
    measured."""
    previous = saved["result"]
    setup = QUICK if previous["quick"] else FULL
    local = costs.local_params(previous["costs"])
    return {**previous, "local": _local_json(local), "hardware": hardware_table(Hardware()),
            "months": month_table(setup.sizes, range(setup.seeds), Hardware(), local),
            "costs_measured_at": previous.get("costs_measured_at", saved["measured_at"])}


def month_table(sizes: tuple[int, ...], seeds: range, hw: Hardware,
                local: Local) -> list[dict[str, Any]]:
    """Each size, rate (per host and per chip) and policy: goodput and its causes over
    the seeded months (a variant only where `modelled`)."""
    rows = []
    for slices in sizes:
        for rate_name, (rate, _) in RATES.items():
            for unit in UNITS:
                for label, policy, trains_on, backend in VARIANTS:
                    job = Job(slices, trains_on=trains_on, backend=backend)
                    if not modelled(label, job.hosts):
                        continue
                    per_host = job.rate(rate, unit)
                    rows.append({"hosts": job.hosts, "slices": slices, "rate": rate_name,
                                 "unit": unit, "per_1000_host_days": round(per_host, 3),
                                 "policy": label, "min_slices": job.min_slices,
                                 **months(policy, job, per_host, seeds, hw, local)})
    return rows


def _local_json(local: Local) -> dict[str, Any]:
    return {"detect": {f"{s}/{k}": v for (s, k), v in local.detect.items()},
            "back": {f"{s}/{k}": v for (s, k), v in local.back.items()},
            "start": local.start}
