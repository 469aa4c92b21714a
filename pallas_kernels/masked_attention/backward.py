"""The masked-attention kernel's backward pass (FlashAttention-2's): each tile's probabilities are
recomputed from the forward's log-sum-exp, never stored.

Two kernels, both written in the loop form (one program per block, an in-kernel loop over the
other axis, its whole extent one block of the ref), which lowers to Triton and to Mosaic alike:
  dq     one program per query tile, looping over its row's live key blocks;
  dk/dv  one program per key block, looping over the query tiles (GQA's folded rows sum the
         query heads sharing the KV head by themselves).
Both skip the tiles the forward's skip table skips. Training-time shapes (a few thousand keys)
fit a row's K/V, or queries, in VMEM / shared memory; longer ones want the grid form of the
forward's "tpu" variant (not written yet).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from pallas_kernels.masked_attention.tile import Static, scores


def backward(static: Static, q, k, v, meta, out, lse, d_out):
  """(dq like q, dk like k, dv like v) for `kernel.flash`'s padded operands."""
  qmeta, kmeta, tree, skip, live_blocks, window = meta
  delta = jnp.sum(d_out.astype(jnp.float32) * out.astype(jnp.float32), axis=-1, keepdims=True)
  dq = _dq(static, q, k, v, d_out, lse, delta, qmeta, kmeta, tree, skip, live_blocks, window)
  dk, dv = _dkdv(static, q, k, v, d_out, lse, delta, qmeta, kmeta, tree,
                 jnp.swapaxes(skip, 1, 2), window)
  return dq, dk, dv


