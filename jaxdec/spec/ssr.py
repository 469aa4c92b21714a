"""SSR: self-speculation for reasoning models. The same model drafts its own final answer: at a
few reasoning budgets it is made to close the scratchpad early and answer (a partial-CoT answer),
and once the real reasoning ends those answers seed a suffix cache that drafts the full-CoT answer,
verified greedily, so the output is exactly plain greedy decoding.

Two phases, each one `lax.while_loop` with static shapes:

1. Reasoning (`ssr_reason`). The cache has 2B rows: B *main* rows decode greedily one token per
   step exactly as plain AR, and B *branch* rows ride in the same forward (batch 2B, width 1), so
   on an accelerator a partial answer costs next to nothing. When main row b has generated at
   least `budgets[j]` tokens and its last token is the line end, its cache and sequence are copied
   into branch row b (a `lax.cond`, so steps without a copy copy nothing), the close tokens are
   forced, and the branch decodes greedily up to `answer_tokens` tokens or a stop token. Every
   partial answer, with its close-token lead-in, lands in `answers[b, i]` as it is produced; one
   still in progress when the main row's reasoning ends is kept as far as it got. A main row
   leaves the phase when its generated tokens end with the close tokens, or at a stop token or
   its budget (then it has no answer phase).
2. Answer (`ssr_answer`). Speculative decoding on the B main rows (cut out of the 2B once) with
   `jaxdec.spec.loop`'s public step and `Greedy` verification, started from the reasoning
   phase's state; the drafter is `SuffixCache` over the
   stored answers. Right after the reasoning the committed suffix is the close tokens, which open
   every stored answer, so the latest answer is proposed whole: a long accepted prefix in one
   forward. After a divergence the longest matching suffix re-finds a span further on.

Open choices, as read here (parameters where it matters):
  - A budget is a minimum: an answer starts at the first line end at or after it (a cut
    mid-line gives the model a half-written number to answer from). If the branch is still busy
    when a budget passes, the next answer waits until the branch is free (answers are not cut
    short by later budgets); the budgets passed meanwhile are skipped, so each answer gets a slot.
  - The branch stops when its main row's reasoning ends (results never depend on batch mates)
    and before its position reaches the model's `max_position_embeddings`.
  - The suffix match needs at least one token after the matched n-gram; ties go to the longest
    n, then the latest answer (most reasoning behind it), then the earliest occurrence.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxdec import decoding
from jaxdec.controls import Controls
from jaxdec.decoding import (DecodeOutput, DecodeStats, Decoding, Job, LoopState, clamp_budget,
                             prefill)
from jaxdec.model import KVCache, Model, ModelConfig, forward
from jaxdec.model.params import Params
from jaxdec.spec import loop
from jaxdec.spec.drafter import Context, Drafter, check_positive, gather
from jaxdec.spec.lookup import continuations, lexical_matches
from jaxdec.spec.tree import Tree
from jaxdec.spec.verify import Draft, Greedy


@struct.dataclass
class SSR:
  """SSR's settings. budgets i32[N] (traced: sweeping values does not recompile; N is static):
  reasoning-token counts, positive and increasing, at which partial answers start;
  close_tokens: the tokens that close the scratchpad ("</think>\\n"); line_end: the token that
  ends a reasoning line; answer_tokens A: the most tokens of one partial answer (after the close
  tokens); num_tokens k: tokens drafted per answer-phase step; max_ngram: the longest suffix the
  lookup matches; lookup: fall back to prompt lookup over the committed sequence where no
  partial answer matches; preempt: a budget that passes while the branch is busy starts a new
  answer at once (the one in progress is kept as far as it got) instead of waiting. Build it with
  `SSR.for_tokenizer`."""

  budgets: jax.Array
  close_tokens: tuple[int, ...] = struct.field(pytree_node=False)
  line_end: int = struct.field(pytree_node=False)
  answer_tokens: int = struct.field(pytree_node=False, default=64)
  num_tokens: int = struct.field(pytree_node=False, default=16)
  max_ngram: int = struct.field(pytree_node=False, default=4)
  lookup: bool = struct.field(pytree_node=False, default=True)
  preempt: bool = struct.field(pytree_node=False, default=False)

  @classmethod
  def for_tokenizer(cls, tokenizer, budgets, *, close: str = "</think>\n", line_end: str = "\n",
                    answer_tokens: int = 64, num_tokens: int = 16, max_ngram: int = 4,
                    lookup: bool = True, preempt: bool = False) -> "SSR":
    """The settings with the close and line-end tokens taken from `tokenizer`'s encoding of
    `close` and `line_end` (which must be one token)."""
    close_ids = tuple(tokenizer.encode(close, add_bos=False))
    end_ids = tokenizer.encode(line_end, add_bos=False)
    if not close_ids:
      raise ValueError(f"close={close!r} encodes to no tokens")
    if len(end_ids) != 1:
      raise ValueError(f"line_end={line_end!r} must be one token, it encodes to {end_ids}")
    return cls(budgets=np.asarray(budgets), close_tokens=tuple(int(t) for t in close_ids),
               line_end=int(end_ids[0]), answer_tokens=answer_tokens,
               num_tokens=num_tokens, max_ngram=max_ngram, lookup=lookup,
               preempt=preempt)

  @property
  def width(self) -> int:
    """Slots of one stored answer: the close tokens, then up to `answer_tokens`."""
    return len(self.close_tokens) + self.answer_tokens

  def check(self, config: ModelConfig) -> None:
    """Raise ValueError naming the bad setting (host side, before tracing)."""
    budgets = np.asarray(self.budgets)
    if budgets.ndim != 1 or budgets.size == 0 or not np.issubdtype(budgets.dtype, np.integer):
      raise ValueError(f"budgets must be a non-empty 1-D sequence of ints, got {self.budgets!r}")
    if (budgets < 1).any() or (np.diff(budgets) <= 0).any():
      raise ValueError(f"budgets must be positive and strictly increasing, got {budgets.tolist()}")
    for name in ("answer_tokens", "num_tokens", "max_ngram"):
      check_positive(name, getattr(self, name))
    ids = (*self.close_tokens, self.line_end)
    if not self.close_tokens or any(isinstance(t, bool) or not isinstance(t, (int, np.integer))
                                    or not 0 <= t < config.vocab_size for t in ids):
      raise ValueError(f"close_tokens {self.close_tokens!r} and line_end {self.line_end!r} must "
                       f"be token ids in [0, {config.vocab_size}), close_tokens at least one")


def suffix_match(answers: jax.Array, lengths: jax.Array, seq: jax.Array, total: jax.Array,
                 max_ngram: int):
  """Where the committed sequence's suffix continues in a stored answer.

  answers i32[B, N, W] with lengths i32[B, N]; seq i32[B, S] committed in [0, total). For n =
  max_ngram..1, the last n committed tokens are looked up in every answer, where at least one
  token follows; the longest n wins, then the latest answer, then the earliest occurrence.
  Returns (slot i32[B], start i32[B]: where the continuation begins, found bool[B], n i32[B]:
  the matched suffix's length, 0 where none).
  """
  batch, num, width = answers.shape
  slot = start = matched = jnp.zeros((batch,), jnp.int32)
  found = jnp.zeros((batch,), bool)
  for n in range(min(max_ngram, width), 0, -1):
    query = gather(seq, total[:, None] - n + jnp.arange(n, dtype=jnp.int32)[None, :])  # [B, n]
    places = width - n + 1
    s = jnp.arange(places, dtype=jnp.int32)
    match = (s[None, None, :] + n < lengths[:, :, None]) & (total >= n)[:, None, None]
    for j in range(n):
      match &= answers[:, :, j: j + places] == query[:, None, j: j + 1]
    later = jnp.arange(num, dtype=jnp.int32)[:, None] * places + (places - 1 - s)[None, :]
    score = jnp.where(match, later[None], -1).reshape(batch, -1)
    best = jnp.argmax(score, axis=1).astype(jnp.int32)
    take = ~found & (jnp.max(score, axis=1) >= 0)
    slot = jnp.where(take, best // places, slot)
    start = jnp.where(take, best % places + n, start)
    matched = jnp.where(take, n, matched)
    found |= take
  return slot, start, found, matched


@struct.dataclass
class SuffixCache(Drafter):
  """Suffix decoding over reference token spans: drafts the up to `num_tokens` tokens that follow
  the longest suffix of the committed sequence found in `answers` (`suffix_match`). SSR fills
  the spans with partial-CoT answers; any per-row spans work (retrieved text, earlier outputs).

  After a divergence the drafter stays aligned: its state is the (span, offset) that lines up
  with the next token, advanced by every committed token, so a wrong number in a partial answer
  (digits are single tokens) costs the digits that differ, not the rest of the sentence. Each
  step it drafts, in order of preference: from a suffix match of at least `min_match` tokens;
  from the alignment; from a shorter match; and, with `lookup`, by prompt lookup over the
  committed sequence itself (an answer echoes the question's and the scratchpad's words).

  answers i32[B, N, W], lengths i32[B, N] (tokens valid per span) are leaves, one set per row."""

  answers: jax.Array
  lengths: jax.Array
  max_ngram: int = struct.field(pytree_node=False, default=4)
  num_tokens: int = struct.field(pytree_node=False, default=16)
  lookup: bool = struct.field(pytree_node=False, default=True)
  min_match: int = struct.field(pytree_node=False, default=2)
  forwards = 0

  @property
  def tree(self) -> Tree:
    return Tree.chain(self.num_tokens)

  def check(self, target: ModelConfig) -> None:
    check_positive("max_ngram", self.max_ngram)
    check_positive("num_tokens", self.num_tokens)
    check_positive("min_match", self.min_match)

  def init(self, prompt, prompt_lengths, capacity, hidden):
    """(span i32[B], offset i32[B]) aligned with the next token; offset -1: not aligned."""
    batch = self.answers.shape[0]
    return jnp.zeros((batch,), jnp.int32), jnp.full((batch,), -1, jnp.int32)

  def propose(self, state, ctx: Context):
    slot, start, found, matched = suffix_match(self.answers, self.lengths, ctx.seq, ctx.total,
                                               self.max_ngram)
    rows = jnp.arange(self.answers.shape[0])
    span, offset = state
    aligned = (offset >= 0) & (offset < self.lengths[rows, span])
    use_match = found & ((matched >= self.min_match) | ~aligned)
    slot, start = jnp.where(use_match, slot, span), jnp.where(use_match, start, offset)
    have = use_match | aligned
    offsets = start[:, None] + jnp.arange(self.num_tokens, dtype=jnp.int32)[None, :]
    tokens = gather(self.answers[rows, slot], offsets)
    valid = have[:, None] & (offsets < self.lengths[rows, slot][:, None])
    if self.lookup:
      starts, seen, _ = lexical_matches(ctx, self.max_ngram, 1, 1)
      echoed, echo_valid = continuations(ctx, starts, seen, self.num_tokens)
      tokens = jnp.where(have[:, None], tokens, echoed)
      valid = jnp.where(have[:, None], valid, echo_valid)
    return Draft(tokens=tokens, valid=valid), (slot, jnp.where(have, start, -1))

  def update(self, state, feedback):
    span, offset = state
    moved = jnp.where(offset >= 0, offset + feedback.count, -1)
    return span, jnp.where(feedback.active, moved, offset)


@struct.dataclass
class Reasoned:
  """SSR's part of the loop carry (`LoopState.method`) between the phases, for the B main rows:
  cache holding total - 1 tokens; answers i32[B, N, W], answer_lengths i32[B, N]: the partial
  answers (close tokens first); started i32[B]: partial answers begun; branch_tokens i32[B]:
  tokens the branch row produced."""

  cache: KVCache
  answers: jax.Array
  answer_lengths: jax.Array
  started: jax.Array
  branch_tokens: jax.Array


@struct.dataclass
class _Branches:
  """The reasoning phase's carry: a cache of 2B rows (main rows, then their branch rows), the
  branch rows' sequences, and the partial answers."""

  cache: KVCache  # 2B rows.
  seq: jax.Array  # i32[B, S]: branch rows' sequences.
  total: jax.Array  # i32[B]: branch rows' committed lengths.
  reasoning: jax.Array  # bool[B]: main row still in phase 1.
  busy: jax.Array  # bool[B]: branch row decoding a partial answer.
  next_budget: jax.Array  # i32[B]: index of the next budget to fire.
  started: jax.Array  # i32[B]
  answers: jax.Array  # i32[B, N, W]
  answer_lengths: jax.Array  # i32[B, N]
  branch_tokens: jax.Array  # i32[B]


def _capacity(ssr: SSR, width: int, buffer_len: int) -> int:
  """Cache and sequence slots: a main row needs P + T (+ k for the last drafts), a branch row
  up to P + T + W."""
  return width + buffer_len + max(ssr.width, ssr.num_tokens)


def _stack(a: KVCache, b: KVCache) -> KVCache:
  """The rows of `a`, then those of `b`."""
  return KVCache(k=jnp.concatenate([a.k, b.k], 1), v=jnp.concatenate([a.v, b.v], 1),
                 positions=jnp.concatenate([a.positions, b.positions]),
                 length=jnp.concatenate([a.length, b.length]))


def _head(cache: KVCache, batch: int) -> KVCache:
  """The first `batch` rows (the main rows)."""
  return KVCache(k=cache.k[:, :batch], v=cache.v[:, :batch], positions=cache.positions[:batch],
                 length=cache.length[:batch])


def _ends_reasoning(seq, total, prompt_lengths, close: tuple[int, ...]):
  """bool[B]: the generated tokens end with the close tokens."""
  c = len(close)
  tail = gather(seq, total[:, None] - c + jnp.arange(c, dtype=jnp.int32)[None, :])
  closing = jnp.all(tail == jnp.asarray(close, jnp.int32)[None, :], axis=1)
  return (total - prompt_lengths >= c) & closing


def _fork(s: LoopState, fork: jax.Array, ssr: SSR) -> LoopState:
  """Copy main rows `fork` bool[B] into their branch rows and queue the close tokens there: the
  branch's cache holds what the main row's does, its sequence adds the close tokens, so its next
  C + 1 forwards catch up and the last one yields the first answer token."""
  m: _Branches = s.method
  batch = fork.shape[0]
  close = jnp.asarray(ssr.close_tokens, jnp.int32)
  c = close.shape[0]
  pick = jnp.concatenate([jnp.zeros_like(fork), fork])

  def copy(m: _Branches):
    main = _head(m.cache, batch)
    slots = jnp.where(fork[:, None], s.total[:, None] + jnp.arange(c)[None, :], s.seq.shape[1])
    seq = jnp.where(fork[:, None], s.seq, m.seq)
    seq = seq.at[jnp.arange(batch)[:, None], slots].set(jnp.broadcast_to(close, slots.shape),
                                                         mode="drop")
    return m.replace(cache=_stack(main, main).where(pick, m.cache), seq=seq,
                     total=jnp.where(fork, s.total + c, m.total))

  m = jax.lax.cond(jnp.any(fork), copy, lambda m: m, m)
  rows = jnp.arange(batch)
  slot = jnp.where(fork, m.started, m.answers.shape[1])
  answers = m.answers.at[rows, slot, :c].set(jnp.broadcast_to(close, (batch, c)), mode="drop")
  return s.replace(method=m.replace(
      answers=answers, answer_lengths=m.answer_lengths.at[rows, slot].set(c, mode="drop"),
      started=m.started + fork.astype(jnp.int32), busy=m.busy | fork))


def _reason_step(params: Params, d: Decoding, s: LoopState, *, config: ModelConfig,
                 ssr: SSR) -> LoopState:
  """One forward over the 2B rows: each feeds the first token its cache lacks. A reasoning main
  row commits its next token (`decoding.commit`, under the controls); a busy branch row appends
  its argmax to its partial answer."""
  batch = s.seq.shape[0]
  budgets = jnp.asarray(ssr.budgets, jnp.int32)
  rows = jnp.arange(batch, dtype=jnp.int32)
  m: _Branches = s.method
  last = gather(s.seq, s.total[:, None] - 1)[:, 0]
  due = s.generated >= budgets[jnp.minimum(m.next_budget, budgets.shape[0] - 1)]
  fork = (m.reasoning & (ssr.preempt | ~m.busy) & (last == ssr.line_end)
          & (m.next_budget < budgets.shape[0]) & due)
  s = _fork(s, fork, ssr)
  m = s.method
  skipped = jnp.sum(budgets[None, :] <= s.generated[:, None], axis=1).astype(jnp.int32)
  m = m.replace(next_budget=jnp.where(fork, skipped, m.next_budget))
  reasoning = m.reasoning
  active = jnp.concatenate([reasoning, m.busy & reasoning])
  fed_at = m.cache.length
  both = jnp.concatenate([s.seq, m.seq])
  logits, _, cache = forward(params, gather(both, fed_at[:, None]), fed_at[:, None], m.cache,
                             config=config)
  cache = cache.with_length(jnp.where(active, fed_at + 1, fed_at))
  # Main rows: the next reasoning token, as plain decoding would choose it.
  main_logits = logits[:batch, 0]
  s, _ = decoding.commit(d, s, decoding.choose(d, s, main_logits)[:, None],
                         reasoning.astype(jnp.int32), main_logits[:, None])
  closed = reasoning & _ends_reasoning(s.seq, s.total, s.prompt_lengths, ssr.close_tokens)
  # Branch rows: append to the current answer; end it at a stop token, A tokens, or the model's
  # last position.
  grew = active[batch:] & (fed_at[batch:] == m.total - 1)
  token = jnp.argmax(logits[batch:, 0], axis=-1).astype(jnp.int32)
  seq = m.seq.at[rows, jnp.where(grew, m.total, m.seq.shape[1])].set(token, mode="drop")
  total = m.total + grew.astype(jnp.int32)
  slot = jnp.where(grew, m.started - 1, budgets.shape[0])
  at = m.answer_lengths[rows, jnp.minimum(slot, budgets.shape[0] - 1)]
  finished = grew & (jnp.isin(token, d.stop_tokens) | (at + 1 >= ssr.width)
                     | (total >= config.max_position_embeddings))
  m = m.replace(cache=cache, seq=seq, total=total, reasoning=reasoning & ~(s.done | closed),
                busy=m.busy & ~finished,
                answers=m.answers.at[rows, slot, at].set(token, mode="drop"),
                answer_lengths=m.answer_lengths.at[rows, slot].add(1, mode="drop"),
                branch_tokens=m.branch_tokens + grew.astype(jnp.int32))
  return s.replace(method=m, forwards=s.forwards + reasoning.astype(jnp.int32))


def ssr_reason(params: Params, d: Decoding, prompt: jax.Array, prompt_lengths: jax.Array,
               max_new_tokens: jax.Array, *, config: ModelConfig, ssr: SSR,
               buffer_len: int) -> LoopState:
  """Phase 1: greedy reasoning on the main rows (the token loop's rows, every control applied),
  partial answers on the branch rows in the same forwards. Returns the main rows' state, its
  method carry a `Reasoned`; rows that stopped (stop token, stop string or budget) are done,
  the others have just closed their reasoning. Arguments as `ssr_generate`."""
  batch, width = prompt.shape
  budget = clamp_budget(max_new_tokens, batch, buffer_len)
  capacity = _capacity(ssr, width, buffer_len)
  cache = KVCache.init(config, batch, capacity, dtype=params.embed.dtype)
  logits, cache, _ = prefill(params, prompt, prompt_lengths, cache, config=config)
  s = decoding.init(d, prompt, prompt_lengths, budget, capacity, config.vocab_size)
  s = decoding.first_token(d, s, logits)
  closed = _ends_reasoning(s.seq, s.total, prompt_lengths, ssr.close_tokens)
  n = len(ssr.budgets)
  zeros = jnp.zeros((batch,), jnp.int32)
  s = s.replace(method=_Branches(
      cache=_stack(cache, jax.tree.map(jnp.zeros_like, cache)), seq=s.seq, total=s.total,
      reasoning=~(s.done | closed), busy=zeros > 0, next_budget=zeros, started=zeros,
      answers=jnp.full((batch, n, ssr.width), d.pad_id, jnp.int32),
      answer_lengths=jnp.zeros((batch, n), jnp.int32), branch_tokens=zeros))
  s = jax.lax.while_loop(lambda s: jnp.any(s.method.reasoning),
                         lambda s: _reason_step(params, d, s, config=config, ssr=ssr).replace(
                             steps=s.steps + 1), s)
  m: _Branches = s.method
  return s.replace(method=Reasoned(cache=_head(m.cache, batch), answers=m.answers,
                                   answer_lengths=m.answer_lengths, started=m.started,
                                   branch_tokens=m.branch_tokens))


def ssr_answer(params: Params, d: Decoding, reasoned: LoopState, *, config: ModelConfig, ssr: SSR,
               buffer_len: int) -> DecodeOutput:
  """Phase 2: greedy speculative decoding of the answer (`jaxdec.spec.loop`'s public step, from
  the reasoning phase's state), drafted by `SuffixCache` over the partial answers; the output
  covers both phases (generated tokens after the prompt)."""
  batch = reasoned.seq.shape[0]
  r: Reasoned = reasoned.method
  drafter = SuffixCache(r.answers, r.answer_lengths, ssr.max_ngram, ssr.num_tokens, ssr.lookup)
  c = loop.Speculation.create(params, config, drafter, Greedy())
  carry = loop.SpecCarry(cache=r.cache, draft_state=drafter.init(None, reasoned.prompt_lengths, 0, None),
                         hidden=None, accepted=jnp.full((batch, buffer_len), -1, jnp.int32))
  reason_forwards, reasoning_length = reasoned.forwards, reasoned.generated
  state = loop.decode(c, d, reasoned.replace(method=carry, steps=jnp.zeros((), jnp.int32)))
  out = loop.output(c, d, state, buffer_len)
  answer_length = out.lengths - reasoning_length
  answer_forwards = state.forwards - reason_forwards
  stats = DecodeStats.create(
      state.forwards, state.steps, out.stats["tokens_per_forward"],
      reason_forwards=reason_forwards, answer_forwards=answer_forwards,
      reasoning_length=reasoning_length, answer_length=answer_length,
      accepted=state.method.accepted,
      answer_acceptance_length=answer_length.astype(jnp.float32)
      / jnp.maximum(answer_forwards, 1).astype(jnp.float32),
      partial_answers=r.started, partial_answer_lengths=r.answer_lengths,
      branch_tokens=r.branch_tokens)
  return out.replace(stats=stats)


def ssr_generate(params: Params, prompt: jax.Array, prompt_lengths: jax.Array,
                 max_new_tokens: jax.Array, stop_tokens: jax.Array, *, config: ModelConfig,
                 ssr: SSR, buffer_len: int, pad_id: int = 0,
                 controls: Controls = Controls()) -> DecodeOutput:
  """Greedy decoding of a reasoning model with SSR; the output equals `jaxdec.ar.generate`'s
  greedy output with the same controls, token for token.

  Args (as `jaxdec.ar.generate`): prompt i32[B, P] right-padded, prompt_lengths i32[B],
    max_new_tokens i32 scalar or [B] (at most buffer_len; reasoning and answer together),
    stop_tokens i32[E], controls; ssr: `SSR` settings.

  Returns DecodeOutput: tokens i32[B, buffer_len], lengths i32[B]; stats: `nfe` (target forwards,
  prefill included), `tokens_per_forward`, `steps` (answer phase), `reason_forwards`,
  `answer_forwards`, `reasoning_length` (generated tokens up to and including the close tokens),
  `answer_length`, `accepted` i32[B, buffer_len] (drafts accepted at each answer step, -1 past
  the last), `answer_acceptance_length`, `partial_answers` (begun per row),
  `partial_answer_lengths` i32[B, N], `branch_tokens`.
  """
  d = Decoding(sampling=None, key=None, stop_tokens=stop_tokens, controls=controls,
               pad_id=pad_id)
  kw = dict(config=config, ssr=ssr, buffer_len=buffer_len)
  reasoned = ssr_reason(params, d, prompt, prompt_lengths, max_new_tokens, **kw)
  return ssr_answer(params, d, reasoned, **kw)


def run(model: Model, prompt, prompt_lengths, max_new_tokens, stop_tokens, ssr: SSR, *,
        controls: Controls, buffer_len: int) -> DecodeOutput:
  """`ssr_generate` for a loaded model (the `Job.run` of `prepare`)."""
  return ssr_generate(model.params, prompt, prompt_lengths, max_new_tokens, stop_tokens,
                      config=model.config, ssr=ssr, buffer_len=buffer_len,
                      pad_id=decoding.pad_id(model.config), controls=controls)


def prepare(model: Model, prompts, ssr: SSR, max_new_tokens: int, *, lengths=None,
            stop_tokens=None) -> Job:
  """`jaxdec.ssr_generate`'s arguments validated on the host, as a `Job` (its `per_row` and
  `args` are the two phases' inputs too: prompt, prompt_lengths, budget, stop ids, ssr)."""
  if not isinstance(ssr, SSR):
    raise TypeError(f"ssr must be a jaxdec.spec.SSR (SSR.for_tokenizer(tokenizer, budgets)), "
                    f"got {type(ssr).__name__}")
  a = decoding.ar_inputs(model, prompts, lengths, max_new_tokens, stop_ids=stop_tokens)
  ssr.check(a.model.config)
  return Job(a.model, run, (a.prompt, a.prompt_lengths), (np.int32(a.budget), a.stops, ssr),
             static=(("buffer_len", decoding.bucket(a.budget)),), budget=a.budget)
