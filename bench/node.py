"""The operator's node, modelled with cgroups: what its CPU request buys it when the
node is busy (`python -m bench --only scale --operator-request 500m`).

On a GKE node the kubelet gives each pod a cgroup whose CPU weight is its request
(cpu.shares = millicores x 1024 / 1000), so a pod that wants no more than its request
gets it however many threads its neighbours run; and the control plane and the TPU
nodes' kubelets run on other machines. The benchmark's machine holds all of it, so by
default it models the node with priorities only (the control plane ahead at nice -10,
the operator one session among the burners: bench/load.py), and the operator's share is
then a fraction of what the control plane leaves, not an amount of CPU.

`NodeModel` models the node as Kubernetes builds it instead, with cgroup v1's cpuset and
cpu controllers:

- the operator's node is `node_cpus` (CPU 0): the operator in a cpu cgroup weighted by
  its request, the tenants (the burners, and JobSet's controller: another pod) in one
  weighted by the rest of the node, whose requests fill it;
- everything off the node (the control plane, kwok, and the benchmark itself, which
  observes from outside) runs on the other CPUs.

The load generator still keeps the machine's load at its target, now all of its burners
on the node: at load 10 a one-CPU node runs ten times what it has. Needs root and
cgroup v1 (`cpuset`, `cpu` mounted under /sys/fs/cgroup); `unavailable` says what is
missing. It is the scale benchmark's model under load, with the chart's request
(`chart_request_m`), wherever the machine allows it.
"""
from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from bench.common import REPO

CHART_VALUES = REPO / "charts" / "elastic-operator" / "values.yaml"
CGROUP_ROOT = Path("/sys/fs/cgroup")
NAME = "etj-bench"
SHARES_PER_CPU = 1024  # cpu.shares of a whole CPU's request (the kubelet's)


def parse_millicores(text: str) -> int:
    """A Kubernetes CPU quantity ("500m", "1", "0.5") in millicores."""
    value = text.strip()
    try:
        millicores = int(value[:-1]) if value.endswith("m") else round(float(value) * 1000)
    except ValueError:
        raise ValueError(f"--operator-request {text!r}: give a CPU quantity such as "
                         f"500m or 1") from None
    if millicores <= 0:
        raise ValueError(f"--operator-request {text!r}: must be above 0")
    return millicores


def chart_request_m(values: Path = CHART_VALUES) -> int:
    """The operator's CPU request in the Helm chart's values, in millicores: what the
    node model gives the operator unless told otherwise."""
    data = yaml.safe_load(values.read_text())
    try:
        cpu = data["resources"]["requests"]["cpu"]
    except (KeyError, TypeError):
        raise ValueError(f"{values}: no resources.requests.cpu to model the operator's "
                         f"node with; give --operator-request CPU") from None
    return parse_millicores(str(cpu))


def unavailable(root: Path = CGROUP_ROOT, cpus: int | None = None,
                euid: int | None = None) -> str | None:
    """Why this machine cannot model the node (root, cgroup v1's cpuset and cpu, two
    CPUs), or None when it can."""
    if (os.geteuid() if euid is None else euid) != 0:
        return "it needs root to create cgroups"
    if (cpus if cpus is not None else os.cpu_count() or 1) < 2:
        return "it needs at least 2 CPUs: one for the node, the rest for what runs off it"
    return missing_controller(root)


def missing_controller(root: Path) -> str | None:
    """Which of cgroup v1's cpuset and cpu controllers is not mounted under `root`."""
    for controller in ("cpuset", "cpu"):
        if not (root / controller / "tasks").exists():
            return f"it needs cgroup v1's {controller} controller at {root / controller}"
    return None


