"""jaxdec.diffusion_generate on tiny random bidirectional models: caches, ragged batches,
retracing, sampling keys and input validation."""

import jax
import numpy as np
import pytest

import jaxdec
from jaxdec import api
from jaxdec.diffusion import (AsyncLane, Dream, DualCache, Factor, FirstStepConfidence, FixedSteps, Frechet,
                              Persistence, PrefixCache, RipplePivot, Scaffold,
                              Probability, RandomConfidence, Threshold)
from jaxdec.model import Bidirectional
from tiny import tiny_model

MASK = 5


def dlm(tokens=None, **overrides):
  """A tiny masked-diffusion model; std 0.5 gives confidences that spread over (0, 1)."""
  kw = dict(attention=Bidirectional(), architecture="llada", std=0.5)
  kw.update(overrides)
  return tiny_model(tokens=dict(mask=MASK, **(tokens or {})), **kw)


@pytest.fixture(scope="module")
def model():
  return dlm()


def _prompts(seed, lengths=(3, 11, 1, 7)):
  rng = np.random.RandomState(seed)
  return [rng.randint(6, 128, n).tolist() for n in lengths]


@pytest.mark.parametrize("shifted, suffix", [(False, None), (True, None), (False, 0),
                                             pytest.param(True, 3, marks=pytest.mark.slow)])
@pytest.mark.parametrize("scheduler", [FixedSteps(), Threshold(0.5)])
@pytest.mark.parametrize("cache", [PrefixCache(), DualCache()])
def test_caches_are_exact_on_a_one_layer_model(cache, scheduler, shifted, suffix):
  """With one layer, keys and values depend only on the tokens, and the prefix and suffix of a
  block do not change while it is decoded: a cache that reuses the right slots, at the right
  positions, with the right visibility, gives exactly the uncached output (also with only part
  of the suffix visible)."""
  model = dlm(num_layers=1, seed=1, embeddings=dict(shifted_logits=shifted))
  kw = dict(gen_length=16, block_length=8, steps=16, scheduler=scheduler, visible_suffix=suffix)
  exact = jaxdec.diffusion_generate(model, _prompts(0), **kw)
  cached = jaxdec.diffusion_generate(model, _prompts(0), cache=cache, **kw)
  np.testing.assert_array_equal(cached.tokens, exact.tokens)
  np.testing.assert_array_equal(cached.stats["nfe"], exact.stats["nfe"])


@pytest.mark.parametrize("cache", [PrefixCache(), DualCache()])
def test_caches_are_approximate_on_deeper_models(model, cache):
  """On two layers the reused entries are stale, so the output moves: the cache is in use."""
  kw = dict(gen_length=16, block_length=8, steps=16, scheduler=Threshold(0.5))
  exact = jaxdec.diffusion_generate(model, _prompts(1), **kw)
  cached = jaxdec.diffusion_generate(model, _prompts(1), cache=cache, **kw)
  assert not np.array_equal(cached.tokens, exact.tokens)


@pytest.mark.parametrize("scheduler, cache", [
    (FixedSteps(), None), (Threshold(0.5), None), (Factor(1.0), None), (Frechet(0.25), None),
    (Dream(Probability()), None), (Threshold(0.5), PrefixCache()), (Threshold(0.5), DualCache()),
    (FixedSteps(), DualCache()), (FirstStepConfidence(0.5), DualCache()),
    (Scaffold(chlg_steps=2, chlg_level=0.5), DualCache()), (RipplePivot(0.5), DualCache()),
    (AsyncLane(0.5, stable=0.25), DualCache())])
def test_ragged_batch_equals_one_by_one(model, scheduler, cache):
  paced = isinstance(scheduler, (Threshold, Factor, Frechet, FirstStepConfidence, RipplePivot,
                                 AsyncLane))
  _assert_batch_equals_one_by_one(model, scheduler, cache, steps=8, paced=paced)


@pytest.mark.parametrize("cache", [None, DualCache()])
def test_a_row_held_back_by_the_cache_keeps_its_scheduler_state(model, cache):
  """Persistence counts forwards per position; while a dual cache refreshes for a row starting a
  block, the other rows wait a step, and that step must not count in their state."""
  _assert_batch_equals_one_by_one(model, Persistence(0.3, 2), cache, steps=16, paced=True)


