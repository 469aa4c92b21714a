"""LLaDA2.1's joint M2T + T2T threshold rule (jaxdec.diffusion.Editing): the edit rule on
hand-built logits, and the whole sampler against a plain-numpy reference of the rule on the table
model (whose logits depend on the previous token, so commits make earlier tokens worth editing)."""

import jax.numpy as jnp
import numpy as np
import pytest

import jaxdec
from jaxdec.diffusion import EosFlags, Editing, rank_confidence
from jaxdec.diffusion.editing import edits
from jaxdec.diffusion.schedulers import StepView
from test_diffusion_api import dlm
from test_diffusion_reference import MASK, VOCAB, _run, prompts, table_model


def _view(tokens, logits):
  tokens = jnp.asarray([tokens], jnp.int32)
  logits = jnp.asarray([logits], jnp.float32)
  x0 = jnp.argmax(logits.at[..., MASK].set(-jnp.inf), axis=-1).astype(jnp.int32)
  candidates = tokens == MASK
  conf = jnp.max(jnp.exp(logits - jnp.max(logits, -1, keepdims=True)), -1)
  zero = jnp.zeros((1,), jnp.int32)
  return StepView(tokens=tokens, inside=jnp.ones_like(candidates), candidates=candidates,
                  x0=x0,
                  ranked=rank_confidence(conf, candidates), logits=logits, step=zero,
                  steps=jnp.int32(4), block_masks=zero, masked=jnp.sum(candidates, 1), block=zero,
                  mask_id=MASK, lookahead=None)


def test_edit_rule_on_hand_built_logits():
  """Position 0: another token at p ~ 0.83 -> edited; 1: a mask -> never edited (M2T's); 2: the
  same token -> kept; 3: another token at p ~ 0.33 -> below the threshold."""
  logits = np.full((4, VOCAB), -20.0)
  logits[0, [7, 8]] = [0.0, np.log(5.0)]  # Current 7, proposal 8 at 5/6.
  logits[1, 9] = 5.0
  logits[2, 10] = 5.0
  logits[3, [11, 12, 13]] = [0.0, 0.0, 0.0]  # Proposal 11 (first of a tie) at 1/3, current 12.
  view = _view([7, MASK, 10, 12], logits)
  np.testing.assert_array_equal(edits(view, 0.5)[0], [True, False, False, False])
  np.testing.assert_array_equal(edits(view, 0.3)[0], [True, False, False, True])
  np.testing.assert_array_equal(edits(view, 0.0)[0], [False] * 4)  # <= 0: editing off.
  np.testing.assert_array_equal(edits(view, jnp.asarray([0.9]))[0], [False] * 4)


def _softmax(z):
  e = np.exp(z - z.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def reference(model, prompt, gen_length, block_length, threshold, editing, max_post,
              verify=False):
  """The rule for one row, in numpy: (tokens, forwards, edits)."""
  x = np.concatenate([prompt, np.full(gen_length, MASK)]).astype(np.int64)
  nfe = total_edits = 0
  for start in range(len(prompt), len(x), block_length):
    block = slice(start, start + block_length)
    post = 0
    while True:
      was_full = not (x[block] == MASK).any()
      probs = _softmax(model.numpy_logits(x)[block].astype(np.float64))
      probs[:, MASK] = -1.0
      x0 = probs.argmax(-1)
      p = probs[np.arange(block_length), x0]
      nfe += 1
      tokens = x[block].copy()
      masked = tokens == MASK
      if masked.any():
        conf = np.where(masked, p, -np.inf)
        commit = masked & (conf >= threshold)
        commit[np.argmax(conf)] = True  # The most confident (first on ties).
        tokens = np.where(commit, x0, tokens)
      edit = (~masked) & (x0 != x[block]) & (p >= editing) & (editing > 0)
      tokens = np.where(edit, x0, tokens)
      total_edits += int(edit.sum())
      x[block] = tokens
      post += int(was_full)
      full = not (tokens == MASK).any()
      if ((was_full if verify else full) and not edit.any()) or (full and post >= max_post):
        break
  return x[len(prompt):], nfe, total_edits


@pytest.mark.parametrize("threshold, editing, max_post, verify", [
    (0.7, 0.5, 16, False), (0.3, 0.2, 2, False), (0.9, 0.0, 16, False), (0.3, 0.2, 16, True),
    (0.9, 0.0, 16, True)])
def test_sampler_equals_the_numpy_reference(threshold, editing, max_post, verify):
  model = table_model(3, peak=4.0)
  rows = prompts(4)
  padded = np.zeros((len(rows), 16), np.int32)
  for i, p in enumerate(rows):
    padded[i, :len(p)] = p
  out = _run(model, padded, np.array([len(p) for p in rows], np.int32), None, np.int32(16),
             Editing(threshold, editing, max_post_steps=max_post, verify=verify), np.float32(0.0),
             np.float32(0.0), gen_length=16, block_length=8, eos=EosFlags(), cfg=False)
  total = 0
  for i, p in enumerate(rows):
    want, want_nfe, want_edits = reference(model, p, 16, 8, threshold, editing, max_post, verify)
    np.testing.assert_array_equal(out.tokens[i], want, err_msg=f"row {i}")
    assert int(out.stats["nfe"][i]) == want_nfe, f"row {i}"
    assert int(out.stats["scheduler"].edits[i]) == want_edits, f"row {i}"
    total += want_edits
  assert (total > 0) == (editing > 0)  # The editing cases exercise edits.


@pytest.mark.parametrize("kw, match", [
    (dict(threshold=1.5), "Editing.threshold must be finite and in \\[0.0, 1.0\\]"),
    (dict(editing_threshold=2.0), "Editing.editing_threshold must be finite and in"),
    (dict(max_post_steps=-1), "Editing.max_post_steps must be an int >= 0, got -1"),
    (dict(verify="yes"), "Editing.verify must be a bool, got 'yes'")])
def test_bad_settings_are_named(kw, match):
  with pytest.raises((ValueError, TypeError), match=match):
    jaxdec.diffusion_generate(dlm(num_layers=1), [[7, 8, 9]], gen_length=8, block_length=8,
                              steps=8, scheduler=Editing(**kw))


def test_ragged_batch_with_the_dual_cache_equals_one_by_one():
  """Edit counts and post steps are per row: a row the cache holds back keeps its state."""
  from test_diffusion_api import _assert_batch_equals_one_by_one

  _assert_batch_equals_one_by_one(dlm(), Editing(0.5, 0.3, max_post_steps=3), None, steps=16,
                                  paced=True)
  _assert_batch_equals_one_by_one(dlm(), Editing(0.5, 0.3, max_post_steps=3),
                                  jaxdec.diffusion.DualCache(), steps=16, paced=True)
