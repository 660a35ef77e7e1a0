"""A decoder-only language model in the style of Qwen3.

RMSNorm, rotary embeddings, grouped-query attention with RMSNorm on queries and keys
(QK-norm), SwiGLU MLP, tied input/output embeddings. Layers are stacked along a leading
axis and run with `lax.scan`, so compile time does not grow with depth.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from elastic_trainer.configs import ModelConfig

Params = dict[str, Any]


def init_params(cfg: ModelConfig, key: jax.Array) -> Params:
    """Parameters as a plain dict of float32 arrays (layer weights stacked on axis 0)."""
    k_embed, k_head, k_q, k_k, k_v, k_o, k_gate, k_up, k_down = jax.random.split(key, 9)
    n_layers, d, hd = cfg.n_layers, cfg.d_model, cfg.head_dim

    def dense(k: jax.Array, shape: tuple[int, ...], fan_in: int) -> jax.Array:
        return jax.random.normal(k, shape, jnp.float32) * (fan_in**-0.5)

    layers = {
        "attn_norm": jnp.ones((n_layers, d), jnp.float32),
        "wq": dense(k_q, (n_layers, d, cfg.n_heads * hd), d),
        "wk": dense(k_k, (n_layers, d, cfg.n_kv_heads * hd), d),
        "wv": dense(k_v, (n_layers, d, cfg.n_kv_heads * hd), d),
        # Output projections start small so the residual stream starts near identity.
        "wo": dense(k_o, (n_layers, cfg.n_heads * hd, d), cfg.n_heads * hd) / (2 * n_layers),
        "q_norm": jnp.ones((n_layers, hd), jnp.float32),
        "k_norm": jnp.ones((n_layers, hd), jnp.float32),
        "mlp_norm": jnp.ones((n_layers, d), jnp.float32),
        "w_gate": dense(k_gate, (n_layers, d, cfg.d_ff), d),
        "w_up": dense(k_up, (n_layers, d, cfg.d_ff), d),
        "w_down": dense(k_down, (n_layers, cfg.d_ff, d), cfg.d_ff) / (2 * n_layers),
    }
    params: Params = {
        "embed": jax.random.normal(k_embed, (cfg.vocab_size, d), jnp.float32) * 0.02,
        "layers": layers,
        "final_norm": jnp.ones((d,), jnp.float32),
    }
    if not cfg.tie_embeddings:
        params["lm_head"] = dense(k_head, (d, cfg.vocab_size), d)
    return params


def rms_norm(x: jax.Array, weight: jax.Array, eps: float) -> jax.Array:
    x32 = x.astype(jnp.float32)
    normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return (normed * weight).astype(x.dtype)


def rope(x: jax.Array, theta: float) -> jax.Array:
    """Rotary embeddings (half-split layout, as in Qwen/Llama). x: [batch, seq, heads, hd]."""
    seq, hd = x.shape[1], x.shape[-1]
    inv_freq = 1.0 / (theta ** (jnp.arange(0, hd, 2, dtype=jnp.float32) / hd))
    angles = jnp.arange(seq, dtype=jnp.float32)[:, None] * inv_freq[None, :]  # [seq, hd/2]
    cos = jnp.cos(angles)[None, :, None, :]
    sin = jnp.sin(angles)[None, :, None, :]
    x1, x2 = x[..., : hd // 2], x[..., hd // 2 :]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)


def _layer(cfg: ModelConfig, x: jax.Array, p: Params) -> jax.Array:
    batch, seq, _ = x.shape
    hd, n_heads, n_kv = cfg.head_dim, cfg.n_heads, cfg.n_kv_heads

    h = rms_norm(x, p["attn_norm"], cfg.rms_eps)
    q = (h @ p["wq"]).reshape(batch, seq, n_heads, hd)
    k = (h @ p["wk"]).reshape(batch, seq, n_kv, hd)
    v = (h @ p["wv"]).reshape(batch, seq, n_kv, hd)
    q = rope(rms_norm(q, p["q_norm"], cfg.rms_eps), cfg.rope_theta)
    k = rope(rms_norm(k, p["k_norm"], cfg.rms_eps), cfg.rope_theta)
    # Grouped-query attention: each key/value head serves n_heads / n_kv query heads.
    q = q.reshape(batch, seq, n_kv, n_heads // n_kv, hd)
    scores = jnp.einsum("bqkgd,bskd->bkgqs", q, k) * (hd**-0.5)
    causal = jnp.tril(jnp.ones((seq, seq), dtype=bool))
    scores = jnp.where(causal, scores.astype(jnp.float32), jnp.finfo(jnp.float32).min)
    weights = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    attn = jnp.einsum("bkgqs,bskd->bqkgd", weights, v).reshape(batch, seq, n_heads * hd)
    x = x + attn @ p["wo"]

    h = rms_norm(x, p["mlp_norm"], cfg.rms_eps)
    x = x + (jax.nn.silu(h @ p["w_gate"]) * (h @ p["w_up"])) @ p["w_down"]
    return x


def forward(cfg: ModelConfig, params: Params, tokens: jax.Array) -> jax.Array:
    """Logits [batch, seq, vocab] (float32) for int tokens [batch, seq]."""
    x = params["embed"][tokens]

    def body(carry: jax.Array, layer_params: Params) -> tuple[jax.Array, None]:
        return _layer(cfg, carry, layer_params), None

    x, _ = jax.lax.scan(body, x, params["layers"])
    x = rms_norm(x, params["final_norm"], cfg.rms_eps)
    head = params["embed"].T if cfg.tie_embeddings else params["lm_head"]
    return (x @ head).astype(jnp.float32)


def loss_fn(cfg: ModelConfig, params: Params, tokens: jax.Array) -> jax.Array:
    """Mean next-token cross entropy; tokens [batch, seq + 1]."""
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    logits = forward(cfg, params, inputs)
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    picked = jnp.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]
    return -jnp.mean(picked)