def shares(request_m: int, node_cpus: int) -> tuple[int, int]:
    """cpu.shares of the operator and of the tenants on a node of `node_cpus` CPUs: the
    operator's request, and the rest of the node (the tenants' requests fill it)."""
    node_m = node_cpus * 1000
    if request_m >= node_m:
        raise ValueError(f"--operator-request {request_m}m: the modelled node has "
                         f"{node_m}m; ask less than that")
    return (request_m * SHARES_PER_CPU // 1000,
            (node_m - request_m) * SHARES_PER_CPU // 1000)


def split_cpus(cpus: int) -> tuple[str, str]:
    """The node's CPU list and the outside's: CPU 0 is the node, the rest outside."""
    if cpus < 2:
        raise ValueError("--operator-request needs a machine of at least 2 CPUs: one for "
                         "the operator's node, the rest for what runs off it")
    return "0", f"1-{cpus - 1}" if cpus > 2 else "1"


@dataclass
class NodeModel:
    """Create with `create()`, place processes, end with `remove()` (every process
    placed goes back to the root groups; the groups are removed)."""

    request_m: int
    cpus: int = field(default_factory=lambda: os.cpu_count() or 1)
    root: Path = CGROUP_ROOT

    def __post_init__(self) -> None:
        self.node_cpus, self.outside_cpus = split_cpus(self.cpus)
        self.operator_shares, self.tenant_shares = shares(self.request_m, 1)

    def describe(self) -> dict[str, object]:
        return {"operator_request_m": self.request_m, "node_cpus": self.node_cpus,
                "outside_cpus": self.outside_cpus, "operator_shares": self.operator_shares,
                "tenant_shares": self.tenant_shares}

    def create(self) -> None:
        why = missing_controller(self.root)
        if why:
            raise RuntimeError(f"--operator-request: {why}")
        mems = (self.root / "cpuset" / "cpuset.mems").read_text().strip()
        # A cpuset group takes no tasks, nor children with CPUs, before it has CPUs.
        for group, cpus in ((None, f"0-{self.cpus - 1}"), ("node", self.node_cpus),
                            ("outside", self.outside_cpus)):
            path = self._dir("cpuset", group)
            path.mkdir(parents=True, exist_ok=True)
            (path / "cpuset.cpus").write_text(cpus)
            (path / "cpuset.mems").write_text(mems)
        for group, weight in (("operator", self.operator_shares),
                              ("tenants", self.tenant_shares)):
            path = self._dir("cpu", group)
            path.mkdir(parents=True, exist_ok=True)
            (path / "cpu.shares").write_text(str(weight))

    def place_operator(self, pid: int) -> None:
        self._place(pid, ("cpuset", "node"), ("cpu", "operator"))

    def place_tenant(self, pid: int) -> None:
        self._place(pid, ("cpuset", "node"), ("cpu", "tenants"))

    def place_outside(self, pid: int) -> None:
        self._place(pid, ("cpuset", "outside"))

    def remove(self, timeout_s: float = 10.0) -> None:
        """Every process left in the groups back to the root's, then the groups gone. A
        process may join a group as it is emptied (a child started meanwhile inherits
        it), so this tries again until `timeout_s`, then names the groups left."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = self._remove_once()
            if not left:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"cgroups left behind: {', '.join(left)}")
            time.sleep(0.2)

    def _remove_once(self) -> list[str]:
        left = []
        for controller, group in (("cpu", "operator"), ("cpu", "tenants"), ("cpu", None),
                                  ("cpuset", "node"), ("cpuset", "outside"),
                                  ("cpuset", None)):
            path = self._dir(controller, group)
            if not path.exists():
                continue
            procs = path / "cgroup.procs"
            for pid in procs.read_text().split() if procs.exists() else ():
                with contextlib.suppress(OSError):  # gone meanwhile
                    (self.root / controller / "cgroup.procs").write_text(pid)
            try:
                path.rmdir()
            except OSError:
                left.append(str(path))
        return left

    def _dir(self, controller: str, group: str | None) -> Path:
        base = self.root / controller / NAME
        return base if group is None else base / group

    def _place(self, pid: int, *groups: tuple[str, str]) -> None:
        # cgroup.procs moves every thread of the process; its children inherit.
        for controller, group in groups:
            (self._dir(controller, group) / "cgroup.procs").write_text(str(pid))
