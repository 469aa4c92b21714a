"""Speculative decoding: draft -> one target forward over [last token, drafts] -> verify ->
commit, all inside one `lax.while_loop` with static shapes.

Invariants per row: `seq[:total]` is the committed sequence (prompt + generated); the target
cache holds K/V for its first total - 1 tokens (the last token is fed next step, as the root of
the draft tree). Rolling back rejected drafts only moves the cache length; for trees the accepted
path's K/V is compacted into consecutive slots first. Each row advances by its own accepted
count, so a ragged batch gives every row what it would get alone.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxdec.ar.loop import GenerateOutput
from jaxdec.model import KVCache, ModelConfig, decode_hidden, embed, unembed
from jaxdec.sampling import Sampling, sample_tokens
from jaxdec.spec.drafters import Context, Drafter
from jaxdec.spec.tree import Tree


@struct.dataclass
class _SpecState:
  cache: KVCache
  draft_state: Any
  seq: jax.Array  # i32[B, S]
  total: jax.Array  # i32[B]
  done: jax.Array  # bool[B]
  hidden: jax.Array | None  # f32[B, S, D] or None
  target_forwards: jax.Array  # i32[B]
  accepted: jax.Array  # i32[B, max_steps]: drafts accepted at each step (-1 = no step).
  step: jax.Array  # i32[]


def compact_path(cache: KVCache, base: jax.Array, path: jax.Array, tree: Tree) -> KVCache:
  """Move the K/V of the accepted tree nodes `path` i32[B, D] (written at slots base + node) to
  slots base + 1 .. base + D so the cache is a plain sequence again. Chains need nothing."""
  if tree.is_chain:
    return cache
  depth = path.shape[1]
  src = base[:, None] + path  # [B, D]
  dst = base[:, None] + 1 + jnp.arange(depth, dtype=jnp.int32)[None, :]

  def move(buffer):  # [L, B, S, K, hd]
    rows = jnp.arange(buffer.shape[1])[:, None]
    picked = buffer[:, rows, jnp.clip(src, 0, buffer.shape[2] - 1)]
    return buffer.at[:, rows, dst].set(picked, mode="drop")

  return cache.replace(k=move(cache.k), v=move(cache.v))


def speculative_generate(params: dict, prompt: jax.Array, prompt_lengths: jax.Array,
                         max_new_tokens: jax.Array, key: jax.Array | None, stop_tokens: jax.Array, *,
                         config: ModelConfig, drafter: Drafter, verifier, buffer_len: int,
                         sampling: Sampling | None = None, pad_id: int = 0) -> GenerateOutput:
  """Generate with a drafter and a verifier. Arguments as `jaxdec.ar.generate`, plus:

    drafter: a `Drafter` (DraftModel, PromptLookup, AdaPLD, ...);
    verifier: Greedy(), Exact(), Truncation(...), Collaborative(...).

  Returns GenerateOutput whose stats hold per-row `acceptance_length` (tokens per target
  forward, prefill included), `target_forwards`, `draft_forwards`, `accepted` i32[B, steps]
  (drafts committed at each step, -1 past the row's last step) and `steps`.
  """
  tree = drafter.tree
  batch, width = prompt.shape
  rows = jnp.arange(batch, dtype=jnp.int32)
  capacity = width + buffer_len + tree.size + 2
  budget = jnp.minimum(jnp.broadcast_to(jnp.asarray(max_new_tokens, jnp.int32), (batch,)), buffer_len)

  # Prefill: the target produces the first token, as in plain AR decoding.
  cache = KVCache.init(config, batch, capacity, dtype=params["embed"].dtype)
  positions = jnp.broadcast_to(jnp.arange(width, dtype=jnp.int32), (batch, width))
  hidden_prompt, _, cache = decode_hidden(params, embed(params, prompt), positions, cache, config=config)
  last_hidden = jnp.take_along_axis(hidden_prompt, (prompt_lengths - 1)[:, None, None], 1)[:, 0]
  first = sample_tokens(unembed(params, last_hidden, config), sampling, key, rows, prompt_lengths)
  seq = jnp.full((batch, capacity), pad_id, jnp.int32).at[:, :width].set(prompt)
  seq = seq.at[rows, prompt_lengths].set(first)
  hidden = None
  if drafter.needs_hidden:
    hidden = jnp.zeros((batch, capacity, config.hidden_size), hidden_prompt.dtype)
    hidden = hidden.at[:, :width].set(hidden_prompt)
  state = _SpecState(
      cache=cache.with_length(prompt_lengths),
      draft_state=drafter.init(prompt, prompt_lengths, capacity),
      seq=seq, total=prompt_lengths + 1,
      done=jnp.isin(first, stop_tokens) | (budget <= 1), hidden=hidden,
      target_forwards=jnp.ones((batch,), jnp.int32),
      accepted=jnp.full((batch, buffer_len), -1, jnp.int32), step=jnp.zeros((), jnp.int32))

  depths = jnp.asarray(tree.depths)
  block_mask = None if tree.is_chain else jnp.asarray(tree.ancestor_mask)[None]

  def step(s: _SpecState) -> _SpecState:
    active = ~s.done
    base = s.total - 1  # Position (and cache slot) of the root: the last committed token.
    ctx = Context(seq=s.seq, total=s.total, hidden=s.hidden, sampling=sampling, key=key, rows=rows)
    draft, draft_state = drafter.propose(s.draft_state, ctx)
    root = jnp.take_along_axis(s.seq, base[:, None], 1)
    block = jnp.concatenate([root, draft.tokens], axis=1)
    block_positions = base[:, None] + depths[None, :]
    hidden_block, _, cache = decode_hidden(params, embed(params, block), block_positions,
                                           s.cache, config=config, mask=block_mask)
    logits = unembed(params, hidden_block, config)
    verdict = verifier(draft, logits, tree, sampling, key, rows, base)

    # Emit the accepted path then the next token, cut at the budget and after a stop token.
    num = verdict.num_accepted
    j = jnp.arange(verdict.path.shape[1] + 1, dtype=jnp.int32)[None, :]
    path_tokens = jnp.take_along_axis(draft.tokens, jnp.maximum(verdict.path - 1, 0), 1)
    path_tokens = jnp.concatenate([path_tokens, jnp.zeros((batch, 1), jnp.int32)], axis=1)
    emitted = jnp.where(j < num[:, None], path_tokens, verdict.next_token[:, None])
    is_stop = jnp.isin(emitted, stop_tokens) & (j <= num[:, None])
    first_stop = jnp.where(jnp.any(is_stop, 1), jnp.argmax(is_stop, 1), j.shape[1])
    room = budget - (s.total - prompt_lengths)
    count = jnp.minimum(jnp.minimum(num + 1, room), first_stop + 1)
    count = jnp.where(active, count, 0)
    write = j < count[:, None]
    slots = jnp.where(write, s.total[:, None] + j, capacity)  # capacity = dropped.
    seq = s.seq.at[rows[:, None], slots].set(emitted, mode="drop")

    cache = compact_path(cache, base, verdict.path, tree)
    total = s.total + count
    cache = cache.with_length(jnp.where(active, total - 1, s.cache.length))
    hidden = s.hidden
    if hidden is not None:  # Hidden states of the root and the accepted path, at their positions.
      nodes = jnp.concatenate([jnp.zeros((batch, 1), jnp.int32), verdict.path], axis=1)
      picked = jnp.take_along_axis(hidden_block, nodes[..., None], 1)
      hidden_slots = jnp.where(j < count[:, None], base[:, None] + j, capacity)
      hidden = hidden.at[rows[:, None], hidden_slots].set(picked, mode="drop")
    hit_stop = jnp.any(is_stop & write, axis=1)
    done = s.done | (active & (hit_stop | (total - prompt_lengths >= budget)))
    committed = jnp.minimum(num, count)  # Drafts that made it into the output.
    accepted = s.accepted.at[:, s.step].set(jnp.where(active, committed, -1), mode="drop")
    return _SpecState(cache=cache, draft_state=draft_state, seq=seq, total=total, done=done,
                      hidden=hidden, target_forwards=s.target_forwards + active.astype(jnp.int32),
                      accepted=accepted, step=s.step + 1)

  state = jax.lax.while_loop(lambda s: ~jnp.all(s.done), step, state)
  lengths = state.total - prompt_lengths
  offsets = prompt_lengths[:, None] + jnp.arange(buffer_len, dtype=jnp.int32)[None, :]
  tokens = jnp.take_along_axis(state.seq, jnp.minimum(offsets, capacity - 1), 1)
  tokens = jnp.where(jnp.arange(buffer_len)[None, :] < lengths[:, None], tokens, pad_id)
  draft_steps = state.target_forwards - 1
  stats = {
      "acceptance_length": lengths.astype(jnp.float32) / state.target_forwards.astype(jnp.float32),
      "target_forwards": state.target_forwards,
      "draft_forwards": draft_steps * drafter.forwards,
      "accepted": state.accepted,
      "nfe": state.target_forwards,
      "steps": state.step,
  }
  return GenerateOutput(tokens=tokens, lengths=lengths, stats=stats)
