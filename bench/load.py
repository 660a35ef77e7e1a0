"""A load generator run beside a benchmark: processes that burn CPU until the machine's
1-minute load average is at a target, so that "detection at load 10" means the same
thing from one run to the next rather than whatever else happens to run.

The load average counts runnable processes (an exponentially damped mean, 60 s time
constant on Linux). A burner is a process that is always runnable: each adds about 1 to
the load. Other work (the benchmark's own cluster, other sessions) adds its own, so the
number of burners follows what is left: every `period_s` it becomes the target minus the
load not ours, moved by at most `step` at a time. The load not ours is read from the
runnable threads now (/proc/loadavg's fourth field, sampled every `SAMPLE_S` over the
period, less our burners), not from the 1-minute average: that lags a minute, and a
controller on it kept 10 burners through the first half minute of the failures while
the cluster's churn added its own (2026-12-05, docs/benchmarks.md). When others alone
exceed the target there are no burners and the load is above it: the samples say so,
and the result reports the 1-minute load measured, not the target.

Burners run at the operator's priority (nice 0 as started): a niced burner would take
only idle time and load nothing that matters. Each is a session of its own, as the
cluster's processes and the operator are: with autogroup scheduling (on by default in
Linux, here too) the kernel shares the CPU between sessions first, then between the
threads of one. Burners left in the benchmark's session would load only that session, the
operator inside it five to one, a contest a node never sets a pod with a CPU request; as
sessions of their own they are the other tenants of the operator's node.

On GKE the control plane (API server, etcd, the controller-manager, the scheduler) runs
on Google's machines and the kubelets (kwok here) on the TPU nodes, none on the operator's
node. `favour` runs those processes ahead of the burners, so the load is the operator
node's; the benchmark can also leave them at nice 0, the whole machine at the load.
"""
from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import percentile
from elastic_devtools.background import BackgroundLoop

PERIOD_S = 5.0
SAMPLE_S = 0.1  # how often the runnable threads are counted within a period
STEP = 2
# What the cluster's control plane runs at when the load is the operator node's alone
# (`favour`): the autogroup weight of nice -10 is about nine times that of nice 0.
CONTROL_PLANE_NICE = -10


def burn(stop: Any) -> None:
    """A burner's body: spin until `stop` is set (checked every ~5 ms of work), in a
    session of its own (see above). Out of the benchmark's session, a Ctrl-C in its
    terminal no longer reaches the burner, so it also ends when its parent is gone."""
    os.setsid()
    parent = os.getppid()
    x = 1.0
    while not stop.is_set() and os.getppid() == parent:
        for _ in range(20_000):
            x = x * 1.0000001 + 1e-9
    _ = x


def favour(pids: dict[str, int], nice: int = CONTROL_PLANE_NICE) -> dict[str, int]:
    """Run these processes (component -> pid) ahead of the burners: their sessions'
    autogroups at `nice` (what the kernel shares the CPU by first), and each of their
    threads too (what it shares by where autogroup is off; a thread started later
    inherits it). The components whose priority was set, with the threads set."""
    done: dict[str, int] = {}
    for component, pid in pids.items():
        with contextlib.suppress(OSError):  # no autogroup here: the threads' nice alone
            Path(f"/proc/{pid}/autogroup").write_text(f"{nice}\n")
        tasks = 0
        for task in Path(f"/proc/{pid}/task").glob("*"):
            try:
                os.setpriority(os.PRIO_PROCESS, int(task.name), nice)
                tasks += 1
            except OSError:  # gone meanwhile, or not ours to raise (not root)
                continue
        if tasks:
            done[component] = tasks
    return done


def burners_for(target: float, load: float, burners_mean: float, current: int,
                step: int = STEP, most: int | None = None) -> int:
    """How many burners to run next: target minus the load not ours, within `step` of
    `current`, never below 0 (nor above `most`, default the target itself)."""
    others = max(0.0, load - burners_mean)
    wanted = max(0, round(target - others))
    most = round(target) if most is None else most
    wanted = min(wanted, most, current + step)
    return max(wanted, current - step, 0)


@dataclass
class Sample:
    at: float  # time.time()
    load1: float
    burners: int
    runnable: float | None = None  # the runnable threads, mean over the period before


