"""Optimizer, sharding and the jitted train step.

The mesh has two axes: `slice` (outer; one entry per active slice; data parallel across
slices, parameters replicated) and `fsdp` (inner; the devices of one slice; parameters
and optimizer state sharded, batch sharded). The global batch is split into
`micro_batches` that run one after the other (gradient accumulation), so the global batch
stays the same when the mesh shrinks to fewer slices.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.experimental import mesh_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from elastic_api.resize import micro_batches
from elastic_trainer.configs import ModelConfig
from elastic_trainer.model import init_params, loss_fn

State = dict[str, Any]  # {"step": int32 scalar, "params": ..., "opt_state": ...}
SLICE_AXIS, FSDP_AXIS = "slice", "fsdp"


def make_optimizer(cfg: ModelConfig, total_steps: int, learning_rate: float | None = None):
    peak = cfg.learning_rate if learning_rate is None else learning_rate
    warmup = max(1, min(cfg.warmup_steps, total_steps // 10 or 1))
    schedule = optax.warmup_cosine_decay_schedule(
        init_value=0.0, peak_value=peak, warmup_steps=warmup,
        decay_steps=max(total_steps, warmup + 1), end_value=peak * 0.1,
    )
    return optax.chain(
        optax.clip_by_global_norm(1.0),
        optax.adamw(schedule, b1=0.9, b2=0.95, weight_decay=cfg.weight_decay),
    )


def slice_mesh_devices(slice_devices: Sequence[Sequence[Any]]) -> np.ndarray:
    """The (slice, fsdp) device array: one row per slice, in the given slice order; within
    a slice, the order `mesh_utils.create_device_mesh` gives from the devices' physical
    layout (the ICI torus on TPU; the listed order on CPU). This is what
    `mesh_utils.create_hybrid_device_mesh((1, n), (slices, 1))` builds from devices
    grouped by `slice_index`, with the slices we chose (the healthy ones) instead of all."""
    sizes = {len(d) for d in slice_devices}
    if len(sizes) != 1:
        raise ValueError(f"slices must have the same number of devices, got {sorted(sizes)}")
    rows = [mesh_utils.create_device_mesh((1, len(d)), devices=list(d))
            for d in slice_devices]
    return np.concatenate(rows, axis=0)


def make_mesh(slice_devices: Sequence[Sequence[Any]]) -> Mesh:
    """A (slice, fsdp) mesh over the given slices' devices (each slice the same size)."""
    return Mesh(slice_mesh_devices(slice_devices), (SLICE_AXIS, FSDP_AXIS))


def fsdp_spec(shape: tuple[int, ...], fsdp_size: int) -> P:
    """Shard the largest axis divisible by the FSDP size; never the stacked-layer axis 0
    of 3-d weights (lax.scan walks it). Small or indivisible arrays are replicated."""
    candidates = range(1, len(shape)) if len(shape) >= 3 else range(len(shape))
    best = None
    for axis in candidates:
        if shape[axis] % fsdp_size == 0 and shape[axis] >= fsdp_size and (
            best is None or shape[axis] > shape[best]
        ):
            best = axis
    if best is None or fsdp_size == 1:
        return P()
    spec: list[str | None] = [None] * len(shape)
    spec[best] = FSDP_AXIS
    return P(*spec)


def state_shardings(abstract_state: Any, mesh: Mesh) -> Any:
    fsdp_size = mesh.shape[FSDP_AXIS]
    return jax.tree.map(
        lambda x: NamedSharding(mesh, fsdp_spec(tuple(x.shape), fsdp_size)), abstract_state
    )


def batch_sharding(mesh: Mesh) -> NamedSharding:
    # [micro_batches, micro_batch, seq + 1]: each micro-batch is split over every device.
    return NamedSharding(mesh, P(None, (SLICE_AXIS, FSDP_AXIS), None))


def micro_batches_for(global_batch: int, total_slices: int, active_slices: int,
                      devices_per_slice: int) -> int:
    """How many micro-batches keep the global batch constant on `active_slices` slices.

    With all slices up this is 1. With fewer, it is the smallest m >= total/active such
    that each micro-batch still divides evenly over the active devices.
    """
    m = micro_batches(global_batch, total_slices, active_slices, devices_per_slice)
    if m is not None:
        return m
    raise ValueError(
        f"--batch {global_batch} cannot be split over {active_slices} slice(s) x "
        f"{devices_per_slice} device(s): choose a batch divisible by "
        f"{total_slices * devices_per_slice} times every active-slice count you allow"
    )


def init_state(cfg: ModelConfig, optimizer: optax.GradientTransformation, seed: int) -> State:
    params = init_params(cfg, jax.random.PRNGKey(seed))
    return {"step": jnp.zeros((), jnp.int32), "params": params,
            "opt_state": optimizer.init(params)}