def _tile_grads(q, k, v, d_out, lse, delta, qmeta, kmeta, tree, window, static: Static):
  """(p, ds) f32[bq, bk]: the tile's probabilities and the gradient of its unscaled scores."""
  s, capped = scores(q, k, qmeta, kmeta, tree, window, **static.tile_args())
  p = jnp.exp(s - lse)  # lse = +inf (a row that sees nothing): p = 0.
  dp = jax.lax.dot_general(d_out, v, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
  ds = p * (dp - delta)
  if static.softcap is not None:  # d(c tanh(x / c)) / dx = 1 - tanh^2.
    ds = ds * (1.0 - jnp.square(capped / static.softcap))
  return p, ds


def _dq(static, q, k, v, d_out, lse, delta, qmeta, kmeta, tree, skip, live_blocks, window):
  batch, kv_heads, rows, head_dim = q.shape
  slots, bq, bk = k.shape[1], static.bq, static.bk

  def kernel(q_ref, do_ref, lse_ref, delta_ref, qmeta_ref, k_ref, v_ref, kmeta_ref, skip_ref,
             live_ref, window_ref, *refs):
    tree_ref = refs[0] if tree is not None else None
    dq_ref = refs[-1]
    q_tile, do_tile = q_ref[...], do_ref[...]
    lse_tile, delta_tile, q_meta = lse_ref[...], delta_ref[...], qmeta_ref[...]
    tree_rows = None if tree_ref is None else tree_ref[...]

    def body(j, dq):
      keys = pl.ds(j * bk, bk)

      def step(dq):
        k_blk = k_ref[keys, :]
        _, ds = _tile_grads(q_tile, k_blk, v_ref[keys, :], do_tile, lse_tile, delta_tile, q_meta,
                            kmeta_ref[:, keys], tree_rows, window_ref[0], static)
        return dq + jnp.dot(ds.astype(k_blk.dtype), k_blk, preferred_element_type=jnp.float32)

      return jax.lax.cond(skip_ref[j] == 0, step, lambda dq: dq, dq)

    dq = jax.lax.fori_loop(0, live_ref[()], body, jnp.zeros((bq, head_dim), jnp.float32))
    dq_ref[...] = (dq * static.scale).astype(dq_ref.dtype)

  row_block = pl.BlockSpec((None, None, bq, head_dim), lambda b, h, i: (b, h, i, 0))
  row_scalar = pl.BlockSpec((None, None, bq, 1), lambda b, h, i: (b, h, i, 0))
  all_keys = pl.BlockSpec((None, slots, None, head_dim), lambda b, h, i: (b, 0, h, 0))
  in_specs = [row_block, row_block, row_scalar, row_scalar,
              pl.BlockSpec((None, bq, qmeta.shape[-1]), lambda b, h, i: (b, i, 0)), all_keys, all_keys,
              pl.BlockSpec((None, kmeta.shape[1], slots), lambda b, h, i: (b, 0, 0)),
              pl.BlockSpec((None, None, skip.shape[2]), lambda b, h, i: (b, i, 0)),
              pl.BlockSpec((None,), lambda b, h, i: (b,)), pl.BlockSpec((1,), lambda b, h, i: (0,))]
  operands = [q, d_out, lse, delta, qmeta, k, v, kmeta, skip, live_blocks, window]
  if tree is not None:
    in_specs.append(pl.BlockSpec((None, bq, tree.shape[2]), lambda b, h, i: (b, i, 0)))
    operands.append(tree)
  return pl.pallas_call(
      kernel, grid=(batch, kv_heads, rows // bq), in_specs=in_specs, out_specs=row_block,
      out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype), interpret=static.interpret)(*operands)


def _dkdv(static, q, k, v, d_out, lse, delta, qmeta, kmeta, tree, skip_by_key, window):
  batch, kv_heads, rows, head_dim = q.shape
  slots, bq, bk = k.shape[1], static.bq, static.bk

  def kernel(k_ref, v_ref, kmeta_ref, q_ref, do_ref, lse_ref, delta_ref, qmeta_ref, skip_ref,
             window_ref, *refs):
    tree_ref = refs[0] if tree is not None else None
    dk_ref, dv_ref = refs[-2:]
    k_blk, v_blk, k_meta = k_ref[...], v_ref[...], kmeta_ref[...]

    def body(i, carry):
      tile = pl.ds(i * bq, bq)

      def step(carry):
        dk, dv = carry
        q_tile, do_tile = q_ref[tile, :], do_ref[tile, :]
        p, ds = _tile_grads(q_tile, k_blk, v_blk, do_tile, lse_ref[tile, :], delta_ref[tile, :],
                            qmeta_ref[tile, :], k_meta,
                            None if tree_ref is None else tree_ref[tile, :], window_ref[0], static)
        contract_rows = (((0,), (0,)), ((), ()))
        dv = dv + jax.lax.dot_general(p.astype(do_tile.dtype), do_tile, contract_rows,
                                      preferred_element_type=jnp.float32)
        dk = dk + jax.lax.dot_general(ds.astype(q_tile.dtype), q_tile, contract_rows,
                                      preferred_element_type=jnp.float32)
        return dk, dv

      return jax.lax.cond(skip_ref[i] == 0, step, lambda c: c, carry)

    zeros = jnp.zeros((bk, head_dim), jnp.float32)
    dk, dv = jax.lax.fori_loop(0, rows // bq, body, (zeros, zeros))
    dk_ref[...] = (dk * static.scale).astype(dk_ref.dtype)
    dv_ref[...] = dv.astype(dv_ref.dtype)

  key_block = pl.BlockSpec((None, bk, None, head_dim), lambda b, h, j: (b, j, h, 0))
  all_rows = pl.BlockSpec((None, None, rows, head_dim), lambda b, h, j: (b, h, 0, 0))
  all_row_scalars = pl.BlockSpec((None, None, rows, 1), lambda b, h, j: (b, h, 0, 0))
  in_specs = [key_block, key_block, pl.BlockSpec((None, kmeta.shape[1], bk), lambda b, h, j: (b, 0, j)),
              all_rows, all_rows, all_row_scalars, all_row_scalars,
              pl.BlockSpec((None, rows, qmeta.shape[-1]), lambda b, h, j: (b, 0, 0)),
              pl.BlockSpec((None, None, skip_by_key.shape[2]), lambda b, h, j: (b, j, 0)),
              pl.BlockSpec((1,), lambda b, h, j: (0,))]
  operands = [k, v, kmeta, q, d_out, lse, delta, qmeta, skip_by_key, window]
  if tree is not None:
    in_specs.append(pl.BlockSpec((None, rows, tree.shape[2]), lambda b, h, j: (b, 0, 0)))
    operands.append(tree)
  return pl.pallas_call(
      kernel, grid=(batch, kv_heads, slots // bk), in_specs=in_specs,
      out_specs=[key_block, key_block],
      out_shape=[jax.ShapeDtypeStruct(k.shape, k.dtype), jax.ShapeDtypeStruct(v.shape, v.dtype)],
      interpret=static.interpret)(*operands)
