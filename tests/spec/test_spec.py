import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from scipy import stats

import jaxdec
from jaxdec import api, decoding, spec
from jaxdec.spec.kforcing import NoiseParams
from jaxdec.spec.verify import _RESIDUAL, _categorical, _chain_rule
from tiny import tiny_model


@pytest.fixture(scope="module")
def draft():
  """A different, smaller random model with the target's vocabulary."""
  return tiny_model(seed=1, hidden_size=32, intermediate_size=64, num_heads=2, num_kv_heads=1)


def _prompts(seed, lengths, vocab=128):
  rng = np.random.RandomState(seed)
  # Repeating fragments give the n-gram drafters something to find.
  return [np.tile(rng.randint(2, vocab, 4), n)[: 3 * n].tolist() for n in lengths]


def _drafters(model, draft):
  return {
      "draft_model": spec.DraftModel(draft, num_tokens=4),
      "self_draft": spec.DraftModel(model, num_tokens=3),  # Always accepted: full-acceptance path.
      "prompt_lookup": spec.PromptLookup(max_ngram=3, num_tokens=5),
      "adapld": spec.AdaPLD(max_ngram=3, min_ngram=2, depth=3, branches=3),
  }


@pytest.mark.parametrize("name", ["draft_model", "self_draft", "prompt_lookup", "adapld"])
def test_greedy_speculative_equals_greedy_ar(model, draft, name):
  drafter = _drafters(model, draft)[name]
  for prompts in (_prompts(0, [3]), _prompts(1, [1, 5, 2, 4, 3])):
    ref = jaxdec.generate(model, prompts, max_new_tokens=30)
    out = jaxdec.speculative_generate(model, prompts, drafter, max_new_tokens=30)
    np.testing.assert_array_equal(out.lengths, ref.lengths)
    np.testing.assert_array_equal(out.tokens, ref.tokens)
    tau = out.stats["acceptance_length"]
    np.testing.assert_allclose(tau, out.lengths / out.stats["target_forwards"], rtol=1e-6)
    accepted = np.asarray(out.stats["accepted"])
    # Each step emits its accepted drafts plus one token (the last step may be cut short by the
    # budget right after its drafts); the prefill emits the first token.
    emitted = np.where(accepted >= 0, accepted + 1, 0).sum(1) + 1
    assert set((emitted - np.asarray(out.lengths)).tolist()) <= {0, 1}
    assert (accepted <= drafter.tree.max_depth).all()
  if name == "self_draft":
    assert np.all(np.asarray(tau) > 3.0)


def test_usable_inside_a_callers_jit(model, draft):
  """The pure loop composes with a caller's own jit (the drafter is a pytree argument)."""
  prompts = _prompts(3, [3, 5])
  prompt, lengths = decoding.prepare_prompts(prompts, None, model.config.vocab_size)

  @jax.jit
  def user_step(params, drafter, prompt, lengths):
    out = jaxdec.spec.speculative_generate(params, prompt, lengths, 12, None,
                                           jnp.zeros((0,), jnp.int32), config=model.config,
                                           drafter=drafter, verifier=spec.Greedy(), buffer_len=16)
    return out.tokens[:, :12]

  tokens = user_step(model.params, spec.DraftModel(draft, 3), prompt, lengths)
  ref = jaxdec.generate(model, prompts, 12, stop_tokens=())
  np.testing.assert_array_equal(tokens, ref.tokens)


def test_ragged_batch_equals_one_by_one(model, draft):
  prompts = _prompts(2, [4, 1, 6, 2])
  for drafter in (spec.DraftModel(draft, 4), spec.AdaPLD(depth=3, branches=2)):
    batch = jaxdec.speculative_generate(model, prompts, drafter, max_new_tokens=20)
    for i, p in enumerate(prompts):
      alone = jaxdec.speculative_generate(model, [p], drafter, max_new_tokens=20)
      np.testing.assert_array_equal(batch.tokens[i], alone.tokens[0])
      assert batch.stats["target_forwards"][i] == alone.stats["target_forwards"][0]


