"""The trainer-side benchmarks, each run in a fresh process by bench.trainer:

    python -m bench.trainer_worker SPEC_JSON OUT_JSON

A fresh process per measurement because the simulated device count must be set before
jax is imported, and so that "without the persistent compilation cache" really starts
with no compiled programs in memory.
"""
from __future__ import annotations

import itertools
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import union_seconds


def _setup_jax(devices: int, cache_dir: str | None) -> None:
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


class CompileLog:
    """When jax traced, lowered and compiled (jax.monitoring time spans, wall clock).

    The spans nest (a persistent-cache read happens inside the backend-compile span), so
    the compile time of a window is the length of the union of the spans in it."""

    SPANS = ("/jax/core/compile/backend_compile_duration",
             "/jax/core/compile/jaxpr_trace_duration",
             "/jax/core/compile/jaxpr_to_mlir_module_duration")
    CACHE_HIT = "/jax/compilation_cache/cache_retrieval_time_sec"

    def __init__(self) -> None:
        import jax

        self.spans: list[tuple[float, float]] = []
        self.hits: list[float] = []

        def on_span(event: str, start_time: float, end_time: float, **_: str | int) -> None:
            if event in self.SPANS:
                self.spans.append((start_time, end_time))

        def on_duration(event: str, duration_secs: float, **_: str | int) -> None:
            if event == self.CACHE_HIT:
                self.hits.append(time.time())

        jax.monitoring.register_event_time_span_listener(on_span)
        jax.monitoring.register_event_duration_secs_listener(on_duration)

    def seconds_between(self, start: float, end: float) -> float:
        return union_seconds(self.spans, start, end)

    def cache_hits_between(self, start: float, end: float) -> int:
        return sum(1 for t in self.hits if start <= t <= end)


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


def _make_trainer(spec: dict[str, Any], workdir: Path, faults: list[str]) -> Any:
    from elastic_trainer.backends import SimulatedBackend
    from elastic_trainer.checkpoint import Checkpointer
    from elastic_trainer.configs import get_config
    from elastic_trainer.data import make_source
    from elastic_trainer.faults import Fault, FaultSchedule
    from elastic_trainer.loop import LoopOptions, build_trainer

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


def _event_phases(trainer: Any, compile_log: CompileLog) -> list[dict[str, Any]]:
    out = []
    for event in trainer.status.events:
        if event.kind != "slice_down" or event.resumed_at is None:
            continue
        s = event.summary()
        det, resumed, restored = event.detected_at, event.resumed_at, event.restored_at
        wait = event.wait_seconds or 0.0
        restore = event.restore_seconds or 0.0
        compile_s = compile_log.seconds_between(det, resumed)
        first_step_total = resumed - restored
        total = resumed - det
        out.append({
            "failed_step": event.failed_step,
            "active_slices_after": event.active_slices_after,
            "restored_from_step": event.restored_from_step,
            "restore_source": event.restore_source, "steps_lost": event.steps_lost,
            "detect_seconds": s["detect_seconds"],
            "wait_seconds": wait,
            "restore_seconds": restore,
            "compile_seconds": compile_s,
            "first_step_seconds": max(0.0, first_step_total - compile_s),
            "other_seconds": max(0.0, total - wait - restore - first_step_total),
            "detect_to_resumed_seconds": total,
            "compilation_cache_hits": compile_log.cache_hits_between(det, resumed),
        })
    return out


