"""Named model configurations, from `tiny` (trains on CPU in seconds) to `qwen3-0.6b`."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelConfig:
    name: str
    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ff: int
    seq_len: int
    rope_theta: float = 1_000_000.0
    rms_eps: float = 1e-6
    tie_embeddings: bool = True
    # Training defaults that suit the size; the command line may override them.
    learning_rate: float = 3e-3
    warmup_steps: int = 10
    weight_decay: float = 0.01

    def __post_init__(self) -> None:
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"config {self.name}: n_heads ({self.n_heads}) must be a multiple of "
                f"n_kv_heads ({self.n_kv_heads}) for grouped-query attention"
            )

    def param_count(self) -> int:
        attn = self.d_model * self.head_dim * (2 * self.n_heads + 2 * self.n_kv_heads)
        mlp = 3 * self.d_model * self.d_ff
        norms = 2 * self.d_model + 2 * self.head_dim
        layer = attn + mlp + norms
        embed = self.vocab_size * self.d_model * (1 if self.tie_embeddings else 2)
        return self.n_layers * layer + embed + self.d_model


CONFIGS: dict[str, ModelConfig] = {
    c.name: c
    for c in (
        ModelConfig(
            name="tiny", vocab_size=256, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2,
            head_dim=16, d_ff=128, seq_len=32, rope_theta=10_000.0, learning_rate=1e-2,
        ),
        ModelConfig(
            name="small", vocab_size=256, d_model=256, n_layers=4, n_heads=8, n_kv_heads=4,
            head_dim=32, d_ff=768, seq_len=128, rope_theta=10_000.0, learning_rate=1e-3,
        ),
        # The real Qwen3-0.6B dimensions (HF config); only shape-checked here.
        ModelConfig(
            name="qwen3-0.6b", vocab_size=151_936, d_model=1024, n_layers=28, n_heads=16,
            n_kv_heads=8, head_dim=128, d_ff=3072, seq_len=2048, learning_rate=3e-4,
            warmup_steps=100,
        ),
    )
}


def get_config(name: str) -> ModelConfig:
    try:
        return CONFIGS[name]
    except KeyError:
        raise ValueError(
            f"unknown model config {name!r}; choose one of {', '.join(CONFIGS)}"
        ) from None