def test_stop_token_inside_an_accepted_run(model):
  """A stop token among accepted drafts ends the row right there, as in AR decoding."""
  prompts = _prompts(3, [3, 5])
  free = jaxdec.generate(model, prompts, max_new_tokens=24, stop_tokens=())
  stop = int(free.tokens[0, 9])
  ref = jaxdec.generate(model, prompts, max_new_tokens=24, stop_tokens=[stop])
  out = jaxdec.speculative_generate(model, prompts, spec.DraftModel(model, 4), max_new_tokens=24,
                                    stop_tokens=[stop])
  np.testing.assert_array_equal(out.lengths, ref.lengths)
  np.testing.assert_array_equal(out.tokens, ref.tokens)


def test_truncation_top1_is_greedy_and_no_retrace(model, draft):
  prompts = _prompts(4, [3, 4])
  ref = jaxdec.generate(model, prompts, max_new_tokens=16)
  api._jitted.clear_cache()
  for k in (1, 1):  # Same shapes and types, other values: one compile.
    v = spec.Truncation(top_k=jnp.asarray(k, jnp.int32), top_p=jnp.asarray(1.0))
    out = jaxdec.speculative_generate(model, prompts, spec.DraftModel(draft, 4), v, max_new_tokens=16)
    np.testing.assert_array_equal(out.tokens, ref.tokens)
  wide = spec.Truncation(top_k=jnp.asarray(20, jnp.int32), top_p=jnp.asarray(0.9))
  loose = jaxdec.speculative_generate(model, prompts, spec.DraftModel(draft, 4), wide, max_new_tokens=16)
  assert api._jitted._cache_size() == 1
  assert float(jnp.mean(loose.stats["acceptance_length"])) >= float(jnp.mean(out.stats["acceptance_length"]))


# ---- sampling: Exact is lossless in distribution --------------------------------------------------

VOCAB = 12
N_SAMPLES = 6000


@pytest.fixture(scope="module")
def small():
  """(target, draft, prompt) where the draft agrees with the target often but not always, and
  the prompt repeats the target's own continuation so n-gram drafts get accepted too."""
  target = tiny_model(seed=3, vocab_size=VOCAB, std=0.1, tokens=dict(eos=(), pad=None))
  leaves, treedef = jax.tree.flatten(target.params)
  noisy = [x + 0.5 * jnp.std(x) * jax.random.normal(jax.random.key(i), x.shape)
           for i, x in enumerate(leaves)]
  draft = target.replace(params=jax.tree.unflatten(treedef, noisy))
  continuation = jaxdec.generate(target, [[3, 5]], 6).tokens[0].tolist()
  return target, draft, [3, 5] + continuation + [3, 5]


def _step_probs(model, sampling):
  from jaxdec.spec.verify import target_probs

  def probs(seq):
    logits = jaxdec.forward(model, np.array([seq]))[:, -1:]
    return np.asarray(target_probs(logits, sampling), np.float64)[0, 0]

  return probs


def _joint_reference(model, prompt, sampling):
  """Exact AR-sampling laws of (t1, t2) and of (t2, t3), from the target's warped distributions."""
  probs = _step_probs(model, sampling)
  first = probs(prompt)
  second = np.stack([probs(prompt + [a]) for a in range(VOCAB)])  # [t1, t2]
  joint12 = first[:, None] * second
  joint23 = np.zeros((VOCAB, VOCAB))
  for a in range(VOCAB):
    for b in range(VOCAB):
      if joint12[a, b] > 0:
        joint23[b] += joint12[a, b] * probs(prompt + [a, b])
  return joint12, joint23


def _pairs(out, i):
  return np.asarray(out.tokens[:, i]) * VOCAB + np.asarray(out.tokens[:, i + 1])


