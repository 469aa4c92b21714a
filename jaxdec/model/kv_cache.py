"""Static-shape KV cache with per-row lengths; every slot carries the position of its token.

Row b's real entries are slots [0, length[b]). A forward writes its T new tokens (keys, values
and positions) at slots [length[b], length[b] + T) and advances `length`; rolling back after
verification only moves `length` back (stale slots are hidden by the mask). Masks read the
stored positions, not slot indices, so a cache may hold its tokens in any order (Fast-dLLM's
dual cache moves the decoded window to the end) and may append, reorder or gather chunks.
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
  positions: jax.Array  # i32[B, S]: the position of the token held by each slot.
  length: jax.Array  # i32[B]: real entries per row.

  @classmethod
  def init(cls, config: ModelConfig, batch: int, max_len: int, dtype=jnp.float32) -> "KVCache":
    shape = (config.num_layers, batch, max_len, config.num_kv_heads, config.head_dim)
    return cls(k=jnp.zeros(shape, dtype), v=jnp.zeros(shape, dtype),
               positions=jnp.zeros((batch, max_len), jnp.int32),
               length=jnp.zeros((batch,), jnp.int32))

  @property
  def max_len(self) -> int:
    return self.k.shape[2]

  def with_length(self, length: jax.Array) -> "KVCache":
    """Set the real length per row (rollback or ragged prefill); data is untouched."""
    return self.replace(length=jnp.broadcast_to(length, self.length.shape).astype(jnp.int32))

  def where(self, rows: jax.Array, other: "KVCache") -> "KVCache":
    """Per row: this cache where rows bool[B] is True, else `other`."""
    pick = lambda new, old: jnp.where(rows.reshape((1, -1) + (1,) * (new.ndim - 2)), new, old)
    return KVCache(k=pick(self.k, other.k), v=pick(self.v, other.v),
                   positions=jnp.where(rows[:, None], self.positions, other.positions),
                   length=jnp.where(rows, self.length, other.length))

  def move(self, src: jax.Array, dst: jax.Array) -> "KVCache":
    """Copy slots src i32[B, N] to slots dst i32[B, N] of each row (a tree's accepted path
    compacted into consecutive slots, say); out-of-range destinations are dropped."""
    rows = jnp.arange(self.k.shape[1])[:, None]
    src = jnp.clip(src, 0, self.max_len - 1)

    def copy(buffer):  # [L, B, S, ...]
      return buffer.at[:, rows, dst].set(buffer[:, rows, src], mode="drop")

    return self.replace(k=copy(self.k), v=copy(self.v),
                        positions=self.positions.at[rows, dst].set(self.positions[rows, src],
                                                                   mode="drop"))


def write_slots(buffer: jax.Array, new: jax.Array, start: jax.Array) -> jax.Array:
  """Write new[B, T, ...] into buffer[b, start[b] : start[b] + T] (no layer axis).

  Slots past the end of the buffer are dropped rather than clamped, so an overlong write never
  overwrites real entries (the API validates lengths before it gets here).
  """
  batch, steps = new.shape[:2]
  slots = start[:, None] + jnp.arange(steps, dtype=jnp.int32)[None, :]
  rows = jnp.arange(batch, dtype=jnp.int32)[:, None]
  return buffer.at[rows, slots].set(new.astype(buffer.dtype), mode="drop")


def write_layer(buffer: jax.Array, layer: jax.Array, new: jax.Array, start: jax.Array) -> jax.Array:
  """Write new[B, T, K, hd] into buffer[layer, b, start[b] : start[b] + T] in place."""
  batch, steps = new.shape[:2]
  slots = start[:, None] + jnp.arange(steps, dtype=jnp.int32)[None, :]
  rows = jnp.arange(batch, dtype=jnp.int32)[:, None]
  return buffer.at[layer, rows, slots].set(new.astype(buffer.dtype), mode="drop")
