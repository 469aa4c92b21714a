"""Tiny random models for tests that do not need transformers."""

import jax

from jaxdec.model import Model, ModelConfig, forward, init_params


def tiny_config(**overrides) -> ModelConfig:
  kw = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
            num_kv_heads=2, head_dim=16, max_position_embeddings=256, eos_token_ids=(1,),
            pad_token_id=0)
  kw.update(overrides)
  return ModelConfig(**kw)


def tiny_model(seed: int = 0, std: float = 0.2, **overrides) -> Model:
  config = tiny_config(**overrides)
  return Model(config=config, params=init_params(config, jax.random.key(seed), std=std))


# Jitted once per (config, shapes): un-jitted calls would compile the layer scan on every call.
jit_forward = jax.jit(forward, static_argnames=("config", "hidden_layers"))
