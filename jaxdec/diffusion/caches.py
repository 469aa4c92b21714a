"""Fast-dLLM's approximate KV caches for bidirectional denoisers.

At the first step of every block one full forward refreshes the keys and values of the whole
canvas (and its logits drive that step's commits); the block's later steps run only a query
window and reuse the refreshed entries. On a bidirectional model the reused entries are stale
(they were computed before this block's commits), so both caches are opt-in approximations; on
a one-layer model they are exact, which the tests use.

- `PrefixCache`: reuse the prefix before the block; the window is the block and everything after.
- `DualCache`: reuse the prefix and the suffix after the block; the window is the block alone.

The jaxdec KV cache attends to slots [0, length) plus the block being written at length, so the
refresh forward runs the canvas in *slot order* prefix ++ suffix ++ window (RoPE positions travel
with the tokens; attention is order-free), leaving the window's slots last, to be rewritten by
every later step. On a shifted (Dream) model the window starts one token early, so that the
block's first position is predicted by a fresh output.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class PrefixCache:
  """Reuse keys/values of the positions before the current block (Fast-dLLM prefix cache)."""

  def window(self, block_length: int, gen_length: int, shift: int) -> int:
    return gen_length + shift


@dataclasses.dataclass(frozen=True)
class DualCache:
  """Reuse keys/values before and after the current block (Fast-dLLM dual cache)."""

  def window(self, block_length: int, gen_length: int, shift: int) -> int:
    return block_length + shift


CACHES = (PrefixCache, DualCache)


def slot_order(start: jax.Array, window: jax.Array, length: jax.Array, width: int) -> jax.Array:
  """i32[B, width]: the canvas position held by each cache slot.

  Row b keeps [0, start) in place, moves the suffix [start + window, length) right after it and
  the window [start, start + window) to the end of its real tokens; padding (>= length) stays.
  """
  slot = jnp.arange(width, dtype=jnp.int32)[None, :]
  start, window, length = start[:, None], window[:, None], length[:, None]
  suffix_end = length - window
  return jnp.where(slot < start, slot,
                   jnp.where(slot < suffix_end, slot + window,
                             jnp.where(slot < length, start + slot - suffix_end, slot)))
