"""Plug-ins written by a user, outside `jaxdec/`, run through the public, jitted API.

Each part is defined here against the documented protocols only: a diffusion scheduler that
re-masks (rollback) and one that runs a lookahead forward, a diffusion cache that keeps the
prompt's keys and values, and a speculative drafter that reads the target's KV cache and one
that learns from verification feedback. Each is checked against plain decoding, exactly.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

import jaxdec
from jaxdec import decoding, diffusion, spec
from jaxdec.decoding import positions
from jaxdec.model import Bidirectional, forward
from tiny import tiny_model

MASK = 5
GEN, BLOCK = 16, 8


def _dlm(**overrides):
  return tiny_model(attention=Bidirectional(), architecture="llada", std=0.5,
                    tokens=dict(mask=MASK), **overrides)


def _dlm_prompts(seed=0, lengths=(3, 9, 5)):
  rng = np.random.RandomState(seed)
  return [rng.randint(6, 128, n).tolist() for n in lengths]


# ---- diffusion schedulers ----------------------------------------------------------------------

@struct.dataclass
class Redo:
  """Decode the whole block at its first step, re-mask all of it at the second, then follow
  `inner`: the canvas after the re-mask is the block's starting canvas again, so the output must
  equal `inner`'s, two forwards per block later."""

  inner: diffusion.Threshold
  confidence = diffusion.Probability()
  tempered = False
  windows = 1

  def check(self, batch):
    self.inner.check(batch)

  def init(self, batch, window):
    return self.inner.init(batch, window)

  def step(self, state, view):
    decision, state = self.inner.step(state, view)  # Threshold keeps no state.
    everything = jnp.where(view.candidates, view.x0, view.tokens)
    remasked = jnp.full_like(view.tokens, view.mask_id)  # The window is one block of masks.
    phase = view.step[:, None]
    tokens = jnp.where(phase == 0, everything, jnp.where(phase == 1, remasked, decision.tokens))
    finished = jnp.where(view.step < 2, False, decision.finished)
    return diffusion.Decision(tokens=tokens, finished=finished), state


@struct.dataclass
class LookTwice(diffusion.Scheduler):
  """Rank and commit from a second forward over the unchanged window (a lookahead): it sees the
  same canvas, so the output equals `FixedSteps()`'s at twice the forwards. A step counter in
  the scheduler's state replaces `view.step` (state rides in the loop carry). Subclassing the
  protocol inherits its defaults (`check`, one window, untempered)."""

  confidence = diffusion.Probability()

  def init(self, batch, window):
    return jnp.zeros((batch,), jnp.int32)

  def step(self, count, view):
    logits = view.lookahead(view.tokens)
    probs = jax.nn.softmax(logits, axis=-1).at[..., view.mask_id].set(-1.0)
    x0 = jnp.argmax(probs, axis=-1).astype(jnp.int32)
    conf = jnp.max(probs, axis=-1)
    ranked = diffusion.rank_confidence(conf, view.candidates)
    quota = diffusion.transfer_count(view.block_masks, view.steps, count)
    tokens = jnp.where(diffusion.top(ranked, quota) & view.candidates, x0, view.tokens)
    finished = count + 1 >= view.steps
    return (diffusion.Decision(tokens, finished, lookaheads=1, sequences=1),
            jnp.where(finished, 0, count + 1))


@struct.dataclass
class TwoWindows:
  """Sees two blocks at a time (the current one and the next) but commits, as `Threshold`, only
  inside the current one: the window's extra block must change nothing."""

  tau: float = 0.6
  confidence = diffusion.Probability()
  tempered = False
  windows = 2

  def check(self, batch):
    if not 0 <= self.tau <= 1:
      raise ValueError(f"TwoWindows.tau must be in [0, 1], got {self.tau}")

  def init(self, batch, window):
    return ()

  def step(self, state, view):
    half = view.tokens.shape[1] // 2
    current = view.candidates & (jnp.arange(2 * half) < half)[None, :]
    ranked = diffusion.rank_confidence(view.ranked.confidence, current)
    select = current & ((ranked.confidence >= self.tau) | (ranked.rank == 0))
    tokens = diffusion.commit(view, select)
    return diffusion.Decision(tokens, diffusion.filled(tokens[:, :half], view.mask_id)), state


