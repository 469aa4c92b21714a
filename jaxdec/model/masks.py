"""Attention masks. `True` = the query may attend to the key.

A forward sees keys in two places: the committed cache prefix (always visible, it is the past)
and the block of T tokens being processed, whose internal visibility is a `bool[B, T, T]`
block mask: lower-triangular (causal), all-ones (bidirectional), or a tree's ancestor matrix.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxdec.model.config import ModelConfig


def default_block_mask(config: ModelConfig, steps: int) -> jax.Array:
  """bool[1, T, T]: causal for AR models, full for bidirectional (masked-diffusion) models."""
  if config.causal:
    return jnp.tril(jnp.ones((steps, steps), jnp.bool_))[None]
  return jnp.ones((1, steps, steps), jnp.bool_)


def key_visibility(block_mask: jax.Array, positions: jax.Array, length: jax.Array | None,
                   cache_len: int, sliding_window: int | None) -> jax.Array:
  """bool[B, T, S] for queries at `positions` i32[B, T].

  Without a cache (`length is None`) the keys are the block itself (S = T). With a cache the
  keys are the S cache slots: the prefix [0, length) plus the block written at
  [length, length + T); everything after is stale and hidden.
  """
  batch, steps = positions.shape
  block_mask = jnp.broadcast_to(block_mask, (batch, steps, steps))
  if length is None:
    visible, key_pos = block_mask, positions
  else:
    slot = jnp.arange(cache_len, dtype=jnp.int32)[None, :]
    rel = slot - length[:, None]  # [B, S]: index into the block, valid in [0, T).
    in_block = (rel >= 0) & (rel < steps)
    rel = jnp.clip(rel, 0, steps - 1)
    block_part = jnp.take_along_axis(block_mask, jnp.broadcast_to(rel[:, None, :], (batch, steps, cache_len)),
                                     axis=2)
    visible = (slot < length[:, None])[:, None, :] | (block_part & in_block[:, None, :])
    key_pos = jnp.where(in_block, jnp.take_along_axis(positions, rel, axis=1), slot)
  if sliding_window is not None:
    visible &= (positions[:, :, None] - key_pos[:, None, :]) < sliding_window
  return visible
