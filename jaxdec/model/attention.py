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
    from pallas_kernels import shipped
    from pallas_kernels.masked_attention import masked_attention

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
  scores = jnp.einsum("btkgd,bskd->bkgts", q, k).astype(jnp.float32) * scale
  if softcap is not None:
    scores = jnp.tanh(scores / softcap) * softcap
  scores = jnp.where(mask.dense()[:, None, None], scores, jnp.finfo(jnp.float32).min)
  probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
  out = jnp.einsum("bkgts,bskd->btkgd", probs, v)
  return out.reshape(batch, steps, heads, head_dim)
