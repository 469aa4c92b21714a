"""Chunk-sparse prefix attention (Prefilling-dLLM): queries against a non-contiguous selection of
a long prefix's cached chunks, without gathering them.

The prefix's K/V sit in chunks k/v_chunks[B, M, L, K, hd] (L slots: Prefilling-dLLM's BOS anchor
then the chunk's tokens); `selected` i32[B, N] names the N chunks each row reads (its top-K) and
`keep` bool[B, M, L] the slots it keeps inside them (intra-chunk token capacity; padding). Every
kept slot of a selected chunk is visible to every query: a prefix precedes the whole decode
block, whatever the model's pattern. The result is partial attention: (out, lse) with lse the
log-sum-exp of each query's scores (-inf where nothing was kept), which `merge` combines exactly
with attention over the rest of the context (the question, the generated blocks).

Variants, as `masked_attention`'s: "tpu" walks the N selected chunks as the innermost grid axis,
the chunk ids scalar-prefetched into the K/V index maps (a chunk is one DMA, never gathered in
HBM); "gpu" loops over them inside one program per query tile (on GPU, L must be a power of two:
pad chunks and leave the padding out of `keep`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from pallas_kernels.chunk_attention.tuned_block_sizes import tuned_block_q
from pallas_kernels.common import (default_interpret, default_variant, fold_rows, online_softmax_step,
                                   out_and_lse_shapes, scratch_read, scratch_reset, scratch_write,
                                   softmax_finish, softmax_start, tpu_row_tiles_params,
                                   tpu_softmax_scratch, unfold_rows)

VARIANTS = ("tpu", "gpu")


def chunk_attention(q: jax.Array, k_chunks: jax.Array, v_chunks: jax.Array, selected: jax.Array,
                    keep: jax.Array, *, scale: float | None = None, softcap: float | None = None,
                    block_q: int | None = None, variant: str | None = None,
                    interpret: bool | None = None) -> tuple[jax.Array, jax.Array]:
  """q[B, T, H, hd] against the `selected` chunks -> (out [B, T, H, hd], lse f32[B, T, H])."""
  batch, steps, heads, head_dim = q.shape
  if (k_chunks.ndim != 5 or k_chunks.shape != v_chunks.shape or k_chunks.shape[0] != batch
      or k_chunks.shape[4] != head_dim or heads % k_chunks.shape[3]):
    raise ValueError(f"chunk_attention: q {q.shape}, k_chunks {k_chunks.shape}, v_chunks "
                     f"{v_chunks.shape} are not [B, T, H, hd] and [B, M, L, K, hd] with H a "
                     f"multiple of K")
  _, chunks, length, kv_heads, _ = k_chunks.shape
  if selected.ndim != 2 or selected.shape[0] != batch:
    raise ValueError(f"selected must be i32[B, N] with B = {batch}, got shape {selected.shape}")
  if keep.shape != (batch, chunks, length):
    raise ValueError(f"keep must be bool[B, M, L] = {(batch, chunks, length)}, got {keep.shape}")
  variant = default_variant() if variant is None else variant
  if variant not in VARIANTS:
    raise ValueError(f"unknown kernel variant {variant!r}; available: {VARIANTS}")
  interpret = default_interpret() if interpret is None else interpret
  rows = steps * (heads // kv_heads)
  block_q = tuned_block_q(rows, variant=variant, interpret=interpret) if block_q is None else block_q
  scale = head_dim ** -0.5 if scale is None else float(scale)
  q_rows = fold_rows(q, kv_heads, block_q)
  keep = keep.astype(jnp.int32)[:, :, None, :]  # [B, M, 1, L]: a lane-major row per chunk.
  selected = jnp.clip(selected.astype(jnp.int32), 0, chunks - 1)
  call = _tpu_call if variant == "tpu" else _gpu_call
  out, lse = call(q_rows, k_chunks, v_chunks, selected, keep, bq=block_q, scale=scale,
                  softcap=softcap, interpret=interpret)
  return unfold_rows(out, steps, heads), unfold_rows(lse, steps, heads)[..., 0]


def merge(parts) -> tuple[jax.Array, jax.Array]:
  """Exact attention over the union of disjoint key sets from their partial results
  [(out [B, T, H, hd], lse f32[B, T, H]), ...]: each part weighted by exp(lse - total lse)."""
  lses = jnp.stack([lse for _, lse in parts])
  total = jax.nn.logsumexp(lses, axis=0)
  weights = jnp.exp(lses - jnp.where(jnp.isfinite(total), total, 0.0)[None])
  out = sum(w[..., None] * o.astype(jnp.float32) for w, (o, _) in zip(weights, parts))
  return out.astype(parts[0][0].dtype), total


def _scores(q, k, keep, scale, softcap):
  s = jax.lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
  s = s * scale
  if softcap is not None:
    s = jnp.tanh(s / softcap) * softcap
  return jnp.where(keep > 0, s, -jnp.inf)


def _tpu_call(q, k_chunks, v_chunks, selected, keep, *, bq, scale, softcap, interpret):
  from jax.experimental.pallas import tpu as pltpu

  batch, kv_heads, padded_rows, head_dim = q.shape
  length, picks = k_chunks.shape[2], selected.shape[1]

  def kernel(selected_ref, q_ref, k_ref, v_ref, keep_ref, o_ref, lse_ref, *scratch):
    n = pl.program_id(3)

    @pl.when(n == 0)
    def _init():
      scratch_reset(*scratch)

    s = _scores(q_ref[...], k_ref[...], keep_ref[...], scale, softcap)
    scratch_write(*scratch, online_softmax_step(s, v_ref[...], scratch_read(*scratch)))

    @pl.when(n == picks - 1)
    def _write():
      out, lse = softmax_finish(*scratch_read(*scratch), empty_lse=-jnp.inf)
      o_ref[...] = out.astype(o_ref.dtype)
      lse_ref[...] = lse

  chunk = pl.BlockSpec((None, None, length, None, head_dim),
                       lambda b, h, i, n, sel: (b, sel[b, n], 0, h, 0))
  grid_spec = pltpu.PrefetchScalarGridSpec(
      num_scalar_prefetch=1, grid=(batch, kv_heads, padded_rows // bq, picks),
      in_specs=[pl.BlockSpec((None, None, bq, head_dim), lambda b, h, i, n, sel: (b, h, i, 0)),
                chunk, chunk,
                pl.BlockSpec((None, None, 1, length), lambda b, h, i, n, sel: (b, sel[b, n], 0, 0))],
      out_specs=[pl.BlockSpec((None, None, bq, head_dim), lambda b, h, i, n, sel: (b, h, i, 0)),
                 pl.BlockSpec((None, None, bq, 1), lambda b, h, i, n, sel: (b, h, i, 0))],
      scratch_shapes=tpu_softmax_scratch(bq, head_dim))
  return pl.pallas_call(
      kernel, grid_spec=grid_spec, out_shape=out_and_lse_shapes(q),
      compiler_params=tpu_row_tiles_params(), interpret=interpret)(selected, q, k_chunks, v_chunks,
                                                                   keep)


def _gpu_call(q, k_chunks, v_chunks, selected, keep, *, bq, scale, softcap, interpret):
  batch, kv_heads, padded_rows, head_dim = q.shape
  chunks, length, picks = k_chunks.shape[1], k_chunks.shape[2], selected.shape[1]

  def kernel(q_ref, k_ref, v_ref, keep_ref, selected_ref, o_ref, lse_ref):
    q_tile = q_ref[...]

    def body(n, carry):
      c = selected_ref[n]
      s = _scores(q_tile, k_ref[c], keep_ref[c], scale, softcap)
      return online_softmax_step(s, v_ref[c], carry)

    out, lse = softmax_finish(*jax.lax.fori_loop(0, picks, body, softmax_start(bq, head_dim)),
                              empty_lse=-jnp.inf)
    o_ref[...] = out.astype(o_ref.dtype)
    lse_ref[...] = lse

  all_chunks = pl.BlockSpec((None, chunks, length, None, head_dim), lambda b, h, i: (b, 0, 0, h, 0))
  return pl.pallas_call(
      kernel, grid=(batch, kv_heads, padded_rows // bq),
      in_specs=[pl.BlockSpec((None, None, bq, head_dim), lambda b, h, i: (b, h, i, 0)),
                all_chunks, all_chunks,
                pl.BlockSpec((None, chunks, 1, length), lambda b, h, i: (b, 0, 0, 0)),
                pl.BlockSpec((None, picks), lambda b, h, i: (b, 0))],
      out_specs=[pl.BlockSpec((None, None, bq, head_dim), lambda b, h, i: (b, h, i, 0)),
                 pl.BlockSpec((None, None, bq, 1), lambda b, h, i: (b, h, i, 0))],
      out_shape=out_and_lse_shapes(q), interpret=interpret)(q, k_chunks, v_chunks, keep, selected)
