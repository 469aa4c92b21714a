"""Speculative decoding: draft -> one target forward over [last token, drafts] -> verify ->
commit, all inside one `lax.while_loop` with static shapes.

Invariants per row: `seq[:total]` is the committed sequence (prompt + generated); the target
cache holds K/V for its first total - 1 tokens (the last token is fed next step, as the root of
the draft tree). Rolling back rejected drafts only moves the cache length; for trees the accepted
path's K/V is compacted into consecutive slots first. Each row advances by its own accepted
count, so a ragged batch gives every row what it would get alone.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxdec.controls import Controls, ControlState, token_logprobs, tree_pending
from jaxdec.decoding import (DecodeOutput, check_returned, clamp_budget, positions, prefill,
                             typed_key)
from jaxdec.model import KVCache, ModelConfig, decode_hidden, embed, unembed
from jaxdec.sampling import Sampling
from jaxdec.spec.drafter import Context, Drafter, Feedback
from jaxdec.spec.tree import DynamicTree, Tree
from jaxdec.spec.verify import Verdict, Verifier


@struct.dataclass
class _SpecState:
  cache: KVCache
  draft_state: Any
  seq: jax.Array  # i32[B, S]
  total: jax.Array  # i32[B]
  done: jax.Array  # bool[B]
  hidden: jax.Array | None  # [layers, B, S, D] at the drafter's layers, or None.
  target_forwards: jax.Array  # i32[B]
  accepted: jax.Array  # i32[B, max_steps]: drafts accepted at each step (-1 = no step).
  step: jax.Array  # i32[]
  controls: ControlState
  logprobs: jax.Array | None  # f32[B, S] aligned with seq, with controls.logprobs.


@struct.dataclass
class _Step:
  """Everything a step reads besides the state (static settings first)."""

  config: ModelConfig = struct.field(pytree_node=False)
  layers: tuple = struct.field(pytree_node=False)
  params: dict
  drafter: Drafter
  verifier: Verifier
  sampling: Sampling | None  # None: greedy.
  key: jax.Array | None
  stop_tokens: jax.Array
  prompt_lengths: jax.Array
  budget: jax.Array
  controls: Controls


def compact_path(cache: KVCache, base: jax.Array, path: jax.Array,
                 tree: Tree | DynamicTree) -> KVCache:
  """Move the K/V of the accepted tree nodes `path` i32[B, D] (written at slots base + node) to
  slots base + 1 .. base + D so the cache is a plain sequence again. Chains need nothing."""
  if tree.is_chain:
    return cache
  dst = base[:, None] + 1 + jnp.arange(path.shape[1], dtype=jnp.int32)[None, :]
  return cache.move(base[:, None] + path, dst)


def _verify(c: _Step, s: _SpecState, rows: jax.Array):
  """Draft, run the target over [root, drafts], verify: (draft, verdict, logits, ruled, hidden,
  cache, state); `logits` are the target's own, `ruled` after the controls' rules."""
  tree = c.drafter.tree
  base = s.total - 1  # Position (and cache slot) of the root: the last committed token.
  ctx = Context(seq=s.seq, total=s.total, hidden=s.hidden, cache=s.cache, sampling=c.sampling,
                key=c.key, rows=rows)
  draft, draft_state = c.drafter.propose(s.draft_state, ctx)
  shape = (s.seq.shape[0], tree.size)
  returned = {"tokens": (draft.tokens, shape), "valid": (draft.valid, shape)}
  if draft.parents is not None:
    returned["parents"] = (draft.parents, shape)
  check_returned(c.drafter, "propose", **returned)
  topo = tree.topology(draft, shape[0])  # This step's per-row tree.
  root = jnp.take_along_axis(s.seq, base[:, None], 1)
  block = jnp.concatenate([root, draft.tokens], axis=1)
  block_positions = base[:, None] + topo.depths
  tree_mask = None if topo.is_chain else topo.ancestor_mask
  h, hidden, cache = decode_hidden(c.params, embed(c.params, block), block_positions, s.cache,
                                   config=c.config, tree=tree_mask, hidden_layers=c.layers)
  logits = unembed(c.params, h, c.config)
  pending = None
  if c.controls.rules is not None:
    pending = tree_pending(block, topo.ancestor_mask, c.config.vocab_size)
  generated = (s.total - c.prompt_lengths)[:, None] + topo.depths
  ruled = c.controls.process(logits, s.controls, generated, c.stop_tokens, pending)
  verdict = c.verifier(draft, ruled, topo, c.sampling, c.key, rows, base)
  return draft, verdict, logits, ruled, hidden, cache, draft_state


def _emit(c: _Step, s: _SpecState, draft, verdict: Verdict):
  """The tokens this step commits: the accepted path then the next token, cut at the budget and
  after a stop token or string. Returns (emitted i32[B, D + 1], count i32[B], hit_stop bool[B],
  the stop strings' histories or None)."""
  batch = draft.tokens.shape[0]
  num = verdict.num_accepted
  j = jnp.arange(verdict.path.shape[1] + 1, dtype=jnp.int32)[None, :]
  path_tokens = jnp.take_along_axis(draft.tokens, jnp.maximum(verdict.path - 1, 0), 1)
  path_tokens = jnp.concatenate([path_tokens, jnp.zeros((batch, 1), jnp.int32)], axis=1)
  emitted = jnp.where(j < num[:, None], path_tokens, verdict.next_token[:, None])
  string_hit, histories = c.controls.stop_hits(s.controls, emitted, s.total - c.prompt_lengths)
  is_stop = (jnp.isin(emitted, c.stop_tokens) | string_hit) & (j <= num[:, None])
  first_stop = jnp.where(jnp.any(is_stop, 1), jnp.argmax(is_stop, 1), j.shape[1])
  room = c.budget - (s.total - c.prompt_lengths)
  count = jnp.minimum(jnp.minimum(num + 1, room), first_stop + 1)
  count = jnp.where(~s.done, count, 0)
  hit_stop = jnp.any(is_stop & (j < count[:, None]), axis=1)
  return emitted, count, hit_stop, histories


def _step(c: _Step, s: _SpecState) -> _SpecState:
  rows = jnp.arange(s.seq.shape[0], dtype=jnp.int32)
  capacity = s.seq.shape[1]
  active = ~s.done
  base = s.total - 1
  draft, verdict, logits, ruled, block_hidden, cache, draft_state = _verify(c, s, rows)
  emitted, count, hit_stop, histories = _emit(c, s, draft, verdict)
  j = jnp.arange(emitted.shape[1], dtype=jnp.int32)[None, :]
  write = j < count[:, None]
  slots = jnp.where(write, s.total[:, None] + j, capacity)
  seq = s.seq.at[rows[:, None], slots].set(emitted, mode="drop")
  total = s.total + count
  cache = compact_path(cache, base, verdict.path, c.drafter.tree)
  cache = cache.with_length(jnp.where(active, total - 1, s.cache.length))
  # emitted[:, j] was chosen from the logits at node nodes[:, j]: the root, then the path.
  nodes = jnp.concatenate([jnp.zeros_like(verdict.path[:, :1]), verdict.path], axis=1)
  logprobs = s.logprobs
  if logprobs is not None:
    at_nodes = jnp.take_along_axis(logits, nodes[:, :, None], 1)
    logprobs = logprobs.at[rows[:, None], slots].set(token_logprobs(at_nodes, emitted), mode="drop")
  hidden = s.hidden
  if hidden is not None:  # Hidden states of the root and the accepted path, at their positions.
    picked = jnp.take_along_axis(block_hidden, nodes[None, :, :, None], 2)
    hidden = hidden.at[:, rows[:, None], jnp.where(write, base[:, None] + j, capacity)].set(
        picked, mode="drop")
  done = s.done | (active & (hit_stop | (total - c.prompt_lengths >= c.budget)))
  committed = jnp.minimum(verdict.num_accepted, count)  # Drafts that made it into the output.
  feedback = Feedback(draft=draft, verdict=verdict, count=count, total=total, active=active,
                      logits=jnp.take_along_axis(ruled, nodes[:, :, None], 1))
  return _SpecState(
      cache=cache, draft_state=c.drafter.update(draft_state, feedback), seq=seq, total=total,
      done=done, hidden=hidden, target_forwards=s.target_forwards + active.astype(jnp.int32),
      accepted=s.accepted.at[:, s.step].set(jnp.where(active, committed, -1), mode="drop"),
      step=s.step + 1, controls=c.controls.advance(s.controls, emitted, count, histories),
      logprobs=logprobs)


def _start(c: _Step, prompt: jax.Array, capacity: int, buffer_len: int, pad_id: int) -> _SpecState:
  """Prefill: the target produces the first token, as in plain AR decoding; the sequence,
  hidden-state and log-probability buffers get `capacity` slots."""
  batch, width = prompt.shape
  rows = jnp.arange(batch, dtype=jnp.int32)
  cache = KVCache.init(c.config, batch, capacity, dtype=c.params["embed"].dtype)
  logits, cache, prompt_hidden = prefill(c.params, prompt, c.prompt_lengths, cache,
                                         config=c.config, hidden_layers=c.layers)
  zeros = jnp.zeros((batch,), jnp.int32)
  first, stop, logp, ctl = c.controls.choose(
      logits, c.controls.start(prompt, c.prompt_lengths, c.config.vocab_size), zeros, zeros == 0,
      sampling=c.sampling, key=c.key, prompt_lengths=c.prompt_lengths, stop_tokens=c.stop_tokens)
  seq = jnp.full((batch, capacity), pad_id, jnp.int32).at[:, :width].set(prompt)
  seq = seq.at[rows, c.prompt_lengths].set(first)
  logprobs = None
  if logp is not None:
    logprobs = jnp.zeros((batch, capacity)).at[rows, c.prompt_lengths].set(logp)
  hidden = None
  if c.layers:
    hidden = jnp.zeros((len(c.layers), batch, capacity, c.config.hidden_size), prompt_hidden.dtype)
    hidden = hidden.at[:, :, :width].set(prompt_hidden)
  draft_state = c.drafter.init(prompt, c.prompt_lengths, capacity,
                               prompt_hidden if c.layers else None)
  return _SpecState(
      cache=cache, draft_state=draft_state, seq=seq,
      total=c.prompt_lengths + 1, hidden=hidden, done=stop | (c.budget <= 1),
      target_forwards=jnp.ones((batch,), jnp.int32),
      accepted=jnp.full((batch, buffer_len), -1, jnp.int32), step=jnp.zeros((), jnp.int32),
      controls=ctl, logprobs=logprobs)


def _output(c: _Step, state: _SpecState, buffer_len: int, pad_id: int) -> DecodeOutput:
  """The generated tokens (and log-probabilities) cut out of the sequence buffer, and the stats."""
  batch, capacity = state.seq.shape
  lengths = state.total - c.prompt_lengths
  offsets = jnp.minimum(positions(batch, buffer_len, c.prompt_lengths), capacity - 1)
  produced = jnp.arange(buffer_len)[None, :] < lengths[:, None]
  tokens = jnp.where(produced, jnp.take_along_axis(state.seq, offsets, 1), pad_id)
  logprobs = None
  if state.logprobs is not None:
    logprobs = jnp.where(produced, jnp.take_along_axis(state.logprobs, offsets, 1), 0.0)
  stats = {
      "acceptance_length": lengths.astype(jnp.float32) / state.target_forwards.astype(jnp.float32),
      "target_forwards": state.target_forwards,
      "draft_forwards": (state.target_forwards - 1) * c.drafter.forwards,
      "accepted": state.accepted,
      "nfe": state.target_forwards,
      "steps": state.step,
  }
  return DecodeOutput(tokens=tokens, lengths=lengths, stats=stats, logprobs=logprobs)


def speculative_generate(params: dict, prompt: jax.Array, prompt_lengths: jax.Array,
                         max_new_tokens: jax.Array, key: jax.Array | None, stop_tokens: jax.Array, *,
                         config: ModelConfig, drafter: Drafter, verifier: Verifier, buffer_len: int,
                         sampling: Sampling | None = None, pad_id: int = 0,
                         controls: Controls = Controls()) -> DecodeOutput:
  """Generate with a drafter and a verifier. Arguments as `jaxdec.ar.generate`, plus:

    drafter: a `Drafter` (DraftModel, PromptLookup, AdaPLD, or your own);
    verifier: a `Verifier`: Greedy(), Exact(), Truncation(...), Collaborative(...).

  Returns DecodeOutput whose stats hold per-row `acceptance_length` (tokens per target
  forward, prefill included), `target_forwards`, `draft_forwards`, `accepted` i32[B, steps]
  (drafts committed at each step, -1 past the row's last step) and `steps`.
  """
  batch, width = prompt.shape
  # A row that is not done has total <= P + budget - 1, so its block (root at total - 1, then N
  # nodes) ends at slot P + buffer_len + N - 2 at most: capacity P + buffer_len + N - 1 suffices
  # (done rows keep running the batch's forwards; their writes past the end are dropped).
  capacity = width + buffer_len + max(b.tree.size for b in drafter.variants()) - 1
  setting = _Step(params=params, drafter=drafter, verifier=verifier, sampling=sampling,
                  key=typed_key(key), stop_tokens=stop_tokens, prompt_lengths=prompt_lengths,
                  budget=clamp_budget(max_new_tokens, batch, buffer_len), config=config,
                  layers=tuple(drafter.hidden_layers(config)), controls=controls)
  state = _start(setting, prompt, capacity, buffer_len, pad_id)
  return _output(setting, _decode(setting, state), buffer_len, pad_id)


def _decode(c: _Step, state: _SpecState) -> _SpecState:
  """Steps until every row is done, from any consistent state (after `_start`, or SSR's
  reasoning phase): one compiled step per drafter variant, chosen with `lax.switch`."""
  drafter = c.drafter
  steps = [functools.partial(_step, c.replace(drafter=b)) for b in drafter.variants()]

  def step(s: _SpecState) -> _SpecState:
    if len(steps) == 1:
      return steps[0](s)
    return jax.lax.switch(jnp.clip(drafter.pick(s.draft_state), 0, len(steps) - 1), steps, s)

  return jax.lax.while_loop(lambda s: ~jnp.all(s.done), step, state)
