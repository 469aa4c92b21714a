"""Grouped-query attention over a structured mask (`MaskSpec`).

`backend` selects the implementation: "xla" materialises the dense mask inside; "pallas" runs
`pallas_kernels.masked_attention`, which evaluates the mask tile by tile from its structure and
skips tiles no query can see (compiled on GPU and TPU, interpret mode elsewhere), except that a
whole in-order sequence under a causal or bidirectional pattern (training forwards) goes to the
kernel JAX ships for the platform (`pallas_kernels.shipped`: splash on TPU, mha on GPU).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxdec.model.masks import Bidirectional, Causal, MaskSpec
from pallas_kernels import shipped
from pallas_kernels.masked_attention import masked_attention

BACKENDS = ("xla", "pallas")


def _plain(mask: MaskSpec) -> bool:
  """A whole sequence in order under a causal or bidirectional pattern, per-row lengths only:
  what JAX's shipped kernels take."""
  return (mask.in_order and mask.tree is None and mask.hidden_keys is None and mask.window is None
          and isinstance(mask.pattern, (Causal, Bidirectional)))


def attention(q: jax.Array, k: jax.Array, v: jax.Array, *, mask: MaskSpec,
              scale: float | None = None, softcap: float | None = None,
              backend: str = "xla") -> jax.Array:
  """q[B, T, H, hd], k/v[B, S, K, hd] -> [B, T, H, hd].

  Scores are q.k times `scale` (default head_dim ** -0.5), soft-capped to cap * tanh(s / cap)
  when `softcap` is set (Gemma 2), then masked. Softmax is taken in fp32 (as HF's eager path).
  Fully masked query rows (padding) produce an average of the values instead of NaN; callers
  ignore those rows.
  """
  if backend not in BACKENDS:
    raise ValueError(f"unknown attention backend {backend!r}; available: {BACKENDS}")
  if backend == "pallas":
    op = shipped.op_for_platform()
    if op is not None and _plain(mask) and shipped.fits(op, softcap, q.shape[1]):
      return shipped.shipped_attention(q, k, v, mask.kv_length,
                                       causal=isinstance(mask.pattern, Causal), op=op, scale=scale,
                                       softcap=softcap)
    return masked_attention(q, k, v, mask, scale=scale, softcap=softcap)
  batch, steps, heads, head_dim = q.shape
  kv_heads = k.shape[2]
  scale = head_dim ** -0.5 if scale is None else scale
  q = q.reshape(batch, steps, kv_heads, heads // kv_heads, head_dim)
  if (mask.segments is not None and mask.segments.interleaved_from is not None
      and mask.tree is None and mask.hidden_keys is None):
    out = _interleaved_streams(q, k, v, mask, scale, softcap)
  else:
    probs = _masked_softmax(jnp.einsum("btkgd,bskd->bkgts", q, k), mask.dense()[:, None, None],
                            scale, softcap, v.dtype)
    out = jnp.einsum("bkgts,bskd->btkgd", probs, v)
  return out.reshape(batch, steps, heads, head_dim)


def _masked_softmax(scores, visible, scale, softcap, dtype):
  """Softmax over the last axis of scaled (soft-capped) scores, in fp32, where `visible`."""
  scores = scores.astype(jnp.float32) * scale
  if softcap is not None:
    scores = jnp.tanh(scores / softcap) * softcap
  scores = jnp.where(visible, scores, jnp.finfo(jnp.float32).min)
  return jax.nn.softmax(scores, axis=-1).astype(dtype)


def _interleaved_streams(q, k, v, mask: MaskSpec, scale, softcap):
  """q[B, T, K, G, hd] of T streams under `Segments.interleaved_from` = W: every query against
  the shared slots [0, W) and against its own stream's slots W + step * T + t only."""
  batch, streams = q.shape[:2]
  shared = mask.segments.interleaved_from
  steps = (k.shape[1] - shared) // streams
  if shared + steps * streams != k.shape[1]:
    raise ValueError(f"interleaved_from={shared}: the {k.shape[1] - shared} slots after it are "
                     f"not a whole number of steps of {streams} streams")
  seg = mask.segments
  head = mask.replace(kv_positions=mask.kv_positions[:, :shared],
                      segments=seg.replace(kv=seg.kv[:, :shared], interleaved_from=None))

  def own(x):  # [B, S, ...] -> each stream's slots, [B, steps, T, ...].
    return x[:, shared:].reshape((batch, steps, streams) + x.shape[2:])

  slots = shared + jnp.arange(steps * streams, dtype=jnp.int32).reshape(steps, streams)
  q_pos, k_pos, k_seg = mask.q_positions[:, None, :], own(mask.kv_positions), own(seg.kv)
  visible = ((slots[None] < mask.kv_length[:, None, None]) & mask.pattern.visible(q_pos, k_pos)
             & ((k_seg == seg.q[:, None, :]) | (k_seg == seg.reads[:, None, :])))
  if mask.window is not None:
    visible &= (q_pos - k_pos) < mask.window
  visible = jnp.concatenate([head.dense(), jnp.swapaxes(visible, 1, 2)], axis=-1)  # [B, T, W + steps]
  scores = jnp.concatenate([jnp.einsum("btkgd,bskd->bkgts", q, k[:, :shared]),
                            jnp.einsum("btkgd,bstkd->bkgts", q, own(k))], axis=-1)
  probs = _masked_softmax(scores, visible[:, None, None], scale, softcap, v.dtype)
  return (jnp.einsum("bkgts,bskd->btkgd", probs[..., :shared], v[:, :shared])
          + jnp.einsum("bkgts,bstkd->btkgd", probs[..., shared:], own(v)))