def test_a_user_scheduler_may_see_several_blocks():
  model = _dlm()
  kw = dict(gen_length=GEN, block_length=BLOCK)
  plain = jaxdec.diffusion_generate(model, _dlm_prompts(), scheduler=diffusion.Threshold(0.6), **kw)
  wide = jaxdec.diffusion_generate(model, _dlm_prompts(), scheduler=TwoWindows(), **kw)
  np.testing.assert_array_equal(wide.tokens, plain.tokens)
  np.testing.assert_array_equal(wide.stats["nfe"], plain.stats["nfe"])


def test_a_user_scheduler_may_remask():
  model = _dlm()
  kw = dict(gen_length=GEN, block_length=BLOCK)
  plain = jaxdec.diffusion_generate(model, _dlm_prompts(), scheduler=diffusion.Threshold(0.6), **kw)
  redo = jaxdec.diffusion_generate(model, _dlm_prompts(), scheduler=Redo(diffusion.Threshold(0.6)),
                                   **kw)
  np.testing.assert_array_equal(redo.tokens, plain.tokens)
  np.testing.assert_array_equal(redo.stats["nfe"], plain.stats["nfe"] + 2 * (GEN // BLOCK))


def test_a_user_scheduler_may_look_ahead():
  model = _dlm()
  kw = dict(gen_length=GEN, block_length=BLOCK, steps=8)
  plain = jaxdec.diffusion_generate(model, _dlm_prompts(), scheduler=diffusion.FixedSteps(), **kw)
  twice = jaxdec.diffusion_generate(model, _dlm_prompts(), scheduler=LookTwice(), **kw)
  np.testing.assert_array_equal(twice.tokens, plain.tokens)
  np.testing.assert_array_equal(twice.stats["nfe"], 2 * plain.stats["nfe"])
  np.testing.assert_array_equal(twice.stats["lookaheads"], plain.stats["nfe"])


@struct.dataclass
class Unreported(LookTwice):
  """LookTwice that does not report its lookahead forwards."""

  def step(self, count, view):
    decision, count = super().step(count, view)
    return decision._replace(lookaheads=0), count


def test_a_scheduler_that_looks_ahead_must_report_it():
  with pytest.raises(ValueError, match="Unreported.step calls view.lookahead but its Decision "
                                       "reports lookaheads=0"):
    jaxdec.diffusion_generate(_dlm(), _dlm_prompts(), gen_length=GEN, block_length=BLOCK,
                              steps=8, scheduler=Unreported())


# ---- diffusion caches --------------------------------------------------------------------------

@struct.dataclass
class PromptKV(diffusion.DiffusionCache):
  """Compute the prompt's keys and values once, at the first step, and reuse them for every
  later step, whose queries are the whole generated region. On a one-layer model a key depends
  only on its token and position, so this is exact; deeper, the prompt's entries go stale."""

  def check(self, guided):
    if guided:
      raise ValueError("PromptKV does not run classifier-free guidance")

  def init(self, denoiser, batch, width):
    return denoiser.init_cache(batch, width), jnp.zeros((), bool)

  def logits(self, state, denoiser, view):
    kv, filled = state
    batch, width = view.x.shape
    prompt_lengths = view.lengths - view.gen_length

    def fill(kv):
      _, fresh = denoiser.hidden(view.x, positions(batch, width), kv.with_length(0), prompt_lengths)
      return fresh.with_length(prompt_lengths)

    kv = jax.lax.cond(filled, lambda kv: kv, fill, kv)
    query = positions(batch, view.gen_length, prompt_lengths)
    tokens = jnp.take_along_axis(view.x, jnp.minimum(query, width - 1), axis=1)
    h, _ = denoiser.hidden(tokens, query, kv, jnp.full((batch,), view.gen_length, jnp.int32))
    logits = denoiser.logits(h, view.logit_index() - prompt_lengths[:, None])
    return logits, view.active, (kv, jnp.ones((), bool))


def test_a_user_cache_is_exact_where_it_should_be():
  kw = dict(gen_length=GEN, block_length=BLOCK, scheduler=diffusion.Threshold(0.5))
  one_layer = _dlm(num_layers=1, seed=1)
  exact = jaxdec.diffusion_generate(one_layer, _dlm_prompts(), **kw)
  cached = jaxdec.diffusion_generate(one_layer, _dlm_prompts(), cache=PromptKV(), **kw)
  np.testing.assert_array_equal(cached.tokens, exact.tokens)
  np.testing.assert_array_equal(cached.stats["nfe"], exact.stats["nfe"])
  deeper = _dlm(num_layers=2, seed=1)  # Stale entries move the output: the cache is in use.
  assert not np.array_equal(jaxdec.diffusion_generate(deeper, _dlm_prompts(), **kw).tokens,
                            jaxdec.diffusion_generate(deeper, _dlm_prompts(), cache=PromptKV(),
                                                      **kw).tokens)
  with pytest.raises(ValueError, match="PromptKV does not run classifier-free guidance"):
    jaxdec.diffusion_generate(one_layer, _dlm_prompts(), cache=PromptKV(), cfg_scale=1.0, **kw)


# ---- speculative drafters ----------------------------------------------------------------------

@struct.dataclass
class TargetCacheDrafter(spec.Drafter):
  """Drafts with the target itself, continuing from the target's own KV cache (read through the
  context): under greedy verification every draft is accepted."""

  target: jaxdec.Model
  num_tokens: int = struct.field(pytree_node=False, default=3)

  @property
  def tree(self):
    return spec.Tree.chain(self.num_tokens)

  @property
  def forwards(self):
    return self.num_tokens

  def check(self, target):
    if target.vocab_size != self.target.config.vocab_size:
      raise ValueError("vocabularies differ")

  def init(self, prompt, prompt_lengths, capacity, hidden):
    return ()

  def propose(self, state, ctx):
    params, config = self.target.params, self.target.config
    token = jnp.take_along_axis(ctx.seq, (ctx.total - 1)[:, None], axis=1)
    cache, drafted = ctx.cache, []
    for i in range(self.num_tokens):
      logits, _, cache = forward(params, token, (ctx.total - 1 + i)[:, None], cache, config=config)
      token = jnp.argmax(logits, -1).astype(jnp.int32)
      drafted.append(token)
    tokens = jnp.concatenate(drafted, axis=1)
    return spec.Draft(tokens=tokens, valid=jnp.ones(tokens.shape, bool)), state


@struct.dataclass
class Bigram(spec.Drafter):
  """Drafts a chain by following, from the last token, the successor each token had when last
  seen. The table starts from the prompt and, with `learn`, takes in every committed token
  through `update` (the verdict and the draft say which; `propose` keeps the root token in the
  state for it)."""

  vocab_size: int = struct.field(pytree_node=False)
  num_tokens: int = struct.field(pytree_node=False, default=3)
  learn: bool = struct.field(pytree_node=False, default=True)
  forwards = 0

  @property
  def tree(self):
    return spec.Tree.chain(self.num_tokens)

  def check(self, target):
    if target.vocab_size != self.vocab_size:
      raise ValueError(f"Bigram.vocab_size {self.vocab_size} != target {target.vocab_size}")

  def init(self, prompt, prompt_lengths, capacity, hidden):
    batch, width = prompt.shape
    table = jnp.zeros((batch, self.vocab_size), jnp.int32)
    rows = jnp.arange(batch)[:, None]
    pairs = jnp.arange(width - 1)[None, :] < (prompt_lengths - 1)[:, None]
    src = jnp.where(pairs, prompt[:, :-1], self.vocab_size)  # Out of range: dropped.
    return table.at[rows, src].set(prompt[:, 1:], mode="drop"), jnp.zeros((batch,), jnp.int32)

  def propose(self, state, ctx):
    table, _ = state
    token = root = jnp.take_along_axis(ctx.seq, (ctx.total - 1)[:, None], axis=1)[:, 0]
    drafted = []
    for _ in range(self.num_tokens):
      token = jnp.take_along_axis(table, token[:, None], axis=1)[:, 0]
      drafted.append(token)
    tokens = jnp.stack(drafted, axis=1)
    return spec.Draft(tokens=tokens, valid=jnp.ones(tokens.shape, bool)), (table, root)

  def update(self, state, feedback):
    table, root = state
    if not self.learn:
      return state
    verdict, draft = feedback.verdict, feedback.draft
    path = jnp.take_along_axis(draft.tokens, jnp.maximum(verdict.path - 1, 0), axis=1)
    j = jnp.arange(path.shape[1] + 1)[None, :]
    committed = jnp.where(j < verdict.num_accepted[:, None],
                          jnp.pad(path, ((0, 0), (0, 1))), verdict.next_token[:, None])
    # Pairs (root, committed[0]), (committed[0], committed[1]), ... of the tokens committed.
    sequence = jnp.concatenate([root[:, None], committed], axis=1)
    learn = (j < feedback.count[:, None]) & feedback.active[:, None]
    rows = jnp.arange(table.shape[0])[:, None]
    src = jnp.where(learn, sequence[:, :-1], self.vocab_size)  # Out of range: dropped.
    return table.at[rows, src].set(sequence[:, 1:], mode="drop"), root


def _ar_prompts(seed, lengths):
  rng = np.random.RandomState(seed)
  return [np.tile(rng.randint(2, 128, 4), n)[: 3 * n].tolist() for n in lengths]


def test_a_drafter_may_read_the_target_cache():
  model = tiny_model()
  prompts = _ar_prompts(0, [2, 5, 3])
  ref = jaxdec.generate(model, prompts, max_new_tokens=20)
  out = jaxdec.speculative_generate(model, prompts, TargetCacheDrafter(model), max_new_tokens=20)
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  np.testing.assert_array_equal(out.lengths, ref.lengths)
  for row in np.asarray(out.stats["accepted"]):  # Every step but a row's last accepts all 3.
    steps = row[row >= 0]
    assert (steps[:-1] == 3).all()
  assert (np.asarray(out.stats["target_forwards"]) <= 1 + -(-19 // 4)).all()


def test_a_drafter_learns_from_feedback():
  model = tiny_model(seed=3)
  prompts = _ar_prompts(1, [2, 6, 4])
  ref = jaxdec.generate(model, prompts, max_new_tokens=40)
  learned = jaxdec.speculative_generate(model, prompts, Bigram(128), max_new_tokens=40)
  frozen = jaxdec.speculative_generate(model, prompts, Bigram(128, learn=False),
                                       max_new_tokens=40)
  for out in (learned, frozen):
    np.testing.assert_array_equal(out.tokens, ref.tokens)
  assert (learned.stats["target_forwards"] <= frozen.stats["target_forwards"]).all()
  assert learned.stats["target_forwards"].sum() < frozen.stats["target_forwards"].sum()


def test_user_parts_compose_with_a_callers_jit():
  model = tiny_model()
  prompts = _ar_prompts(0, [3, 4])
  prompt, lengths = decoding.prepare_prompts(prompts, None, 128)

  @jax.jit
  def run(params, drafter, prompt, lengths):
    return spec.speculative_generate(params, prompt, lengths, 16, None, jnp.asarray([1]),
                                     config=model.config, drafter=drafter,
                                     verifier=spec.Greedy(), buffer_len=16)

  out = run(model.params, Bigram(128), prompt, lengths)
  ref = jaxdec.generate(model, prompts, max_new_tokens=16)
  np.testing.assert_array_equal(out.tokens, ref.tokens)


# ---- protocol violations -----------------------------------------------------------------------

class Opaque:
  """Not a pytree: the loop could not carry it."""


@struct.dataclass
class DuckScheduler:
  """Duck-typed (no protocol base class), but without `step`."""

  confidence = diffusion.Probability()
  tempered = False
  windows = 1

  def check(self, batch):
    pass

  def init(self, batch, window):
    return ()


@struct.dataclass
class WrongShape(diffusion.Threshold):
  def step(self, state, view):
    decision, state = super().step(state, view)
    return diffusion.Decision(decision.tokens[:, :-1], decision.finished), state


def test_protocol_violations_name_the_part_and_the_member():
  dlm, kw = _dlm(), dict(gen_length=GEN, block_length=BLOCK)
  with pytest.raises(TypeError, match="scheduler DuckScheduler does not implement the Scheduler "
                                      "protocol: it lacks step"):
    jaxdec.diffusion_generate(dlm, _dlm_prompts(), scheduler=DuckScheduler(), **kw)
  with pytest.raises(TypeError, match="cache Opaque does not implement the DiffusionCache "
                                      "protocol: it lacks check, init, logits"):
    jaxdec.diffusion_generate(dlm, _dlm_prompts(), cache=Opaque(), **kw)
  with pytest.raises(TypeError, match="scheduler Redo must be a pytree of arrays"):
    jaxdec.diffusion_generate(dlm, _dlm_prompts(), scheduler=Redo(inner=Opaque()), **kw)
  with pytest.raises(TypeError, match=r"WrongShape.step returned tokens with shape \(3, 7\), "
                                      r"expected \(3, 8\)"):
    jaxdec.diffusion_generate(dlm, _dlm_prompts(), scheduler=WrongShape(), **kw)
  # Subclasses of a protocol are refused when built if they leave out a method without default.
  with pytest.raises(TypeError, match="abstract class NoPropose .*propose"):
    type("NoPropose", (spec.Drafter,), {"tree": spec.Tree.chain(2), "forwards": 0})()
  with pytest.raises(TypeError, match="abstract class NoLogits .*logits"):
    type("NoLogits", (diffusion.DiffusionCache,), {"init": lambda self, d, b, w: ()})()
