"""Speculative decoding over the token loop's core (`jaxdec.decoding`): draft -> one target
forward over [last token, drafts] -> verify -> commit, all inside one `lax.while_loop` with
static shapes. `start` / `step` / `decode` / `output` are public, so other methods (SSR's answer
phase) run the same step from their own state.

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
import numpy as np
from flax import struct

from jaxdec import decoding
from jaxdec.controls import Controls, tree_pending
from jaxdec.decoding import (DecodeOutput, Decoding, Job, LoopState, check_returned, clamp_budget,
                             prefill, typed_key)
from jaxdec.model import KVCache, Model, ModelConfig, decode_hidden, embed, unembed
from jaxdec.model.params import Params
from jaxdec.sampling import Sampling
from jaxdec.spec.drafter import Context, Drafter, Feedback, variants
from jaxdec.spec.tree import DynamicTree, Tree
from jaxdec.spec.verify import Exact, Greedy, Verifier, VerifyInputs


@struct.dataclass
class SpecCarry:
  """The speculative method's part of the loop carry (`LoopState.method`).

  cache: the target's KV cache, holding the first total - 1 committed tokens (the last one is
  fed next step, as the root of the draft tree); draft_state: the drafter's; hidden
  [layers, B, S, D] the target's hidden states at the drafter's layers, or None; accepted
  i32[B, max_steps]: drafts committed at each step (-1 = no step).
  """

  cache: KVCache
  draft_state: Any
  hidden: jax.Array | None
  accepted: jax.Array


@struct.dataclass
class Speculation:
  """What a speculative step reads besides the carry (static settings first): the target
  (config, params), the drafter and its hidden layers, the verifier."""

  config: ModelConfig = struct.field(pytree_node=False)
  layers: tuple = struct.field(pytree_node=False)
  params: Params
  drafter: Drafter
  verifier: Verifier

  @classmethod
  def create(cls, params: Params, config: ModelConfig, drafter: Drafter,
             verifier: Verifier) -> "Speculation":
    return cls(config=config, layers=tuple(drafter.hidden_layers(config)), params=params,
               drafter=drafter, verifier=verifier)

  def capacity(self, width: int, buffer_len: int) -> int:
    """Sequence and cache slots: a row that is not done has total <= P + T - 1, so its block
    (root at total - 1, then N nodes) ends at slot P + T + N - 2 at most (done rows keep running
    the batch's forwards; their writes past the end are dropped)."""
    return width + buffer_len + max(b.tree.size for b in variants(self.drafter)) - 1


def compact_path(cache: KVCache, base: jax.Array, path: jax.Array,
                 tree: Tree | DynamicTree) -> KVCache:
  """Move the K/V of the accepted tree nodes `path` i32[B, D] (written at slots base + node) to
  slots base + 1 .. base + D so the cache is a plain sequence again. Chains need nothing."""
  if tree.is_chain:
    return cache
  dst = base[:, None] + 1 + jnp.arange(path.shape[1], dtype=jnp.int32)[None, :]
  return cache.move(base[:, None] + path, dst)


def _verify(c: Speculation, d: Decoding, s: LoopState, rows: jax.Array):
  """Draft, run the target over [root, drafts], verify: (draft, verdict, logits, ruled, hidden,
  cache, state); `logits` are the target's own, `ruled` after the controls' rules."""
  m: SpecCarry = s.method
  tree = c.drafter.tree
  base = s.total - 1  # Position (and cache slot) of the root: the last committed token.
  ctx = Context(seq=s.seq, total=s.total, hidden=m.hidden, cache=m.cache, sampling=d.sampling,
                key=d.key, rows=rows)
  draft, draft_state = c.drafter.propose(m.draft_state, ctx)
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
  h, hidden, cache = decode_hidden(c.params, embed(c.params, block), block_positions, m.cache,
                                   config=c.config, tree=tree_mask, hidden_layers=c.layers)
  logits = unembed(c.params, h, c.config)
  pending = None
  if d.controls.rules is not None:
    pending = tree_pending(block, topo.ancestor_mask, c.config.vocab_size)
  generated = s.generated[:, None] + topo.depths
  ruled = d.controls.process(logits, s.controls, generated, d.stop_tokens, pending)
  verdict = c.verifier(VerifyInputs(draft=draft, logits=ruled, tree=topo, sampling=d.sampling,
                                    key=d.key, rows=rows, base=base))
  return draft, verdict, logits, ruled, hidden, cache, draft_state


def step(c: Speculation, d: Decoding, s: LoopState) -> LoopState:
  """One speculative step: draft, verify in one target forward, commit the accepted path and
  the next token (`decoding.commit`), roll the cache back to the committed sequence, tell the
  drafter."""
  m: SpecCarry = s.method
  rows = jnp.arange(s.seq.shape[0], dtype=jnp.int32)
  capacity = s.seq.shape[1]
  active = s.active
  base = s.total - 1
  draft, verdict, logits, ruled, block_hidden, cache, draft_state = _verify(c, d, s, rows)
  num = verdict.num_accepted
  # emitted[:, j] was chosen from the logits at node nodes[:, j]: the root, then the path.
  nodes = jnp.concatenate([jnp.zeros_like(verdict.path[:, :1]), verdict.path], axis=1)
  j = jnp.arange(nodes.shape[1], dtype=jnp.int32)[None, :]
  path_tokens = jnp.take_along_axis(draft.tokens, jnp.maximum(verdict.path - 1, 0), 1)
  path_tokens = jnp.concatenate([path_tokens, jnp.zeros_like(num)[:, None]], axis=1)
  emitted = jnp.where(j < num[:, None], path_tokens, verdict.next_token[:, None])
  at_nodes = jnp.take_along_axis(logits, nodes[:, :, None], 1)
  s, count = decoding.commit(d, s, emitted, num + 1, at_nodes)
  cache = compact_path(cache, base, verdict.path, c.drafter.tree)
  cache = cache.with_length(jnp.where(active, s.total - 1, m.cache.length))
  hidden = m.hidden
  if hidden is not None:  # Hidden states of the root and the accepted path, at their positions.
    write = j < count[:, None]
    picked = jnp.take_along_axis(block_hidden, nodes[None, :, :, None], 2)
    hidden = hidden.at[:, rows[:, None], jnp.where(write, base[:, None] + j, capacity)].set(
        picked, mode="drop")
  committed = jnp.minimum(num, count)  # Drafts that made it into the output.
  feedback = Feedback(draft=draft, verdict=verdict, count=count, total=s.total, active=active,
                      logits=jnp.take_along_axis(ruled, nodes[:, :, None], 1))
  method = SpecCarry(cache=cache, draft_state=c.drafter.update(draft_state, feedback),
                     hidden=hidden,
                     accepted=m.accepted.at[:, s.steps].set(jnp.where(active, committed, -1),
                                                            mode="drop"))
  return s.replace(method=method, forwards=s.forwards + active.astype(jnp.int32))


def start(c: Speculation, d: Decoding, prompt: jax.Array, prompt_lengths: jax.Array,
          budget: jax.Array, buffer_len: int) -> LoopState:
  """Prefill: the target produces the first token, as in plain AR decoding; the sequence,
  hidden-state and log-probability buffers get `c.capacity` slots."""
  batch, width = prompt.shape
  capacity = c.capacity(width, buffer_len)
  cache = KVCache.init(c.config, batch, capacity, dtype=c.params.embed.dtype)
  logits, cache, prompt_hidden = prefill(c.params, prompt, prompt_lengths, cache,
                                         config=c.config, hidden_layers=c.layers)
  hidden = None
  if c.layers:
    hidden = jnp.zeros((len(c.layers), batch, capacity, c.config.hidden_size), prompt_hidden.dtype)
    hidden = hidden.at[:, :, :width].set(prompt_hidden)
  draft_state = c.drafter.init(prompt, prompt_lengths, capacity,
                               prompt_hidden if c.layers else None)
  carry = SpecCarry(cache=cache, draft_state=draft_state, hidden=hidden,
                    accepted=jnp.full((batch, buffer_len), -1, jnp.int32))
  s = decoding.init(d, prompt, prompt_lengths, budget, capacity, c.config.vocab_size, carry)
  return decoding.first_token(d, s, logits)


def decode(c: Speculation, d: Decoding, s: LoopState) -> LoopState:
  """Steps until every row is done, from any consistent state (after `start`, or SSR's
  reasoning phase): one compiled step per drafter variant, chosen with `lax.switch`."""
  drafter = c.drafter
  steps = [functools.partial(step, c.replace(drafter=b), d) for b in variants(drafter)]

  def one(s: LoopState) -> LoopState:
    if len(steps) == 1:
      return steps[0](s)
    return jax.lax.switch(jnp.clip(drafter.pick(s.method.draft_state), 0, len(steps) - 1),
                          steps, s)

  return decoding.run(one, s)


def output(c: Speculation, d: Decoding, s: LoopState, buffer_len: int) -> DecodeOutput:
  """The generated tokens and the stats, speculation's added: per-row `acceptance_length`
  (tokens per target forward, prefill included), `target_forwards`, `draft_forwards`,
  `accepted` i32[B, steps]."""
  forwards = s.forwards
  return decoding.output(
      d, s, buffer_len,
      acceptance_length=s.generated.astype(jnp.float32) / jnp.maximum(forwards, 1).astype(jnp.float32),
      target_forwards=forwards, draft_forwards=jnp.maximum(forwards - 1, 0) * c.drafter.forwards,
      accepted=s.method.accepted)


def speculative_generate(params: Params, prompt: jax.Array, prompt_lengths: jax.Array,
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
  c = Speculation.create(params, config, drafter, verifier)
  d = Decoding(sampling=sampling, key=typed_key(key), stop_tokens=stop_tokens, controls=controls,
               pad_id=pad_id)
  budget = clamp_budget(max_new_tokens, prompt.shape[0], buffer_len)
  s = start(c, d, prompt, prompt_lengths, budget, buffer_len)
  return output(c, d, decode(c, d, s), buffer_len)


def run(model: Model, prompt, prompt_lengths, sampling, max_new_tokens, key, stop_tokens,
        drafter: Drafter, verifier: Verifier, *, controls: Controls,
        buffer_len: int) -> DecodeOutput:
  """`speculative_generate` for a loaded model (the `Job.run` of `prepare`)."""
  return speculative_generate(model.params, prompt, prompt_lengths, max_new_tokens, key,
                              stop_tokens, config=model.config, drafter=drafter,
                              verifier=verifier, buffer_len=buffer_len, sampling=sampling,
                              pad_id=decoding.pad_id(model.config), controls=controls)


def prepare(model: Model, prompts, drafter, verifier=None, max_new_tokens=64, sampling=None,
            key=None, *, lengths=None, stop_tokens=None) -> Job:
  """`jaxdec.speculative_generate`'s arguments validated on the host, as a `Job`; the verifier
  defaults to `Greedy()` without sampling and `Exact()` with it."""
  a = decoding.ar_inputs(model, prompts, lengths, max_new_tokens, sampling, key, stop_tokens)
  if verifier is None:
    verifier = Greedy() if a.sampling is None else Exact()
  if isinstance(drafter, Model):
    raise TypeError("drafter is a Model: wrap a draft model as spec.DraftModel(model, "
                    "num_tokens=4) (the tokens it drafts a step)")
  decoding.check_part(drafter, Drafter, "drafter")
  decoding.check_part(verifier, Verifier, "verifier")
  drafter.check(a.model.config)
  for branch in variants(drafter):
    verifier.check(branch.tree, a.sampling)
  return Job(a.model, run, (a.prompt, a.prompt_lengths, a.sampling),
             (np.int32(a.budget), a.key, a.stops, drafter, verifier),
             static=(("buffer_len", decoding.bucket(a.budget)),),
             parts=decoding.part_types(drafter, verifier), budget=a.budget)
