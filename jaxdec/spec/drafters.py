"""Drafters: propose draft tokens for the target to verify. Each is a pytree (a model's weights
are leaves; sizes are static fields) with the same small protocol:

  tree            static `Tree` topology of the drafts (a chain for single-sequence drafters)
  needs_hidden    whether `Context.hidden` (the target's final hidden states) must be kept
  forwards        draft-model forward passes per step (for the stats)
  init(prompt, prompt_lengths, capacity) -> state
  propose(state, ctx) -> (Draft, state)
  check(target_config)  raises ValueError if the drafter cannot serve this target
"""

from __future__ import annotations

from typing import Any, Protocol

import jax
import jax.numpy as jnp
from flax import struct

from jaxdec.model import KVCache, Model, ModelConfig, decode_hidden, embed, forward
from jaxdec.sampling import Sampling, sample_tokens
from jaxdec.spec.tree import Tree
from jaxdec.spec.verify import _DRAFT, Draft, target_probs


@struct.dataclass
class Context:
  """What a drafter may read: seq i32[B, S] committed tokens (prompt + generated), total i32[B]
  committed count, hidden f32[B, S, D] target final hidden states at positions < total - 1
  (None unless the drafter needs them), the sampling settings and key, rows i32[B]."""

  seq: jax.Array
  total: jax.Array
  hidden: jax.Array | None
  sampling: Sampling | None
  key: jax.Array | None
  rows: jax.Array


class Drafter(Protocol):
  tree: Tree
  needs_hidden: bool
  forwards: int

  def init(self, prompt: jax.Array, prompt_lengths: jax.Array, capacity: int) -> Any: ...

  def propose(self, state: Any, ctx: Context) -> tuple[Draft, Any]: ...

  def check(self, target: ModelConfig) -> None: ...


def _check_positive(name: str, value) -> None:
  if isinstance(value, bool) or not isinstance(value, int) or value < 1:
    raise ValueError(f"{name} must be an int >= 1, got {value!r}")


def _gather(seq: jax.Array, index: jax.Array) -> jax.Array:
  """seq[b, index[b, ...]] with out-of-range indices clipped (callers mask them)."""
  flat = jnp.clip(index, 0, seq.shape[1] - 1).reshape(index.shape[0], -1)
  return jnp.take_along_axis(seq, flat, 1).reshape(index.shape)


@struct.dataclass
class DraftModel:
  """A smaller AR model with the target's vocabulary drafts `num_tokens` tokens autoregressively
  (sampled with the target's sampling settings, so `Exact` verification is lossless).

  Its KV cache is resynchronised each step by re-feeding the last two committed tokens at
  length total - 2: whatever was accepted, rejected or never fed, the cache then holds exactly
  the committed sequence (a re-fed token rewrites identical K/V).
  """

  model: Model
  num_tokens: int = struct.field(pytree_node=False, default=4)
  needs_hidden = False

  def __post_init__(self):
    _check_positive("num_tokens", self.num_tokens)

  @property
  def tree(self) -> Tree:
    return Tree.chain(self.num_tokens)

  @property
  def forwards(self) -> int:
    return self.num_tokens

  def check(self, target: ModelConfig) -> None:
    if self.model.config.vocab_size != target.vocab_size:
      raise ValueError(f"draft vocabulary {self.model.config.vocab_size} != target vocabulary "
                       f"{target.vocab_size}: drafter and target must share a tokenizer")
    if not self.model.config.causal:
      raise ValueError("the draft model must be causal (autoregressive)")

  def init(self, prompt, prompt_lengths, capacity):
    params, config = self.model.params, self.model.config
    batch, width = prompt.shape
    cache = KVCache.init(config, batch, capacity, dtype=params["embed"].dtype)
    positions = jnp.broadcast_to(jnp.arange(width, dtype=jnp.int32), (batch, width))
    _, _, cache = decode_hidden(params, embed(params, prompt), positions, cache, config=config)
    return cache.with_length(prompt_lengths)

  def propose(self, state: KVCache, ctx: Context):
    params, config = self.model.params, self.model.config
    total = ctx.total
    key = None if ctx.key is None else jax.random.fold_in(ctx.key, _DRAFT)
    index = total[:, None] + jnp.array([[-2, -1]], jnp.int32)
    logits, _, cache = forward(params, _gather(ctx.seq, index), index, state.with_length(total - 2),
                               config=config)

    def draw(logit, position):
      token = sample_tokens(logit, ctx.sampling, key, ctx.rows, position)
      probs = None if ctx.sampling is None else target_probs(logit[:, None], ctx.sampling)[:, 0]
      return token, probs

    def step(carry, i):
      logit, cache = carry
      token, probs = draw(logit, total + i)
      logits, _, cache = forward(params, token[:, None], (total + i)[:, None], cache, config=config)
      return (logits[:, 0], cache), (token, probs)

    (logit, cache), (tokens, probs) = jax.lax.scan(
        step, (logits[:, 1], cache), jnp.arange(self.num_tokens - 1, dtype=jnp.int32))
    last, last_probs = draw(logit, total + self.num_tokens - 1)
    tokens = jnp.concatenate([tokens.T, last[:, None]], axis=1)
    if probs is not None:
      probs = jnp.concatenate([jnp.swapaxes(probs, 0, 1), last_probs[:, None]], axis=1)
    return Draft(tokens=tokens, valid=jnp.ones(tokens.shape, bool), probs=probs), cache


