"""Prompt-lookup decoding: draft by copying what followed an earlier occurrence of the last few
tokens (n-gram reuse from the prompt and the generated text); no draft model."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from jaxdec.plugins import Param, register_cli
from jaxdec.spec.drafter import Context, Drafter, check_positive, gather
from jaxdec.spec.tree import Tree
from jaxdec.spec.verify import Draft


def ngram_matches(ctx: Context, n: int) -> tuple[jax.Array, jax.Array]:
  """(match bool[B, S - n + 1], usable bool[B]): match[b, s] iff seq[b, s:s+n] equals the last n
  committed tokens and s < total - n (the trailing self-match is excluded)."""
  seq, total = ctx.seq, ctx.total
  width = seq.shape[1] - n + 1
  query = gather(seq, total[:, None] - n + jnp.arange(n, dtype=jnp.int32)[None, :])
  match = jnp.ones((seq.shape[0], width), bool)
  for j in range(n):
    match &= seq[:, j: j + width] == query[:, j: j + 1]
  match &= jnp.arange(width, dtype=jnp.int32)[None, :] < (total - n)[:, None]
  return match, total - n >= 0


def continuations(ctx: Context, starts: jax.Array, found: jax.Array, depth: int):
  """Tokens seq[start : start + depth] per (row, branch), valid while before `total`.
  starts/found: [B, branches] -> tokens, valid [B, branches * depth]."""
  offsets = starts[..., None] + jnp.arange(depth, dtype=jnp.int32)[None, None, :]
  tokens = gather(ctx.seq, offsets)
  valid = found[..., None] & (offsets < ctx.total[:, None, None])
  return tokens.reshape(tokens.shape[0], -1), valid.reshape(valid.shape[0], -1)


def lexical_matches(ctx: Context, max_ngram: int, min_ngram: int, branches: int):
  """Longest n-gram first (n = max_ngram..min_ngram), earliest occurrences first. Returns the
  continuation starts i32[B, branches], which are found bool[B, branches], and whether any
  n-gram matched bool[B]."""
  batch = ctx.seq.shape[0]
  starts = jnp.zeros((batch, branches), jnp.int32)
  found = jnp.zeros((batch, branches), bool)
  have = jnp.zeros((batch,), bool)
  for n in range(max_ngram, min_ngram - 1, -1):
    match, usable = ngram_matches(ctx, n)
    positions = jnp.arange(match.shape[1], dtype=jnp.int32)
    # Scores in f32 (positions and the fill are exact there): XLA's CPU top_k on i32 is a full
    # sort, ~100 us per call at 1K positions, against ~2 us on f32.
    earliest = jnp.where(match, -positions[None, :], -(2 ** 30)).astype(jnp.float32)
    score, first = jax.lax.top_k(earliest, branches)
    hit = (score > -(2 ** 30)) & usable[:, None]
    take = ~have & jnp.any(hit, -1)
    starts = jnp.where(take[:, None], first.astype(jnp.int32) + n, starts)
    found = jnp.where(take[:, None], hit, found)
    have |= take
  return starts, found, have


@register_cli("drafter", "lookup", order=10, help="prompt lookup",
              params=(Param("num_tokens", int, "draft tokens a step"),
                      Param("max_ngram", int, "longest n-gram matched")))
@struct.dataclass
class PromptLookup(Drafter):
  """Prompt-lookup decoding with transformers' matching: the last n tokens for n =
  max_ngram..1, the earliest earlier occurrence, and the up to `num_tokens` tokens that followed
  it (fewer near the end: the rest are padding)."""

  max_ngram: int = struct.field(pytree_node=False, default=3)
  num_tokens: int = struct.field(pytree_node=False, default=6)
  forwards = 0

  def __post_init__(self):
    check_positive("max_ngram", self.max_ngram)
    check_positive("num_tokens", self.num_tokens)

  @property
  def tree(self) -> Tree:
    return Tree.chain(self.num_tokens)

  def init(self, prompt, prompt_lengths, capacity, hidden):
    return ()

  def propose(self, state, ctx: Context):
    starts, found, _ = lexical_matches(ctx, self.max_ngram, 1, 1)
    tokens, valid = continuations(ctx, starts, found, self.num_tokens)
    return Draft(tokens=tokens, valid=valid), state
