"""The diffusion sampler: one `lax.while_loop` over denoising steps, traceable under jit.

Row b's canvas is prompt ++ [MASK] * gen_length, right-padded to a static width (padding is
hidden from attention). The generated region is cut into semi-autoregressive blocks; each row
has an active window of `scheduler.windows` consecutive blocks starting at its current block.
Every step the cache computes the window's logits, the proposals and confidences are drawn, and
the scheduler decides the window's new tokens and whether the current block is finished. Rows
advance independently (their own block, step and forward count), so a ragged batch gives each
row what it would get alone. Budgets (`steps`, thresholds, temperature) are traced; shapes are
static.

The controls of the token loops (`jaxdec.controls`) apply here too, read for a decoder that
fills a canvas out of order (a block's tokens are final once the row finishes it, since blocks
commit left to right):
  - stop strings: a row's output ends where a stop string completes in its generated text
    read left to right (the completing token kept), as a stop token ends it: `lengths` is
    cut there; with `stop_early` a finished block holding such a completion ends the row.
  - min_new_tokens: the stop tokens' logits are -inf at generated positions before it (no
    stop token is proposed there), and stop tokens or strings ending before it are ignored
    when cutting `lengths`.
  - repetition penalty: at every step, each token present in the prompt or committed (not a
    mask) anywhere in the row's generated region has its logit penalised (CTRL's rule, as
    `LogitsRules.apply`) at every window position, before proposals and confidences; a
    scheduler's lookahead forwards get the same rule on the canvas they see.
  - logprobs: each output token's log-probability, log_softmax of the model's logits at its
    position in the last step that wrote it (committed, or edited by a T2T scheduler; a
    lookahead's logits are never used), before rules and temperature; 0 past `lengths`.
  - on_step (streaming): called once per step with each row's current block i32[B, L] and
    count i32[B]: the block's tokens, up to the row's end, when the row finished the block
    this step (its tokens are then final: blocks commit left to right), else 0.
"""

from __future__ import annotations

from typing import Any, Protocol

import jax
import jax.numpy as jnp
from flax import struct

from jaxdec.controls import Controls, ControlState, mark, token_logprobs
from jaxdec.decoding import (DecodeOutput, DecodeStats, check_returned, positions, rows_until_stop,
                             typed_key)
from jaxdec.decoding import pad_id as default_pad_id
from jaxdec.diffusion.caches import CanvasView, DiffusionCache, NoCache
from jaxdec.diffusion.llada import FixedSteps
from jaxdec.diffusion.proposals import EosFlags, position_keys, propose
from jaxdec.diffusion.schedulers import Scheduler, StepView, rank_confidence
from jaxdec.model import (BlockCausal, KVCache, ModelConfig, decode_hidden, embed,
                          hidden_mask_keys, unembed)
from jaxdec.model.params import Params


class Denoiser(Protocol):
  """What the sampler needs from a model: hidden states for tokens at positions, of which the
  first valid_lengths i32[B] per row are real (with an optional KVCache, as
  `jaxdec.model.forward`), and logits f32[B, N, V] of the hidden states at index i32[B, N].
  Tests plug in hand-built logits this way. `block_size`: an int when the model is block-causal
  (the caches then run exact without refreshes; see caches.py), else None."""

  mask_token_id: int
  shifted_logits: bool
  block_size: int | None

  def hidden(self, tokens: jax.Array, positions: jax.Array, cache: KVCache | None,
             valid_lengths: jax.Array) -> tuple[Any, KVCache | None]: ...

  def logits(self, hidden: Any, index: jax.Array) -> jax.Array: ...

  def init_cache(self, batch: int, length: int) -> KVCache: ...


def gather_rows(a: jax.Array, index: jax.Array) -> jax.Array:
  """a[B, W, ...] at index i32[B, N] -> [B, N, ...]."""
  index = index.reshape(index.shape + (1,) * (a.ndim - 2))
  return jnp.take_along_axis(a, index, axis=1)


