"""The masked-attention kernel equals its reference (plain jnp, built from the mask spec's fields,
sharing no code with jaxdec's attention; jaxdec's XLA attention and `MaskSpec.dense` are checked
against it too) - in interpret mode
with both variants on a CPU, compiled with the platform's variant on a GPU or TPU - over the mask
patterns jaxdec decodes with: ragged caches, prefill with padding, trees (as wide as the forward
and wider), hidden mask keys, windows, independent streams (segments), slots in any order, GQA, head_dim 64 and 128, float32 and
bfloat16, one tile and many."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdec.model.attention import attention
from jaxdec.model.masks import Bidirectional, BlockCausal, Causal, MaskSpec, Segments
from pallas_kernels.common import assert_close, platform, variants_to_test
from pallas_kernels.masked_attention import (VARIANTS, BlockSizes, masked_attention,
                                             reference_attention, reference_mask)
from pallas_kernels.masked_attention.kernel import _metadata, _skip_table

# Many tiles: exercises the online softmax and the skips (compiled tiles obey the hardware's
# minimums: Triton's dots 16, Mosaic's lanes 128).
SMALL = {"cpu": BlockSizes(8, 16), "gpu": BlockSizes(16, 16), "tpu": BlockSizes(8, 128)}[platform()]


def _qkv(rng, batch, steps, heads, kv_heads, head_dim, slots, dtype):
  def draw(*shape):
    return jnp.asarray(rng.normal(size=shape), jnp.float32).astype(dtype)

  return (draw(batch, steps, heads, head_dim), draw(batch, slots, kv_heads, head_dim),
          draw(batch, slots, kv_heads, head_dim))


def _cached(lengths, steps, slots, pattern=Causal(), **extra):
  """A forward of `steps` tokens appended to caches holding `lengths` entries."""
  lengths = jnp.asarray(lengths, jnp.int32)
  batch = lengths.shape[0]
  q_pos = lengths[:, None] + jnp.arange(steps, dtype=jnp.int32)[None]
  kv_pos = jnp.broadcast_to(jnp.arange(slots, dtype=jnp.int32), (batch, slots))
  return MaskSpec(q_positions=q_pos, kv_positions=kv_pos, kv_length=lengths + steps,
                  start=lengths, pattern=pattern, **extra)


def _random_tree(rng, batch, steps, width):
  """Per-row ancestor matrices of random trees over `width` nodes, the first `steps` as queries."""
  trees = np.zeros((batch, width, width), bool)
  for b in range(batch):
    parents = [-1] + [int(rng.integers(0, i)) for i in range(1, width)]
    for i in range(width):
      node = i
      while node >= 0:
        trees[b, i, node] = True
        node = parents[node]
  return jnp.asarray(trees[:, :steps, :])


CASES = {
    "decode, ragged cache": lambda rng: _cached([30, 7, 0], 1, 48),
    "verify chain, ragged": lambda rng: _cached([21, 3, 40], 6, 64),
    "verify tree": lambda rng: _cached([17, 33, 5], 7, 48, tree=_random_tree(rng, 3, 7, 7)),
    "draft tree wider than the forward":
        lambda rng: _cached([9, 20, 2], 3, 48, tree=_random_tree(rng, 3, 3, 10)),
    "prefill, right padding": lambda rng: MaskSpec(
        q_positions=jnp.broadcast_to(jnp.arange(40, dtype=jnp.int32), (3, 40)),
        kv_positions=jnp.broadcast_to(jnp.arange(40, dtype=jnp.int32), (3, 40)),
        kv_length=jnp.asarray([40, 25, 1], jnp.int32), start=jnp.zeros((3,), jnp.int32)),
    "diffusion, bidirectional window": lambda rng: _cached([24, 8, 30], 16, 64,
                                                          pattern=Bidirectional(), window=20),
    "block causal": lambda rng: _cached([16, 0, 32], 16, 64, pattern=BlockCausal(8)),
    "block causal, hidden masks": lambda rng: _cached(
        [16, 0, 8], 16, 48, pattern=BlockCausal(8, causal_given=True),
        hidden_keys=jnp.asarray(rng.random((3, 16)) < 0.5)),
    "traced window (sliding layer)": lambda rng: _cached([30, 12, 44], 4, 64,
                                                         window=jnp.asarray(9, jnp.int32)),
    "parallel streams over a shared context": lambda rng: _cached(
        [20, 36, 9], 6, 48, segments=Segments(
            q=jnp.asarray(rng.integers(0, 3, (3, 6)), jnp.int32), reads=jnp.full((3, 6), 9, jnp.int32),
            kv=jnp.asarray(rng.choice([0, 1, 2, 9], (3, 48)), jnp.int32))),
}


@pytest.mark.parametrize("variant", variants_to_test(VARIANTS))
@pytest.mark.parametrize("blocks", [None, SMALL], ids=["one tile", "many tiles"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_kernel_equals_reference(case, blocks, variant):
  rng = np.random.default_rng(sorted(CASES).index(case))
  mask = CASES[case](rng)
  batch, steps = mask.q_positions.shape
  q, k, v = _qkv(rng, batch, steps, 4, 2, 64, mask.kv_positions.shape[1], jnp.float32)
  out = masked_attention(q, k, v, mask, block_sizes=blocks, variant=variant)
  seen = np.asarray(mask.dense().any(-1))[:, :, None, None]  # Fully masked rows: ignored.
  assert_close(out, reference_attention(q, k, v, mask), jnp.float32, where=seen)


@pytest.mark.parametrize("case", sorted(CASES))
def test_xla_attention_and_dense_mask_equal_the_reference(case):
  """The reference shares no code with jaxdec: its mask equals `MaskSpec.dense`, and jaxdec's
  XLA attention (the default backend, interleaved streams included) equals it."""
  rng = np.random.default_rng(sorted(CASES).index(case))
  mask = CASES[case](rng)
  batch, steps = mask.q_positions.shape
  q, k, v = _qkv(rng, batch, steps, 4, 2, 64, mask.kv_positions.shape[1], jnp.float32)
  np.testing.assert_array_equal(np.asarray(reference_mask(mask)), np.asarray(mask.dense()))
  seen = np.asarray(mask.dense().any(-1))[:, :, None, None]  # Fully masked rows: ignored.
  assert_close(attention(q, k, v, mask=mask, backend="xla"), reference_attention(q, k, v, mask),
               jnp.float32, where=seen)


def test_the_reference_refuses_an_unknown_pattern():
  class Sideways:
    def visible(self, q_pos, k_pos):
      return k_pos >= q_pos

  mask = _cached([4], 2, 16, pattern=Sideways())
  q, k, v = _qkv(np.random.default_rng(0), 1, 2, 4, 2, 64, 16, jnp.float32)
  with pytest.raises(ValueError, match="knows the patterns .* got .*Sideways"):
    reference_attention(q, k, v, mask)


@pytest.mark.parametrize("heads, kv_heads, head_dim, dtype", [
    (4, 4, 64, jnp.float32), (8, 1, 128, jnp.float32), (4, 2, 128, jnp.bfloat16),
    (6, 2, 64, jnp.bfloat16)])
@pytest.mark.parametrize("variant", variants_to_test(VARIANTS))
def test_gqa_head_dims_and_dtypes(heads, kv_heads, head_dim, dtype, variant):
  rng = np.random.default_rng(heads * head_dim)
  mask = _cached([12, 29], 5, 48, tree=_random_tree(rng, 2, 5, 5))
  q, k, v = _qkv(rng, 2, 5, heads, kv_heads, head_dim, 48, dtype)
  out = masked_attention(q, k, v, mask, block_sizes=SMALL, variant=variant)
  assert out.dtype == dtype
  assert_close(out, reference_attention(q, k, v, mask), dtype)


def test_scale_softcap_and_reordered_slots():
  """Slots carry positions: a cache whose entries sit in a permuted slot order gives the same
  attention as the ordered one (the kernel reads positions, never slot order)."""
  rng = np.random.default_rng(3)
  mask = _cached([25, 10], 3, 32)
  q, k, v = _qkv(rng, 2, 3, 4, 2, 64, 32, jnp.float32)
  perm = np.stack([np.concatenate([rng.permutation(n), np.arange(n, 32)]) for n in (25, 10)])
  gather = lambda x: jnp.take_along_axis(x, jnp.asarray(perm).reshape(perm.shape + (1,) * (x.ndim - 2)), 1)
  shuffled = mask.replace(kv_positions=gather(mask.kv_positions))
  kwargs = dict(scale=0.2, softcap=5.0)
  out = masked_attention(q, gather(k), gather(v), shuffled, block_sizes=SMALL,
                         **kwargs)
  assert_close(out, reference_attention(q, k, v, mask, **kwargs), jnp.float32)


def test_tiles_no_query_can_see_are_skipped():
  """Causal prefill of 64 tokens in 16 x 16 tiles: the 6 tiles above the diagonal are skipped;
  a row with 20 real tokens has 2 live key blocks and skips the dead ones too."""
  positions = jnp.broadcast_to(jnp.arange(64, dtype=jnp.int32), (2, 64))
  mask = MaskSpec(q_positions=positions, kv_positions=positions,
                  kv_length=jnp.asarray([64, 20], jnp.int32), start=jnp.zeros((2,), jnp.int32))
  qmeta, kmeta, _ = _metadata(mask, 1, 64, 64)
  skip, live = _skip_table(qmeta, kmeta, 64, mask, 16, 16, jnp.int32(1 << 30), False)
  np.testing.assert_array_equal(np.asarray(skip[0]), np.triu(np.ones((4, 4), np.int32), 1))
  i, j = np.indices((4, 4))
  np.testing.assert_array_equal(np.asarray(skip[1]), ~((j <= i) & (j < 2)))
  np.testing.assert_array_equal(np.asarray(live), [4, 2])


def test_bad_inputs_name_the_problem():
  rng = np.random.default_rng(0)
  mask = _cached([4], 2, 16)
  q, k, v = _qkv(rng, 1, 2, 3, 2, 64, 16, jnp.float32)
  with pytest.raises(ValueError, match="multiple of K"):
    masked_attention(q, k, v, mask)
  q, k, v = _qkv(rng, 1, 2, 4, 2, 64, 16, jnp.float32)
  with pytest.raises(ValueError, match="unknown kernel variant 'cuda'"):
    masked_attention(q, k, v, mask, variant="cuda")
  with pytest.raises(ValueError, match="block_k must be a positive int, got 0"):
    BlockSizes(block_q=8, block_k=0)


def test_it_runs_inside_jit_with_traced_lengths():
  rng = np.random.default_rng(1)
  q, k, v = _qkv(rng, 2, 4, 4, 2, 64, 32, jnp.float32)

  @jax.jit
  def both(lengths):
    mask = _cached(lengths, 4, 32)
    return (masked_attention(q, k, v, mask, block_sizes=SMALL),
            reference_attention(q, k, v, mask))

  out, ref = both(jnp.asarray([9, 27], jnp.int32))
  assert_close(out, ref, jnp.float32)


TRAINING = {  # Forwards a training step takes: whole sequences, no cache.
    "causal, padded rows": dict(pattern=Causal(), lengths=[40, 23]),
    "block causal": dict(pattern=BlockCausal(8), lengths=[40, 40]),
    "bidirectional, soft-capped": dict(pattern=Bidirectional(), lengths=[40, 31], softcap=4.0),
    "block causal, hidden masks": dict(pattern=BlockCausal(8, causal_given=True), lengths=[40, 36],
                                       hidden=True),
}


@pytest.mark.parametrize("case", sorted(TRAINING))
def test_gradients_match_the_reference(case):
  spec = TRAINING[case]
  rng = np.random.default_rng(sorted(TRAINING).index(case))
  positions = jnp.broadcast_to(jnp.arange(40, dtype=jnp.int32), (2, 40))
  mask = MaskSpec(q_positions=positions, kv_positions=positions,
                  kv_length=jnp.asarray(spec["lengths"], jnp.int32),
                  start=jnp.zeros((2,), jnp.int32), pattern=spec["pattern"],
                  hidden_keys=jnp.asarray(rng.random((2, 40)) < 0.3) if spec.get("hidden") else None)
  q, k, v = _qkv(rng, 2, 40, 4, 2, 64, 40, jnp.float32)
  probe = jnp.asarray(rng.normal(size=q.shape), jnp.float32)
  real = jnp.asarray(mask.dense().any(-1))[:, :, None, None]  # Fully masked rows: not compared.

  def loss(attend, q, k, v):
    out = attend(q, k, v, mask, softcap=spec.get("softcap"))
    return jnp.sum(jnp.where(real, out, 0.0) * probe)

  kernel = lambda *a, **kw: masked_attention(*a, block_sizes=SMALL, **kw)
  got = jax.grad(lambda *x: loss(kernel, *x), argnums=(0, 1, 2))(q, k, v)
  want = jax.grad(lambda *x: loss(reference_attention, *x), argnums=(0, 1, 2))(q, k, v)
  for g, w in zip(got, want):
    assert_close(g, w, jnp.float32)
