"""SimSD: a block-diffusion drafter verified by a target with a causal stream."""

import jax
import numpy as np
import pytest

import jaxdec
from jaxdec import diffusion, spec
from jaxdec.model import BlockCausal
from tiny import tiny_model

BLOCK = 8
# An id the random target never predicts on these prompts (checked: `_reference`), as a trained
# model never predicts its mask token: the diffusion sampler never proposes it, AR decoding may.
MASK = 113


def _block_model(seed, **overrides):
  """A tiny block-diffusion model whose given tokens form a causal LM (gsm-dlm's layout)."""
  return tiny_model(seed=seed, attention=BlockCausal(BLOCK, causal_given=True),
                    embeddings=dict(shifted_logits=True), tokens=dict(mask=MASK), **overrides)


@pytest.fixture(scope="module")
def target():
  return _block_model(0)


@pytest.fixture(scope="module")
def draft():
  return _block_model(1, hidden_size=32, intermediate_size=64, num_heads=2, num_kv_heads=1)


def _prompts(seed, lengths):
  rng = np.random.RandomState(seed)
  return [rng.randint(2, 120, n).tolist() for n in lengths]


def _reference(target, prompts, gen):
  ref = jaxdec.generate(target, prompts, max_new_tokens=gen, stop_tokens=())
  assert MASK not in np.asarray(ref.tokens)
  return ref


@pytest.mark.parametrize("order", ["left_to_right", "confidence"])
@pytest.mark.parametrize("threshold", [0.0, 0.3, 1.0])
def test_greedy_simsd_equals_the_targets_own_block_decoding(target, draft, order, threshold):
  """Token for token: SimSD == the target's block decoding one token per forward, left to
  right (the diffusion sampler, dual cache) == the AR loop over its causal stream; ragged."""
  prompts = _prompts(0, [3, 9, 5])
  gen = 4 * BLOCK
  ref = _reference(target, prompts, gen)
  blocks = jaxdec.diffusion_generate(
      target, prompts, gen_length=gen, block_length=BLOCK, steps=gen,
      scheduler=diffusion.FixedSteps(confidence=diffusion.LeftToRight()),
      cache=diffusion.DualCache())
  np.testing.assert_array_equal(blocks.tokens, ref.tokens)
  drafter = spec.SimSD(draft, threshold=threshold, num_tokens=5, order=order)
  out = jaxdec.speculative_generate(target, prompts, drafter, max_new_tokens=gen, stop_tokens=())
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  np.testing.assert_array_equal(out.lengths, ref.lengths)
  for row, prompt in enumerate(prompts):  # Each row alone gives what it gives in the batch.
    alone = jaxdec.speculative_generate(target, [prompt], drafter, max_new_tokens=gen,
                                        stop_tokens=())
    np.testing.assert_array_equal(alone.stats["accepted"][0],
                                  out.stats["accepted"][row, :alone.stats["accepted"].shape[1]])


def test_self_drafting_left_to_right_is_always_accepted(target):
  """The target as its own drafter, one commit per forward: every draft token is the target's
  next greedy token given the ones before it, so every draft is accepted whole. A draft cache
  holding anything but the committed tokens as given ones would break this."""
  drafter = spec.SimSD(target, threshold=1.0, num_tokens=4)
  out = jaxdec.speculative_generate(target, _prompts(1, [4, 7]), drafter, max_new_tokens=31,
                                    stop_tokens=())
  accepted = np.asarray(out.stats["accepted"])
  steps = accepted[accepted >= 0]
  assert (steps[:-1] == 4).all()  # The last step may be cut by the budget.
  np.testing.assert_allclose(out.stats["acceptance_length"], 31 / 7)


def test_threshold_trades_draft_forwards_for_parallel_commits(target, draft):
  """A threshold of 0 commits the whole draft in one forward; the drafts then differ from the
  one-per-forward ones (the masks' own guesses), and the output stays the target's."""
  prompts = _prompts(2, [6])
  ref = _reference(target, prompts, 20)
  for threshold in (0.0, 1.0):
    out = jaxdec.speculative_generate(target, prompts, spec.SimSD(draft, threshold, num_tokens=6),
                                      max_new_tokens=20, stop_tokens=())
    np.testing.assert_array_equal(out.tokens, ref.tokens)


