"""Block diffusion: the [clean | noisy] training forward scores each block exactly as decoding
sees it, and a BlockCausal model decodes with an exact prefix cache."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdec
from jaxdec import diffusion
from jaxdec.model import BlockCausal, forward
from jaxdec.train.objectives import BlockDiffusion, block_ids
from tests.tiny import tiny_model

SIZE, MASK = 4, 3


def test_block_ids_start_at_each_completion():
  # [prompt 3 | completion 6 | prompt 2 | completion 5]
  scored = np.array([[0, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1]], bool)
  ids = np.asarray(block_ids(jnp.asarray(scored), SIZE))[0]
  assert (np.diff(ids) >= 0).all()
  same = lambda i, j: ids[i] == ids[j]
  assert same(0, 2) and not same(2, 3)  # The prompt ends a block: the completion starts one.
  assert same(3, 6) and not same(6, 7) and same(7, 8)  # Blocks of 4 from the completion's start.
  assert not same(8, 9) and same(9, 10) and not same(10, 11)  # The next document starts anew.
  assert same(11, 14) and not same(14, 15)


def _model(shifted, causal_given=False):
  return tiny_model(std=0.3, attention=BlockCausal(SIZE, causal_given=causal_given),
                    tokens=dict(mask=MASK), embeddings=dict(shifted_logits=shifted))


@pytest.mark.parametrize("shifted, causal_given", [(False, False), (True, False), (True, True)])
def test_training_logits_are_decodings_logits(shifted, causal_given):
  """Every masked token's training logits equal those of a plain forward of what decoding feeds
  the model for its block: the clean tokens before the block, then the noisy block, with
  positions aligned so the completion starts on a block boundary."""
  model = _model(shifted, causal_given)
  prompt, length = 6, 22
  tokens = jax.random.randint(jax.random.key(1), (1, length), 4, 128)
  scored = jnp.arange(length)[None, :] >= prompt
  objective = BlockDiffusion()
  _, masked, logits = objective.weighted_nll(model.params, tokens, jax.random.key(2), model.config,
                                             t=jnp.full((1,), 0.5), scored=scored)
  masked, logits = np.asarray(masked[0]), np.asarray(logits[0])
  assert masked.sum() >= 6
  offset = (-prompt) % SIZE
  for start in range(prompt, length, SIZE):
    end = min(start + SIZE, length)
    noisy = jnp.where(jnp.asarray(masked[None, start:end]), MASK, tokens[:, start:end])
    fed = jnp.concatenate([tokens[:, :start], noisy], axis=1)
    out, _, _ = forward(model.params, fed, jnp.arange(end)[None, :] + offset, config=model.config)
    out = np.asarray(out[0])
    for i in range(start, end):
      if masked[i]:
        np.testing.assert_allclose(logits[i], out[i - 1 if shifted else i], atol=2e-4, rtol=2e-4)


def test_needs_a_block_causal_model():
  model = tiny_model(attention=jaxdec.model.Bidirectional(), tokens=dict(mask=MASK))
  with pytest.raises(ValueError, match="BlockCausal"):
    BlockDiffusion().weighted_nll(model.params, jnp.ones((1, 8), jnp.int32), jax.random.key(0),
                                  model.config)


@pytest.mark.parametrize("causal_given", [False, True])
def test_prefix_cache_is_exact_for_block_causal(causal_given):
  """Earlier blocks never see the active one and it never sees later ones, so Fast-dLLM's prefix
  and dual caches change nothing."""
  model = _model(True, causal_given)
  prompts = jnp.asarray([[5, 6, 7, 8, 9, 0, 0], [10, 11, 12, 13, 14, 15, 16]], jnp.int32)
  lengths = jnp.asarray([5, 7], jnp.int32)
  run = lambda cache, suffix=None: diffusion.diffusion_generate(
      model.params, prompts, lengths, config=model.config, gen_length=12, block_length=SIZE,
      steps=12, cache=cache, visible_suffix=suffix).tokens
  np.testing.assert_array_equal(run(diffusion.PrefixCache()), run(None))
  np.testing.assert_array_equal(run(diffusion.DualCache()), run(None))
  np.testing.assert_array_equal(run(None, suffix=5), run(None))  # Later masks stay unseen.
  alone = diffusion.diffusion_generate(model.params, prompts[:1, :5], lengths[:1], config=model.config,
                                    gen_length=12, block_length=SIZE, steps=12).tokens
  np.testing.assert_array_equal(run(None)[:1], alone)


# CI keeps the threshold case: the cache's row bookkeeping is the same for every scheduler.
@pytest.mark.parametrize("scheduler", [diffusion.Threshold(0.5)] + [
    pytest.param(s, marks=pytest.mark.slow)
    for s in (diffusion.FirstStepConfidence(0.5), diffusion.RipplePivot(0.5), diffusion.AsyncLane(0.5),
              diffusion.Editing(0.5, 0.3, max_post_steps=3),
              diffusion.FlowBlock(0.5, 0.3, gate=0.25, blocks=2, max_post_steps=3))],
    ids=lambda s: type(s).__name__)
def test_block_causal_cache_never_holds_rows_back(scheduler):
  """On a block-causal model the caches grow a block at a time instead of refreshing, so rows
  whose blocks end at different steps each take a step every forward (the batched forwards are
  the longest row's), and a ragged batch still equals the uncached run and each row alone."""
  model = _model(False, causal_given=True)
  prompts = jax.random.randint(jax.random.key(4), (3, 9), 4, 128)
  lengths = jnp.asarray([9, 3, 6], jnp.int32)
  run = lambda p, n, cache: diffusion.diffusion_generate(
      model.params, p, n, config=model.config, gen_length=16, block_length=SIZE, steps=16,
      scheduler=scheduler, cache=cache)
  plain = run(prompts, lengths, None)
  nfe = np.asarray(plain.stats["nfe"])
  assert len(set(nfe.tolist())) > 1  # The rows are out of step.
  for cache in (diffusion.DualCache(), diffusion.PrefixCache()):
    cached = run(prompts, lengths, cache)
    np.testing.assert_array_equal(cached.tokens, plain.tokens)
    np.testing.assert_array_equal(cached.stats["nfe"], nfe)
    assert int(cached.stats["forwards"]) == int(plain.stats["forwards"])
  for b in range(3):
    alone = run(prompts[b:b + 1, :int(lengths[b])], lengths[b:b + 1], diffusion.DualCache())
    np.testing.assert_array_equal(alone.tokens[0], plain.tokens[b])


def test_aligned_positions_hide_later_blocks():
  """With the offsets, a block's outputs depend on nothing after it, for any prompt length."""
  model = _model(True)
  prompt_lengths = jnp.asarray([5, 6, 7, 8], jnp.int32)
  offsets = diffusion.sampler.aligned_offsets(model.config, prompt_lengths, SIZE)
  denoiser = diffusion.ModelDenoiser(model.params, model.config, offsets)
  canvas = jax.random.randint(jax.random.key(0), (4, 20), 4, 128)
  later = jnp.arange(20)[None, :] >= (prompt_lengths + SIZE)[:, None]
  changed = jnp.where(later, MASK, canvas)
  where = jnp.broadcast_to(jnp.arange(20), (4, 20))
  hidden = lambda x: denoiser.hidden(x, where, None, jnp.full((4,), 20))[0]
  block = (where < (prompt_lengths + SIZE)[:, None])[..., None]
  np.testing.assert_allclose(jnp.where(block, hidden(canvas), 0), jnp.where(block, hidden(changed), 0),
                             atol=1e-5)


def test_causal_given_tokens_are_the_causal_model():
  """With `causal_given`, given tokens' logits are the causal model's (same weights) whatever is
  masked after them, so decoding a block left to right is AR decoding; a mask's logits read the
  given tokens after it in its block, and no mask reads another."""
  model = _model(True, causal_given=True)
  causal = dataclasses.replace(model.config, attention=jaxdec.model.Causal())
  tokens = jax.random.randint(jax.random.key(7), (1, 14), 4, 128)
  run = lambda x, config=model.config: np.asarray(
      forward(model.params, x, jnp.arange(x.shape[1])[None, :], config=config)[0])
  ar = run(tokens, causal)
  np.testing.assert_allclose(run(tokens), ar, atol=1e-5)  # Nothing masked: the causal model.
  left_to_right = tokens.at[:, 10:].set(MASK)  # Block [8, 12) half given, the rest masked.
  np.testing.assert_allclose(run(left_to_right)[:, :10], ar[:, :10], atol=1e-5)
  holes = tokens.at[:, 9].set(MASK)
  reads_right = run(holes)[:, 9]
  assert not np.allclose(reads_right, run(holes.at[:, 11].set(20))[:, 9], atol=1e-4)
  masks_after = holes.at[:, 10:12].set(MASK)  # Masks are not read: as if they were cut off.
  np.testing.assert_allclose(run(masks_after)[:, 9], run(masks_after[:, :10])[:, 9], atol=1e-5)


def test_ar_term_is_the_causal_models_next_token_loss():
  model = _model(True, causal_given=True)
  tokens = jax.random.randint(jax.random.key(8), (2, 18), 4, 128)
  scored = jnp.broadcast_to(jnp.arange(18) >= 5, (2, 18))
  ar_nll = BlockDiffusion(ar_weight=1.0)._run(model.params, tokens, jax.random.key(9),
                                              model.config, scored=scored)[3]
  causal = dataclasses.replace(model.config, attention=jaxdec.model.Causal())
  logits = forward(model.params, tokens, jnp.broadcast_to(jnp.arange(18), (2, 18)), config=causal)[0]
  logp = jax.nn.log_softmax(logits[:, 4:-1])
  want = -jnp.take_along_axis(logp, tokens[:, 5:, None], axis=-1)[..., 0].sum(axis=1)
  np.testing.assert_allclose(ar_nll, want, rtol=1e-4)
  with pytest.raises(ValueError, match="causal_given"):  # Else clean tokens see the next one.
    BlockDiffusion(ar_weight=1.0).weighted_nll(_model(True).params, tokens, jax.random.key(9),
                                               _model(True).config, scored=scored)


def test_causal_given_needs_a_mask_token():
  with pytest.raises(ValueError, match="hides mask tokens: set tokens.mask"):
    tiny_model(attention=BlockCausal(SIZE, causal_given=True))


def test_block_length_must_match_the_pattern():
  model = _model(True)
  with pytest.raises(ValueError, match="block_size"):
    diffusion.diffusion_generate(model.params, jnp.ones((1, 3), jnp.int32), jnp.asarray([3]),
                              config=model.config, gen_length=16, block_length=8, steps=16)


def test_suffix_blocks_are_masked_from_a_cut_on():
  model = _model(True)
  length = 64
  tokens = jax.random.randint(jax.random.key(3), (4, length), 4, 128)
  scored = jnp.ones((4, length), bool)
  _, masked, _ = BlockDiffusion(suffix_fraction=1.0).weighted_nll(
      model.params, tokens, jax.random.key(4), model.config, t=jnp.ones((4,)), scored=scored)
  blocks = np.asarray(masked).reshape(4, -1, SIZE)[:, 1:]  # Position 0 is never scored (shifted).
  cuts = blocks.argmax(axis=-1)
  for row, cut in zip(blocks.reshape(-1, SIZE), cuts.reshape(-1)):
    assert not row[:cut].any() and row[cut:].all()
  assert len(set(cuts.reshape(-1).tolist())) > 1


def test_confidence_ordered_blocks_mask_the_least_confident_tokens():
  model = _model(True)
  length, prompt, ratio = 64, 5, 0.5
  tokens = jax.random.randint(jax.random.key(7), (3, length), 4, 128)
  scored = jnp.broadcast_to(jnp.arange(length) >= prompt, (3, length))
  # With every block's ratio 1, every scored token is masked: the logits are the all-masked pass.
  _, everything, logits = BlockDiffusion().weighted_nll(
      model.params, tokens, jax.random.key(8), model.config, t=jnp.ones((3,)), scored=scored)
  assert np.asarray(everything).sum() == np.asarray(scored[:, 1:]).sum()
  confidence = np.asarray(jax.nn.softmax(logits).max(-1))
  _, masked, _ = BlockDiffusion(confidence_fraction=1.0).weighted_nll(
      model.params, tokens, jax.random.key(9), model.config, t=jnp.full((3,), ratio), scored=scored)
  masked, blocks = np.asarray(masked), np.asarray(block_ids(scored, SIZE))
  scored = np.asarray(scored) & (np.arange(length) > 0)
  for row in range(3):
    for block in np.unique(blocks[row]):
      mine = (blocks[row] == block) & scored[row]
      if not mine.any():
        continue
      hidden, given = mine & masked[row], mine & ~masked[row]
      assert given.sum() == int((1 - ratio) * mine.sum())  # The surest half given.
      if hidden.any() and given.any():
        assert confidence[row][given].min() >= confidence[row][hidden].max()
  assert not (masked & ~scored).any()


def test_mask_kind_fractions_must_add_up_to_at_most_one():
  model = _model(True)
  with pytest.raises(ValueError, match="0.75 \\+ 0.5"):
    BlockDiffusion(suffix_fraction=0.75, confidence_fraction=0.5).weighted_nll(
        model.params, jnp.ones((1, 16), jnp.int32), jax.random.key(0), model.config)


def test_complementary_masks_cover_every_scored_token_once():
  model = _model(True)
  length, prompt = 40, 7
  tokens = jax.random.randint(jax.random.key(5), (3, length), 4, 128)
  scored = jnp.broadcast_to(jnp.arange(length) >= prompt, (3, length))
  objective = BlockDiffusion(complementary=True)
  per_seq, masked, _ = objective.weighted_nll(model.params, tokens, jax.random.key(6),
                                              model.config, scored=scored)
  assert per_seq.shape == (6,) and masked.shape == (6, length)
  first, second = np.asarray(masked[:3]), np.asarray(masked[3:])
  np.testing.assert_array_equal(first ^ second, np.asarray(scored))  # Each scored token once.
  assert not (first & second).any() and first.any() and second.any()


@pytest.mark.parametrize("complementary", [False, True])
def test_edit_training_corrupts_given_tokens_and_scores_them(complementary):
  """T2T editing training: only given (unmasked, scored) tokens are replaced, never by the mask;
  their logits are what decoding computes on the corrupted block; the loss adds their CE."""
  model = _model(False)
  prompt, length = 6, 22
  tokens = jax.random.randint(jax.random.key(11), (2, length), 4, 128)
  scored = jnp.broadcast_to(jnp.arange(length) >= prompt, (2, length))
  t = jnp.full((2,), 0.5)
  objective = BlockDiffusion(edit_fraction=0.5, edit_weight=0.7, complementary=complementary)
  per_seq, masked, logits, _, edited, noisy = objective._run(
      model.params, tokens, jax.random.key(12), model.config, t=t, scored=scored)
  plain, plain_masked, _ = BlockDiffusion(complementary=complementary).weighted_nll(
      model.params, tokens, jax.random.key(12), model.config, t=t, scored=scored)
  np.testing.assert_array_equal(masked, plain_masked)  # Editing leaves the masks' draws alone.
  rows = 4 if complementary else 2
  tokens_r = np.asarray(jnp.concatenate([tokens, tokens]) if complementary else tokens)
  scored_r = np.tile(np.asarray(scored), (rows // 2, 1))
  edited, noisy, masked = np.asarray(edited), np.asarray(noisy), np.asarray(masked)
  assert edited.sum() >= 8 and not (edited & (masked | ~scored_r)).any()
  assert (noisy[edited] != MASK).all() and (noisy[masked] == MASK).all()
  np.testing.assert_array_equal(noisy[~edited & ~masked], tokens_r[~edited & ~masked])
  ce = np.asarray(optax_ce(logits, tokens_r))
  p_mask = (1 - 1e-3) * 0.5 + 1e-3
  p = np.where(np.arange(rows)[:, None] < 2, p_mask, max(1 - p_mask, 1e-3))
  want = (np.where(masked, ce / p, 0).sum(1) + 0.7 * np.where(edited, ce, 0).sum(1))
  np.testing.assert_allclose(per_seq, want, rtol=1e-5)
  assert not np.allclose(per_seq, plain)
  offset = (-prompt) % SIZE  # Decoding's logits of row 0's corrupted blocks.
  for start in range(prompt, length, SIZE):
    end = min(start + SIZE, length)
    fed = jnp.concatenate([tokens[:1, :start], jnp.asarray(noisy[:1, start:end])], axis=1)
    out, _, _ = forward(model.params, fed, jnp.arange(end)[None, :] + offset, config=model.config)
    for i in range(start, end):
      if edited[0, i]:
        np.testing.assert_allclose(np.asarray(logits[0, i]), np.asarray(out[0, i]), atol=2e-4,
                                   rtol=2e-4)


def optax_ce(logits, labels):
  import optax

  return optax.softmax_cross_entropy_with_integer_labels(logits, jnp.asarray(labels))


@pytest.mark.parametrize("shifted, causal_given, fraction",
                         [(False, False, 1.0), (True, True, 1.0), (True, True, 0.5)])
def test_stale_blocks_read_noisy_copies_from_the_last_fresh_block(shifted, causal_given, fraction):
  """A stale block reads the noisy copies of the blocks back to the last fresh (not stale) one
  and the clean tokens before it, as a wavefront decoder feeds the model: a masked token's
  training logits are those of a plain forward of [clean tokens | noisy blocks from the last
  fresh block on] (masks and edits in place). With every block stale that is the whole noisy
  canvas. The masks' and edits' draws are plain training's."""
  model = _model(shifted, causal_given)
  prompt, length = 6, 30
  tokens = jax.random.randint(jax.random.key(3), (1, length), 4, 128)
  scored = jnp.arange(length)[None, :] >= prompt
  t, key = jnp.full((1,), 0.5), jax.random.key(10)  # At 0.5: a fresh block, a run of two stale.
  objective = BlockDiffusion(stale_fraction=fraction, edit_fraction=0.6)
  _, masked, logits, _, edited, noisy = objective._run(model.params, tokens, key, model.config,
                                                       t=t, scored=scored)
  fresh = BlockDiffusion(edit_fraction=0.6)._run(model.params, tokens, key, model.config, t=t,
                                                 scored=scored)
  np.testing.assert_array_equal(masked, fresh[1])
  np.testing.assert_array_equal(noisy, fresh[5])
  masked, logits = np.asarray(masked[0]), np.asarray(logits[0])
  assert masked.sum() >= 6 and edited.sum() >= 2
  assert not np.allclose(logits[masked], np.asarray(fresh[2][0])[masked])
  # The objective's per-block draw: block rank r is stale when uniform(fold_in(key, 2))[r] < f.
  blocks = np.asarray(block_ids(scored, SIZE))[0]
  rank = np.cumsum(np.diff(blocks, prepend=blocks[0] - 1) > 0) - 1
  draw = np.asarray(jax.random.uniform(jax.random.fold_in(key, 2), (1, length)))[0]
  stale = (draw[rank] < fraction) & (blocks > blocks.min())
  if fraction < 1.0:
    assert stale[prompt:].any() and not stale[prompt:].all()
  offset = (-prompt) % SIZE
  for start in range(prompt, length, SIZE):
    end = min(start + SIZE, length)
    first = start
    while stale[first]:  # Back to the last fresh block's start.
      first = int(np.flatnonzero(blocks == blocks[first] - 1)[0])
    fed = jnp.concatenate([tokens[:, :first], noisy[:, first:end]], axis=1)
    out, _, _ = forward(model.params, fed, jnp.arange(end)[None, :] + offset, config=model.config)
    out = np.asarray(out[0])
    for i in range(start, end):
      if masked[i]:
        np.testing.assert_allclose(logits[i], out[i - 1 if shifted else i], atol=2e-4, rtol=2e-4)


def test_edit_fraction_out_of_range_is_named():
  model = _model(False)
  for name in ("edit_fraction", "stale_fraction"):
    with pytest.raises(ValueError, match=f"{name} must lie in \\[0, 1\\], got 1.5"):
      BlockDiffusion(**{name: 1.5}).weighted_nll(
          model.params, jnp.ones((1, 16), jnp.int32), jax.random.key(0), model.config)
