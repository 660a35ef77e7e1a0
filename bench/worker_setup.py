"""What every trainer-benchmark worker process sets up (bench.trainer_worker, and the
overhead and defaults workers it runs): JAX on simulated CPU devices, the elastic Trainer
of a benchmark spec, and the process's CPU sampler. JAX and the trainer are imported
inside the functions: the device count must be set before jax is imported."""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any


def setup_jax(devices: int, cache_dir: str | None) -> None:
    """JAX on `devices` simulated CPU devices, with the persistent compilation cache in
    `cache_dir` (None: no compilation cache). Before jax is imported anywhere: the device
    count is read once, at its import."""
    flag = "--xla_force_host_platform_device_count"
    kept = [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith(flag)]
    os.environ["XLA_FLAGS"] = " ".join([*kept, f"{flag}={devices}"])
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax

    if cache_dir:
        jax.config.update("jax_compilation_cache_dir", cache_dir)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    else:
        jax.config.update("jax_enable_compilation_cache", False)


def make_trainer(spec: dict[str, Any], workdir: Path, faults: list[str]) -> Any:
    """The elastic Trainer a benchmark spec describes, on the simulated backend with
    `faults` (its checkpoints under `workdir`, emptied first)."""
    from elastic_trainer.backends import SimulatedBackend
    from elastic_trainer.checkpoint import Checkpointer
    from elastic_trainer.compose import build_trainer
    from elastic_trainer.configs import get_config
    from elastic_trainer.data import make_source
    from elastic_trainer.loop import LoopOptions
    from elastic_trainer.simulated_faults import Fault, FaultSchedule

    cfg = get_config(spec["config"])
    slices = spec.get("slices", 2)
    health = FaultSchedule([Fault.parse(f, slices) for f in faults],
                           spec.get("fault_duration", 1.0))
    backend = SimulatedBackend(slices, spec.get("devices_per_slice", 2), health)
    ckpt_dir = workdir / "checkpoints"
    shutil.rmtree(ckpt_dir, ignore_errors=True)
    # A period left out of the spec is the trainer's default: chosen (cadence.py).
    checkpointer = Checkpointer(str(ckpt_dir), spec.get("checkpoint_period"), 3,
                                async_save=True)
    opts = LoopOptions(steps=spec["steps"], batch=spec.get("batch", 8), seed=0,
                       min_slices=spec.get("min_slices"), elastic_timeout=120.0,
                       max_retries=10, snapshot_period=spec.get("snapshot_period"),
                       log_every=10**9, prefetch=spec.get("prefetch"))
    data = make_source("synthetic", 0, opts.batch, cfg.seq_len, cfg.vocab_size)
    return build_trainer(cfg, opts, backend, data, checkpointer)


class CpuSampler:
    """The process's CPU time (every thread: the training thread, XLA's, the background
    copies and writes) sampled against the wall clock, so the CPU spent between two step
    timestamps can be read off afterwards. Other processes' load barely moves it, unlike
    wall time on a shared machine."""

    def __init__(self, interval: float = 0.005) -> None:
        import threading

        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True,
                                        name="bench-cpu-sampler")
        self._thread.start()

    def _run(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self.samples.append((time.time(), time.process_time()))

    def cpu_between(self, start: float, end: float) -> float:
        inside = [cpu for t, cpu in self.samples if start <= t <= end]
        return inside[-1] - inside[0] if len(inside) >= 2 else 0.0

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
