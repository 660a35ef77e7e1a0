"""The executable store (issue 80): a compiled step is keyed by what it depends on, not by
the devices it was compiled for, and loads onto another mesh of its shape bit-exactly; the
compile ahead fills it within the overhead budget; `etj train` in a new process loads
what an earlier one compiled."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from elastic_trainer import executables, train
from elastic_trainer.backends import SimulatedBackend
from elastic_trainer.configs import get_config
from elastic_trainer.executables import ExecutableStore, step_key
from elastic_trainer.mesh_steps import MeshSteps
from elastic_trainer.simulated_faults import FaultSchedule
from tests.support.trainer_run import RunTrainer

ROWS = P("fsdp", None)


def _mesh(devices: list[Any], shape: tuple[int, int] = (2, 2)) -> Mesh:
    return Mesh(np.array(devices).reshape(shape), ("slice", "fsdp"))


def _args(mesh: Mesh, spec: P = ROWS, shape: tuple[int, ...] = (8, 4),
          dtype: Any = jnp.float32) -> tuple[Any, Any]:
    return (jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, spec)),
            jax.ShapeDtypeStruct((3,), jnp.float32, sharding=NamedSharding(mesh, P())))


def test_the_key_is_the_shape_not_the_devices(cpu_devices: list[Any],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = _mesh(cpu_devices[:4]), _mesh(cpu_devices[4:][::-1])
    key = step_key(a, _args(a), "run")
    assert step_key(b, _args(b), "run") == key  # other devices, in another order
    other_mesh = _mesh(cpu_devices[:4], (1, 4))
    assert len({key, step_key(other_mesh, _args(other_mesh), "run"),
                step_key(a, _args(a, P(None, "fsdp")), "run"),
                step_key(a, _args(a, shape=(16, 4)), "run"),
                step_key(a, _args(a, dtype=jnp.bfloat16), "run"),
                step_key(a, _args(a), "another config")}) == 6
    monkeypatch.setattr(executables, "_versions", lambda: "jax=0.0.0;jaxlib=0.0.0")
    assert step_key(a, _args(a), "run") != key


def _step(x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
    return x * 2 + y.sum(), (x @ x.T).sum()


def _jitted(mesh: Mesh) -> Any:
    x, y = _args(mesh)
    return jax.jit(_step, in_shardings=(x.sharding, y.sharding),
                   out_shardings=(x.sharding, NamedSharding(mesh, P())), donate_argnums=(0,))


def test_a_stored_executable_runs_on_other_devices_bit_exactly(cpu_devices: list[Any],
                                                               tmp_path: Path) -> None:
    a, b = _mesh(cpu_devices[:4]), _mesh(cpu_devices[4:][::-1])
    key = step_key(a, _args(a), "run")
    ExecutableStore(tmp_path).put(key, _jitted(a).lower(*_args(a)).compile(), a)
    # A new store on the same directory: what a later process reads.
    loaded = ExecutableStore(tmp_path).get(key, b)
    assert loaded is not None
    values = np.arange(32, dtype=np.float32).reshape(8, 4), np.ones(3, np.float32)
    x, y = (jax.device_put(v, s.sharding) for v, s in zip(values, _args(b), strict=True))
    out, total = loaded(x, y)
    assert x.is_deleted()  # donated, as compiled
    assert out.sharding.device_set == set(cpu_devices[4:])
    ref_x = jax.device_put(values[0], _args(b)[0].sharding)
    ref_out, ref_total = _jitted(b)(ref_x, y)
    assert np.asarray(out).tobytes() == np.asarray(ref_out).tobytes()
    assert float(total) == float(ref_total)
    assert ExecutableStore(tmp_path).get("no-such-key", b) is None
    assert ExecutableStore(tmp_path, enabled=False).get(key, b) is None


def test_the_next_recoverys_mesh_is_compiled_ahead_within_the_budget(
        cpu_devices: list[Any]) -> None:
    cfg = get_config("tiny")
    backend = SimulatedBackend(2, 2, FaultSchedule([]))
    steps = MeshSteps(cfg, train.StateSpec.of(cfg, 10), backend, batch=8, seed=0, steps=10,
                      learning_rate=None, store=ExecutableStore(None), budget=0.5,
                      min_slices=1)
    assert steps.ahead_shapes((0, 1)) == [(0,)]
    assert steps.ahead_shapes((1,)) == [(0, 1)]
    steps.compile_seconds = 0.01  # as if timed: the budget allows it after 0.02 s
    steps.for_slices((0, 1))
    assert steps.ahead_done(timeout=300)
    assert (steps.compiled, steps.loaded) == (1, 0)
    # The slice lost is another than the one compiled ahead for: loaded, not compiled.
    built, key = steps.for_slices((1,))
    built.step_fn.resolve()
    assert key == ((1,), 2) and (steps.compiled, steps.loaded) == (1, 1)
    steps.ahead_done(timeout=300)
    backend.close()


def test_a_new_process_loads_what_the_last_compiled_bit_exactly(run_trainer: RunTrainer,
                                                                 tmp_path: Path) -> None:
    # Slice 1 lost and back: both meshes compiled (the store empty), then kept. A new
    # process on the same store, slice 0 lost instead: both loaded (the one-slice mesh
    # onto the other slice's devices), nothing compiled, the same parameters.
    cache = str(tmp_path / "cache")
    common = ("--min-slices", "1", "--snapshot-period", "2", "--compilation-cache", cache)
    fresh = run_trainer(*common, "--fail-at", "12-20:1", steps=30)
    loaded = run_trainer(*common, "--fail-at", "12-20:0", steps=30)
    for run in (fresh, loaded):
        assert run.returncode == 0, run.log[-4000:]
        assert [e["active_slices_after"] for e in run.events()] == [1]
        assert [e["active_slices_after"] for e in run.events("scale_up")] == [2]
    assert fresh.log.count("compiled in") == 2 and "loaded from the executable" not in fresh.log
    assert loaded.log.count("loaded from the executable store") == 2
    assert "compiled in" not in loaded.log
    assert loaded.summary["params_digest"] == fresh.summary["params_digest"]
