"""The overhead benchmark's worker (run by bench.trainer_worker in a fresh process): the
elastic loop with every default (snapshots and checkpoints on, their periods chosen
within the overhead budget) against a plain jit loop of the same model and step
function, in interleaved rounds in one process; then one profile run of each.

Both loops read each step's loss after dispatching the next one (the plain loop as any
loop that logs its loss without stalling the device; the elastic loop always does). The
profile also runs the plain loop reading the loss right after each step: what a per-step
device sync costs.
"""
from __future__ import annotations

import itertools
import os
import time
from pathlib import Path
from statistics import mean, median
from typing import Any

from bench.profiling import ThreadCpu, Timers, WakeProbe, cpu_per_step, patched
from bench.worker_setup import CpuSampler, make_trainer, setup_jax


class _Setup:
    """The model, the mesh and the step, built once; a plain loop over them."""

    def __init__(self, spec: dict[str, Any], workdir: Path) -> None:
        self.spec, self.workdir = spec, workdir
        slices, dps = spec.get("slices", 2), spec.get("devices_per_slice", 2)
        # A persistent cache of its own, so that each round's fresh Trainer (new jitted
        # functions) does not compile again: the rounds measure steps, not compiles.
        setup_jax(slices * dps, str(workdir / "compilation-cache"))
        from elastic_trainer import train
        from elastic_trainer.backends import SimulatedBackend
        from elastic_trainer.configs import get_config
        from elastic_trainer.data import make_source
        from elastic_trainer.simulated_faults import FaultSchedule

        cfg = get_config(spec["config"])
        self.steps, self.batch = spec["steps"], spec.get("batch", 8)
        backend = SimulatedBackend(slices, dps, FaultSchedule([], 1.0))
        self.compiled = train.build_step(
            cfg, train.make_optimizer(cfg, self.steps),
            train.make_mesh(backend.slice_devices(range(slices))), 1, 0)
        self.data = make_source("synthetic", 0, self.batch, cfg.seq_len, cfg.vocab_size)
        self.sampler = CpuSampler()

    def batch_for(self, step: int) -> Any:
        import jax

        from elastic_trainer import train

        return jax.device_put(train.shape_batch(self.data.batch(step), 1),
                              self.compiled.batch_sharding)

    def plain(self, sync: bool = False, timers: Timers | None = None) -> list[float]:
        """Completion times of steps 1..steps (step 0 at [0]): the loss read one step
        behind, or (`sync`) right after each step."""
        import jax

        t = timers or Timers()
        batch, step_fn = t.wrap("batch", self.batch_for), t.wrap("dispatch", self.compiled.step_fn)
        read = t.wrap("loss read (waits for the step)", float)
        state = self.compiled.init_fn()
        jax.block_until_ready(state)
        times, pending = [time.time()], None
        for step in range(self.steps):
            state, metrics = step_fn(state, batch(step))
            if sync:
                read(metrics["loss"])
                times.append(time.time())
                continue
            if pending is not None:
                read(pending)
                times.append(time.time())
            pending = metrics["loss"]
        if pending is not None:
            read(pending)
            times.append(time.time())
        return times

    def elastic(self) -> tuple[list[float], dict[str, Any]]:
        """Completion times as plain(); what the cadences chose and when copies were made."""
        trainer = make_trainer({**self.spec, "min_slices": None}, self.workdir, [])
        copies: dict[str, list[int]] = {"snapshots": [], "checkpoints": []}
        decided: list[int] = []
        take, save = trainer.snapshots.take, trainer.checkpointer.save
        decide = trainer.copies.decide

        def took(step: int, *args: Any, **kwargs: Any) -> Any:
            copies["snapshots"].append(step)
            return take(step, *args, **kwargs)

        def saved(step: int, *args: Any, **kwargs: Any) -> Any:
            copies["checkpoints"].append(step)
            return save(step, *args, **kwargs)

        def decided_at(cadence: Any) -> Any:
            decided.append(trainer.status.progress.step)
            return decide(cadence)

        trainer.snapshots.take, trainer.checkpointer.save = took, saved
        trainer.copies.decide = decided_at
        t0 = time.time()
        result = trainer.run()
        if result.failure is not None:
            raise RuntimeError(f"training failed: {result.failure}")
        times = [t0] + [t for _s, t in result.step_times]
        chosen = max(decided[:2] or [0]) if len(decided) >= 2 else None
        info = {
            "snapshot_cadence": trainer.copies.cadences.snapshot.report().to_wire(),
            "checkpoint_cadence": trainer.copies.cadences.checkpoint.report().to_wire(),
            "copies": copies, "cadence_chosen_at_step": chosen,
        }
        return times, info


