"""What a step's time goes to, for the overhead benchmark's profile (bench/overhead_worker.py):
timers around the loop's parts, every thread's CPU, and how late a sleeping thread wakes
(the GIL and the cores, contended).

Only the profile rounds use these: wrapping functions costs time of its own, so the timed
rounds run without them.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from statistics import median
from typing import Any

from bench.common import percentile


class Timers:
    """Time spent in named parts: each call's wall time and the calling thread's CPU time
    (a part that waits for the device or a lock takes wall time, not CPU), kept per call
    so that a window (the steady state) can be read off afterwards."""

    def __init__(self) -> None:
        self.calls: dict[str, list[tuple[float, float, float]]] = defaultdict(list)

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        calls = self.calls[name]

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                calls.append((time.time(), time.perf_counter() - t0, time.thread_time() - c0))
        return timed

    def per_step(self, start: float, end: float, steps: int) -> dict[str, dict[str, float]]:
        """Milliseconds per step of each part (calls that ended in [start, end])."""
        out = {}
        for name, calls in sorted(self.calls.items()):
            inside = [(w, c) for t, w, c in calls if start <= t <= end]
            out[name] = {"wall_ms": round(sum(w for w, _ in inside) * 1e3 / max(1, steps), 4),
                         "cpu_ms": round(sum(c for _, c in inside) * 1e3 / max(1, steps), 4)}
        return out


@contextlib.contextmanager
def patched(owner: Any, name: str, timers: Timers, label: str) -> Iterator[None]:
    """`owner.name` timed as `label` for the block (a class, an instance or a module)."""
    original = getattr(owner, name)
    setattr(owner, name, timers.wrap(label, original))
    try:
        yield
    finally:
        setattr(owner, name, original)


def _thread_cpu(tid: int) -> float | None:
    """CPU seconds of one thread of this process (utime + stime), from /proc."""
    try:
        with open(f"/proc/self/task/{tid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _group(name: str) -> str:
    """Threads by what they do: one group per kind, numbered saves together."""
    if name == "MainThread":
        return "training thread"
    for prefix in ("checkpoint-save-", "checkpoint-wait"):
        if name.startswith(prefix):
            return prefix.rstrip("-")
    return name if not name.startswith(("Thread-", "ThreadPoolExecutor")) else \
        "other Python threads (orbax)"


class ThreadCpu:
    """CPU time by thread group, sampled every `interval` s, so that a window can be read
    off afterwards (a thread that starts or ends inside counts from its first to its last
    sample). Threads jax's and orbax's C++ start (XLA's compute pool, tensorstore) have no
    Python name: "native"."""

    def __init__(self, interval: float = 0.1) -> None:
        self.interval = interval
        self._samples: list[tuple[float, dict[int, float]]] = []
        self._names: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-thread-cpu", daemon=True)

    def _sample(self) -> None:
        for t in threading.enumerate():
            if t.native_id is not None:
                self._names.setdefault(t.native_id, _group(t.name or ""))
        try:
            tids = [int(t) for t in os.listdir("/proc/self/task")]
        except OSError:
            return
        cpu = {tid: c for tid in tids if (c := _thread_cpu(tid)) is not None}
        self._samples.append((time.time(), cpu))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def start(self) -> None:
        self._sample()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def between(self, start: float, end: float) -> dict[str, float]:
        """CPU seconds by thread group from `start` to `end`."""
        first: dict[int, float] = {}
        last: dict[int, float] = {}
        for t, cpu in self._samples:
            if start <= t <= end:
                for tid, c in cpu.items():
                    first.setdefault(tid, c)
                    last[tid] = c
        out: dict[str, float] = defaultdict(float)
        for tid, c in last.items():
            name = self._names.get(tid, "native (XLA, tensorstore)")
            if not name.startswith("bench-"):  # the benchmark's own samplers
                out[name] += c - first[tid]
        return dict(out)


class WakeProbe:
    """A thread that sleeps 1 ms at a time and records how late it wakes: what any thread
    waits for the GIL and a core while the loop runs (Python threads wait for both)."""

    def __init__(self, sleep: float = 0.001) -> None:
        self.sleep = sleep
        self.late: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-wake-probe", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.perf_counter()
            time.sleep(self.sleep)
            self.late.append(time.perf_counter() - t0 - self.sleep)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> dict[str, float | None]:
        self._stop.set()
        self._thread.join()
        return {"n": len(self.late),
                "p50_ms": _ms(median(self.late) if self.late else None),
                "p99_ms": _ms(percentile(self.late, 99))}


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1e3, 4)


def cpu_per_step(groups: dict[str, float], steps: int) -> dict[str, float]:
    """Milliseconds of CPU per step, by thread group (every thread of the process)."""
    return {k: round(v * 1e3 / max(1, steps), 4) for k, v in sorted(groups.items()) if v > 0}