@struct.dataclass
class ModelDenoiser:
  """A jaxdec decoder as a Denoiser (only the window's logits are projected to the vocabulary).
  `offsets` i32[B] (optional) are added to every position: see `aligned_offsets`."""

  params: Params
  config: ModelConfig = struct.field(pytree_node=False)
  offsets: jax.Array | None = None

  @property
  def mask_token_id(self) -> int:
    return self.config.tokens.mask

  @property
  def shifted_logits(self) -> bool:
    return self.config.embeddings.shifted_logits

  @property
  def block_size(self) -> int | None:
    """A `BlockCausal` model's block (caches are exact for it), None for other patterns."""
    return self.config.attention.block_size

  def hidden(self, tokens, positions, cache, valid_lengths):
    if self.offsets is not None:
      positions = positions + self.offsets[:, None]
    h, _, cache = decode_hidden(self.params, embed(self.params, tokens), positions, cache,
                                config=self.config, valid_lengths=valid_lengths,
                                hidden_keys=hidden_mask_keys(tokens, self.config))
    return h, cache

  def logits(self, hidden, index):
    return unembed(self.params, gather_rows(hidden, index), self.config)

  def init_cache(self, batch, length):
    return KVCache.init(self.config, batch, length, dtype=self.params.embed.dtype)


def aligned_offsets(config: ModelConfig, prompt_lengths: jax.Array, block_length: int):
  """i32[B] position offsets that start each row's generation on a block boundary of a
  `BlockCausal` model (None for other patterns). Its attention cuts blocks at multiples of
  `block_size` *positions*, while decoding starts a block right after each prompt; RoPE is
  relative, so shifting a row's positions changes nothing but where the pattern cuts."""
  if not isinstance(config.attention, BlockCausal):
    return None
  if block_length != config.attention.block_size:
    raise ValueError(f"block_length {block_length} must equal the model's BlockCausal block_size "
                     f"{config.attention.block_size}: its attention cuts blocks there")
  return (-jnp.asarray(prompt_lengths, jnp.int32)) % block_length


@struct.dataclass
class Guided:
  """LLaDA's unsupervised classifier-free guidance around a Denoiser: logits = u + (w + 1)(c - u),
  c from the canvas, u from the canvas with the prompt masked (one batched forward for both)."""

  mask_token_id: int = struct.field(pytree_node=False)
  shifted_logits: bool = struct.field(pytree_node=False)
  inner: Any
  scale: jax.Array
  prompt_lengths: jax.Array

  def hidden(self, tokens, positions, cache, valid_lengths):
    if cache is not None:
      raise ValueError("classifier-free guidance runs without a cache")
    blank = jnp.where(positions < self.prompt_lengths[:, None], self.mask_token_id, tokens)
    two = lambda a: jnp.concatenate([a, a])
    return self.inner.hidden(jnp.concatenate([tokens, blank]), two(positions), None,
                             two(valid_lengths))

  def logits(self, hidden, index):
    cond, uncond = jnp.split(self.inner.logits(hidden, jnp.concatenate([index, index])), 2)
    return uncond + (jnp.asarray(self.scale, jnp.float32) + 1.0) * (cond - uncond)

  @property
  def block_size(self) -> int | None:
    return self.inner.block_size

  def init_cache(self, batch, length):
    raise ValueError("classifier-free guidance runs without a cache (cache=None)")


