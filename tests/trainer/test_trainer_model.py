"""The model, its sharding rules and the micro-batch arithmetic (in-process, 1 CPU device)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from elastic_trainer import train
from elastic_trainer.configs import CONFIGS, get_config
from elastic_trainer.model import forward, init_params, loss_fn


def test_tiny_forward_shapes_and_initial_loss_near_uniform() -> None:
    cfg = get_config("tiny")
    params = init_params(cfg, jax.random.PRNGKey(0))
    tokens = jnp.arange(2 * (cfg.seq_len + 1), dtype=jnp.int32).reshape(2, -1) % cfg.vocab_size
    logits = forward(cfg, params, tokens[:, :-1])
    assert logits.shape == (2, cfg.seq_len, cfg.vocab_size)
    loss = float(loss_fn(cfg, params, tokens))
    assert abs(loss - np.log(cfg.vocab_size)) < 0.5


def test_attention_is_causal() -> None:
    cfg = get_config("tiny")
    params = init_params(cfg, jax.random.PRNGKey(1))
    a = jnp.arange(cfg.seq_len, dtype=jnp.int32)[None, :]
    b = a.at[0, -1].set(7)  # change only the last token
    la, lb = forward(cfg, params, a), forward(cfg, params, b)
    np.testing.assert_array_equal(np.asarray(la[0, :-1]), np.asarray(lb[0, :-1]))
    assert not np.array_equal(np.asarray(la[0, -1]), np.asarray(lb[0, -1]))


def test_qwen3_06b_has_the_real_shapes() -> None:
    cfg = get_config("qwen3-0.6b")
    params = jax.eval_shape(lambda: init_params(cfg, jax.random.PRNGKey(0)))
    layers = params["layers"]
    assert params["embed"].shape == (151_936, 1024)
    assert layers["wq"].shape == (28, 1024, 16 * 128)
    assert layers["wk"].shape == (28, 1024, 8 * 128)
    assert layers["q_norm"].shape == (28, 128)
    assert layers["w_gate"].shape == (28, 1024, 3072)
    assert "lm_head" not in params  # tied embeddings, as in Qwen3-0.6B
    count = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params))
    assert count == cfg.param_count()
    assert 590e6 < count < 600e6  # Qwen3-0.6B: 0.6B parameters with embeddings
    logits = jax.eval_shape(lambda p, t: forward(cfg, p, t), params,
                            jax.ShapeDtypeStruct((1, cfg.seq_len), jnp.int32))
    assert logits.shape == (1, 2048, 151_936)


def test_every_config_builds_its_optimizer_state_abstractly() -> None:
    for cfg in CONFIGS.values():
        state = train.abstract_state(cfg, train.make_optimizer(cfg, 100))
        assert state["step"].shape == ()
        assert jax.tree.structure(state["params"]) == jax.tree.structure(
            jax.eval_shape(lambda c=cfg: init_params(c, jax.random.PRNGKey(0))))


def test_unknown_config_names_the_choices() -> None:
    with pytest.raises(ValueError, match="tiny"):
        get_config("gpt-5")


@pytest.mark.parametrize(("shape", "fsdp", "spec"), [
    ((2, 64, 128), 2, P(None, None, "fsdp")),  # never the stacked-layer axis
    ((256, 64), 4, P("fsdp", None)),
    ((64,), 2, P("fsdp")),
    ((3, 5), 2, P()),  # nothing divisible: replicated
    ((), 2, P()),
    ((256, 64), 1, P()),
])
def test_fsdp_spec(shape: tuple[int, ...], fsdp: int, spec: P) -> None:
    assert train.fsdp_spec(shape, fsdp) == spec


def test_micro_batches_keep_the_global_batch() -> None:
    assert train.micro_batches_for(8, 2, 2, 2) == 1
    assert train.micro_batches_for(8, 2, 1, 2) == 2
    assert train.micro_batches_for(24, 3, 2, 2) == 2  # 12 per micro-batch over 4 devices
    assert train.micro_batches_for(48, 4, 3, 2) == 2  # ceil(4/3) = 2; 24 over 6 devices
    with pytest.raises(ValueError, match="--batch 6"):
        train.micro_batches_for(6, 2, 1, 4)
