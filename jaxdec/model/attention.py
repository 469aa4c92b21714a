"""Grouped-query attention over explicit masks (the XLA backend; Pallas kernels plug in here)."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def attention(q: jax.Array, k: jax.Array, v: jax.Array, visible: jax.Array) -> jax.Array:
  """q[B, T, H, hd], k/v[B, S, K, hd], visible bool[B, T, S] -> [B, T, H, hd].

  Softmax is taken in fp32 (as HF's eager path). Fully masked query rows (padding) produce an
  average of the values instead of NaN; callers ignore those rows.
  """
  batch, steps, heads, head_dim = q.shape
  kv_heads = k.shape[2]
  q = q.reshape(batch, steps, kv_heads, heads // kv_heads, head_dim)
  scores = jnp.einsum("btkgd,bskd->bkgts", q, k).astype(jnp.float32) * (head_dim ** -0.5)
  scores = jnp.where(visible[:, None, None], scores, jnp.finfo(jnp.float32).min)
  probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
  out = jnp.einsum("bkgts,bskd->btkgd", probs, v)
  return out.reshape(batch, steps, heads, head_dim)
