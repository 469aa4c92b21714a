"""The reference the masked-attention kernel must equal, written from first principles in plain
jnp: the dense [B, T, S] mask is built here from the mask spec's fields as `MaskSpec` documents
them, then one float32 softmax over every key slot. It shares no code with jaxdec's attention or
`MaskSpec.dense` (nor imports jaxdec), so a bug in either shows as a difference from it.

Fully masked query rows (padding) come out as zeros, as the kernel's do."""

from __future__ import annotations

import jax
import jax.numpy as jnp

# A model's attention pattern, by class name: which key positions a query position sees.
_PATTERNS = {
    "Causal": lambda pattern, q, k: k <= q,
    "Bidirectional": lambda pattern, q, k: jnp.ones(jnp.broadcast_shapes(q.shape, k.shape), bool),
    "BlockCausal": lambda pattern, q, k: k // pattern.block_size <= q // pattern.block_size,
}


def reference_attention(q, k, v, mask, *, scale=None, softcap=None):
  """q[B, T, H, hd], k/v[B, S, K, hd], mask: a `jaxdec.model.masks.MaskSpec` -> [B, T, H, hd]
  (query head h reads KV head h // (H / K)); scores times `scale` (default hd ** -0.5),
  soft-capped to cap * tanh(s / cap) by `softcap`."""
  heads, head_dim = q.shape[2], q.shape[3]
  group = heads // k.shape[2]
  scale = head_dim ** -0.5 if scale is None else scale
  k, v = (jnp.repeat(x.astype(jnp.float32), group, axis=2) for x in (k, v))
  scores = jnp.einsum("bthd,bshd->bhts", q.astype(jnp.float32), k) * scale
  if softcap is not None:
    scores = softcap * jnp.tanh(scores / softcap)
  probs = _softmax(scores, reference_mask(mask)[:, None])
  return jnp.einsum("bhts,bshd->bthd", probs, v).astype(q.dtype)


def _softmax(scores, visible):
  """Softmax over the visible keys; zeros for a row that sees none (no NaN, in either pass)."""
  top = jnp.max(jnp.where(visible, scores, -jnp.inf), axis=-1, keepdims=True)
  top = jax.lax.stop_gradient(jnp.where(jnp.isfinite(top), top, 0.0))
  weights = jnp.where(visible, jnp.exp(jnp.where(visible, scores - top, 0.0)), 0.0)
  total = jnp.sum(weights, axis=-1, keepdims=True)
  return weights / jnp.where(total > 0, total, 1.0)


def reference_mask(mask):
  """bool[B, T, S]: query t may attend to key slot s, from the spec's fields alone."""
  q_pos = mask.q_positions[:, :, None]
  k_pos = mask.kv_positions[:, None, :]
  batch, steps = mask.q_positions.shape
  slots = mask.kv_positions.shape[1]
  start = jnp.zeros((batch,), jnp.int32) if mask.start is None else mask.start
  visible = _pattern(mask.pattern, q_pos, k_pos)
  if mask.tree is not None:  # The tree's W columns are the slots [start, start + W).
    width = mask.tree.shape[-1]
    holds = _holds(start, width, slots)
    tree = jnp.broadcast_to(mask.tree, (batch, steps, width)).astype(jnp.int32)
    in_tree = jnp.any(holds, axis=1)[:, None, :]
    visible = jnp.where(in_tree, jnp.einsum("btw,bws->bts", tree, holds.astype(jnp.int32)) > 0,
                        visible)
  if mask.hidden_keys is not None:  # A mask key: seen at its own position only.
    hidden = jnp.einsum("bt,bts->bs", mask.hidden_keys.astype(jnp.int32),
                        _holds(start, steps, slots).astype(jnp.int32)) > 0
    given_query = ~mask.hidden_keys[:, :, None]
    visible = visible & (~hidden[:, None, :] | (q_pos == k_pos))
    visible = visible & (~given_query | (k_pos <= q_pos))  # Given tokens attend causally.
  visible = visible & (jnp.arange(slots)[None, None, :] < mask.kv_length[:, None, None])
  if mask.segments is not None:  # A key of the query's own segment or of the one it reads.
    seg = mask.segments
    k_seg = seg.kv[:, None, :]
    visible = visible & ((k_seg == seg.q[:, :, None]) | (k_seg == seg.reads[:, :, None]))
  if mask.window is not None:
    visible = visible & (q_pos - k_pos < mask.window)
  return visible


def _pattern(pattern, q_pos, k_pos):
  rule = _PATTERNS.get(type(pattern).__name__)
  if rule is None:
    raise ValueError(f"reference_attention knows the patterns {sorted(_PATTERNS)}, got "
                     f"{pattern!r}")
  return rule(pattern, q_pos, k_pos)


def _holds(start, width: int, slots: int):
  """bool[B, width, S]: slot s holds this forward's token w (s == start + w)."""
  token = jnp.arange(width)[None, :, None]
  slot = jnp.arange(slots)[None, None, :]
  return slot == start[:, None, None] + token