def _assert_batch_equals_one_by_one(model, scheduler, cache, steps, paced):
  """`paced`: rows also progress at their own pace (their forward counts differ)."""
  prompts = _prompts(2)
  kw = dict(gen_length=16, block_length=8, steps=steps, scheduler=scheduler, cache=cache)
  batch = jaxdec.diffusion_generate(model, prompts, **kw)
  for i, p in enumerate(prompts):
    alone = jaxdec.diffusion_generate(model, [p], **kw)
    np.testing.assert_array_equal(batch.tokens[i], alone.tokens[0], err_msg=f"row {i}")
    assert int(batch.stats["nfe"][i]) == int(alone.stats["nfe"][0])
  if paced:
    assert len(set(batch.stats["nfe"].tolist())) > 1


def test_a_hidden_suffix_is_what_a_truncated_canvas_gives():
  """visible_suffix=k on one block of a longer canvas equals decoding that block alone on a
  canvas that ends k positions after it; and hiding the suffix changes what the model predicts."""
  model = dlm(seed=2)
  prompts = _prompts(3)
  kw = dict(block_length=8, scheduler=Threshold(0.5))
  for k in (0, 8):
    short = jaxdec.diffusion_generate(model, prompts, gen_length=8 + k, steps=8 + k, **kw)
    long = jaxdec.diffusion_generate(model, prompts, gen_length=32, steps=32, visible_suffix=k,
                                     **kw)
    np.testing.assert_array_equal(long.tokens[:, :8], short.tokens[:, :8])
  full = jaxdec.diffusion_generate(model, prompts, gen_length=32, steps=32, **kw)
  assert not np.array_equal(full.tokens[:, :8], long.tokens[:, :8])


def test_stats_and_lengths(model):
  out = jaxdec.diffusion_generate(model, _prompts(3), gen_length=12, block_length=4, steps=6,
                                  stop_tokens=())
  assert out.tokens.shape == (4, 12)
  assert out.stats["nfe"].tolist() == [6] * 4
  np.testing.assert_allclose(out.stats["tokens_per_forward"], 2.0)
  assert out.lengths.tolist() == [12] * 4
  assert not (np.asarray(out.tokens) == MASK).any()
  stop = int(out.tokens[0, 5])
  cut = jaxdec.diffusion_generate(model, _prompts(3), gen_length=12, block_length=4, steps=6,
                                  stop_tokens=[stop])
  np.testing.assert_array_equal(cut.tokens, out.tokens)  # Decoding never stops early.
  for row in range(4):
    hits = np.flatnonzero(np.asarray(out.tokens[row]) == stop)
    assert int(cut.lengths[row]) == (hits[0] + 1 if hits.size else 12)



