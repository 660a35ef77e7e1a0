"""The compiled step of each mesh an attempt runs on, compiled once per shape (issue 80).

    for_slices(active)   the step for a mesh over `active` (built once per slice set in
                         this process); its executable resolved at its first call (the
                         loop's compile phase): loaded from the executable store when a
                         mesh of that shape was compiled before, in this process or an
                         earlier one, on any devices (executables.py), else compiled and
                         kept there
    ahead                after an attempt starts, the meshes the next recovery needs (one
                         slice fewer, where the job may train on fewer; all slices, when
                         fewer train) are compiled on a background thread and kept, once
                         the attempt has run long enough that the compile's time is
                         within the job's overhead budget (compile seconds <= budget x
                         seconds trained); the next attempt cancels what has not begun

On the simulated backend the compile ahead shares the host's cores with the steps; on
Pathways it runs on the controller's host, off the TPUs.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import jax
import jax.numpy as jnp

from elastic_trainer import model, train
from elastic_trainer.backends import Backend
from elastic_trainer.configs import ModelConfig
from elastic_trainer.executables import ExecutableStore, code_fingerprint, step_key

log = logging.getLogger("elastic_trainer")

MeshKey = tuple[tuple[int, ...], int]  # (the active slices, micro-batches)
# The compile-ahead's estimate of a compile before one was timed in this process.
UNTIMED_COMPILE_SECONDS = 10.0


class MeshSteps:
    """The steps of the meshes of one run; `budget`: the share of step time the
    overhead budget allows (0.02 for 2 %); `min_slices`: the fewest slices the job trains
    on (None: all of them)."""

    def __init__(self, cfg: ModelConfig, spec: train.StateSpec, backend: Backend, *,
                 batch: int, seed: int, steps: int, learning_rate: float | None,
                 store: ExecutableStore, budget: float, min_slices: int | None) -> None:
        self.cfg, self.spec, self.backend, self.store = cfg, spec, backend, store
        self.batch, self.seed, self.budget = batch, seed, budget
        self.min_slices = min_slices or backend.total_slices
        self.fingerprint = (f"{cfg!r};steps={steps};lr={learning_rate};"
                            f"code={code_fingerprint(model, train)}")
        self._built: dict[MeshKey, train.CompiledStep] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard, self._building = threading.Lock(), threading.Lock()
        self._cancel = threading.Event()
        self._thread: threading.Thread | None = None
        self.compile_seconds: float | None = None  # the last compile timed here
        self.compiled = self.loaded = 0

    def for_slices(self, active: tuple[int, ...]) -> tuple[train.CompiledStep, MeshKey]:
        """The step for a mesh over `active` and its key (the steps of a mesh are timed
        against each other); what the next recovery needs is compiled ahead."""
        key, built = self._build(active)
        self._start_ahead(active)
        return built, key

    def _build(self, active: tuple[int, ...]) -> tuple[MeshKey, train.CompiledStep]:
        micro = train.micro_batches_for(self.batch, self.backend.total_slices, len(active),
                                        self.backend.devices_per_slice)
        key = (active, micro)
        with self._building:  # the training thread's and the compile ahead's
            return key, self._built_for(key)

    def _built_for(self, key: MeshKey) -> train.CompiledStep:
        active, micro = key
        if key not in self._built:
            mesh = train.make_mesh(self.backend.slice_devices(active))
            built = train.build_step(self.cfg, self.spec.optimizer, mesh, micro, self.seed)
            args = self._abstract_args(built)
            self._built[key] = replace(built, step_fn=_FirstCall(
                lambda: self.executable(built.step_fn, mesh, args)))
        return self._built[key]

    def _abstract_args(self, built: train.CompiledStep) -> tuple[Any, Any]:
        micro = built.micro_batches
        tokens = jax.ShapeDtypeStruct((micro, self.batch // micro, self.cfg.seq_len + 1),
                                      jnp.int32, sharding=built.batch_sharding)
        return self.spec.target(built.shardings), tokens

    def executable(self, jitted: Any, mesh: jax.sharding.Mesh, args: tuple[Any, Any]
                   ) -> Any:
        """The step's executable for `args` on `mesh`: loaded, else compiled and kept.
        One at a time per key: a recovery that needs what is being compiled ahead waits
        for it rather than compiling it twice."""
        if not hasattr(jitted, "lower"):
            # jax.jit patched into a plain wrapper (pathwaysutils' DeviceLossSimulator,
            # which follows a lost device through jit calls): jit compiles, nothing kept.
            return jitted
        key = step_key(mesh, args, self.fingerprint)
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            t0 = time.time()
            exe = self.store.get(key, mesh)
            if exe is not None:
                self.loaded += 1
                log.info("step for mesh %s loaded from the executable store in %.2fs",
                         dict(mesh.shape), time.time() - t0)
                return exe
            exe = jitted.lower(*args).compile()
            self.compile_seconds = time.time() - t0
            self.compiled += 1
            self.store.put(key, exe, mesh)
            log.info("step for mesh %s compiled in %.2fs%s", dict(mesh.shape),
                     self.compile_seconds, " and kept" if self.store.enabled else "")
            return exe

    # --- compile ahead ------------------------------------------------------------------

    def ahead_shapes(self, active: tuple[int, ...]) -> list[tuple[int, ...]]:
        """Slice sets of the meshes the next recovery may need: one slice fewer (if the job
        trains on fewer) and all slices (if fewer train now)."""
        total = self.backend.total_slices
        out = []
        if len(active) - 1 >= self.min_slices:
            out.append(active[:-1])
        if len(active) < total:
            out.append(tuple(range(total)))
        return out

    def _start_ahead(self, active: tuple[int, ...]) -> None:
        self._cancel.set()  # the last attempt's, where it has not begun
        shapes = self.ahead_shapes(active)
        if not shapes or not self.store.enabled:
            return
        self._cancel = cancel = threading.Event()
        self._thread = threading.Thread(target=self._ahead, args=(shapes, cancel),
                                        daemon=True, name="compile-ahead")
        self._thread.start()

    def ahead_done(self, timeout: float) -> bool:
        """Wait up to `timeout` for the compile ahead; whether none is left running."""
        if self._thread is not None:
            self._thread.join(timeout)
        return self._thread is None or not self._thread.is_alive()

    def _ahead(self, shapes: list[tuple[int, ...]], cancel: threading.Event) -> None:
        estimate = self.compile_seconds or UNTIMED_COMPILE_SECONDS
        if cancel.wait(estimate / self.budget):  # trained long enough for it
            return
        for slices in shapes:
            if cancel.is_set():
                return
            try:
                _, built = self._build(slices)
                built.step_fn.resolve()
            except Exception as err:  # the recovery compiles it instead
                log.warning("compile ahead for %d slice(s) failed: %s: %s", len(slices),
                            type(err).__name__, err)


class _FirstCall:
    """The step function, its executable resolved at the first call (or ahead)."""

    def __init__(self, resolve: Callable[[], Any]) -> None:
        self._resolve = resolve
        self._exe: Any = None
        self._lock = threading.Lock()

    def resolve(self) -> Any:
        with self._lock:
            exe = self._exe = self._exe or self._resolve()
            return exe

    def __call__(self, state: Any, tokens: Any) -> Any:
        exe = self._exe or self.resolve()
        return exe(state, tokens)
