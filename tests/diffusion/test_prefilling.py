"""Prefilling-dLLM's chunk-sparse cache (jaxdec.diffusion.prefilling) on tiny random models.

On one layer a token's keys and values depend only on the token and its position, so a chunk
encoded alone equals the same tokens inside any sequence at the same positions: decoding with the
cache must then equal the dual cache decoding the prompt the cache *means* (the kept chunks, each
after a BOS, numbered on, then the query), token for token."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdec
from jaxdec.diffusion import DualCache, ModelDenoiser, Threshold
from jaxdec.diffusion.prefilling import PrefillingCache, draft
from jaxdec.model import BlockCausal
from test_diffusion_api import dlm

BOS = 1
KW = dict(gen_length=16, block_length=8, steps=16, scheduler=Threshold(0.5))


def _prompts(seed, lengths=(30, 23, 9, 5)):
  rng = np.random.RandomState(seed)
  return [rng.randint(6, 128, n).tolist() for n in lengths]


def _prepared(model, prompts, cache):
  width = max(map(len, prompts))
  arr = np.array([p + [0] * (width - len(p)) for p in prompts], np.int32)
  lengths = jnp.asarray([len(p) for p in prompts], jnp.int32)
  return jax.jit(lambda a, n: cache.prepare(ModelDenoiser(model.params, model.config), a, n))(
      jnp.asarray(arr), lengths)


def _meant(prompt, chosen, chunk, query):
  """The prompt a continuous-position cache stands for: each kept chunk after a BOS, the query."""
  context, tail = prompt[:max(len(prompt) - query, 0)], prompt[max(len(prompt) - query, 0):]
  out = []
  for m in chosen:
    if m >= 0:
      out += [BOS] + context[m * chunk:(m + 1) * chunk]
  return out + tail


@pytest.mark.parametrize("top_k", [10, 2])
def test_equals_the_dual_cache_on_the_prompt_it_keeps(top_k):
  """All chunks (top_k >= chunks) or the two best: ragged rows, a partial last chunk, a row whose
  prompt is all query (no context)."""
  model = dlm(num_layers=1, seed=1)
  prompts = _prompts(0)
  cache = PrefillingCache(chunk_size=8, top_k=top_k, query_tokens=6, bos_id=BOS)
  *_, prepared = _prepared(model, prompts, cache)
  chosen = np.asarray(prepared.chosen)
  meant = [_meant(p, c, 8, 6) for p, c in zip(prompts, chosen)]
  if top_k == 10:
    assert meant[0] == [x for m in range(3) for x in [BOS] + prompts[0][8 * m:8 * m + 8]] + \
        prompts[0][24:]
  else:
    scores = np.asarray(prepared.scores)
    for row, c in zip(scores, chosen):
      live = np.isfinite(row).sum()
      best = np.sort(np.argsort(-row, kind="stable")[:min(2, live)])
      np.testing.assert_array_equal(c[c >= 0], best)
  np.testing.assert_array_equal(prepared.context_length,
                                [len(m) - min(len(p), 6) for m, p in zip(meant, prompts)])
  sparse = jaxdec.diffusion_generate(model, prompts, cache=cache, **KW)
  dense = jaxdec.diffusion_generate(model, meant, cache=DualCache(), **KW)
  np.testing.assert_array_equal(sparse.tokens, dense.tokens)
  np.testing.assert_array_equal(sparse.stats["nfe"], dense.stats["nfe"])


def test_draft_score_is_the_drafts_log_probability_given_each_chunk():
  """The score of chunk m: mean log p(draft | [BOS, chunk m], query) with the draft masked, as a
  plain forward over that sequence computes it."""
  model = dlm(num_layers=1, seed=2)
  prompts = _prompts(3, (27, 14))
  cache = PrefillingCache(chunk_size=8, top_k=1, query_tokens=5, draft_tokens=3, bos_id=BOS)
  *_, prepared = _prepared(model, prompts, cache)
  denoiser = ModelDenoiser(model.params, model.config)
  for b, prompt in enumerate(prompts):
    query = prompt[-5:]
    drafted = np.asarray(draft(denoiser, jnp.asarray([query], jnp.int32),
                               jnp.asarray([5], jnp.int32), 3))[0]
    context = prompt[:-5]
    for m in range(-(-len(context) // 8)):
      seq = [BOS] + context[8 * m:8 * m + 8] + query + [model.config.tokens.mask] * 3
      logits = jaxdec.model.forward(model.params, jnp.asarray([seq], jnp.int32), None,
                                    config=model.config)[0][0]
      logp = jax.nn.log_softmax(logits[-3:].astype(jnp.float32))
      want = float(np.mean(np.asarray(logp)[np.arange(3), drafted]))
      np.testing.assert_allclose(float(prepared.scores[b, m]), want, rtol=1e-5, atol=1e-5)
    assert np.all(np.isneginf(np.asarray(prepared.scores[b, -(-len(context) // 8):])))


def test_keys_score_prefers_the_chunk_that_repeats_the_query():
  model = dlm(num_layers=2, seed=3)
  rng = np.random.RandomState(4)
  query = rng.randint(6, 128, 8).tolist()
  chunks = [rng.randint(6, 128, 8).tolist() for _ in range(5)]
  chunks[3] = query
  cache = PrefillingCache(chunk_size=8, top_k=1, query_tokens=8, score="keys", bos_id=BOS)
  *_, prepared = _prepared(model, [sum(chunks, []) + query], cache)
  assert int(prepared.chosen[0, 0]) == 3


def test_reuse_positions_and_token_capacity():
  """"reuse": every kept chunk at 0..C and the query at C + 1; a capacity keeps BOS and that many
  tokens of each chunk."""
  model = dlm(num_layers=2, seed=1)
  prompts = _prompts(5, (40, 20))
  cache = PrefillingCache(chunk_size=8, top_k=3, query_tokens=6, positions="reuse",
                          token_capacity=3, bos_id=BOS)
  denoiser, query, query_lengths, prepared = _prepared(model, prompts, cache)
  np.testing.assert_array_equal(denoiser.offsets, [9, 9])
  sizes = [[8, 8, 8, 8, 2], [8, 6]]  # Context tokens per chunk.
  for b in range(2):
    chosen = [m for m in np.asarray(prepared.chosen[b]) if m >= 0]
    assert len(chosen) == min(3, len(sizes[b]))
    assert int(prepared.context_length[b]) == sum(1 + min(3, sizes[b][m]) for m in chosen)
    held = np.asarray(prepared.context.positions[b, :int(prepared.context_length[b])])
    assert held.max() <= 8 and np.sum(held == 0) == len(chosen)
  np.testing.assert_array_equal(query[0], prompts[0][-6:])
  np.testing.assert_array_equal(query_lengths, [6, 6])
  out = jaxdec.diffusion_generate(model, prompts, cache=cache, **KW)
  assert out.tokens.shape == (2, 16)


def test_ragged_batch_equals_one_by_one():
  model = dlm(num_layers=2, seed=1)
  prompts = _prompts(6)
  cache = PrefillingCache(chunk_size=8, top_k=2, query_tokens=6, bos_id=BOS)
  both = jaxdec.diffusion_generate(model, prompts, cache=cache, **KW)
  for b, prompt in enumerate(prompts):
    alone = jaxdec.diffusion_generate(model, [prompt], cache=cache, **KW)
    np.testing.assert_array_equal(both.tokens[b], alone.tokens[0])


@pytest.mark.parametrize("kw, match", [
    (dict(score="attention"), "score must be one of"),
    (dict(positions="absolute"), "positions must be one of"),
    (dict(chunk_size=0), "chunk_size must be an int >= 1, got 0"),
    (dict(top_k=2.0), "top_k must be an int >= 1, got 2.0"),
    (dict(token_capacity=0), "token_capacity must be an int >= 1, got 0")])
def test_bad_settings_are_named(kw, match):
  model = dlm(num_layers=1)
  with pytest.raises(ValueError, match=match):
    jaxdec.diffusion_generate(model, [[7, 8, 9]], cache=PrefillingCache(**kw), **KW)


def test_block_causal_models_are_refused():
  model = dlm(num_layers=1, attention=BlockCausal(8))
  with pytest.raises(ValueError, match="bidirectional dLLMs"):
    jaxdec.diffusion_generate(model, [[7, 8, 9]], cache=PrefillingCache(), **dict(KW, steps=16))


def test_sparse_elbo_equals_the_dense_one_on_the_prompt_it_keeps():
  """The bench's likelihood of a continuation given the kept chunks: on one layer it equals the
  dense estimate on the prompt the cache stands for (same masks)."""
  from jaxdec.bench.prefilling import _dense_nll, _sparse_nll

  model = dlm(num_layers=1, seed=1)
  prompt = _prompts(7, (30,))[0]
  cache = PrefillingCache(chunk_size=8, top_k=2, query_tokens=6, bos_id=BOS)
  *_, prepared = _prepared(model, [prompt], cache)
  meant = _meant(prompt, np.asarray(prepared.chosen[0]), 8, 6)
  continuation = jnp.asarray([[40, 41, 42, 43, 44]], jnp.int32)
  mask = jnp.asarray([[True, False, True, True, False]])
  sparse = _sparse_nll(model, cache, jnp.asarray([prompt], jnp.int32), continuation, mask)
  dense = _dense_nll(model, jnp.asarray([meant], jnp.int32), continuation, mask)
  np.testing.assert_allclose(float(sparse), float(dense), rtol=1e-5)
  whole = _dense_nll(model, jnp.asarray([prompt], jnp.int32), continuation, mask)
  assert abs(float(whole) - float(dense)) > 1e-3  # The prefix matters.


@pytest.mark.slow  # Prefilling's exactness tests run in CI
def test_bench_command_compares_each_score_with_dense(tmp_path):
  """`jaxdec bench prefilling` at a toy size: one row per score, ratios from the same run."""
  import json

  from jaxdec import cli

  out = tmp_path / "prefilling.json"
  assert cli.main(["bench", "prefilling", "--lengths", "300", "--prompts", "1", "--gen-length",
                   "8", "--continuation", "8", "--elbo-samples", "1", "--chunk-size", "64",
                   "--query-tokens", "16", "--score", "draft", "keys", "--out", str(out)]) == 0
  rows = json.loads(out.read_text())["rows"]
  assert [r["sparse"] for r in rows] == ["draft score", "keys score"]
  for r in rows:
    assert r["speedup"] == pytest.approx(r["sparse tok/s"] / r["dense tok/s"])
    assert r["dense bits/byte"] > 0 and r["sparse bits/byte"] > 0
    assert r["bits/byte change %"] == pytest.approx(
        100 * (r["sparse bits/byte"] / r["dense bits/byte"] - 1))
