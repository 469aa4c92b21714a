"""Structured attention masks: what a query may see, described rather than materialised.

A model's own pattern is a small static object in its config (`Causal`, `Bidirectional`,
`BlockCausal`), a function of query and key *positions*. One forward's `MaskSpec` adds what only
the caller knows: which key slots hold real entries (`kv_length`: slots at or past it are stale or
padding), optionally a `tree` that replaces the pattern among the tokens this forward writes
(a draft tree's ancestor matrix), and which of those tokens are masks
(`BlockCausal(causal_given=True)` hides them as keys), and optionally `segments` that cut one row
into independent streams over shared contexts (Hyper-Parallel Decoding). Because the pattern reads positions, not
slot indices, a KV cache may hold its entries in any slot order. The XLA backend materialises the dense mask
(`MaskSpec.dense`); a kernel can read the structure and skip blocks instead.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
from flax import struct


@dataclasses.dataclass(frozen=True)
class Causal:
  """A query sees keys at positions up to its own (autoregressive models).

  Every pattern declares `block_size` (BlockCausal's block; None for the others) and
  `causal_given` (BlockCausal's option; False for the others), so callers read them directly."""

  block_size: ClassVar[None] = None
  causal_given: ClassVar[bool] = False

  def visible(self, q_pos: jax.Array, k_pos: jax.Array) -> jax.Array:
    return k_pos <= q_pos


@dataclasses.dataclass(frozen=True)
class Bidirectional:
  """A query sees every real key (masked-diffusion models: LLaDA, Dream)."""

  block_size: ClassVar[None] = None
  causal_given: ClassVar[bool] = False

  def visible(self, q_pos: jax.Array, k_pos: jax.Array) -> jax.Array:
    return jnp.ones(jnp.broadcast_shapes(q_pos.shape, k_pos.shape), jnp.bool_)


@dataclasses.dataclass(frozen=True)
class BlockCausal:
  """Positions are cut into blocks of `block_size`; a query sees its own block and every earlier
  one (block-diffusion models: bidirectional inside a block, causal across blocks).

  `causal_given`: given (non-mask) tokens attend causally and are the only keys (a mask also sees
  itself); a mask reads every given token its block sees. Given tokens then form exactly the
  causal model the weights came from (so does decoding a block strictly left to right), and
  only masks read to the right: what a small model adapted from an AR one needs, since with
  every token visible its AR path is perturbed by each mask after it (measured on gsm-synth).
  Lost: a given token reading later ones, and masks reading each other within a step. Only this
  pattern offers it, because its caches hold given tokens only (later blocks are invisible)."""

  block_size: int
  causal_given: bool = False

  def __post_init__(self):
    if isinstance(self.block_size, bool) or not isinstance(self.block_size, int) or self.block_size < 1:
      raise ValueError(f"BlockCausal.block_size must be a positive int, got {self.block_size!r}")
    if not isinstance(self.causal_given, bool):
      raise TypeError(f"BlockCausal.causal_given must be a bool, got {self.causal_given!r}")

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
class Segments:
  """Independent streams packed into one row (Hyper-Parallel Decoding): every token carries a
  segment id, and a query also names one other segment it may read, its shared context. A query
  sees a key only when the key's segment is its own or the one it reads; position rules (the
  pattern, the window, lengths) then apply as usual. So several queries that continue one
  context at the *same* positions neither see each other nor need their own copy of it.

  q i32[B, T] and reads i32[B, T] for this forward's tokens (a context token reads itself);
  kv i32[B, S] for the key slots, this forward's tokens included (with a cache, the caller keeps
  it aligned with the slots).

  `interleaved_from` (static) promises a layout the XLA backend exploits: query t of this forward
  is stream t (segment t), and from that slot on the keys are the streams' own tokens, one per
  stream per step in stream order (slot interleaved_from + step * T + t), so (S -
  interleaved_from) is a multiple of T. Attention then scores each query against the shared slots
  before it and its own stream's slots only (T x (W + steps) scores instead of T x S), which is
  what keeps a decode step of many streams linear in the number of streams. The visibility it
  computes is `visible()`'s; backends that read the dense mask may ignore it."""

  q: jax.Array
  reads: jax.Array
  kv: jax.Array
  interleaved_from: int | None = struct.field(pytree_node=False, default=None)

  def visible(self) -> jax.Array:
    """bool[B, T, S]."""
    k = self.kv[:, None, :]
    return (k == self.q[:, :, None]) | (k == self.reads[:, :, None])


@struct.dataclass
class MaskSpec:
  """Visibility for one forward: queries q_positions i32[B, T] against key slots holding
  kv_positions i32[B, S]; slots >= kv_length i32[B] are hidden. With `tree` bool[B or 1, T, T],
  the T keys written by this forward at slots [start, start + T) are visible to query i
  iff tree[i, j], instead of by the pattern; a `tree` bool[B or 1, T, W] of another width W
  covers the W slots [start, start + W) (a drafter growing a tree over several forwards: the
  nodes written earlier sit in those slots too). `window` (a query sees keys fewer than `window`
  positions back) is a Python int when every layer shares it, or a traced i32[] that the layer
  scan sets per layer (Gemma's sliding and full-attention layers). `hidden_keys` bool[B, T]
  marks this forward's masks: only a query at the same position sees them, and the other tokens
  attend causally (`BlockCausal.causal_given`); keys already in a cache count as given.
  `in_order` (static) promises that every row's queries and keys are its tokens 0..T-1 at
  positions 0..T-1 (a whole sequence, no cache): the mask is then the pattern plus per-row
  lengths, which JAX's shipped attention kernels take. `segments` (`Segments`) further hides
  keys of other streams."""

  q_positions: jax.Array
  kv_positions: jax.Array
  kv_length: jax.Array
  pattern: object = struct.field(pytree_node=False, default=Causal())
  window: int | jax.Array | None = None
  tree: jax.Array | None = None
  start: jax.Array | None = None  # i32[B]: the slot of this forward's first token.
  hidden_keys: jax.Array | None = None
  in_order: bool = struct.field(pytree_node=False, default=False)
  segments: Segments | None = None

  def dense(self) -> jax.Array:
    """bool[B, T, S]: True where query t may attend to key slot s."""
    q = self.q_positions[:, :, None]
    k = self.kv_positions[:, None, :]
    slots = jnp.arange(self.kv_positions.shape[1], dtype=jnp.int32)[None, :]
    visible = self.pattern.visible(q, k)
    steps = self.q_positions.shape[1]
    rel = slots - self.start[:, None]  # [B, S]: index into this forward's tokens, valid in [0, T).
    in_block = (rel >= 0) & (rel < steps)
    if self.tree is not None:
      width = self.tree.shape[-1]
      tree = jnp.broadcast_to(self.tree, (q.shape[0], steps, width))
      index = jnp.broadcast_to(jnp.clip(rel, 0, width - 1)[:, None, :], visible.shape)
      from_tree = jnp.take_along_axis(tree, index, axis=2)
      visible = jnp.where(((rel >= 0) & (rel < width))[:, None, :], from_tree, visible)
    if self.hidden_keys is not None:
      hidden = in_block & jnp.take_along_axis(self.hidden_keys, jnp.clip(rel, 0, steps - 1), axis=1)
      given_query = ~self.hidden_keys[:, :, None]
      visible &= (~hidden[:, None, :] | (q == k)) & (~given_query | (k <= q))
    visible &= (slots < self.kv_length[:, None])[:, None, :]
    if self.segments is not None:
      visible &= self.segments.visible()
    if self.window is not None:
      visible &= (q - k) < self.window
    return visible
