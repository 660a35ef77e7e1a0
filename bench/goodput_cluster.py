"""The local control plane the goodput runs share (bench/goodput_costs.py,
bench/goodput_check.py): fake v5e node pools enough for two sides (each side's slices
and spares on pools of its own), the jobs' namespace, the operator, and the machine's
load sampled while it runs."""
from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from statistics import mean
from typing import Any

from bench.cluster_prep import prepare_namespace, start_operator
from bench.goodput_side import NAMESPACE, SideSpec
from elastic_devtools.background import BackgroundLoop

LOCAL_SLICES, TOPOLOGY, HOSTS_PER_SLICE = 4, "2x4", 2
SPARES = {"ours": 2, "baseline": 1}  # ours moves slices; the baseline's restart may too
STEP_SECONDS = 0.1  # the tiny model paced at this (a real step: bench/goodput_model.py)


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

    def summary(self) -> dict[str, Any]:
        load = self.samples or []
        return {"mean": round(mean(load), 2) if load else None,
                "max": round(max(load), 2) if load else None, "samples": len(load)}


@dataclass(frozen=True)
class Cluster:
    api: Any
    env: dict[str, str]
    specs: dict[str, SideSpec]
    workdir: Path


def side_specs(pools: list[str], workdir: Path, checkpoint_steps: int) -> dict[str, SideSpec]:
    specs, start = {}, 0
    for name in ("ours", "baseline"):
        count = LOCAL_SLICES + SPARES[name]
        specs[name] = SideSpec(name, LOCAL_SLICES, TOPOLOGY, tuple(pools[start:start + count]),
                               checkpoint_steps, STEP_SECONDS, workdir / name)
        start += count
    return specs


@contextmanager
def local_cluster(workdir: Path, checkpoint_steps: int) -> Iterator[Cluster]:
    """The cluster up with both sides' pools labelled, the operator running; down after."""
    from elastic_devtools import localcluster as lc

    pools = LOCAL_SLICES * 2 + sum(SPARES.values())
    cluster = lc.up(lc.ClusterConfig(
        dir=workdir / "cluster", tpu_pools=(lc.parse_tpu_pool(f"v5e:{TOPOLOGY}:{pools}"),),
        cpu_nodes=2, die_with_parent=True), progress=_log)
    operator = None
    try:
        api = cluster.api_client()
        prepare_namespace(api, NAMESPACE)
        operator = start_operator(cluster.kubeconfig, workdir, "bench-goodput")
        env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "PYTHONUNBUFFERED": "1"}
        env.pop("XLA_FLAGS", None)
        specs = side_specs(_pools(api), workdir, checkpoint_steps)
        _label_nodes(api, specs)
        yield Cluster(api, env, specs, workdir)
    finally:
        if operator is not None:
            operator.stop()
        lc.down(workdir / "cluster", progress=_log)


def _pools(api: Any) -> list[str]:
    from kubernetes import client

    from elastic_api.names import NODE_POOL_LABEL, TPU_ACCELERATOR_LABEL

    core: Any = client.CoreV1Api(api)
    nodes = core.list_node(label_selector=TPU_ACCELERATOR_LABEL).items
    return sorted({n.metadata.labels[NODE_POOL_LABEL] for n in nodes},
                  key=lambda name: int(name.rsplit("-", 1)[1]))


def _label_nodes(api: Any, specs: dict[str, SideSpec]) -> None:
    """Each side's pools carry its label; the CPU pool (the heads) carries every side's."""
    from kubernetes import client

    from elastic_api.names import NODE_POOL_LABEL, TPU_ACCELERATOR_LABEL

    core: Any = client.CoreV1Api(api)
    mine = {pool: spec.node_label for spec in specs.values() for pool in spec.pools}
    for node in core.list_node().items:
        labels = node.metadata.labels or {}
        if TPU_ACCELERATOR_LABEL not in labels:
            wanted = {s.node_label: "true" for s in specs.values()}
        elif labels.get(NODE_POOL_LABEL) in mine:
            wanted = {mine[labels[NODE_POOL_LABEL]]: "true"}
        else:
            continue
        core.patch_node(node.metadata.name, {"metadata": {"labels": wanted}})
