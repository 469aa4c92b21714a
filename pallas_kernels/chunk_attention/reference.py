"""Plain-jnp chunk-sparse attention: gather the selected chunks, one dense softmax over them."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def reference_chunk_attention(q, k_chunks, v_chunks, selected, keep, *, scale=None, softcap=None):
  """See `kernel.chunk_attention`: (out [B, T, H, hd], lse f32[B, T, H])."""
  batch, steps, heads, head_dim = q.shape
  kv_heads = k_chunks.shape[3]
  scale = head_dim ** -0.5 if scale is None else scale
  take = jax.vmap(lambda x, ids: x[ids])
  k = take(k_chunks, selected).reshape(batch, -1, kv_heads, head_dim)  # [B, N * L, K, hd]
  v = take(v_chunks, selected).reshape(batch, -1, kv_heads, head_dim)
  visible = take(keep, selected).reshape(batch, -1)
  q = q.reshape(batch, steps, kv_heads, heads // kv_heads, head_dim)
  s = jnp.einsum("btkgd,bskd->bkgts", q, k, preferred_element_type=jnp.float32) * scale
  if softcap is not None:
    s = jnp.tanh(s / softcap) * softcap
  s = jnp.where(visible[:, None, None, None, :], s, -jnp.inf)
  lse = jax.nn.logsumexp(s, axis=-1)  # -inf where a row sees nothing.
  p = jnp.exp(s - jnp.where(jnp.isfinite(lse), lse, 0.0)[..., None])
  out = jnp.einsum("bkgts,bskd->btkgd", p.astype(v.dtype), v, preferred_element_type=jnp.float32)
  return (out.reshape(batch, steps, heads, head_dim).astype(q.dtype),
          lse.transpose(0, 3, 1, 2).reshape(batch, steps, heads))
