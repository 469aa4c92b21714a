"""Flash attention over jaxdec's structured mask (`MaskSpec`), evaluated tile by tile.

One kernel serves every pattern jaxdec decodes with: causal prefill and decode, speculative
verification (a chain or draft tree against a cache with per-row lengths), drafting (a tree
wider than the forward), and diffusion (bidirectional, block-causal, windowed caches, hidden mask
keys, independent streams). The dense [B, T, S] mask is never built: the kernel evaluates visibility inside each
[block_q, block_k] tile from per-query and per-key metadata that XLA prepares in O(B (T + S)),

  query rows  i32[B, R, 4]: position, 1 if a given (non-mask) token, its segment and the
              segment it reads (both 0 without `Segments`);
  key slots   i32[B, 5, S]: position, 1 if live (slot < kv_length), its column in the tree
              (slot - start in [0, W), else -1), 1 if a hidden mask key, its segment;
  tree rows   f32[B, R, W']: the tree's row for each query (W padded), read for a tile's keys
              by a [W', block_k] one-hot product (no gather in the kernel);

and skips whole tiles no query of which can see a key (`_skip_table`: keys past a row's length;
under a causal or block-causal pattern, keys after every query). GQA folds the G query heads of
a KV head into the rows (row t * G + g), so a verification step's few queries still fill a tile.

Two variants run the same tile math (`_tile`):
  "tpu"  Mosaic: key blocks are the innermost ("arbitrary") grid axis; the running max, sum and
         accumulator live in VMEM scratch; the skip table and live-block counts are
         scalar-prefetched, and a dead block's index map repeats the last live block (no DMA).
  "gpu"  Triton: one program per query tile loops over its row's live key blocks (fori_loop),
         skipping tiles by the same table.
On CPU both run in Pallas' interpret mode (the default there), which the tests use.

Fully masked query rows (padding) come out as zeros (the XLA path averages the values);
callers ignore those rows either way.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl

from pallas_kernels.common import (default_interpret, default_variant, fold_rows,
                                   online_softmax_step, out_and_lse_shapes, pad_to, scratch_read,
                                   scratch_reset, scratch_write, softmax_finish, softmax_start,
                                   tpu_row_tiles_params, tpu_softmax_scratch, unfold_rows)
from pallas_kernels.masked_attention.backward import backward
from pallas_kernels.masked_attention.tile import Static, scores
from pallas_kernels.masked_attention.tuned_block_sizes import BlockSizes, tuned_block_sizes

VARIANTS = ("tpu", "gpu")
_NO_WINDOW = np.iinfo(np.int32).max


def masked_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask, *, scale: float | None = None,
                     softcap: float | None = None, block_sizes: BlockSizes | None = None,
                     variant: str | None = None, interpret: bool | None = None) -> jax.Array:
  """q[B, T, H, hd], k/v[B, S, K, hd] (H a multiple of K), mask: a `MaskSpec` -> [B, T, H, hd].

  Same contract as `jaxdec.model.attention.attention` (scores times `scale`, default
  hd ** -0.5, soft-capped by `softcap`, softmax in float32). `variant` "tpu" | "gpu" defaults to
  the platform's, `interpret` to True off GPU/TPU; `block_sizes` to `tuned_block_sizes`."""
  batch, steps, heads, head_dim = q.shape
  kv_heads = k.shape[2]
  if k.shape != v.shape or k.shape[0] != batch or k.shape[3] != head_dim or heads % kv_heads:
    raise ValueError(f"masked_attention: q {q.shape}, k {k.shape}, v {v.shape} are not "
                     f"[B, T, H, hd] and [B, S, K, hd] with H a multiple of K")
  variant = default_variant() if variant is None else variant
  if variant not in VARIANTS:
    raise ValueError(f"unknown kernel variant {variant!r}; available: {VARIANTS}")
  interpret = default_interpret() if interpret is None else interpret
  group = heads // kv_heads
  rows, slots = steps * group, k.shape[1]
  if block_sizes is None:
    block_sizes = tuned_block_sizes(rows, slots, variant=variant, interpret=interpret)
  bq, bk = block_sizes.block_q, block_sizes.block_k
  scale = head_dim ** -0.5 if scale is None else scale

  qmeta, kmeta, tree = _metadata(mask, group, rows, slots)
  q_rows = fold_rows(q, kv_heads, bq)
  qmeta = pad_to(qmeta, 1, bq)
  k, v = pad_to(k, 1, bk), pad_to(v, 1, bk)
  kmeta = pad_to(kmeta, 2, bk)  # Padded slots are dead (live = 0).
  if tree is not None:
    tree = pad_to(pad_to(tree, 1, bq), 2, 128)  # A lane-wide (and power-of-two) tree width.
  window = _NO_WINDOW if mask.window is None else mask.window
  window = jnp.reshape(jnp.asarray(window, jnp.int32), (1,))
  skip, live_blocks = _skip_table(qmeta, kmeta, rows, mask, bq, bk, window[0], tree is not None)

  static = Static(bq=bq, bk=bk, pattern=mask.pattern, scale=float(scale), softcap=softcap,
                  hidden=mask.hidden_keys is not None, segments=mask.segments is not None,
                  variant=variant, interpret=interpret)
  out = flash(static, q_rows, k, v, (qmeta, kmeta, tree, skip, live_blocks, window))
  return unfold_rows(out, steps, heads)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def flash(static: Static, q, k, v, meta):
  """q[B, K, R, hd] (rows padded to bq), k/v[B, S, K, hd] (slots padded to bk), meta = (query
  rows, key slots, tree rows or None, skip table, live blocks, window) -> out[B, K, R, hd]."""
  return _forward(static, q, k, v, meta)[0]


