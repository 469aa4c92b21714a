"""Structured attention masks: what a query may see, described rather than materialised.

A model's own pattern is a small static object in its config (`Causal`, `Bidirectional`,
`BlockCausal`), a function of query and key *positions*. One forward's `MaskSpec` adds what only
the caller knows: which key slots hold real entries (`kv_length`: slots at or past it are stale or
padding) and, optionally, a `tree` that replaces the pattern among the tokens this forward
writes (a draft tree's ancestor matrix). Because the pattern reads positions, not slot indices,
a KV cache may hold its entries in any slot order. The XLA backend materialises the dense mask
(`MaskSpec.dense`); a kernel can read the structure and skip blocks instead.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import struct


@dataclasses.dataclass(frozen=True)
class Causal:
  """A query sees keys at positions up to its own (autoregressive models)."""

  def visible(self, q_pos: jax.Array, k_pos: jax.Array) -> jax.Array:
    return k_pos <= q_pos


@dataclasses.dataclass(frozen=True)
class Bidirectional:
  """A query sees every real key (masked-diffusion models: LLaDA, Dream)."""

  def visible(self, q_pos: jax.Array, k_pos: jax.Array) -> jax.Array:
    return jnp.ones(jnp.broadcast_shapes(q_pos.shape, k_pos.shape), jnp.bool_)


@dataclasses.dataclass(frozen=True)
class BlockCausal:
  """Positions are cut into blocks of `block_size`; a query sees its own block and every earlier
  one (block-diffusion models: bidirectional inside a block, causal across blocks)."""

  block_size: int

  def __post_init__(self):
    if isinstance(self.block_size, bool) or not isinstance(self.block_size, int) or self.block_size < 1:
      raise ValueError(f"BlockCausal.block_size must be a positive int, got {self.block_size!r}")

  def visible(self, q_pos: jax.Array, k_pos: jax.Array) -> jax.Array:
    return k_pos // self.block_size <= q_pos // self.block_size


PATTERNS = {"causal": Causal, "bidirectional": Bidirectional, "block_causal": BlockCausal}


def pattern_to_dict(pattern) -> dict:
  kind = {cls: name for name, cls in PATTERNS.items()}[type(pattern)]
  return {"kind": kind, **dataclasses.asdict(pattern)}


def pattern_from_dict(data: dict):
  data = dict(data)
  kind = data.pop("kind", None)
  if kind not in PATTERNS:
    raise ValueError(f"unknown attention pattern {kind!r}; expected one of {sorted(PATTERNS)}")
  return PATTERNS[kind](**data)


@struct.dataclass
class MaskSpec:
  """Visibility for one forward: queries q_positions i32[B, T] against key slots holding
  kv_positions i32[B, S]; slots >= kv_length i32[B] are hidden. With `tree` bool[B or 1, T, T],
  the T keys written by this forward at slots [tree_start, tree_start + T) are visible to query i
  iff tree[i, j], instead of by the pattern. `window` (a query sees keys fewer than `window`
  positions back) is a Python int when every layer shares it, or a traced i32[] that the layer
  scan sets per layer (Gemma's sliding and full-attention layers)."""

  q_positions: jax.Array
  kv_positions: jax.Array
  kv_length: jax.Array
  pattern: object = struct.field(pytree_node=False, default=Causal())
  window: int | jax.Array | None = None
  tree: jax.Array | None = None
  tree_start: jax.Array | None = None

  def dense(self) -> jax.Array:
    """bool[B, T, S]: True where query t may attend to key slot s."""
    q = self.q_positions[:, :, None]
    k = self.kv_positions[:, None, :]
    slots = jnp.arange(self.kv_positions.shape[1], dtype=jnp.int32)[None, :]
    visible = self.pattern.visible(q, k)
    if self.tree is not None:
      steps = self.q_positions.shape[1]
      rel = slots - self.tree_start[:, None]  # [B, S]: index into the block, valid in [0, T).
      in_block = (rel >= 0) & (rel < steps)
      tree = jnp.broadcast_to(self.tree, (q.shape[0], steps, steps))
      index = jnp.broadcast_to(jnp.clip(rel, 0, steps - 1)[:, None, :], visible.shape)
      from_tree = jnp.take_along_axis(tree, index, axis=2)
      visible = jnp.where(in_block[:, None, :], from_tree, visible)
    visible &= (slots < self.kv_length[:, None])[:, None, :]
    if self.window is not None:
      visible &= (q - k) < self.window
    return visible