def recovery(spec: dict[str, Any], workdir: Path) -> dict[str, Any]:
    """One run of the elastic loop with the given faults; per-event phase split."""
    _setup_jax(spec.get("slices", 2) * spec.get("devices_per_slice", 2), spec.get("cache_dir"))
    compile_log = CompileLog()
    trainer = _make_trainer(spec, workdir, spec["fail_at"])
    t0 = time.time()
    result = trainer.run()
    wall = time.time() - t0
    if result.failure is not None:
        raise RuntimeError(f"training failed: {result.failure}")
    times = [t for _s, t in result.step_times]
    gaps = sorted(b - a for a, b in itertools.pairwise(times))
    return {
        "config": spec["config"], "wall_seconds": wall, "final_step": result.final_step,
        "steady_step_seconds": gaps[len(gaps) // 2] if gaps else None,
        "events": _event_phases(trainer, compile_log),
    }


def steps_lost_sweep(spec: dict[str, Any], workdir: Path) -> dict[str, Any]:
    """Steps lost (and restore seconds) against the snapshot period, one process."""
    _setup_jax(spec.get("slices", 2) * spec.get("devices_per_slice", 2), None)
    compile_log = CompileLog()
    points = []
    for period in spec["snapshot_periods"]:
        run_spec = {**spec, "snapshot_period": period}
        trainer = _make_trainer(run_spec, workdir, spec["fail_at"])
        result = trainer.run()
        if result.failure is not None:
            raise RuntimeError(f"training failed: {result.failure}")
        for phases in _event_phases(trainer, compile_log):
            points.append({"snapshot_period": period, **phases})
    return {"config": spec["config"], "checkpoint_period": spec.get("checkpoint_period"),
            "fail_at": spec["fail_at"], "points": points}


def restore_throughput(spec: dict[str, Any], workdir: Path) -> dict[str, Any]:
    """Orbax restore of a checkpoint of `size_mb` against plain reads of its files."""
    devices = spec.get("devices", 4)
    _setup_jax(devices, None)
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from elastic_trainer.checkpoint import Checkpointer

    mesh = Mesh(np.array(jax.devices()[:devices]), ("x",))
    sharding = NamedSharding(mesh, P("x"))
    n_arrays = spec.get("arrays", 8)
    per_array = int(spec["size_mb"] * 2**20 / n_arrays / 4)
    rows = max(devices, per_array // 1024 // devices * devices)
    # Random values: constant arrays would compress to nothing and flatter the restore.
    keys = jax.random.split(jax.random.PRNGKey(0), n_arrays)
    tree = {f"w{i}": jax.device_put(jax.random.normal(keys[i], (rows, 1024), jnp.float32),
                                    sharding) for i in range(n_arrays)}
    ckpt_dir = workdir / "restore-ckpt"
    shutil.rmtree(ckpt_dir, ignore_errors=True)
    ckpt = Checkpointer(str(ckpt_dir), 1, 1, async_save=False)
    ckpt.save(1, tree)
    ckpt.wait()
    files = [p for p in (ckpt_dir / "1").rglob("*") if p.is_file()]
    total_bytes = sum(p.stat().st_size for p in files)
    logical_bytes = sum(int(a.size) * a.dtype.itemsize for a in tree.values())
    target = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding),
                          tree)
    del tree

    def evict() -> bool:
        """Drop the files from the page cache (clean pages) so reads hit the disk."""
        ok = True
        for p in files:
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            except OSError:
                ok = False
            finally:
                os.close(fd)
        return ok

    def plain_read() -> float:
        t0 = time.perf_counter()
        for p in files:
            with open(p, "rb", buffering=0) as f:
                while f.read(8 << 20):
                    pass
        return time.perf_counter() - t0

    def orbax_restore() -> float:
        t0 = time.perf_counter()
        restored = ckpt.restore(1, target)
        jax.block_until_ready(restored)
        return time.perf_counter() - t0

    out: dict[str, Any] = {"checkpoint_bytes": total_bytes, "state_bytes": logical_bytes,
                           "files": len(files), "devices": devices}
    for mode in ("cold", "warm"):
        plain_s, orbax_s = [], []
        evicted = True
        for _ in range(spec.get("repeats", 3)):
            if mode == "cold":
                evicted = evict() and evicted
            plain_s.append(plain_read())
            if mode == "cold":
                evict()
            orbax_s.append(orbax_restore())
        out[mode] = {"plain_read_seconds": plain_s, "orbax_restore_seconds": orbax_s,
                     "page_cache_evicted": evicted if mode == "cold" else False}
    ckpt.close()
    shutil.rmtree(ckpt_dir, ignore_errors=True)
    return out