def _forward(static: Static, q, k, v, meta):
  """(out, lse f32[B, K, R]: each row's log-sum-exp, +inf for a row that sees no key)."""
  call = _tpu_call if static.variant == "tpu" else _gpu_call
  return call(q, k, v, *meta, bq=static.bq, bk=static.bk, interpret=static.interpret,
              **static.tile_args())


def _flash_fwd(static, q, k, v, meta):
  out, lse = _forward(static, q, k, v, meta)
  return out, (q, k, v, meta, out, lse)


def _flash_bwd(static, residuals, d_out):
  q, k, v, meta, out, lse = residuals
  dq, dk, dv = backward(static, q, k, v, meta, out, lse, d_out)
  return dq, dk, dv, jax.tree.map(lambda _: None, meta)


flash.defvjp(_flash_fwd, _flash_bwd)


def _metadata(mask, group: int, rows: int, slots: int):
  """(query rows i32[B, R, 2], key slots i32[B, 4, S], tree rows f32[B, R, W] or None): the
  module docstring's layout, row t * G + g for query t."""
  batch, steps = mask.q_positions.shape
  slot = jnp.arange(slots, dtype=jnp.int32)[None, :]
  start = jnp.zeros((batch,), jnp.int32) if mask.start is None else mask.start
  rel = slot - start[:, None]  # [B, S]: which of this forward's tokens a slot holds.
  given = (jnp.ones((batch, steps), jnp.int32) if mask.hidden_keys is None
           else (~mask.hidden_keys).astype(jnp.int32))
  zeros = jnp.zeros((batch, steps), jnp.int32)
  seg = mask.segments
  q_seg, q_reads = (zeros, zeros) if seg is None else (seg.q, seg.reads)
  qmeta = jnp.stack([mask.q_positions.astype(jnp.int32), given, q_seg.astype(jnp.int32),
                     q_reads.astype(jnp.int32)], axis=-1)
  qmeta = jnp.repeat(qmeta, group, axis=1)
  live = (slot < mask.kv_length[:, None]).astype(jnp.int32)
  column = jnp.full((batch, slots), -1, jnp.int32)
  tree = None
  if mask.tree is not None:
    width = mask.tree.shape[-1]
    column = jnp.where((rel >= 0) & (rel < width), rel, -1)
    tree = jnp.broadcast_to(mask.tree, (batch, steps, width)).astype(jnp.float32)
    tree = jnp.repeat(tree, group, axis=1)
  hidden = jnp.zeros((batch, slots), jnp.int32)
  if mask.hidden_keys is not None:
    in_block = (rel >= 0) & (rel < steps)
    marked = jnp.take_along_axis(mask.hidden_keys, jnp.clip(rel, 0, steps - 1), axis=1)
    hidden = (in_block & marked).astype(jnp.int32)
  k_seg = jnp.zeros((batch, slots), jnp.int32) if seg is None else seg.kv.astype(jnp.int32)
  kmeta = jnp.stack([mask.kv_positions.astype(jnp.int32), live, column, hidden, k_seg], axis=1)
  return qmeta, kmeta, tree