def _ngram_matches(ctx: Context, n: int) -> tuple[jax.Array, jax.Array]:
  """(match bool[B, S - n + 1], usable bool[B]): match[b, s] iff seq[b, s:s+n] equals the last n
  committed tokens and s < total - n (the trailing self-match is excluded)."""
  seq, total = ctx.seq, ctx.total
  width = seq.shape[1] - n + 1
  query = _gather(seq, total[:, None] - n + jnp.arange(n, dtype=jnp.int32)[None, :])
  match = jnp.ones((seq.shape[0], width), bool)
  for j in range(n):
    match &= seq[:, j: j + width] == query[:, j: j + 1]
  match &= jnp.arange(width, dtype=jnp.int32)[None, :] < (total - n)[:, None]
  return match, total - n >= 0


def _continuations(ctx: Context, starts: jax.Array, found: jax.Array, depth: int):
  """Tokens seq[start : start + depth] per (row, branch), valid while before `total`.
  starts/found: [B, branches] -> tokens, valid [B, branches * depth]."""
  offsets = starts[..., None] + jnp.arange(depth, dtype=jnp.int32)[None, None, :]
  tokens = _gather(ctx.seq, offsets)
  valid = found[..., None] & (offsets < ctx.total[:, None, None])
  return tokens.reshape(tokens.shape[0], -1), valid.reshape(valid.shape[0], -1)


def _lexical(ctx: Context, max_ngram: int, min_ngram: int, branches: int):
  """Longest n-gram first (n = max_ngram..min_ngram), earliest occurrences first. Returns the
  continuation starts [B, branches] and which are found."""
  batch = ctx.seq.shape[0]
  starts = jnp.zeros((batch, branches), jnp.int32)
  found = jnp.zeros((batch, branches), bool)
  have = jnp.zeros((batch,), bool)
  for n in range(max_ngram, min_ngram - 1, -1):
    match, usable = _ngram_matches(ctx, n)
    positions = jnp.arange(match.shape[1], dtype=jnp.int32)
    score, first = jax.lax.top_k(jnp.where(match, -positions[None, :], -(2 ** 30)), branches)
    hit = (score > -(2 ** 30)) & usable[:, None]
    take = ~have & jnp.any(hit, -1)
    starts = jnp.where(take[:, None], first.astype(jnp.int32) + n, starts)
    found = jnp.where(take[:, None], hit, found)
    have |= take
  return starts, found, have