def _random_tree(size_mb: float, devices: int) -> tuple[Any, Any]:
    """About `size_mb` MiB of random float32 arrays sharded over `devices` CPU devices
    (random: constant arrays would compress to nothing), and their sharding."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    sharding = NamedSharding(Mesh(np.array(jax.devices()[:devices]), ("x",)), P("x"))
    n_arrays = 8
    per_array = int(size_mb * 2**20 / n_arrays / 4)
    rows = max(devices, per_array // 1024 // devices * devices)
    keys = jax.random.split(jax.random.PRNGKey(0), n_arrays)
    tree = {f"w{i}": jax.device_put(jax.random.normal(keys[i], (rows, 1024), jnp.float32),
                                    sharding) for i in range(n_arrays)}
    return tree, sharding


def _drop_page_cache(directory: Path) -> bool:
    """The files under `directory` out of the page cache, so a restore reads the disk."""
    ok = True
    for p in (x for x in directory.rglob("*") if x.is_file()):
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        except OSError:
            ok = False
        finally:
            os.close(fd)
    return ok


def restore_sizes(spec: dict[str, Any], workdir: Path) -> dict[str, Any]:
    """Save and restore checkpoints of each of `sizes_mb` under `root` (a gs:// URL, on
    fake-gcs-server, or none: local files, page cache dropped before each restore); the
    size as the operator's scan counts it (Checkpointer.step_size: the same rule)."""
    devices = spec.get("devices", 4)
    _setup_jax(devices, None)
    import jax
    from etils import epath

    from elastic_trainer.checkpoint import Checkpointer

    root = spec.get("root") or str(workdir / "restore-sizes")
    points = []
    for size_mb in spec["sizes_mb"]:
        tree, sharding = _random_tree(size_mb, devices)
        directory = f"{root}/size-{size_mb}"
        ckpt = Checkpointer(directory, 1, 1, async_save=False)
        t0 = time.perf_counter()
        ckpt.save(1, tree)
        ckpt.wait()
        save_s = time.perf_counter() - t0
        size = ckpt.step_size(1)
        target = jax.tree.map(
            lambda a, s=sharding: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), tree)
        del tree
        seconds, evicted = [], True
        for _ in range(spec.get("repeats", 2)):
            if not directory.startswith("gs://"):
                evicted = _drop_page_cache(Path(directory)) and evicted
            t0 = time.perf_counter()
            restored = ckpt.restore(1, target)
            jax.block_until_ready(restored)
            seconds.append(time.perf_counter() - t0)
            del restored
        ckpt.close()
        epath.Path(directory).rmtree()
        points.append({"size_mb": size_mb, "bytes": size.bytes if size else None,
                       "files": size.files if size else None, "save_seconds": save_s,
                       "restore_seconds": seconds,
                       "page_cache_evicted": evicted and not directory.startswith("gs://")})
    return {"root": "gs://" if root.startswith("gs://") else "local", "points": points}


def _overhead(spec: dict[str, Any], workdir: Path) -> dict[str, Any]:
    from bench.overhead_worker import overhead

    return overhead(spec, workdir)


def _defaults(spec: dict[str, Any], workdir: Path) -> dict[str, Any]:
    from bench.defaults_worker import defaults

    return defaults(spec, workdir)


KINDS = {"recovery": recovery, "steps_lost_sweep": steps_lost_sweep, "overhead": _overhead,
         "restore_throughput": restore_throughput, "restore_sizes": restore_sizes,
         "defaults": _defaults}


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    out_path = Path(argv[1])
    workdir = Path(spec["workdir"])
    workdir.mkdir(parents=True, exist_ok=True)
    result = KINDS[spec["kind"]](spec, workdir)
    out_path.write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