@pytest.mark.parametrize("scheduler,cache", [(FixedSteps(), None), (Threshold(0.5), DualCache())])
def test_stop_early_keeps_the_answer_and_skips_later_blocks(model, scheduler, cache):
  kw = dict(gen_length=16, block_length=4, steps=8, scheduler=scheduler, cache=cache)
  full = jaxdec.diffusion_generate(model, _prompts(4), stop_tokens=(), **kw)
  stop = int(full.tokens[1, 5])  # Row 1 stops in its second block; others wherever it occurs.
  early = jaxdec.diffusion_generate(model, _prompts(4), stop_tokens=[stop], stop_early=True, **kw)
  tokens, nfe = np.asarray(full.tokens), np.asarray(full.stats["nfe"])
  for row in range(4):
    hits = np.flatnonzero(tokens[row] == stop)
    end = (hits[0] // 4 + 1) * 4 if hits.size else 16  # The end of the block holding it.
    np.testing.assert_array_equal(early.tokens[row, :end], tokens[row, :end])
    assert (np.asarray(early.tokens[row, end:]) == 0).all()  # Pad, not mask.
    assert int(early.stats["decoded"][row]) == end
    assert int(early.lengths[row]) == (hits[0] + 1 if hits.size else 16)
    assert int(early.stats["nfe"][row]) <= nfe[row]
  assert int(early.stats["decoded"][1]) <= 8 and int(early.stats["nfe"][1]) < nfe[1]
  np.testing.assert_allclose(early.stats["tokens_per_forward"],
                             np.asarray(early.stats["decoded"]) / np.asarray(early.stats["nfe"]))

def test_threshold_sweep_trades_forwards_for_parallelism(model):
  nfe = [int(jaxdec.diffusion_generate(model, _prompts(4), gen_length=16, block_length=16,
                                       scheduler=Threshold(tau)).stats["nfe"].sum())
         for tau in (0.1, 0.5, 0.9, 1.0)]
  assert nfe[0] < nfe[1] < nfe[-1] == 4 * 16  # tau > 1: one token per forward.


@pytest.mark.parametrize("rule, values", [(Threshold, [0.2, 0.6, 0.95]), (Factor, [0.5, 1.0, 3.0]),
                                          (Frechet, [0.0, 0.25, 0.6])])
def test_per_row_values_equal_separate_runs(model, rule, values):
  """One batch can sweep a threshold: row i with value i is row i run alone with it."""
  prompts = _prompts(9, (5, 5, 5))
  kw = dict(gen_length=16, block_length=8)
  batch = jaxdec.diffusion_generate(model, prompts, scheduler=rule(values), **kw)
  for i, value in enumerate(values):
    alone = jaxdec.diffusion_generate(model, [prompts[i]], scheduler=rule(value), **kw)
    np.testing.assert_array_equal(batch.tokens[i], alone.tokens[0])
    assert int(batch.stats["nfe"][i]) == int(alone.stats["nfe"][0])
  assert len(set(batch.stats["nfe"].tolist())) > 1


def test_no_retrace_when_only_values_change(model):
  api._jitted.clear_cache()
  key = jax.random.key(0)
  for tau, steps, temperature in ((0.9, 16, 0.0), (0.5, 8, 0.7), (0.2, 4, [0.0, 1.0, 0.3, 2.0])):
    jaxdec.diffusion_generate(model, _prompts(5), gen_length=16, block_length=4, steps=steps,
                              scheduler=Threshold(tau), temperature=temperature, key=key)
  assert api._jitted._cache_size() == 1
  for f in (0.5, 1.0, 3.0):
    jaxdec.diffusion_generate(model, _prompts(6), gen_length=16, block_length=4, scheduler=Factor(f))
  assert api._jitted._cache_size() == 2
  for w in (0.5, 2.0):
    jaxdec.diffusion_generate(model, _prompts(6), gen_length=16, block_length=4, cfg_scale=w)
  assert api._jitted._cache_size() == 3


def test_sampling_is_keyed_by_row_and_position(model):
  prompts = _prompts(7)
  kw = dict(gen_length=16, block_length=8, steps=16, temperature=1.0)
  a = jaxdec.diffusion_generate(model, prompts, key=jax.random.key(1), **kw)
  b = jaxdec.diffusion_generate(model, prompts, key=jax.random.key(1), **kw)
  c = jaxdec.diffusion_generate(model, prompts, key=jax.random.key(2), **kw)
  first = jaxdec.diffusion_generate(model, prompts[:1], key=jax.random.key(1), **kw)
  greedy = jaxdec.diffusion_generate(model, prompts, **dict(kw, temperature=0.0))
  np.testing.assert_array_equal(a.tokens, b.tokens)
  np.testing.assert_array_equal(a.tokens[0], first.tokens[0])  # Row 0 ignores the rows after it.
  assert not np.array_equal(a.tokens, c.tokens)
  assert not np.array_equal(a.tokens, greedy.tokens)


def test_shifted_models_default_to_the_dream_sampler():
  model = dlm(architecture="Dream", embeddings=dict(shifted_logits=True), layer=dict(qkv_bias=True))
  kw = dict(gen_length=16, block_length=16, steps=8)
  default = jaxdec.diffusion_generate(model, _prompts(8), **kw)
  dream = jaxdec.diffusion_generate(model, _prompts(8), scheduler=Dream(), **kw)
  llada = jaxdec.diffusion_generate(model, _prompts(8), scheduler=FixedSteps(), **kw)
  np.testing.assert_array_equal(default.tokens, dream.tokens)
  assert not np.array_equal(default.tokens, llada.tokens)


def test_runs_inside_a_callers_jit(model):
  from jaxdec.diffusion import diffusion_generate

  prompt = np.array([[7, 8, 9, 0], [10, 11, 12, 13]], np.int32)
  lengths = np.array([3, 4], np.int32)

  @jax.jit
  def mine(params, prompt, lengths, tau):
    out = diffusion_generate(params, prompt, lengths, config=model.config, gen_length=8,
                             block_length=4, steps=8, scheduler=Threshold(tau))
    return out.tokens

  got = mine(model.params, prompt, lengths, np.float32(0.5))
  want = jaxdec.diffusion_generate(model, [[7, 8, 9], [10, 11, 12, 13]], gen_length=8,
                                   block_length=4, steps=8, scheduler=Threshold(0.5))
  np.testing.assert_array_equal(got, want.tokens)


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(gen_length=10, block_length=4), ValueError, "gen_length=10 is not a multiple of block_length=4"),
    (dict(gen_length=16, block_length=4, steps=6), ValueError, "steps=6 is not divisible by the number of blocks"),
    (dict(gen_length=0), ValueError, "gen_length must be a positive int"),
    (dict(steps=2.5), ValueError, "steps must be a positive int"),
    (dict(scheduler="threshold"), TypeError, "scheduler str does not implement the Scheduler"),
    (dict(scheduler=Threshold), TypeError, r"must be an instance, got the class Threshold"),
    (dict(scheduler=Factor(0.0)), ValueError, r"Factor.factor must be finite and in \(0.0, inf\]"),
    (dict(scheduler=Threshold(float("nan"))), ValueError, "Threshold.tau must be finite"),
    (dict(scheduler=Threshold(1.5)), ValueError, r"Threshold.tau must be finite and in \[0.0, 1.0\]"),
    (dict(scheduler=Threshold([0.5, 0.9])), ValueError, r"Threshold.tau must be a scalar or have shape \(1,\)"),
    (dict(scheduler=FixedSteps("lowest")), TypeError, "scheduler.confidence str does not implement"),
    (dict(scheduler=Dream(eps=2.0)), ValueError, "Dream.eps must be in"),
    (dict(cache="dual"), TypeError, "cache str does not implement the DiffusionCache protocol"),
    (dict(cache=DualCache(), cfg_scale=1.0), ValueError, "needs cache=None"),
    (dict(temperature=0.5), ValueError, "needs a PRNG key"),
    (dict(scheduler=FixedSteps(RandomConfidence())), ValueError, "needs a PRNG key"),
    (dict(temperature=-1.0), ValueError, "temperature must be"),
    (dict(visible_suffix=-1), ValueError, "visible_suffix must be None or an int >= 0, got -1"),
    (dict(gen_length=256, block_length=256, steps=256), ValueError, "exceeds the model's maximum"),
])
def test_bad_arguments_raise(model, kwargs, error, message):
  with pytest.raises(error, match=message):
    jaxdec.diffusion_generate(model, [[7, 8, 9]], **kwargs)