@struct.dataclass
class PromptLookup:
  """Prompt-lookup decoding (n-gram copy from the prompt and generated text), with transformers'
  matching: the last n tokens for n = max_ngram..1, the earliest earlier occurrence, and the
  up to `num_tokens` tokens that followed it (fewer near the end: the rest are padding)."""

  max_ngram: int = struct.field(pytree_node=False, default=3)
  num_tokens: int = struct.field(pytree_node=False, default=6)
  needs_hidden = False
  forwards = 0

  def __post_init__(self):
    _check_positive("max_ngram", self.max_ngram)
    _check_positive("num_tokens", self.num_tokens)

  @property
  def tree(self) -> Tree:
    return Tree.chain(self.num_tokens)

  def check(self, target: ModelConfig) -> None:
    pass

  def init(self, prompt, prompt_lengths, capacity):
    return ()

  def propose(self, state, ctx: Context):
    starts, found, _ = _lexical(ctx, self.max_ngram, 1, 1)
    tokens, valid = _continuations(ctx, starts, found, self.num_tokens)
    return Draft(tokens=tokens, valid=valid), state


@struct.dataclass
class AdaPLD:
  """Adaptive prompt lookup: lexical n-gram lookup first (n >= min_ngram); when no n-gram
  matches, a semantic fallback retrieves the earlier positions whose target hidden states are
  most similar (cosine >= min_similarity) to the current one and copies what followed them.
  Up to `branches` such continuations of `depth` tokens are verified together as a tree."""

  max_ngram: int = struct.field(pytree_node=False, default=3)
  min_ngram: int = struct.field(pytree_node=False, default=2)
  depth: int = struct.field(pytree_node=False, default=4)
  branches: int = struct.field(pytree_node=False, default=3)
  min_similarity: float = struct.field(pytree_node=False, default=0.5)
  needs_hidden = True
  forwards = 0

  def __post_init__(self):
    for name in ("max_ngram", "min_ngram", "depth", "branches"):
      _check_positive(name, getattr(self, name))
    if self.min_ngram > self.max_ngram:
      raise ValueError(f"min_ngram={self.min_ngram} > max_ngram={self.max_ngram}")

  @property
  def tree(self) -> Tree:
    return Tree.branches(self.branches, self.depth)

  def check(self, target: ModelConfig) -> None:
    pass

  def init(self, prompt, prompt_lengths, capacity):
    return ()

  def propose(self, state, ctx: Context):
    starts, found, have = _lexical(ctx, self.max_ngram, self.min_ngram, self.branches)
    sem_starts, sem_found = self._semantic(ctx)
    starts = jnp.where(have[:, None], starts, sem_starts)
    found = jnp.where(have[:, None], found, sem_found)
    tokens, valid = _continuations(ctx, starts, found, self.depth)
    return Draft(tokens=tokens, valid=valid), state

  def _semantic(self, ctx: Context):
    """Positions s <= total - 3 whose hidden state is closest to the one at total - 2 (which
    predicted the last token): the token after s + 1 is a guess for the next one."""
    hidden = ctx.hidden.astype(jnp.float32)
    unit = hidden / jnp.maximum(jnp.linalg.norm(hidden, axis=-1, keepdims=True), 1e-6)
    query = _gather_rows(unit, ctx.total - 2)
    similarity = jnp.einsum("bsd,bd->bs", unit, query)
    positions = jnp.arange(hidden.shape[1], dtype=jnp.int32)[None, :]
    similarity = jnp.where(positions <= (ctx.total - 3)[:, None], similarity, -2.0)
    score, index = jax.lax.top_k(similarity, self.branches)
    return index.astype(jnp.int32) + 2, score >= self.min_similarity


def _gather_rows(x: jax.Array, index: jax.Array) -> jax.Array:
  """x[b, index[b]] for x[B, S, D] -> [B, D]."""
  return jnp.take_along_axis(x, jnp.clip(index, 0, x.shape[1] - 1)[:, None, None], 1)[:, 0]