def _skip_table(qmeta, kmeta, rows: int, mask, bq: int, bk: int, window, has_tree: bool):
  """(skip i32[B, nq, nk]: 1 where no query of tile i can see a key of block j; live_blocks
  i32[B]: key blocks up to the row's last live slot). Relies on the patterns being monotone: a
  later query sees what an earlier one sees, an earlier key is seen wherever a later one is
  (Causal, Bidirectional, BlockCausal all are), so tile (i, j) may be visible iff
  pattern.visible(latest query, earliest live key) and the window reaches back that far. A tile
  holding tree columns is never skipped (the tree overrides the pattern)."""
  batch, padded_rows, _ = qmeta.shape
  big = jnp.int32(1 << 29)  # Beyond any position, yet a difference of two cannot overflow.
  real = (jnp.arange(padded_rows) < rows)[None, :]
  q_pos = qmeta[..., 0].reshape(batch, -1, bq)
  q_real = real.reshape(1, -1, bq)
  q_last = jnp.max(jnp.where(q_real, q_pos, -big), axis=-1)  # [B, nq]
  q_first = jnp.min(jnp.where(q_real, q_pos, big), axis=-1)
  k_pos, k_live = kmeta[:, 0].reshape(batch, -1, bk), kmeta[:, 1].reshape(batch, -1, bk) > 0
  k_first = jnp.min(jnp.where(k_live, k_pos, big), axis=-1)  # [B, nk]
  k_last = jnp.max(jnp.where(k_live, k_pos, -big), axis=-1)
  any_live = jnp.any(k_live, axis=-1)
  seen = mask.pattern.visible(q_last[:, :, None], k_first[:, None, :])
  seen &= (q_first[:, :, None] - k_last[:, None, :]) < window
  if has_tree:
    seen |= jnp.any(kmeta[:, 2].reshape(batch, -1, bk) >= 0, axis=-1)[:, None, :]
  skip = ~(seen & any_live[:, None, :])
  live_blocks = jnp.max(jnp.where(any_live, jnp.arange(any_live.shape[1]) + 1, 0), axis=-1)
  return skip.astype(jnp.int32), live_blocks.astype(jnp.int32)


def _tile(q, k, v, qmeta, kmeta, tree, window, carry, **tile_args):
  """One online-softmax step over a [bq, bk] tile."""
  s, _ = scores(q, k, qmeta, kmeta, tree, window, **tile_args)
  return online_softmax_step(s, v, carry)


def _finish(m, l, acc):
  """(out, lse); lse = +inf for a row that sees no key, so the backward's exp(s - lse) is 0."""
  return softmax_finish(m, l, acc, empty_lse=jnp.inf)


def _tpu_call(q, k, v, qmeta, kmeta, tree, skip, live_blocks, window, *, bq, bk, interpret,
              **tile_args):
  from jax.experimental.pallas import tpu as pltpu

  batch, kv_heads, padded_rows, head_dim = q.shape
  nq, nk = padded_rows // bq, k.shape[1] // bk

  def kernel(skip_ref, live_ref, window_ref, q_ref, k_ref, v_ref, qmeta_ref, kmeta_ref, *refs):
    tree_ref = refs[0] if tree is not None else None
    o_ref, lse_ref, scratch = refs[-5], refs[-4], refs[-3:]
    b, i, j = pl.program_id(0), pl.program_id(2), pl.program_id(3)

    @pl.when(j == 0)
    def _init():
      scratch_reset(*scratch)

    @pl.when(skip_ref[(b * nq + i) * nk + j] == 0)  # Flat: SMEM holds 1-D arrays best.
    def _step():
      scratch_write(*scratch, _tile(q_ref[...], k_ref[...], v_ref[...], qmeta_ref[...],
                                    kmeta_ref[...], None if tree_ref is None else tree_ref[...],
                                    window_ref[0], scratch_read(*scratch), **tile_args))

    @pl.when(j == nk - 1)
    def _write():
      out, lse = _finish(*scratch_read(*scratch))
      o_ref[...] = out.astype(o_ref.dtype)
      lse_ref[...] = lse

  def key_block(b, h, i, j, skip_ref, live_ref, window_ref):
    del h, i, skip_ref, window_ref  # A dead block repeats the last live one: no new DMA.
    return jnp.minimum(j, jnp.maximum(live_ref[b] - 1, 0))

  kv_spec = pl.BlockSpec((None, bk, None, head_dim),
                         lambda b, h, i, j, *s: (b, key_block(b, h, i, j, *s), h, 0))
  in_specs = [
      pl.BlockSpec((None, None, bq, head_dim), lambda b, h, i, j, *_: (b, h, i, 0)),
      kv_spec, kv_spec,
      pl.BlockSpec((None, bq, qmeta.shape[-1]), lambda b, h, i, j, *_: (b, i, 0)),
      pl.BlockSpec((None, kmeta.shape[1], bk), lambda b, h, i, j, *s: (b, 0, key_block(b, h, i, j, *s))),
  ]
  operands = [q, k, v, qmeta, kmeta]
  if tree is not None:
    in_specs.append(pl.BlockSpec((None, bq, tree.shape[2]), lambda b, h, i, j, *_: (b, i, 0)))
    operands.append(tree)
  grid_spec = pltpu.PrefetchScalarGridSpec(
      num_scalar_prefetch=3, grid=(batch, kv_heads, nq, nk), in_specs=in_specs,
      out_specs=[pl.BlockSpec((None, None, bq, head_dim), lambda b, h, i, j, *_: (b, h, i, 0)),
                 pl.BlockSpec((None, None, bq, 1), lambda b, h, i, j, *_: (b, h, i, 0))],
      scratch_shapes=tpu_softmax_scratch(bq, head_dim))
  return pl.pallas_call(
      kernel, grid_spec=grid_spec, out_shape=out_and_lse_shapes(q),
      compiler_params=tpu_row_tiles_params(),
      interpret=interpret)(skip.reshape(-1), live_blocks, window, *operands)