def test_bad_models_and_prompts_raise(model):
  with pytest.raises(ValueError, match="this model is causal: use jaxdec.generate"):
    jaxdec.diffusion_generate(tiny_model(tokens=dict(mask=MASK)), [[7, 8]])
  with pytest.raises(ValueError, match="needs a model with a mask token"):
    jaxdec.diffusion_generate(tiny_model(attention=Bidirectional()), [[7, 8]])
  with pytest.raises(ValueError, match="prompts contain the mask token id 5"):
    jaxdec.diffusion_generate(model, [[7, MASK, 8]])
  with pytest.raises(ValueError, match="need an EOS id"):
    jaxdec.diffusion_generate(dlm(tokens=dict(eos=())), [[7, 8]], logits_eos_inf=True)


def test_parts_with_the_same_fields_get_their_own_programs(model):
  """PrefixCache() and DualCache() (or Threshold and Factor) have equal JAX tree structures; the
  jitted entry point must still compile each its own program, whatever ran before."""
  kw = dict(gen_length=16, block_length=8, steps=16)
  alone = {}
  for cache in (PrefixCache(), DualCache()):
    api._jitted.clear_cache()
    alone[type(cache)] = jaxdec.diffusion_generate(model, _prompts(3), cache=cache, **kw).tokens
  assert not np.array_equal(alone[PrefixCache], alone[DualCache])  # Guards the test's strength.
  api._jitted.clear_cache()
  for cache in (PrefixCache(), DualCache()):
    np.testing.assert_array_equal(
        jaxdec.diffusion_generate(model, _prompts(3), cache=cache, **kw).tokens, alone[type(cache)])