def abstract_state(cfg: ModelConfig, optimizer: optax.GradientTransformation) -> Any:
    return jax.eval_shape(lambda: init_state(cfg, optimizer, 0))


@dataclass(frozen=True)
class StateSpec:
    """The training state before it exists: the optimizer that updates it and its shape
    (a tree of ShapeDtypeStruct), made once per run."""

    optimizer: optax.GradientTransformation
    abstract: Any

    @classmethod
    def of(cls, cfg: ModelConfig, total_steps: int, learning_rate: float | None = None
           ) -> StateSpec:
        optimizer = make_optimizer(cfg, total_steps, learning_rate)
        return cls(optimizer, abstract_state(cfg, optimizer))

    @property
    def nbytes(self) -> int:
        return sum(int(x.size) * x.dtype.itemsize for x in jax.tree.leaves(self.abstract))

    def target(self, shardings: Any) -> Any:
        """The state's shape on `shardings`: what a restore fills."""
        return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                            self.abstract, shardings)


@dataclass
class CompiledStep:
    mesh: Mesh
    shardings: Any
    batch_sharding: NamedSharding
    micro_batches: int
    step_fn: Any  # jitted (state, tokens) -> (state, metrics); state is donated
    init_fn: Callable[[], State]
    eval_fn: Any  # jitted (params, tokens) -> the mean loss; nothing is donated or updated


def build_step(cfg: ModelConfig, optimizer: optax.GradientTransformation, mesh: Mesh,
               micro_batches: int, seed: int) -> CompiledStep:
    shardings = state_shardings(abstract_state(cfg, optimizer), mesh)
    b_sharding = batch_sharding(mesh)

    def train_step(state: State, tokens: jax.Array) -> tuple[State, dict[str, jax.Array]]:
        params = state["params"]
        grad_fn = jax.value_and_grad(lambda p, t: loss_fn(cfg, p, t))

        def accumulate(carry: Any, micro: jax.Array) -> tuple[Any, None]:
            loss_sum, grad_sum = carry
            loss, grads = grad_fn(params, micro)
            return (loss_sum + loss, jax.tree.map(jnp.add, grad_sum, grads)), None

        zeros = jax.tree.map(jnp.zeros_like, params)
        (loss_sum, grad_sum), _ = jax.lax.scan(accumulate, (jnp.zeros(()), zeros), tokens)
        grads = jax.tree.map(lambda g: g / micro_batches, grad_sum)
        updates, opt_state = optimizer.update(grads, state["opt_state"], params)
        new_state = {"step": state["step"] + 1, "params": optax.apply_updates(params, updates),
                     "opt_state": opt_state}
        metrics = {"loss": loss_sum / micro_batches, "grad_norm": optax.tree.norm(grads)}
        return new_state, metrics

    replicated = NamedSharding(mesh, P())
    step_fn = jax.jit(
        train_step,
        in_shardings=(shardings, b_sharding),
        out_shardings=(shardings, {"loss": replicated, "grad_norm": replicated}),
        donate_argnums=(0,),
    )
    init_fn = jax.jit(lambda: init_state(cfg, optimizer, seed), out_shardings=shardings)
    return CompiledStep(mesh, shardings, b_sharding, micro_batches, step_fn, init_fn,
                        build_eval(cfg, shardings["params"], b_sharding))


def build_eval(cfg: ModelConfig, param_shardings: Any, b_sharding: NamedSharding) -> Any:
    """The evaluation step: the mean loss of a batch split into micro-batches as the
    train step splits it, from the parameters alone (read, never changed)."""

    def eval_step(params: Any, tokens: jax.Array) -> jax.Array:
        losses = jax.lax.map(lambda micro: loss_fn(cfg, params, micro), tokens)
        return jnp.mean(losses)

    replicated = NamedSharding(b_sharding.mesh, P())
    return jax.jit(eval_step, in_shardings=(param_shardings, b_sharding),
                   out_shardings=replicated)


def shape_batch(tokens: np.ndarray, micro_batches: int) -> np.ndarray:
    batch = tokens.shape[0]
    return tokens.reshape(micro_batches, batch // micro_batches, tokens.shape[1])


def params_digest(params: Any) -> str:
    """sha256 over every parameter's bytes, in tree order."""
    digest = hashlib.sha256()
    for leaf in jax.tree.leaves(jax.device_get(params)):
        array = np.ascontiguousarray(np.asarray(leaf))
        digest.update(str(array.dtype).encode())
        digest.update(str(array.shape).encode())
        digest.update(array.tobytes())
    return digest.hexdigest()