@struct.dataclass
class _State:
  x: jax.Array  # i32[B, W]: the canvases.
  block: jax.Array  # i32[B]: current block (num_blocks = done).
  step: jax.Array  # i32[B]: forwards run on the current block.
  block_masks: jax.Array  # i32[B]: masks of the active window when the block started.
  nfe: jax.Array  # i32[B]: forwards used by each row.
  lookaheads: jax.Array  # i32[B]: of which a scheduler's lookaheads (batched: one each).
  hypotheses: jax.Array  # i32[B]: sequences those lookaheads ran (H per call of [B, H, N]).
  committed: jax.Array  # i32[B, G]: masks filled by each of the row's forwards.
  forwards: jax.Array  # i32[]: batched forwards run.
  cache: Any  # The cache's state.
  scheduler: Any  # The scheduler's state.
  # Controls (None unless asked for): the bytes of the row's finished blocks (stop strings),
  # whether its output ended in a finished block (streaming), the log-probability of each
  # canvas token when it was written.
  history: jax.Array | None = None  # i16[B, H].
  ended: jax.Array | None = None  # bool[B].
  logprobs: jax.Array | None = None  # f32[B, W].


@struct.dataclass
class _Setting:
  """Everything a step reads besides the state (static settings first)."""

  eos: EosFlags = struct.field(pytree_node=False)
  block_length: int = struct.field(pytree_node=False)
  gen_length: int = struct.field(pytree_node=False)
  stop_early: bool = struct.field(pytree_node=False)
  visible_suffix: int | None = struct.field(pytree_node=False)
  denoiser: Denoiser
  scheduler: Scheduler
  cache: DiffusionCache
  key: jax.Array | None  # None: greedy.
  temperature: jax.Array
  prompt_lengths: jax.Array
  per_block: jax.Array
  stop_tokens: jax.Array  # i32[E].
  controls: Controls = Controls()
  prompt: jax.Array | None = None  # i32[B, P]: the prompts as given (repetition penalty).
  given_lengths: jax.Array | None = None  # i32[B]: their lengths.

  @property
  def num_blocks(self) -> int:
    return self.gen_length // self.block_length

  @property
  def window(self) -> int:
    return self.block_length * self.scheduler.windows


def _step_view(c: _Setting, s: _State, view: CanvasView, logits, advance, place, inside):
  """Proposals, confidences and the scheduler's view of the window; returns (StepView, a list
  that records at trace time whether the scheduler called `lookahead`)."""
  mask_id = c.denoiser.mask_token_id
  rows = jnp.arange(s.x.shape[0], dtype=jnp.int32)
  tokens = jnp.take_along_axis(s.x, jnp.minimum(place, s.x.shape[1] - 1), axis=1)
  candidates = (tokens == mask_id) & inside
  keys = None if c.key is None else position_keys(c.key, rows, place, s.nfe)
  x0, conf = propose(logits, c.temperature, keys, confidence=c.scheduler.confidence,
                     tempered=c.scheduler.tempered, mask_id=mask_id, eos=c.eos)
  masked = jnp.sum(candidates, axis=1, dtype=jnp.int32)
  called = []  # Only to check the scheduler's report (`Decision.lookaheads`), never to count.

  def one(window_tokens):
    x = s.x.at[rows[:, None], jnp.where(inside, place, s.x.shape[1])].set(window_tokens, mode="drop")
    return _ruled(c, x, c.cache.logits(s.cache, c.denoiser, view.replace(x=x))[0], place)

  def lookahead(window_tokens):
    called.append(True)
    if window_tokens.ndim == 3:  # [B, H, N]: H hypotheses per row, run as one batched forward.
      return jax.vmap(one, in_axes=1, out_axes=1)(window_tokens)
    return one(window_tokens)

  step_view = StepView(
      tokens=tokens, inside=inside, candidates=candidates, x0=x0, ranked=rank_confidence(conf, candidates),
      logits=logits, step=s.step, steps=c.per_block,
      block_masks=jnp.where(s.step == 0, masked, s.block_masks), masked=masked, block=s.block,
      mask_id=mask_id, lookahead=lookahead)
  return step_view, called