def _pvalue(samples, probs):
  expected = probs.reshape(-1) * samples.size
  counts = np.bincount(samples, minlength=expected.size)
  assert counts[expected == 0].sum() == 0, "sampled a pair the target never produces"
  big = expected >= 5
  obs, exp = np.append(counts[big], counts[~big].sum()), np.append(expected[big], expected[~big].sum())
  keep = exp > 0
  return stats.chisquare(obs[keep], exp[keep] * obs[keep].sum() / exp[keep].sum()).pvalue


@struct.dataclass
class _WrongResidual(spec.Exact):
  """Negative control: on rejection, resample from p instead of max(p - q, 0)."""

  def __call__(self, inputs):
    from jaxdec.spec.verify import target_probs

    draft, key, rows, base = inputs.draft, inputs.key, inputs.rows, inputs.base
    p = target_probs(inputs.logits, inputs.sampling)
    verdict = _chain_rule(draft, p, draft.probs, key, rows, base)
    p_at = jnp.take_along_axis(p, verdict.num_accepted[:, None, None], 1)[:, 0]
    return verdict.replace(next_token=_categorical(key, rows, base + verdict.num_accepted + 1, p_at))


def _heads(target):
  """Medusa heads that start as copies of the target's own head, drafting a small tree."""
  from jaxdec.train.mtp import MedusaHeads

  return spec.Heads(MedusaHeads(num_heads=2).init(jax.random.key(0), target),
                    ((0,), (1,), (0, 0), (1, 0)))


def _kforcing(student):
  """A push-forward student (an untrained noise embedding) drafting chains of 3."""
  d = student.config.hidden_size
  noise = NoiseParams(w=0.5 * jax.random.normal(jax.random.key(1), (8, d)), base=jnp.zeros((d,)))
  return spec.KForcing(spec.PushForward(student, noise, num_tokens=3))


def _eagle(target):
  """An untrained EAGLE-3 drafter (from the target's last layer) growing dynamic trees."""
  from jaxdec.train.eagle import Eagle3Drafter

  part = Eagle3Drafter(top_k=3, depth=2, size=5)
  return part.to_drafter(part.init(jax.random.key(0), target), target)


# CI keeps a chain and a dynamic tree; the other drafters' laws run under -m slow (their greedy
# output is checked token for token in CI).
@pytest.mark.parametrize("which", ["draft_model", "eagle_dynamic_tree"] + [
    pytest.param(w, marks=pytest.mark.slow) for w in ("prompt_lookup", "adapld", "heads", "kforcing")])
def test_exact_matches_ar_sampling_in_distribution(small, which):
  target, other, prompt = small
  sampling = jaxdec.Sampling.create(temperature=1.0, top_k=8, top_p=0.95)
  drafter = {"draft_model": lambda: spec.DraftModel(other, 3),
             "prompt_lookup": lambda: spec.PromptLookup(3, 3),
             "adapld": lambda: spec.AdaPLD(max_ngram=3, min_ngram=1, depth=2, branches=3),
             "heads": lambda: _heads(target),
             "kforcing": lambda: _kforcing(other),
             "eagle_dynamic_tree": lambda: _eagle(target)}[which]()
  out = jaxdec.speculative_generate(target, [prompt] * N_SAMPLES, drafter, spec.Exact(),
                                    max_new_tokens=3, sampling=sampling, key=jax.random.key(0))
  accepted = np.asarray(out.stats["accepted"][:, 0])
  assert (accepted > 0).mean() > 0.05 and (accepted == 0).mean() > 0.05  # Both paths exercised.
  joint12, joint23 = _joint_reference(target, prompt, jaxdec.Sampling.create(1.0, 8, 0.95, batch=1))
  assert _pvalue(_pairs(out, 0), joint12) > 1e-3
  assert _pvalue(_pairs(out, 1), joint23) > 1e-3


