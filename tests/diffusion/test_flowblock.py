"""FlowBlock's gated wavefront (jaxdec.diffusion.FlowBlock): the gate and the in-order commit on
hand-built logits, the whole sampler against a plain-numpy reference of the rule on the table
model, its reduction to `Editing`, and ragged batches."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdec
from jaxdec.diffusion import DualCache, EosFlags, Editing, FlowBlock, rank_confidence
from jaxdec.diffusion.flowblock import admitted
from jaxdec.model import BlockCausal
from jaxdec.diffusion.schedulers import StepView
from test_diffusion_api import _assert_batch_equals_one_by_one, dlm
from test_diffusion_reference import MASK, VOCAB, _run, prompts, table_model
from test_editing import _softmax
from tiny import tiny_model


def _view(tokens, logits):
  tokens = jnp.asarray([tokens], jnp.int32)
  logits = jnp.asarray([logits], jnp.float32)
  probs = np.asarray(jax.nn.softmax(logits, axis=-1))
  x0 = jnp.argmax(logits.at[..., MASK].set(-jnp.inf), axis=-1).astype(jnp.int32)
  candidates = tokens == MASK
  zero = jnp.zeros((1,), jnp.int32)
  return StepView(tokens=tokens, inside=jnp.ones_like(candidates), candidates=candidates,
                  x0=x0,
                  ranked=rank_confidence(jnp.asarray(probs.max(-1)), candidates), logits=logits,
                  step=zero, steps=jnp.int32(4), block_masks=zero,
                  masked=jnp.sum(candidates, 1), block=zero, mask_id=MASK, lookahead=None)


def _logits(proposals, peaks):
  """Rows with `proposal` at probability ~1 (peak 20) or a near tie (peak 0.1)."""
  logits = np.zeros((len(proposals), VOCAB))
  logits[np.arange(len(proposals)), proposals] = peaks
  return logits


def test_the_gate_admits_in_order():
  m = MASK
  tokens = jnp.asarray([[1, 2, m, m, 3, 4, m, m, 5, m, m, m],  # Shares 1/2, 1/2, 1/4.
                        [1, m, m, m, 3, 4, 5, 6, 7, 8, 9, 1]], jnp.int32)  # 1/4 blocks the rest.
  np.testing.assert_array_equal(admitted(tokens, m, 3, 0.5), [[1, 1, 1], [1, 0, 0]])
  np.testing.assert_array_equal(admitted(tokens, m, 3, 0.6), [[1, 0, 0], [1, 0, 0]])
  np.testing.assert_array_equal(admitted(tokens, m, 3, 0.0), [[1, 1, 1], [1, 1, 1]])
  np.testing.assert_array_equal(admitted(tokens, m, 3, jnp.asarray([0.6, 0.25])),
                                [[1, 0, 0], [1, 1, 1]])


def test_blocks_commit_in_order():
  """Block 1 of the window is certain and fills while block 0 still holds an unsure mask: block 0
  is not finished. Once block 0 is full it finishes though block 1 still has masks."""
  m = MASK
  scheduler = FlowBlock(threshold=0.9, editing_threshold=0.5, gate=0.5, blocks=2)
  logits = _logits([7, 8, 9, 10, 11, 12, 13, 14], [20, 20, 20, 0.1, 20, 20, 20, 20])
  state = scheduler.init(1, 8)
  decision, _ = scheduler.step(state, _view([7, 8, m, m, m, m, m, m], logits))
  # Block 0 is half committed, so block 1 is admitted and fills; block 0's near tie (10) waits.
  np.testing.assert_array_equal(decision.tokens[0], [7, 8, 9, m, 11, 12, 13, 14])
  assert not bool(decision.finished[0])
  decision, _ = scheduler.step(state, _view([7, 8, 9, m, m, m, m, m], logits))
  np.testing.assert_array_equal(decision.tokens[0], [7, 8, 9, 10, 11, 12, 13, 14])
  assert bool(decision.finished[0])  # Full, no edit: it commits, block 1 already drafted.
  closed = FlowBlock(threshold=0.9, editing_threshold=0.5, gate=0.75, blocks=2)
  decision, _ = closed.step(state, _view([7, 8, m, m, m, m, m, m], logits))
  np.testing.assert_array_equal(decision.tokens[0], [7, 8, 9, m, m, m, m, m])  # Not admitted.


def test_edits_reach_every_admitted_block_and_hold_block_0_back():
  """A committed token in block 1 the model now contradicts is edited; one in block 0 keeps
  block 0 open for a post step even though it has no mask."""
  scheduler = FlowBlock(threshold=0.9, editing_threshold=0.5, gate=0.5, blocks=2)
  logits = _logits([7, 8, 9, 10, 11, 12, 13, 14], [20] * 8)
  state = scheduler.init(1, 8)
  decision, next_state = scheduler.step(state, _view([7, 8, 9, 10, 11, 1, 13, 14], logits))
  np.testing.assert_array_equal(decision.tokens[0], [7, 8, 9, 10, 11, 12, 13, 14])
  assert bool(decision.finished[0])  # Block 0 made no edit.
  assert int(next_state.edits[0]) == 1
  decision, next_state = scheduler.step(state, _view([7, 1, 9, 10, 11, 12, 13, 14], logits))
  assert not bool(decision.finished[0]) and int(next_state.post[0]) == 1


def reference(model, prompt, gen_length, block_length, blocks, threshold, editing, gate, max_post,
              verify=False):
  """The wavefront rule for one row, in numpy: (tokens, forwards, edits)."""
  x = np.concatenate([prompt, np.full(gen_length, MASK)]).astype(np.int64)
  nfe = total_edits = 0
  start, end = len(prompt), len(x)
  post = 0
  while start < end:
    window = np.arange(start, min(start + blocks * block_length, end))
    lane = (window - start) // block_length
    probs = _softmax(model.numpy_logits(x)[window].astype(np.float64))
    probs[:, MASK] = -1.0
    x0, tokens = probs.argmax(-1), x[window].copy()
    p = probs[np.arange(len(window)), x0]
    nfe += 1
    masked = tokens == MASK
    wave = np.zeros(len(window), bool)
    for k in range(min(blocks, lane.max() + 1)):  # Block k joins when every block before it
      before = lane == k - 1  # is in and >= gate committed (the window stops at the end).
      if k == 0 or (wave[before].all() and (~masked[before]).mean() >= gate):
        wave |= lane == k
    commit = masked & wave & (p >= threshold)
    first = lane == 0
    if (masked & first).any():
      commit[np.argmax(np.where(masked & first, p, -np.inf))] = True
    edit = (~masked) & wave & (x0 != tokens) & (p >= editing) & (editing > 0)
    tokens = np.where(commit | edit, x0, tokens)
    total_edits += int(edit.sum())
    was_full = not (masked & first).any()
    post += int(was_full)
    x[window] = tokens
    full = not (tokens[first] == MASK).any()
    if ((was_full if verify else full) and not edit[first].any()) or (full and post >= max_post):
      start, post = start + block_length, 0
  return x[len(prompt):], nfe, total_edits


@pytest.mark.parametrize("blocks, threshold, editing, gate, max_post, verify", [
    (2, 0.7, 0.5, 0.5, 16, False), (3, 0.3, 0.2, 0.25, 2, False), (3, 0.9, 0.0, 0.0, 16, False),
    (2, 0.5, 0.4, 1.0, 4, False), (2, 0.3, 0.2, 0.5, 16, True)])
def test_sampler_equals_the_numpy_reference(blocks, threshold, editing, gate, max_post, verify):
  model = table_model(3, peak=4.0)
  rows = prompts(4)
  padded = np.zeros((len(rows), 16), np.int32)
  for i, p in enumerate(rows):
    padded[i, :len(p)] = p
  scheduler = FlowBlock(threshold, editing, gate, blocks=blocks, max_post_steps=max_post,
                        verify=verify)
  out = _run(model, padded, np.array([len(p) for p in rows], np.int32), None, np.int32(32),
             scheduler, np.float32(0.0), np.float32(0.0), gen_length=32, block_length=8,
             eos=EosFlags(), cfg=False)
  serial = _run(model, padded, np.array([len(p) for p in rows], np.int32), None, np.int32(32),
                Editing(threshold, editing, max_post_steps=max_post, verify=verify),
                np.float32(0.0), np.float32(0.0), gen_length=32, block_length=8, eos=EosFlags(),
                cfg=False)
  for i, p in enumerate(rows):
    want, want_nfe, want_edits = reference(model, p, 32, 8, blocks, threshold, editing, gate,
                                           max_post, verify)
    np.testing.assert_array_equal(out.tokens[i], want, err_msg=f"row {i}")
    assert int(out.stats["nfe"][i]) == want_nfe, f"row {i}"
    assert int(out.stats["scheduler"].edits[i]) == want_edits, f"row {i}"
  if gate < 1.0:  # An open wavefront takes fewer forwards than serial blocks.
    assert out.stats["nfe"].sum() < serial.stats["nfe"].sum()


@pytest.mark.parametrize("threshold, editing, max_post", [(0.7, 0.5, 16), (0.3, 0.2, 0)])
def test_one_block_or_a_closed_gate_is_editing(threshold, editing, max_post):
  """blocks=1 is `Editing` exactly; so is a wavefront whose gate opens only on a full block when
  a full block commits at once (max_post_steps=0)."""
  model = table_model(5, peak=4.0)
  rows = prompts(3)
  padded = np.zeros((len(rows), 16), np.int32)
  for i, p in enumerate(rows):
    padded[i, :len(p)] = p
  lengths = np.array([len(p) for p in rows], np.int32)
  run = lambda s: _run(model, padded, lengths, None, np.int32(16), s, np.float32(0.0),
                       np.float32(0.0), gen_length=16, block_length=8, eos=EosFlags(), cfg=False)
  serial = run(Editing(threshold, editing, max_post_steps=max_post))
  wavefronts = [FlowBlock(threshold, editing, 0.5, blocks=1, max_post_steps=max_post)]
  if max_post == 0:
    wavefronts.append(FlowBlock(threshold, editing, 1.0, blocks=2, max_post_steps=0))
  for scheduler in wavefronts:
    out = run(scheduler)
    np.testing.assert_array_equal(out.tokens, serial.tokens)
    np.testing.assert_array_equal(out.stats["nfe"], serial.stats["nfe"])
    np.testing.assert_array_equal(out.stats["scheduler"].edits, serial.stats["scheduler"].edits)


def test_ragged_batch_equals_one_by_one():
  """Each row has its own wavefront, packed into one batched forward."""
  scheduler = FlowBlock(0.5, 0.3, gate=0.25, blocks=2, max_post_steps=3)
  _assert_batch_equals_one_by_one(dlm(), scheduler, None, steps=16, paced=True)
  _assert_batch_equals_one_by_one(dlm(), scheduler, DualCache(), steps=16, paced=True)


@pytest.mark.parametrize("kw, match", [
    (dict(threshold=1.5), "FlowBlock.threshold must be finite and in \\[0.0, 1.0\\]"),
    (dict(editing_threshold=2.0), "FlowBlock.editing_threshold must be finite and in"),
    (dict(gate=-0.1), "FlowBlock.gate must be finite and in \\[0.0, 1.0\\]"),
    (dict(max_post_steps=-1), "FlowBlock.max_post_steps must be an int >= 0, got -1"),
    (dict(verify="yes"), "FlowBlock.verify must be a bool, got 'yes'")])
def test_bad_settings_are_named(kw, match):
  with pytest.raises((ValueError, TypeError), match=match):
    jaxdec.diffusion_generate(dlm(num_layers=1), [[7, 8, 9]], gen_length=8, block_length=8,
                              steps=8, scheduler=FlowBlock(**kw))


def test_bad_wavefront_bound_is_named():
  with pytest.raises(ValueError, match="FlowBlock.blocks must be an int >= 1, got 0"):
    FlowBlock(blocks=0)


@pytest.mark.parametrize("scheduler", [
    Editing(0.3, 1e-6, max_post_steps=9, verify=True),
    Editing(0.0, 1e-6, max_post_steps=9, verify=True),
    FlowBlock(0.3, 1e-6, gate=0.5, blocks=2, max_post_steps=9, verify=True),
    FlowBlock(0.0, 1e-6, gate=0.0, blocks=3, max_post_steps=9, verify=True)])
def test_verified_argmax_editing_is_the_causal_streams_greedy_decoding(scheduler):
  """On a model whose given tokens form a causal LM (causal_given, shifted logits), editing
  wherever the argmax differs and finishing a block only after a mask-free forward made no edit
  gives exactly the stream's greedy (AR) decoding, however much was drafted in parallel; ragged
  prompts, dual cache. Without `verify` the last drafts are left unchecked. (A random model's
  drafts are poor, so the forwards saved are measured on the zoo model: `jaxdec bench blocks`.)"""
  model = tiny_model(seed=0, attention=BlockCausal(8, causal_given=True),
                     embeddings=dict(shifted_logits=True), tokens=dict(mask=113))
  rng = np.random.RandomState(0)
  rows = [rng.randint(2, 120, n).tolist() for n in (3, 9, 5)]
  want = jaxdec.generate(model, rows, max_new_tokens=32, stop_tokens=())
  run = lambda s: jaxdec.diffusion_generate(model, rows, gen_length=32, block_length=8, steps=32,
                                            scheduler=s, cache=DualCache())
  out = run(scheduler)
  np.testing.assert_array_equal(out.tokens, want.tokens)
  assert (np.asarray(out.stats["scheduler"].edits) > 0).all()  # Drafts were repaired.
  if float(scheduler.threshold) == 0.0:  # All masks drafted at once: unchecked, they stay wrong.
    assert not np.array_equal(run(scheduler.replace(verify=False)).tokens, want.tokens)
