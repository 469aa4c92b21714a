"""Tiny random models for tests that do not need transformers."""

import dataclasses

import jax

from jaxdec.model import Model, ModelConfig, SpecialTokens, forward, init_params
from jaxdec.model.config import FLAT_FIELDS, GROUPS

TINY = ModelConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
                   num_kv_heads=2, head_dim=16, max_position_embeddings=256,
                   tokens=SpecialTokens(eos=(1,), pad=0))


def updated(base: ModelConfig, **overrides) -> ModelConfig:
  """`base` with `overrides` (ModelConfig fields); a group given as a dict updates base's group
  (`tokens=dict(mask=3)` keeps the other ids)."""
  for name, value in overrides.items():
    if name in GROUPS and isinstance(value, dict):
      group = getattr(base, name)
      value = GROUPS[name](**value) if group is None else dataclasses.replace(group, **value)
      overrides[name] = value
  return dataclasses.replace(base, **overrides)


def flat_dict(grouped: dict) -> dict:
  """A `ModelConfig.to_dict` as jaxdec wrote it before the groups: every field flat."""
  flat = {k: v for k, v in grouped.items() if k not in GROUPS}
  for name, (group, field) in FLAT_FIELDS.items():
    flat[name] = None if grouped[group] is None else grouped[group][field]
  return flat


def tiny_config(**overrides) -> ModelConfig:
  """A 2-layer config (eos id 1, pad 0), `updated` by `overrides`."""
  return updated(TINY, **overrides)


def tiny_model(seed: int = 0, std: float = 0.2, **overrides) -> Model:
  config = tiny_config(**overrides)
  return Model(config=config, params=init_params(config, jax.random.key(seed), std=std))


# Jitted once per (config, shapes): un-jitted calls would compile the layer scan on every call.
jit_forward = jax.jit(forward, static_argnames=("config", "hidden_layers"))
