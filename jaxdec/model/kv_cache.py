"""Static-shape KV cache with per-row lengths.

Row b holds its committed tokens in slots [0, length[b]), slot index == token position. A
forward writes its T new tokens at slots [length[b], length[b] + T) and advances `length`;
rolling back after verification only moves `length` back (stale slots are masked out).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from jaxdec.model.config import ModelConfig


@struct.dataclass
class KVCache:
  k: jax.Array  # [layers, B, S, kv_heads, head_dim]
  v: jax.Array  # [layers, B, S, kv_heads, head_dim]
  length: jax.Array  # i32[B]: committed tokens per row.

  @classmethod
  def init(cls, config: ModelConfig, batch: int, max_len: int, dtype=jnp.float32) -> "KVCache":
    shape = (config.num_layers, batch, max_len, config.num_kv_heads, config.head_dim)
    return cls(k=jnp.zeros(shape, dtype), v=jnp.zeros(shape, dtype),
               length=jnp.zeros((batch,), jnp.int32))

  @property
  def max_len(self) -> int:
    return self.k.shape[2]

  def with_length(self, length: jax.Array) -> "KVCache":
    """Set the committed length per row (rollback or ragged prefill); data is untouched."""
    return self.replace(length=jnp.broadcast_to(length, self.length.shape).astype(jnp.int32))


def write_layer(buffer: jax.Array, layer: jax.Array, new: jax.Array, start: jax.Array) -> jax.Array:
  """Write new[B, T, K, hd] into buffer[layer, b, start[b] : start[b] + T] in place.

  Slots past the end of the buffer are dropped rather than clamped, so an overlong write never
  overwrites committed entries (the API validates lengths before it gets here).
  """
  batch, steps = new.shape[:2]
  slots = start[:, None] + jnp.arange(steps, dtype=jnp.int32)[None, :]
  rows = jnp.arange(batch, dtype=jnp.int32)[:, None]
  return buffer.at[layer, rows, slots].set(new.astype(buffer.dtype), mode="drop")