def _ruled(c: _Setting, x: jax.Array, logits: jax.Array, place: jax.Array) -> jax.Array:
  """The window's logits f32[B, N, V] under the controls' rules (as they are without rules):
  CTRL's penalty on every token of the prompt or committed (not a mask) anywhere in the
  generated region of canvas x i32[B, W], at every window position; the stop tokens at -inf at
  generated positions before `min_new_tokens`."""
  rules = c.controls.rules
  if rules is None:
    return logits
  batch, vocab = x.shape[0], logits.shape[-1]
  given = jnp.arange(c.prompt.shape[1])[None, :] < c.given_lengths[:, None]
  seen = mark(jnp.zeros((batch, vocab), bool), c.prompt, given)
  generated = jnp.take_along_axis(x, positions(batch, c.gen_length, c.prompt_lengths), axis=1)
  seen = mark(seen, generated, generated != c.denoiser.mask_token_id)
  index = place - c.prompt_lengths[:, None]  # Generated tokens before each window position.
  return rules.apply(logits, jnp.broadcast_to(seen[:, None, :], logits.shape), index,
                     c.stop_tokens)


def _ends(c: _Setting, tokens: jax.Array, first: jax.Array, history: jax.Array | None):
  """Where generated tokens i32[B, K] (the first of them the row's generated token `first`
  i32[B]) end the row's output: bool[B, K] at a stop token or where a stop string completes
  after `history` (the bytes before them), none before `min_new_tokens`; and the history after
  them (None without stop strings)."""
  stops = jnp.isin(tokens, c.stop_tokens)
  controls = c.controls
  if controls.rules is not None:
    index = first[:, None] + jnp.arange(tokens.shape[1], dtype=jnp.int32)[None, :]
    stops = stops & (index >= controls.rules.min_new_tokens[:, None])
  if controls.stops is None:
    return stops, None
  hits, histories = controls.stop_hits(ControlState(None, history), tokens, first)
  return stops | hits, histories[:, -1]


def _first_ends(stops: jax.Array) -> jax.Array:
  """i32[B]: tokens up to and including the first end of each row (all K if none)."""
  return jnp.where(jnp.any(stops, axis=1), jnp.argmax(stops, axis=1) + 1,
                   stops.shape[1]).astype(jnp.int32)


def _finish_blocks(c: _Setting, s: _State, x: jax.Array, start: jax.Array, finished: jax.Array,
                   block: jax.Array):
  """What a row finishing its block does (its tokens are final: blocks commit left to right):
  with `stop_early`, a block holding an end of the output ends the row (later blocks stay
  masked); the stop-string history moves past the block; a stream gets the block's tokens up to
  the row's end. Returns (block, history, ended)."""
  batch = x.shape[0]
  tokens = jnp.take_along_axis(x, positions(batch, c.block_length, start), axis=1)
  if c.controls.rules is None and c.controls.stops is None:
    stops, history = jnp.isin(tokens, c.stop_tokens), None  # The program without controls.
  else:
    stops, history = _ends(c, tokens, s.block * c.block_length, s.history)
  stopped = finished & stops.any(axis=1)
  if c.stop_early:
    block = jnp.where(stopped, c.num_blocks, block)
  history = s.history if history is None else jnp.where(finished[:, None], history, s.history)
  ended = s.ended
  if c.controls.on_step is not None:
    count = jnp.where(finished & ~ended, _first_ends(stops), 0)
    c.controls.on_step(tokens, count)
    ended = ended | stopped
  return block, history, ended


def _held(advance: jax.Array, new, old):
  """The scheduler's next state, with rows that did not advance this step (a cache held them
  back) keeping their old one: their step did not happen. State leaves lead with the batch."""
  def pick(n, o):
    if jnp.ndim(n) < 1 or jnp.shape(n)[0] != advance.shape[0]:
      raise ValueError(f"a scheduler's state leaves must lead with the batch axis "
                       f"({advance.shape[0]}), got one of shape {jnp.shape(n)}")
    return jnp.where(advance.reshape(advance.shape + (1,) * (jnp.ndim(n) - 1)), n, o)
  return jax.tree.map(pick, new, old)


