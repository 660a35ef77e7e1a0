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
from bench.defaults_worker import defaults
from bench.overhead_worker import overhead
from bench.worker_setup import make_trainer, setup_jax


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
    setup_jax(spec.get("slices", 2) * spec.get("devices_per_slice", 2), spec.get("cache_dir"))
    compile_log = CompileLog()
    trainer = make_trainer(spec, workdir, spec["fail_at"])
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
    setup_jax(spec.get("slices", 2) * spec.get("devices_per_slice", 2), None)
    compile_log = CompileLog()
    points = []
    for period in spec["snapshot_periods"]:
        run_spec = {**spec, "snapshot_period": period}
        trainer = make_trainer(run_spec, workdir, spec["fail_at"])
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
    setup_jax(devices, None)
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
                evicted = _drop_page_cache(files) and evicted
            plain_s.append(plain_read())
            if mode == "cold":
                _drop_page_cache(files)
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


def _drop_page_cache(where: Path | list[Path]) -> bool:
    """The files under a directory (or these files) out of the page cache (clean pages),
    so that a read hits the disk; False where one could not be."""
    files = where if isinstance(where, list) else [x for x in where.rglob("*") if x.is_file()]
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


def restore_sizes(spec: dict[str, Any], workdir: Path) -> dict[str, Any]:
    """Save and restore checkpoints of each of `sizes_mb` under `root` (a gs:// URL, on
    fake-gcs-server, or none: local files, page cache dropped before each restore); the
    size as the operator's scan counts it (Checkpointer.step_size: the same rule)."""
    devices = spec.get("devices", 4)
    setup_jax(devices, None)
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


KINDS = {"recovery": recovery, "steps_lost_sweep": steps_lost_sweep, "overhead": overhead,
         "restore_throughput": restore_throughput, "restore_sizes": restore_sizes,
         "defaults": defaults}


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