def runnable_now(loadavg: str | None = None) -> int:
    """The threads runnable at this instant, this one's reading excluded: the numerator of
    /proc/loadavg's fourth field ("4/312": 4 running of 312)."""
    text = loadavg if loadavg is not None else Path("/proc/loadavg").read_text()
    return max(0, int(text.split()[3].split("/")[0]) - 1)


@dataclass
class LoadGenerator(BackgroundLoop):
    """Start with `start()`, read the samples in a window with `summary(start, end)`,
    end with `stop()` (also a context manager). target 0: burns nothing, samples only."""

    THREAD_NAME = "load-generator"
    target: float
    period_s: float = PERIOD_S
    # Where each burner goes once started (bench/node.py: a tenant of the operator's node).
    place: Callable[[int], None] | None = None
    samples: list[Sample] = field(default_factory=list)
    _procs: list[tuple[Any, Any]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._stop = threading.Event()  # start() makes a fresh one; _resize reads it

    def join_seconds(self) -> float:
        return self.period_s + 5

    def stop(self) -> None:
        super().stop()
        self._resize(0)

    def _run(self) -> None:
        while True:
            counted: list[int] = []
            deadline = time.monotonic() + self.period_s
            while time.monotonic() < deadline:
                counted.append(runnable_now())
                if self._stop.wait(SAMPLE_S):
                    return
            runnable = sum(counted) / len(counted)
            with self._lock:
                self.samples.append(Sample(time.time(), os.getloadavg()[0], len(self._procs),
                                           round(runnable, 2)))
            if self.target > 0:
                current = len(self._procs)  # every one of them runnable throughout
                self._resize(burners_for(self.target, runnable, current, current))

    def _resize(self, n: int) -> None:
        ctx = mp.get_context("spawn")  # the benchmark has threads: no fork
        while len(self._procs) < n and not self._stop.is_set():
            stop = ctx.Event()
            proc = ctx.Process(target=burn, args=(stop,), name="bench-load", daemon=True)
            proc.start()
            self._procs.append((proc, stop))
            if self.place is not None and proc.pid is not None:
                self.place(proc.pid)
        while len(self._procs) > n:
            proc, stop = self._procs.pop()
            stop.set()
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()

    def settle(self, timeout_s: float, within: float = 1.0) -> float:
        """Wait until the 1-minute load is within `within` of the target (it lags the
        burners by about a minute) or `timeout_s` passed; the seconds waited."""
        t0 = time.monotonic()
        while self.target > 0 and time.monotonic() - t0 < timeout_s \
                and os.getloadavg()[0] < self.target - within:
            time.sleep(1.0)
        return time.monotonic() - t0

    def summary(self, start: float | None = None, end: float | None = None) -> dict[str, Any]:
        """The measured 1-minute load and the burners over [start, end] (time.time())."""
        with self._lock:
            inside = [s for s in self.samples if (start is None or s.at >= start)
                      and (end is None or s.at <= end)]
        loads = [s.load1 for s in inside]
        runnable = [s.runnable for s in inside if s.runnable is not None]
        return {
            "target": self.target, "cpus": os.cpu_count(), "samples": len(inside),
            "load1_mean": round(sum(loads) / len(loads), 2) if loads else None,
            "load1_min": round(min(loads), 2) if loads else None,
            "load1_p50": _round(percentile(loads, 50)),
            "load1_max": round(max(loads), 2) if loads else None,
            "burners_mean": round(sum(s.burners for s in inside) / len(inside), 2)
            if inside else None,
            "burners_max": max((s.burners for s in inside), default=None),
            # What the burners were sized by: the threads runnable, our burners included.
            "runnable_mean": round(sum(runnable) / len(runnable), 2) if runnable else None,
            "runnable_max": max(runnable, default=None),
        }


def at_moment(samples: list[Sample], when: float) -> Sample | None:
    """The load generator's sample that covers `when` (time.time()): the first one at or
    after it, which records the burners run over the period up to it (they change only
    right after a sample) and the load read at its end. None after the last sample."""
    after = [s for s in samples if s.at >= when]
    return min(after, key=lambda s: s.at) if after else None


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 2)
