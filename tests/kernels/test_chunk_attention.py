"""The chunk-sparse prefix kernel equals its gather-then-softmax reference (interpret mode and
both variants on a CPU, compiled on a GPU or TPU; GQA, head_dim 64 and 128, float32 and
bfloat16, token capacity and padding in `keep`, rows that keep nothing), and `merge` of its
partial result with attention over the rest of the context equals one softmax over everything."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pallas_kernels.chunk_attention import (VARIANTS, chunk_attention, merge,
                                            reference_chunk_attention)
from pallas_kernels.common import assert_close, variants_to_test


def _inputs(rng, *, batch=2, steps=5, heads=4, kv_heads=2, head_dim=64, chunks=6, length=32,
            picks=3, dtype=jnp.float32, keep_rate=0.7):
  draw = lambda *shape: jnp.asarray(rng.normal(size=shape), jnp.float32).astype(dtype)
  q = draw(batch, steps, heads, head_dim)
  k, v = (draw(batch, chunks, length, kv_heads, head_dim) for _ in range(2))
  selected = jnp.asarray(np.stack([rng.choice(chunks, picks, replace=False) for _ in range(batch)]),
                         jnp.int32)
  keep = jnp.asarray(rng.random((batch, chunks, length)) < keep_rate)
  keep = keep.at[:, :, 0].set(True)  # The BOS anchor of each chunk is always kept.
  return q, k, v, selected, keep


@pytest.mark.parametrize("variant", variants_to_test(VARIANTS))
@pytest.mark.parametrize("heads, kv_heads, head_dim, dtype", [
    (4, 2, 64, jnp.float32), (4, 4, 128, jnp.float32), (8, 1, 64, jnp.bfloat16),
    (4, 2, 128, jnp.bfloat16)])
def test_kernel_equals_reference(variant, heads, kv_heads, head_dim, dtype):
  rng = np.random.default_rng(heads + head_dim)
  q, k, v, selected, keep = _inputs(rng, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                                    dtype=dtype)
  out, lse = chunk_attention(q, k, v, selected, keep, variant=variant, block_q=16)
  want_out, want_lse = reference_chunk_attention(q, k, v, selected, keep)
  assert out.dtype == dtype
  assert_close(out, want_out, dtype)
  assert_close(lse, want_lse, jnp.float32)


def test_rows_that_keep_nothing_give_zero_and_minus_infinity():
  rng = np.random.default_rng(0)
  q, k, v, selected, keep = _inputs(rng)
  keep = keep.at[1].set(False)
  out, lse = chunk_attention(q, k, v, selected, keep)
  assert np.all(np.asarray(out[1]) == 0) and np.all(np.isneginf(np.asarray(lse[1])))
  want_out, want_lse = reference_chunk_attention(q, k, v, selected, keep)
  assert_close(out[0], want_out[0], jnp.float32)
  assert_close(lse[0], want_lse[0], jnp.float32)


def test_merge_with_the_rest_of_the_context_is_one_softmax():
  """Selected chunks + a dense local part (e.g. the question and generated blocks), merged,
  equal softmax attention over their concatenation."""
  rng = np.random.default_rng(1)
  q, k, v, selected, keep = _inputs(rng, keep_rate=1.0)
  local_k, local_v = (jnp.asarray(rng.normal(size=(2, 10, 2, 64)), jnp.float32) for _ in range(2))
  sparse = chunk_attention(q, k, v, selected, keep)
  local = reference_chunk_attention(q, local_k[:, None], local_v[:, None],
                                    jnp.zeros((2, 1), jnp.int32), jnp.ones((2, 1, 10), bool))
  out, _ = merge([sparse, local])
  gathered = lambda x: jax.vmap(lambda c, ids: c[ids])(x, selected).reshape(2, -1, 2, 64)
  everything = reference_chunk_attention(
      q, jnp.concatenate([gathered(k), local_k], 1)[:, None],
      jnp.concatenate([gathered(v), local_v], 1)[:, None], jnp.zeros((2, 1), jnp.int32),
      jnp.ones((2, 1, 3 * 32 + 10), bool))[0]
  assert_close(out, everything, jnp.float32)


def test_bad_inputs_name_the_problem():
  rng = np.random.default_rng(2)
  q, k, v, selected, keep = _inputs(rng)
  with pytest.raises(ValueError, match=r"keep must be bool\[B, M, L\] = \(2, 6, 32\)"):
    chunk_attention(q, k, v, selected, keep[:, :, :10])
  with pytest.raises(ValueError, match="selected must be i32"):
    chunk_attention(q, k, v, selected[0], keep)
  with pytest.raises(ValueError, match=r"\[B, M, L, K, hd\]"):
    chunk_attention(q, k[:, 0], v[:, 0], selected, keep)
  with pytest.raises(ValueError, match="unknown kernel variant"):
    chunk_attention(q, k, v, selected, keep, variant="cuda")
