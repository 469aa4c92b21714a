"""Grouped-query attention over a structured mask (`MaskSpec`).

`backend` selects the implementation: "xla" materialises the dense mask inside; "pallas" runs
`pallas_kernels.masked_attention`, which evaluates the mask tile by tile from its structure and
skips tiles no query can see (compiled on GPU and TPU, interpret mode elsewhere).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxdec.model.masks import MaskSpec

BACKENDS = ("xla", "pallas")


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
    from pallas_kernels.masked_attention import masked_attention

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
