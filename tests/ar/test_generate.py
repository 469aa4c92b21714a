import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import jaxdec
from jaxdec import api, decoding
from tiny import tiny_model


def _prompts(seed, lengths, vocab=128):
  rng = np.random.RandomState(seed)
  return [rng.randint(2, vocab, n).tolist() for n in lengths]


def test_ragged_batch_equals_one_by_one(model):
  prompts = _prompts(0, [3, 11, 1, 7])
  batch = jaxdec.generate(model, prompts, max_new_tokens=24)
  for i, p in enumerate(prompts):
    alone = jaxdec.generate(model, [p], max_new_tokens=24)
    assert int(batch.lengths[i]) == int(alone.lengths[0])
    np.testing.assert_array_equal(batch.tokens[i], alone.tokens[0])


def test_array_prompts_with_lengths(model):
  prompts = _prompts(1, [4, 9])
  array = np.zeros((2, 9), np.int32)
  for i, p in enumerate(prompts):
    array[i, : len(p)] = p
  a = jaxdec.generate(model, array, max_new_tokens=10, lengths=[4, 9])
  b = jaxdec.generate(model, prompts, max_new_tokens=10)
  np.testing.assert_array_equal(a.tokens, b.tokens)


def test_greedy_matches_a_plain_argmax_loop(model):
  prompt = _prompts(2, [6])[0]
  out = jaxdec.generate(model, [prompt], max_new_tokens=12, stop_tokens=())
  seq = list(prompt)
  for _ in range(12):
    seq.append(int(np.argmax(jaxdec.forward(model, np.array([seq]))[0, -1])))
  np.testing.assert_array_equal(out.tokens[0], seq[len(prompt):])


def test_stops_at_eos_per_row(model):
  prompts = _prompts(3, [5, 8])
  free = jaxdec.generate(model, prompts, max_new_tokens=16, stop_tokens=())
  stop = int(free.tokens[0, 4])
  first = int(np.flatnonzero(np.asarray(free.tokens[0]) == stop)[0])
  out = jaxdec.generate(model, prompts, max_new_tokens=16, stop_tokens=[stop])
  assert int(out.lengths[0]) == first + 1  # The stop token is included.
  np.testing.assert_array_equal(out.tokens[0, : first + 1], free.tokens[0, : first + 1])
  assert (np.asarray(out.tokens[0, first + 1:]) == model.config.tokens.pad).all()
  hits = np.flatnonzero(np.asarray(free.tokens[1]) == stop)
  expected_1 = hits[0] + 1 if hits.size else 16
  assert int(out.lengths[1]) == expected_1
  assert out.stats["nfe"].tolist() == out.lengths.tolist()


def test_budget_is_respected(model):
  out = jaxdec.generate(model, _prompts(4, [3, 5]), max_new_tokens=5, stop_tokens=())
  assert out.tokens.shape == (2, 5)
  assert out.lengths.tolist() == [5, 5]
  one = jaxdec.generate(model, _prompts(4, [3]), max_new_tokens=1, stop_tokens=())
  assert one.lengths.tolist() == [1] and one.stats["nfe"].tolist() == [1]
  assert one.stats["steps"] == 0  # The prefill gave the one token: no loop step ran.


def test_no_retrace_when_only_values_change(model):
  api._jitted.clear_cache()
  sampling = lambda t, k, p: jaxdec.Sampling.create(temperature=t, top_k=k, top_p=p)
  key = jax.random.key(0)
  jaxdec.generate(model, _prompts(5, [4, 6]), 20, sampling=sampling(0.5, 5, 0.9), key=key)
  jaxdec.generate(model, _prompts(6, [9, 2]), 17, sampling=sampling(1.3, 0, 1.0), key=key)
  jaxdec.generate(model, _prompts(7, [12, 1]), 31, sampling=sampling([0.0, 2.0], [3, 0], [1.0, 0.5]),
                  key=jax.random.key(1))
  assert api._jitted._cache_size() == 1
  jaxdec.generate(model, _prompts(5, [4, 6]), 20)  # Greedy is a different (static) program.
  assert api._jitted._cache_size() == 2