def _step(c: _Setting, s: _State) -> _State:
  batch, width = s.x.shape
  rows = jnp.arange(batch, dtype=jnp.int32)
  active = s.block < c.num_blocks
  start = c.prompt_lengths + jnp.minimum(s.block, c.num_blocks - 1) * c.block_length
  lengths = c.prompt_lengths + c.gen_length
  # The canvas the model sees ends `visible_suffix` positions after the window (the rest is
  # hidden from attention as padding is).
  seen = lengths if c.visible_suffix is None else jnp.minimum(
      lengths, start + c.window + c.visible_suffix)
  view = CanvasView(x=s.x, start=start, active=active, step=s.step, lengths=seen,
                    window=c.window, gen_length=c.gen_length,
                    shift=int(c.denoiser.shifted_logits))
  raw, advance, cache = c.cache.logits(s.cache, c.denoiser, view)
  check_returned(c.cache, "logits", logits=(raw, (batch, c.window, None)),
                 advance=(advance, (batch,)))
  place = positions(batch, c.window, start)  # i32[B, N]: canvas positions of the window.
  inside = place < lengths[:, None]  # Windows that reach past the last block hold nothing.
  logits = _ruled(c, s.x, raw, place)
  step_view, called = _step_view(c, s, view, logits, advance, place, inside)
  decision, scheduler = c.scheduler.step(s.scheduler, step_view)
  check_returned(c.scheduler, "step", tokens=(decision.tokens, (batch, c.window)),
                 finished=(decision.finished, (batch,)))
  if called and isinstance(decision.lookaheads, int) and decision.lookaheads == 0:
    raise ValueError(f"{type(c.scheduler).__name__}.step calls view.lookahead but its Decision "
                     f"reports lookaheads=0: report the forwards it ran (Decision.lookaheads)")
  reported = jnp.broadcast_to(jnp.asarray(decision.lookaheads, jnp.int32), (batch,))
  ran = advance.astype(jnp.int32) * reported
  scheduler = _held(advance, scheduler, s.scheduler)
  # Only advancing rows change (a cache may hold rows back for one forward while it refreshes
  # others: that keeps a batch equal to one-by-one runs, see caches.py); a decision may only
  # touch the window's real positions.
  tokens = jnp.where(advance[:, None] & inside, decision.tokens, step_view.tokens)
  finished = advance & decision.finished
  step = s.step + advance.astype(jnp.int32)
  x = s.x.at[rows[:, None], jnp.where(inside, place, width)].set(tokens, mode="drop")
  left = jnp.sum((tokens == step_view.mask_id) & inside, axis=1, dtype=jnp.int32)
  filled = step_view.masked - left  # i32[B]: masks this forward filled.
  committed = s.committed.at[rows, jnp.where(advance, s.nfe, c.gen_length)].set(filled, mode="drop")
  block = s.block + finished.astype(jnp.int32)
  history, ended = s.history, s.ended
  if c.stop_early or c.controls.on_step is not None:
    block, history, ended = _finish_blocks(c, s, x, start, finished, block)
  logprobs = s.logprobs
  if logprobs is not None:  # Each written token's log-probability under this step's logits.
    wrote = (advance[:, None] & inside & (tokens != step_view.tokens)
             & (tokens != step_view.mask_id))
    logprobs = logprobs.at[rows[:, None], jnp.where(wrote, place, width)].set(
        token_logprobs(raw, tokens), mode="drop")
  return _State(x=x, block=block,
                step=jnp.where(finished, 0, step), block_masks=step_view.block_masks,
                nfe=s.nfe + advance.astype(jnp.int32) + ran, lookaheads=s.lookaheads + ran,
                hypotheses=s.hypotheses + advance.astype(jnp.int32) * jnp.asarray(
                    decision.sequences, jnp.int32),
                committed=committed, forwards=s.forwards + 1 + jnp.max(reported),
                cache=cache,
                scheduler=scheduler, history=history, ended=ended, logprobs=logprobs)