def test_no_recompile_across_thresholds(target, draft):
  from jaxdec import api

  prompts = _prompts(3, [5])
  jaxdec.speculative_generate(target, prompts, spec.SimSD(draft, 0.5), max_new_tokens=8)
  size = api._jitted._cache_size()
  jaxdec.speculative_generate(target, prompts, spec.SimSD(draft, 0.8), max_new_tokens=8)
  assert api._jitted._cache_size() == size


# ---- sampling: Exact verification of SimSD drafts is lossless in distribution ----------------

VOCAB = 12
N_SAMPLES = 6000


@pytest.mark.slow  # CI checks greedy SimSD token for token; the verifier's law is test_spec's
def test_exact_simsd_matches_the_targets_sampling_in_distribution():
  target = tiny_model(seed=3, vocab_size=VOCAB, std=0.1,
                      attention=BlockCausal(4, causal_given=True),
                      tokens=dict(eos=(), pad=None, mask=VOCAB - 1),
                      embeddings=dict(shifted_logits=True))
  draft = tiny_model(seed=4, vocab_size=VOCAB, std=0.1, attention=BlockCausal(4, causal_given=True),
                     hidden_size=32, num_heads=2, num_kv_heads=1,
                     tokens=dict(eos=(), pad=None, mask=VOCAB - 1),
                     embeddings=dict(shifted_logits=True))
  prompt = [3, 5, 2]
  sampling = jaxdec.Sampling.create(temperature=1.0)
  out = jaxdec.speculative_generate(target, [prompt] * N_SAMPLES,
                                    spec.SimSD(draft, threshold=0.2, num_tokens=3), spec.Exact(),
                                    max_new_tokens=3, sampling=sampling, key=jax.random.key(0))
  accepted = np.asarray(out.stats["accepted"][:, 0])
  assert (accepted > 0).mean() > 0.05 and (accepted == 0).mean() > 0.05
  from test_spec import _joint_reference, _pairs, _pvalue

  joint12, joint23 = _joint_reference(target, prompt, jaxdec.Sampling.create(1.0, batch=1))
  assert _pvalue(_pairs(out, 0), joint12) > 1e-3
  assert _pvalue(_pairs(out, 1), joint23) > 1e-3


# ---- errors ---------------------------------------------------------------------------------

def test_bad_settings_are_named(target, draft, model):
  prompts = _prompts(4, [4])
  with pytest.raises(ValueError, match="SimSD.order"):
    spec.SimSD(draft, order="random")
  with pytest.raises(ValueError, match="SimSD.num_tokens"):
    spec.SimSD(draft, num_tokens=0)
  with pytest.raises(ValueError, match="SimSD.max_steps"):
    spec.SimSD(draft, max_steps=0)
  with pytest.raises(ValueError, match="SimSD.threshold"):
    jaxdec.speculative_generate(target, prompts, spec.SimSD(draft, threshold=1.5))
  with pytest.raises(ValueError, match="causal_given"):  # An AR model is not a diffusion draft.
    jaxdec.speculative_generate(model, prompts, spec.SimSD(model))
  with pytest.raises(ValueError, match="vocabulary"):
    jaxdec.speculative_generate(target, prompts, spec.SimSD(_block_model(5, vocab_size=200)))
  with pytest.raises(ValueError, match="order='left_to_right'"):
    jaxdec.speculative_generate(target, prompts, spec.SimSD(draft, order="confidence"),
                                sampling=jaxdec.Sampling.create(temperature=1.0),
                                key=jax.random.key(0))
  bidirectional = tiny_model(attention=BlockCausal(BLOCK), embeddings=dict(shifted_logits=True),
                             tokens=dict(mask=MASK))
  with pytest.raises(ValueError, match="masked-diffusion"):  # No causal stream to verify with.
    jaxdec.speculative_generate(bidirectional, prompts, spec.SimSD(draft))
  with pytest.raises(TypeError, match=r"SimSD.model must be a jaxdec Model .* got str; load it "
                                      r"first: jaxdec.load\('zoo:gsm-dlm-draft'\)"):
    spec.SimSD("zoo:gsm-dlm-draft")  # Drafters never read disks.