def _reference_probs(logits, temperature, top_k, top_p):
  """transformers' warpers (temperature, top-k, top-p) written out in numpy."""
  x = logits.astype(np.float64) / temperature
  if top_k:
    x = np.where(x < np.sort(x)[-top_k], -np.inf, x)
  if top_p < 1:
    order = np.argsort(x, kind="stable")
    probs = np.exp(x[order] - x.max())
    cumulative = np.cumsum(probs / probs.sum())
    remove = cumulative <= 1 - top_p
    remove[-1] = False
    x[order[remove]] = -np.inf
  p = np.exp(x - x.max())
  return p / p.sum()


def _chi_square_pvalue(samples, probs):
  counts = np.bincount(samples, minlength=probs.size)
  expected = probs * samples.size
  assert counts[probs == 0].sum() == 0, "sampled a token the warpers exclude"
  big = expected >= 5  # Pool the rare bins so the chi-square approximation holds.
  obs = np.append(counts[big], counts[~big].sum())
  exp = np.append(expected[big], expected[~big].sum())
  if exp[-1] == 0:
    obs, exp = obs[:-1], exp[:-1]
  return stats.chisquare(obs, exp).pvalue


@pytest.mark.parametrize("temperature, top_k, top_p", [(1.0, 0, 1.0), (0.7, 8, 1.0), (1.5, 0, 0.8),
                                                       (1.2, 20, 0.9)])
def test_sampling_matches_the_warped_softmax(temperature, top_k, top_p):
  model = tiny_model(std=0.1)  # Flat enough that many tokens have mass.
  prompt = _prompts(8, [5])[0]
  n = 4000
  out = jaxdec.generate(model, [prompt] * n, max_new_tokens=1, stop_tokens=(),
                        sampling=jaxdec.Sampling.create(temperature, top_k, top_p),
                        key=jax.random.key(42))
  logits = np.asarray(jaxdec.forward(model, np.array([prompt]))[0, -1])
  samples = np.asarray(out.tokens[:, 0])
  assert _chi_square_pvalue(samples, _reference_probs(logits, temperature, top_k, top_p)) > 1e-3
  # The test has power: the same samples reject a distribution that is slightly off.
  wrong = _reference_probs(logits, temperature * 1.5, top_k, top_p)
  assert _chi_square_pvalue(samples, wrong) < 1e-3


def test_sampling_is_reproducible_and_keyed_by_row_and_position(model):
  prompts = _prompts(9, [4, 6, 3])
  s = jaxdec.Sampling.create(temperature=1.0)
  a = jaxdec.generate(model, prompts, 16, sampling=s, key=jax.random.key(7))
  b = jaxdec.generate(model, prompts, 16, sampling=s, key=jax.random.key(7))
  c = jaxdec.generate(model, prompts, 16, sampling=s, key=jax.random.key(8))
  np.testing.assert_array_equal(a.tokens, b.tokens)
  assert not np.array_equal(a.tokens, c.tokens)
  # Row 0's sample does not depend on what else is in the batch.
  alone = jaxdec.generate(model, prompts[:1], 16, sampling=s, key=jax.random.key(7))
  np.testing.assert_array_equal(alone.tokens[0, : alone.lengths[0]], a.tokens[0, : a.lengths[0]])


def test_temperature_zero_rows_are_greedy(model):
  prompts = _prompts(10, [4, 6])
  greedy = jaxdec.generate(model, prompts, 12)
  mixed = jaxdec.generate(model, prompts, 12, key=jax.random.key(0),
                          sampling=jaxdec.Sampling.create(temperature=[0.0, 1.0]))
  np.testing.assert_array_equal(mixed.tokens[0], greedy.tokens[0])