def denoise(denoiser: Denoiser, prompt: jax.Array, prompt_lengths: jax.Array,
            key: jax.Array | None = None, *, gen_length: int, block_length: int,
            steps: jax.Array | int, scheduler: Scheduler | None = None,
            cache: DiffusionCache | None = None, temperature: jax.Array | float = 0.0,
            cfg_scale: jax.Array | float | None = None, stop_tokens: jax.Array | None = None,
            eos: EosFlags = EosFlags(), pad_id: int = 0, stop_early: bool = False,
            visible_suffix: int | None = None, controls: Controls = Controls()) -> DecodeOutput:
  """Fill gen_length masks after each prompt; see `diffusion_generate` for the arguments."""
  if not isinstance(controls, Controls):
    raise TypeError(f"controls must be a jaxdec.controls.Controls, got {type(controls).__name__}")
  given, given_lengths = (prompt, prompt_lengths) if controls.rules is not None else (None, None)
  scheduler = FixedSteps() if scheduler is None else scheduler
  cache = NoCache() if cache is None else cache
  if gen_length % block_length:
    raise ValueError(f"gen_length={gen_length} is not a multiple of block_length={block_length}")
  if visible_suffix is not None and (isinstance(visible_suffix, bool) or
                                     not isinstance(visible_suffix, int) or visible_suffix < 0):
    raise ValueError(f"visible_suffix must be None or an int >= 0, got {visible_suffix!r}")
  num_blocks = gen_length // block_length
  if isinstance(steps, int) and (steps < num_blocks or steps % num_blocks):
    raise ValueError(f"steps={steps} is not a positive multiple of the {num_blocks} blocks")
  if (eos.logits_eos_inf or eos.confidence_eos_eot_inf) and (eos.eos_id is None or eos.eot_id is None):
    raise ValueError(f"the EOS flags need eos_id and eot_id, got {eos}")
  cache.check(cfg_scale is not None)
  denoiser, prompt, prompt_lengths, cache = cache.prepare(denoiser, prompt, prompt_lengths)
  stop_tokens = jnp.zeros((0,), jnp.int32) if stop_tokens is None else jnp.asarray(stop_tokens, jnp.int32)
  batch, width = prompt.shape
  if cfg_scale is not None:
    denoiser = Guided(denoiser.mask_token_id, denoiser.shifted_logits, denoiser,
                      jnp.asarray(cfg_scale, jnp.float32), prompt_lengths)
  mask_id = denoiser.mask_token_id
  canvas = width + gen_length
  lengths = prompt_lengths + gen_length  # i32[B]: real canvas length.
  slot = jnp.arange(canvas, dtype=jnp.int32)[None, :]
  x = jnp.where(slot < prompt_lengths[:, None], jnp.pad(prompt, ((0, 0), (0, gen_length))),
                jnp.where(slot < lengths[:, None], mask_id, pad_id)).astype(jnp.int32)
  setting = _Setting(
      denoiser=denoiser, scheduler=scheduler, cache=cache, key=typed_key(key),
      temperature=jnp.broadcast_to(jnp.asarray(temperature, jnp.float32), (batch,)),
      prompt_lengths=prompt_lengths, per_block=jnp.asarray(steps, jnp.int32) // num_blocks,
      eos=eos, block_length=block_length, gen_length=gen_length, stop_early=stop_early,
      visible_suffix=visible_suffix,
      stop_tokens=stop_tokens, controls=controls, prompt=given, given_lengths=given_lengths)
  zeros = jnp.zeros((batch,), jnp.int32)
  state = _State(x=x, block=zeros, step=zeros, block_masks=zeros, nfe=zeros, lookaheads=zeros,
                 hypotheses=zeros,
                 committed=jnp.zeros((batch, gen_length), jnp.int32),
                 forwards=jnp.zeros((), jnp.int32), cache=cache.init(denoiser, batch, canvas),
                 scheduler=scheduler.init(batch, setting.window), **_control_carry(setting, x))
  state = jax.lax.while_loop(lambda s: jnp.any(s.block < num_blocks),
                             lambda s: _step(setting, s), state)

  tokens = jnp.take_along_axis(state.x, positions(batch, gen_length, prompt_lengths), axis=1)
  left = tokens == mask_id  # Only after an early stop.
  decoded = gen_length - jnp.sum(left, axis=1, dtype=jnp.int32)
  tokens = jnp.where(left, pad_id, tokens)
  lengths = _output_lengths(setting, tokens)
  logprobs = None
  if state.logprobs is not None:
    logprobs = jnp.take_along_axis(state.logprobs, positions(batch, gen_length, prompt_lengths), 1)
    logprobs = jnp.where(jnp.arange(gen_length)[None, :] < lengths[:, None], logprobs, 0.0)
  # nfe, tokens_per_forward and steps mean what they mean in the token loops (`DecodeStats`);
  # `forwards` (batched forwards) is `steps` under its older name. Tokens per forward counts the
  # canvas tokens decoded (an early stop leaves later blocks undecoded).
  stats = DecodeStats.create(
      state.nfe, state.forwards, decoded.astype(jnp.float32) / state.nfe.astype(jnp.float32),
      forwards=state.forwards, committed=state.committed, lookaheads=state.lookaheads,
      lookahead_sequences=state.hypotheses, decoded=decoded, scheduler=state.scheduler)
  return DecodeOutput(tokens=tokens, lengths=lengths, stats=stats, logprobs=logprobs)