def _window(times: list[float], start: int, sampler: Any) -> dict[str, Any]:
    """Step durations of steps after `start`, and the process CPU per step over them."""
    durations = [b - a for a, b in itertools.pairwise(times)][start:]
    cpu = sampler.cpu_between(times[start], times[-1]) / max(1, len(durations))
    return {"durations": durations, "cpu_per_step": cpu}


def _round(setup: _Setup, elastic_first: bool) -> dict[str, Any]:
    load = os.getloadavg()[0]
    if elastic_first:
        elastic, info = setup.elastic()
        plain = setup.plain()
    else:
        plain = setup.plain()
        elastic, info = setup.elastic()
    # The window starts after the warm-up and once both cadences are chosen (their
    # probes, and orbax's first save, are start-up, not the steady state).
    start = max(setup.spec["warmup"], (info["cadence_chosen_at_step"] or 0) + 1)
    start = min(start, len(plain) - 2)
    p, e = _window(plain, start, setup.sampler), _window(elastic, start, setup.sampler)
    in_window = {k: len([s for s in v if s > start]) for k, v in info["copies"].items()}
    return {
        "plain": p["durations"], "elastic": e["durations"],
        "plain_cpu_per_step": p["cpu_per_step"], "elastic_cpu_per_step": e["cpu_per_step"],
        "load_average": [load, os.getloadavg()[0]], "elastic_first": elastic_first,
        "window_first_step": start + 1, "copies_in_window": in_window,
        "snapshot_cadence": info["snapshot_cadence"],
        "checkpoint_cadence": info["checkpoint_cadence"],
    }


def _profile_plain(setup: _Setup, sync: bool, start: int) -> dict[str, Any]:
    timers, threads, probe = Timers(), ThreadCpu(), WakeProbe()
    threads.start()
    probe.start()
    times = setup.plain(sync=sync, timers=timers)
    return _profile(times, start, timers, threads, probe)


def _profile_elastic(setup: _Setup, start: int) -> dict[str, Any]:
    import contextlib

    from elastic_trainer import copies, loop, prefetch, snapshots

    timers, threads, probe = Timers(), ThreadCpu(), WakeProbe()
    parts = [
        (prefetch.BatchPrefetcher, "get", "batch (inline, or from the prefetch thread)"),
        (loop.Trainer, "_dispatch", "dispatch (with the batch)"),
        (loop.Trainer, "_finish_pending", "loss read and bookkeeping"),
        (loop.Trainer, "_after_step", "bookkeeping: progress, metrics, log, report"),
        (copies.Copies, "step_done", "bookkeeping: cadence"),
        (loop.Trainer, "_keep", "snapshot and checkpoint dispatch"),
        (snapshots.ReplicaSnapshots, "take", "snapshot hand-off (in _keep)"),
    ]
    with contextlib.ExitStack() as stack:
        for owner, name, label in parts:
            stack.enter_context(patched(owner, name, timers, label))
        threads.start()
        probe.start()
        times, _info = setup.elastic()
    return _profile(times, start, timers, threads, probe)


def _profile(times: list[float], start: int, timers: Timers, threads: ThreadCpu,
             probe: WakeProbe) -> dict[str, Any]:
    """The window of the timed rounds (steps after `start`): per step, the training
    thread's parts, every thread's CPU, and how late a sleeping thread woke."""
    threads.stop()
    durations = [b - a for a, b in itertools.pairwise(times)][start:]
    t0, t1, n = times[start], times[-1], len(durations)
    return {
        "window_steps": n,
        "mean_step_ms": round(mean(durations) * 1e3, 4),
        "median_step_ms": round(median(durations) * 1e3, 4),
        "training_thread_ms_per_step": timers.per_step(t0, t1, n),
        "cpu_ms_per_step_by_thread": cpu_per_step(threads.between(t0, t1), n),
        "wake_up_delay_of_a_sleeping_thread": probe.stop(),
    }


def overhead(spec: dict[str, Any], workdir: Path) -> dict[str, Any]:
    setup = _Setup(spec, workdir)
    setup.plain()  # compiles (and warms the persistent cache for the elastic loop)
    rounds = [_round(setup, elastic_first=bool(i % 2)) for i in range(spec.get("rounds", 2))]
    start = rounds[0]["window_first_step"] - 1
    profile = {
        "plain (loss read one step behind)": _profile_plain(setup, False, start),
        "plain (loss read after each step: a device sync per step)":
            _profile_plain(setup, True, start),
        "elastic (defaults)": _profile_elastic(setup, start),
    }
    setup.sampler.close()
    return {
        "config": spec["config"], "steps": spec["steps"], "warmup_steps": spec["warmup"],
        "checkpoint_period": spec.get("checkpoint_period"),
        "snapshot_period": spec.get("snapshot_period"),
        "rounds": rounds, "profile": profile,
    }