def _gpu_call(q, k, v, qmeta, kmeta, tree, skip, live_blocks, window, *, bq, bk, interpret,
              **tile_args):
  batch, kv_heads, padded_rows, head_dim = q.shape
  slots = k.shape[1]
  nq, nk = padded_rows // bq, slots // bk

  def kernel(q_ref, k_ref, v_ref, qmeta_ref, kmeta_ref, skip_ref, live_ref, window_ref, *refs):
    tree_ref = refs[0] if tree is not None else None
    o_ref, lse_ref = refs[-2:]
    q_tile, q_meta = q_ref[...], qmeta_ref[...]
    tree_rows = None if tree_ref is None else tree_ref[...]
    window_now = window_ref[0]

    def body(j, carry):
      keys = pl.ds(j * bk, bk)

      def step(carry):
        return _tile(q_tile, k_ref[keys, :], v_ref[keys, :], q_meta, kmeta_ref[:, keys],
                     tree_rows, window_now, carry, **tile_args)

      return jax.lax.cond(skip_ref[j] == 0, step, lambda c: c, carry)

    out, lse = _finish(*jax.lax.fori_loop(0, live_ref[()], body, softmax_start(bq, head_dim)))
    o_ref[...] = out.astype(o_ref.dtype)
    lse_ref[...] = lse

  in_specs = [
      pl.BlockSpec((None, None, bq, head_dim), lambda b, h, i: (b, h, i, 0)),
      pl.BlockSpec((None, slots, None, head_dim), lambda b, h, i: (b, 0, h, 0)),
      pl.BlockSpec((None, slots, None, head_dim), lambda b, h, i: (b, 0, h, 0)),
      pl.BlockSpec((None, bq, qmeta.shape[-1]), lambda b, h, i: (b, i, 0)),
      pl.BlockSpec((None, kmeta.shape[1], slots), lambda b, h, i: (b, 0, 0)),
      pl.BlockSpec((None, None, nk), lambda b, h, i: (b, i, 0)),
      pl.BlockSpec((None,), lambda b, h, i: (b,)),
      pl.BlockSpec((1,), lambda b, h, i: (0,)),
  ]
  operands = [q, k, v, qmeta, kmeta, skip, live_blocks, window]
  if tree is not None:
    in_specs.append(pl.BlockSpec((None, bq, tree.shape[2]), lambda b, h, i: (b, i, 0)))
    operands.append(tree)
  return pl.pallas_call(
      kernel, grid=(batch, kv_heads, nq), in_specs=in_specs,
      out_specs=[pl.BlockSpec((None, None, bq, head_dim), lambda b, h, i: (b, h, i, 0)),
                 pl.BlockSpec((None, None, bq, 1), lambda b, h, i: (b, h, i, 0))],
      out_shape=out_and_lse_shapes(q), interpret=interpret)(*operands)