@pytest.mark.slow  # checks the statistical test's power, not jaxdec
def test_chi_square_rejects_a_wrong_residual_rule(small):
  target, other, prompt = small
  sampling = jaxdec.Sampling.create(temperature=1.0)
  out = jaxdec.speculative_generate(target, [prompt] * N_SAMPLES, spec.DraftModel(other, 3),
                                    _WrongResidual(), max_new_tokens=3, sampling=sampling,
                                    key=jax.random.key(0))
  _, joint23 = _joint_reference(target, prompt, jaxdec.Sampling.create(1.0, batch=1))
  assert _pvalue(_pairs(out, 1), joint23) < 1e-6


def test_collaborative_weight_zero_is_exact(small):
  target, other, prompt = small
  prompts = [prompt] * 64
  sampling = jaxdec.Sampling.create(temperature=0.8)
  kw = dict(max_new_tokens=6, sampling=sampling, key=jax.random.key(5))
  a = jaxdec.speculative_generate(target, prompts, spec.DraftModel(other, 3), spec.Exact(), **kw)
  b = jaxdec.speculative_generate(target, prompts, spec.DraftModel(other, 3),
                                  spec.Collaborative(weight=jnp.asarray(0.0), max_overshoot=jnp.asarray(9.0)), **kw)
  np.testing.assert_array_equal(a.tokens, b.tokens)


# ---- errors ----------------------------------------------------------------------------------------

def test_bad_drafters_raise(model):
  other_vocab = tiny_model(vocab_size=64)
  with pytest.raises(ValueError, match="draft vocabulary 64 != target vocabulary 128"):
    jaxdec.speculative_generate(model, [[5, 6]], spec.DraftModel(other_vocab, 4))
  with pytest.raises(ValueError, match="num_tokens must be an int >= 1, got 0"):
    spec.DraftModel(model, 0)
  with pytest.raises(ValueError, match="num_tokens must be an int >= 1, got 0"):
    spec.PromptLookup(3, 0)
  with pytest.raises(ValueError, match="not a tree: node 2 has parent 2"):
    spec.Tree((0, 2))
  with pytest.raises(ValueError, match="not a tree: node 1 has parent -1"):
    spec.Tree((-1,))
  with pytest.raises(ValueError, match="Collaborative verification needs a chain"):
    jaxdec.speculative_generate(model, [[5, 6]], spec.AdaPLD(), spec.Collaborative())
  with pytest.raises(TypeError, match="drafter str does not implement the Drafter protocol: it "
                                      "lacks check, forwards, hidden_layers, init, propose, tree, "
                                      "update"):
    jaxdec.speculative_generate(model, [[5, 6]], "ngram")
  with pytest.raises(TypeError, match=r"verifier must be an instance, got the class Exact: pass Exact\(...\)"):
    jaxdec.speculative_generate(model, [[5, 6]], spec.PromptLookup(2, 2), spec.Exact)
  with pytest.raises(ValueError, match="Greedy\\(\\) verification decodes greedily but sampling"):
    jaxdec.speculative_generate(model, [[5, 6]], spec.PromptLookup(2, 2), spec.Greedy(),
                                sampling=jaxdec.Sampling.create(0.8), key=jax.random.key(0))
  with pytest.raises(ValueError, match="Collaborative.weight must be in"):
    jaxdec.speculative_generate(model, [[5, 6]], spec.PromptLookup(2, 2),
                                spec.Collaborative(weight=jnp.asarray(1.5)))


def test_draft_model_takes_a_model_not_a_path():
  """Drafters never read disks: a path is a TypeError that says to load it first."""
  with pytest.raises(TypeError, match=r"DraftModel.model must be a jaxdec Model .* got str; "
                                      r"load it first: jaxdec.load\('zoo:pycode-draft'\)"):
    spec.DraftModel("zoo:pycode-draft", 2)
  with pytest.raises(TypeError, match="DraftModel.model must be a jaxdec Model .* got int$"):
    spec.DraftModel(3, 2)
