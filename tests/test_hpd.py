"""Hyper-Parallel Decoding: every query of a shared context decodes exactly what it would alone."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdec
from jaxdec import hpd
from jaxdec.model import Causal, MaskSpec, Segments
from tests.tiny import tiny_model

MODEL = tiny_model(seed=3, std=0.3)
RNG = np.random.default_rng(0)


def ids(n):
  return [int(t) for t in RNG.integers(2, MODEL.config.vocab_size, n)]


def alone(model, context, query, budget, stop_tokens=None):
  out = jaxdec.generate(model, [context + query], max_new_tokens=budget, stop_tokens=stop_tokens)
  return out.tokens[0, : out.lengths[0]].tolist()


def test_segments_hide_other_streams_and_keep_the_pattern():
  # Slots: context (segment 5) at positions 0, 1; stream 0 at 2; stream 1 at 2, 3.
  kv = jnp.asarray([[5, 5, 0, 1, 1]])
  positions = jnp.asarray([[0, 1, 2, 2, 3]])
  mask = MaskSpec(q_positions=positions, kv_positions=positions, kv_length=jnp.asarray([5]),
                  pattern=Causal(), start=jnp.asarray([0]),
                  segments=Segments(q=kv, reads=jnp.asarray([[5, 5, 5, 5, 5]]), kv=kv))
  want = np.asarray([[1, 0, 0, 0, 0],
                     [1, 1, 0, 0, 0],
                     [1, 1, 1, 0, 0],  # stream 0 sees the context and itself, not stream 1
                     [1, 1, 0, 1, 0],
                     [1, 1, 0, 1, 1]], bool)
  np.testing.assert_array_equal(np.asarray(mask.dense()[0]), want)


@pytest.mark.parametrize("softcap, window", [(None, None), (5.0, 3)])
def test_interleaved_stream_attention_equals_the_dense_mask(softcap, window):
  """The XLA backend's per-stream path (`Segments.interleaved_from`) computes what the dense mask
  gives: shared slots [0, W) with padding and two documents, then 3 steps of 4 streams, the
  last step only partly written (kv_length), GQA, soft-capping and a window."""
  from jaxdec.model.attention import attention

  rng = np.random.default_rng(1)
  batch, width, streams, steps, heads, kv_heads, dim = 2, 7, 4, 3, 4, 2, 8
  slots = width + steps * streams
  ctx_seg = np.array([[4, 4, 4, 4, 5, 5, -1], [4, 4, 4, 5, 5, 5, 5]])  # -1: padding
  ctx_pos = np.array([[0, 1, 2, 3, 0, 1, 0], [0, 1, 2, 0, 1, 2, 3]])
  reads = np.array([[4, 4, 5, 5], [4, 5, 5, 5]])  # each stream's document context
  start = np.take_along_axis(ctx_pos, np.array([[3, 3, 5, 5], [2, 6, 6, 6]]), axis=1) + 1
  kv_seg = np.concatenate([ctx_seg, np.tile(np.arange(streams), (batch, steps))], axis=1)
  gen_pos = (start[:, None, :] + np.arange(steps)[None, :, None]).reshape(batch, -1)
  kv_pos = np.concatenate([ctx_pos, gen_pos], axis=1)
  q_pos = start + steps - 1  # the last step's tokens
  q = jnp.asarray(rng.normal(size=(batch, streams, heads, dim)), jnp.float32)
  k, v = (jnp.asarray(rng.normal(size=(batch, slots, kv_heads, dim)), jnp.float32)
          for _ in range(2))

  def run(interleaved_from):
    seg = Segments(q=jnp.asarray(np.tile(np.arange(streams), (batch, 1))), reads=jnp.asarray(reads),
                   kv=jnp.asarray(kv_seg), interleaved_from=interleaved_from)
    mask = MaskSpec(q_positions=jnp.asarray(q_pos), kv_positions=jnp.asarray(kv_pos),
                    kv_length=jnp.asarray([slots - 1, slots]), pattern=Causal(), window=window,
                    start=jnp.full((batch,), slots - streams), segments=seg)
    return attention(q, k, v, mask=mask, softcap=softcap)

  np.testing.assert_allclose(run(width), run(None), atol=1e-5, rtol=1e-5)


def test_pack_layout():
  packed = hpd.pack([([7, 8, 9], [[1], [2, 3]]), ([4], [[5, 6]])], width=12, streams=4)
  np.testing.assert_array_equal(packed.tokens[0, :10], [7, 8, 9, 1, 2, 3, 4, 5, 6, 0])
  np.testing.assert_array_equal(packed.positions[0, :9], [0, 1, 2, 3, 3, 4, 0, 1, 2])
  np.testing.assert_array_equal(packed.segments[0, :9], [4, 4, 4, 0, 1, 1, 5, 2, 2])
  np.testing.assert_array_equal(packed.reads[0, :9], [4, 4, 4, 4, 4, 4, 5, 5, 5])
  np.testing.assert_array_equal(packed.ends[0], [3, 5, 8, -1])
  assert packed.lengths.tolist() == [9] and packed.order == ((0, 0), (0, 1), (0, 2))


def test_greedy_equals_each_query_alone_with_ragged_queries_and_eos():
  context = ids(13)
  queries = [ids(1), ids(5), ids(2), ids(9), ids(3)]
  # Stop tokens chosen from what the streams generate, so that streams end at different steps.
  free = [alone(MODEL, context, q, 12, stop_tokens=()) for q in queries]
  stops = [free[0][3], free[2][6]]
  out = jaxdec.parallel_generate(MODEL, context, queries, max_new_tokens=12, stop_tokens=stops)
  lengths = set()
  for j, q in enumerate(queries):
    want = alone(MODEL, context, q, 12, stop_tokens=stops)
    assert out.tokens[j, : out.lengths[j]].tolist() == want, j
    lengths.add(int(out.lengths[j]))
  assert len(lengths) > 1  # Streams stopped at different steps.
  assert int(out.stats["nfe"][0]) == max(lengths)


def test_stacked_documents_and_several_rows():
  docs = [ids(11), ids(4), ids(17)]
  queries = [[ids(3), ids(6)], [ids(2)], [ids(4), ids(1), ids(5)]]
  for rows in (1, 2):
    out = jaxdec.parallel_generate(MODEL, docs, queries, max_new_tokens=7, stop_tokens=(),
                                   rows=rows)
    flat = [(c, q) for c, qs in zip(docs, queries) for q in qs]
    assert out.tokens.shape == (len(flat), 7)
    for j, (c, q) in enumerate(flat):
      assert out.tokens[j].tolist() == alone(MODEL, c, q, 7, stop_tokens=()), (rows, j)


def test_sampling_is_per_query_and_greedy_at_zero_temperature():
  context, queries = ids(9), [ids(2), ids(4)]
  greedy = jaxdec.parallel_generate(MODEL, context, queries, max_new_tokens=6, stop_tokens=())
  cold = jaxdec.parallel_generate(MODEL, context, queries, max_new_tokens=6, stop_tokens=(),
                                  sampling=jaxdec.Sampling.create(temperature=[0.0, 0.0]),
                                  key=jax.random.key(0))
  np.testing.assert_array_equal(cold.tokens, greedy.tokens)
  # The same query twice draws different tokens (its own keys), reproducibly.
  hot = lambda seed: jaxdec.parallel_generate(
      MODEL, context, [queries[0], queries[0]], max_new_tokens=6, stop_tokens=(),
      sampling=jaxdec.Sampling.create(temperature=2.0), key=jax.random.key(seed)).tokens
  first = hot(1)
  np.testing.assert_array_equal(first, hot(1))
  assert (first[0] != first[1]).any()


def test_sampling_matches_the_models_distribution():
  """The first sampled token of a stream follows softmax(logits of context + query)."""
  context, query = ids(6), ids(2)
  n = 400
  out = jaxdec.parallel_generate(MODEL, context, [query] * n, max_new_tokens=1, stop_tokens=(),
                                 sampling=jaxdec.Sampling.create(temperature=1.0),
                                 key=jax.random.key(7))
  probs = np.asarray(jax.nn.softmax(jaxdec.forward(MODEL, np.asarray([context + query]))[0, -1]))
  counts = np.bincount(out.tokens[:, 0], minlength=probs.size)
  top = np.argsort(probs)[::-1][:5]
  expected = probs[top] * n
  observed = counts[top]
  chi2 = (((observed - expected) ** 2) / expected).sum()
  assert chi2 < 20.5, (observed, expected)  # chi-square, 5 dof, p = 0.001


@pytest.mark.parametrize("bad, message", [
    (dict(queries=[]), "non-empty list"),
    (dict(queries=[[3], []]), "query 1 is empty"),
    (dict(queries=[3, 4]), "one flat list"),
    (dict(context=[3] * 256), "context has 256 tokens"),
    (dict(queries=[[3], [3] * 248], max_new_tokens=8), "query 1 has 248 tokens"),
    (dict(max_new_tokens=0), "max_new_tokens must be a positive int"),
    (dict(queries=[[3, 999]]), "outside the vocabulary"),
    (dict(context=[[2, 3], [4]], queries=[[[5]]]), "2 query lists"),
    (dict(rows=3), "rows=3 exceeds the 1 documents"),
])
def test_bad_inputs_name_the_problem(bad, message):
  args = dict(context=[2, 3, 4], queries=[[5, 6]], max_new_tokens=4)
  args.update(bad)
  with pytest.raises((ValueError, TypeError), match=message):
    jaxdec.parallel_generate(MODEL, args.pop("context"), args.pop("queries"), **args)


def test_pallas_backend_decodes_the_same_tokens():
  """The masked-attention kernel reads the segments too (interpret mode on CPU)."""
  import dataclasses
  pallas = MODEL.replace(config=dataclasses.replace(MODEL.config, attention_backend="pallas"))
  context, queries = ids(10), [ids(3), ids(1), ids(4)]
  want = jaxdec.parallel_generate(MODEL, context, queries, max_new_tokens=4, stop_tokens=())
  got = jaxdec.parallel_generate(pallas, context, queries, max_new_tokens=4, stop_tokens=())
  np.testing.assert_array_equal(got.tokens, want.tokens)