def test_usable_inside_a_callers_jit(model):
  prompt, lengths = decoding.prepare_prompts(_prompts(11, [3, 5]), None, model.config.vocab_size)

  @jax.jit
  def user_step(params, prompt, lengths):
    out = jaxdec.ar.generate(params, prompt, lengths, 8, None, jnp.zeros((0,), jnp.int32),
                             config=model.config, buffer_len=8)
    return out.tokens

  tokens = user_step(model.params, prompt, lengths)
  ref = jaxdec.generate(model, _prompts(11, [3, 5]), 8, stop_tokens=())
  np.testing.assert_array_equal(tokens, ref.tokens)


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(prompts=[[5, 6], []]), ValueError, "prompt 1 is empty"),
    (dict(prompts=[]), ValueError, "prompts is empty"),
    (dict(prompts=[[5, 500]]), ValueError, "token id 500 outside the vocabulary"),
    (dict(prompts=[[-1, 5]]), ValueError, "token id -1 outside the vocabulary"),
    (dict(prompts=[[5] * 250], max_new_tokens=10), ValueError,
     "prompt length 250 \\+ max_new_tokens=10 exceeds the model's maximum of 256"),
    (dict(prompts=[[5]], max_new_tokens=0), ValueError, "max_new_tokens must be a positive int"),
    (dict(prompts=[[5.5]]), TypeError, "prompt 0 must be a flat sequence of int"),
    (dict(prompts=[[5]], sampling=jaxdec.Sampling.create(1.0)), ValueError, "sampling needs a PRNG key"),
    (dict(prompts=[[5]], sampling=jaxdec.Sampling(np.float32(1), np.int32(0), np.float32(0)),
          key=jax.random.key(0)), ValueError, "top_p must be in \\(0, 1\\]"),
    (dict(prompts=[[5]], stop_tokens=[999]), ValueError, "stop_tokens contains token id 999"),
    (dict(prompts=[[5]], stop_tokens=2), TypeError, r"stop_tokens must be a sequence .* write \[2\]"),
    (dict(prompts=[5, 6, 7]), TypeError, r"one flat list of 3 ints; .* wrap it in a list: \[ids\]"),
    (dict(prompts=[[5]], sampling=jaxdec.Sampling(np.float32("nan"), np.int32(0), np.float32(1)),
          key=jax.random.key(0)), ValueError, "temperature must be finite"),
    (dict(prompts=[[5]], key=jax.random.key(0)), ValueError, "a key was given but sampling is None"),
])
def test_bad_input_raises_a_clear_error(model, kwargs, error, message):
  kwargs.setdefault("max_new_tokens", 4)
  with pytest.raises(error, match=message):
    jaxdec.generate(model, **kwargs)


@pytest.mark.parametrize("kwargs, message", [
    (dict(temperature=float("nan")), r"temperature must be finite and >= 0, got \[nan\]|got nan"),
    (dict(temperature=-0.5), "temperature must be finite and >= 0"),
    (dict(top_k=-1), "top_k must be >= 0"),
    (dict(top_p=1.5), r"top_p must be in \(0, 1\]"),
])
def test_sampling_create_checks_its_values(kwargs, message):
  with pytest.raises(ValueError, match=message):
    jaxdec.Sampling.create(**kwargs)


def test_forward_errors(model):
  with pytest.raises(TypeError, match="model must be a jaxdec Model"):
    jaxdec.forward("not a model", [[1]])
  with pytest.raises(ValueError, match="token id 128 outside"):
    jaxdec.forward(model, [[1, 128]])
  with pytest.raises(ValueError, match="sequence length 300 exceeds"):
    jaxdec.forward(model, np.ones((1, 300), np.int32))


def test_legacy_uint32_keys_work_like_typed_keys(model):
  """`jax.random.PRNGKey(0)` (what many JAX codebases pass) is the same key as `key(0)`."""
  prompts = _prompts(12, [3, 5])
  sampling = jaxdec.Sampling.create(temperature=1.0)
  typed = jaxdec.generate(model, prompts, 8, sampling=sampling, key=jax.random.key(3))
  legacy = jaxdec.generate(model, prompts, 8, sampling=sampling, key=jax.random.PRNGKey(3))
  np.testing.assert_array_equal(typed.tokens, legacy.tokens)
  with pytest.raises(TypeError, match="key must be a PRNG key"):
    jaxdec.generate(model, prompts, 8, sampling=sampling, key=np.zeros(3, np.uint32))


def test_masked_diffusion_models_are_refused():
  from jaxdec.model import Bidirectional

  dlm = tiny_model(attention=Bidirectional(), tokens=dict(mask=5))
  with pytest.raises(ValueError, match="decode it with jaxdec.diffusion_generate"):
    jaxdec.generate(dlm, [[7, 8]], 4)
  with pytest.raises(ValueError, match="decode it with jaxdec.diffusion_generate"):
    jaxdec.speculative_generate(dlm, [[7, 8]], jaxdec.spec.PromptLookup(2, 2), max_new_tokens=4)