def _control_carry(c: _Setting, x: jax.Array) -> dict:
  """The controls' part of the first carry: only what the call's controls read."""
  batch, width = x.shape
  controls, carry = c.controls, {}
  if controls.stops is not None and (c.stop_early or controls.on_step is not None):
    carry["history"] = controls.stops.blank(batch)
  if controls.on_step is not None:
    carry["ended"] = jnp.zeros((batch,), bool)
  if controls.logprobs:
    carry["logprobs"] = jnp.zeros((batch, width), jnp.float32)
  return carry


def _output_lengths(c: _Setting, tokens: jax.Array) -> jax.Array:
  """i32[B]: each row's output, up to and including its first stop token or completed stop
  string (read left to right over the generated tokens, none before `min_new_tokens`)."""
  if c.controls.rules is None and c.controls.stops is None:
    return rows_until_stop(tokens, c.stop_tokens)
  batch = tokens.shape[0]
  history = None if c.controls.stops is None else c.controls.stops.blank(batch)
  stops, _ = _ends(c, tokens, jnp.zeros((batch,), jnp.int32), history)
  return _first_ends(stops)


def diffusion_generate(params: Params, prompt: jax.Array, prompt_lengths: jax.Array,
                       key: jax.Array | None = None, *, config: ModelConfig, gen_length: int,
                       block_length: int, steps: jax.Array | int, scheduler: Scheduler | None = None,
                       cache: DiffusionCache | None = None, temperature: jax.Array | float = 0.0,
                       cfg_scale: jax.Array | float | None = None,
                       stop_tokens: jax.Array | None = None,
                       eos: EosFlags = EosFlags(), stop_early: bool = False,
                       visible_suffix: int | None = None,
                       controls: Controls = Controls()) -> DecodeOutput:
  """Masked-diffusion decoding with a bidirectional (LLaDA, Dream, pycode-dlm) or block-causal
  (block diffusion: gsm-dlm) jaxdec model.

  Args:
    prompt: i32[B, P] right-padded prompts; prompt_lengths: i32[B], each >= 1.
    key: PRNG key (typed or legacy uint32[2]), or None for greedy decoding (temperature is then
      ignored).
    gen_length, block_length: static; gen_length is a multiple of block_length.
    steps: total forwards of the step-counting schedulers (FixedSteps, Dream), split evenly over
      the blocks; traced. Threshold rules run each block until it has no mask left.
    scheduler: a `Scheduler`: FixedSteps() (LLaDA, the default), Dream(), Threshold(tau),
      Factor(f), Frechet(delta), or your own; on a shifted model (Dream) position i is
      predicted by output i - 1.
    cache: a `DiffusionCache`: None / NoCache() (exact), PrefixCache() or DualCache()
      (Fast-dLLM, approximate), PrefillingCache() (long prompts: Prefilling-dLLM), or your own.
    temperature: f32 scalar or [B]; LLaDA-family rows draw with Gumbel noise, Dream rows from
      the tempered softmax.
    cfg_scale: LLaDA's classifier-free guidance weight w (None = off, a static switch; the value
      is traced): logits = u + (w + 1)(c - u), u from the canvas with the prompt masked.
    stop_tokens: i32[E]: `lengths` cuts after the first of them.
    eos: LLaDA's EOS flags (`EosFlags`).
    stop_early: static; a row ends once a block it finishes holds a stop token (or a completed
      stop string), so no forwards are spent past its answer (its later blocks come back as
      pad). Off, as LLaDA's reference sampler, every block is decoded.
    visible_suffix: static; None (LLaDA, Dream): the model sees the whole canvas, every later
      block's masks included; k: only the first k positions after the active window (0: none,
      as block-diffusion models decode), the rest hidden from attention. A model that has not
      learned to ignore hundreds of masks predicts the next block better without them. A
      `BlockCausal` model (block diffusion) never sees later blocks whatever this is, and
      block_length must equal its block_size (its positions are shifted per row so each
      generation starts on a block of its pattern: `aligned_offsets`).
    controls: `jaxdec.controls.Controls` (rules and stop strings traced, logprobs and the
      streaming hook static; none by default, which costs nothing), read as the module
      docstring says for a decoder that fills its canvas out of order.

  Returns:
    DecodeOutput: tokens i32[B, gen_length] (the generated region, never cut); lengths i32[B]
    (tokens up to and including the first stop token or stop string, gen_length if none);
    stats `nfe` i32[B] forwards used by each row, `lookaheads` i32[B] of which a scheduler's
    lookahead forwards (`lookahead_sequences` i32[B]: the sequences they ran, H per [B, H, N]
    call), `decoded` i32[B] canvas tokens decoded (gen_length unless the row stopped early),
    `tokens_per_forward` f32[B] = decoded / nfe, `steps` / `forwards` i32[] batched forwards,
    `committed` i32[B, gen_length]: masks that row b's n-th forward filled (0 for a
    scheduler's lookahead forwards and for n >= nfe; forwards past the gen_length-th are not
    recorded); `scheduler`: the scheduler's final state (e.g. `Editing`'s edit counts);
    logprobs f32[B, gen_length] when `controls.logprobs`, else None.
  """
  if config.is_causal:
    raise ValueError("the diffusion sampler needs a bidirectional model; this config is causal "
                     "(an autoregressive model: use jaxdec.generate)")
  if config.tokens.mask is None:
    raise ValueError("the diffusion sampler needs a model with a mask token (tokens.mask)")
  denoiser = ModelDenoiser(params, config, aligned_offsets(config, prompt_lengths, block_length))
  return denoise(denoiser, prompt, prompt_lengths, key,
                 gen_length=gen_length, block_length=block_length, steps=steps,
                 scheduler=scheduler, cache=cache, temperature=temperature, cfg_scale=cfg_scale,
                 stop_tokens=stop_tokens, eos=eos, pad_id=default_pad_id(config),
                 stop_early=stop_early, visible_suffix=visible_suffix, controls=controls)
