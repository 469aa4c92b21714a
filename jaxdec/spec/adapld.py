"""AdaPLD: adaptive prompt lookup with a semantic fallback and branched hypotheses."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from jaxdec.model import ModelConfig
from jaxdec.plugins import Param, register_cli
from jaxdec.spec.drafter import Context, Drafter, check_positive
from jaxdec.spec.lookup import continuations, lexical_matches
from jaxdec.spec.tree import Tree
from jaxdec.spec.verify import Draft


@register_cli("drafter", "adapld", order=20, help="lookup with a semantic fallback, tree drafts",
              params=(Param("num_tokens", int, "a branch's depth", arg="depth"),
                      Param("max_ngram", int, "longest n-gram matched"),
                      Param("branches", int, "continuations verified together as a tree")))
@struct.dataclass
class AdaPLD(Drafter):
  """Lexical n-gram lookup first (n >= min_ngram); when no n-gram matches, a semantic fallback
  retrieves the earlier positions whose final target hidden states are most similar (cosine >=
  min_similarity) to the current one and copies what followed them. Up to `branches` such
  continuations of `depth` tokens are verified together as a tree."""

  max_ngram: int = struct.field(pytree_node=False, default=3)
  min_ngram: int = struct.field(pytree_node=False, default=2)
  depth: int = struct.field(pytree_node=False, default=4)
  branches: int = struct.field(pytree_node=False, default=3)
  min_similarity: float = struct.field(pytree_node=False, default=0.5)
  forwards = 0

  def __post_init__(self):
    for name in ("max_ngram", "min_ngram", "depth", "branches"):
      check_positive(name, getattr(self, name))
    if self.min_ngram > self.max_ngram:
      raise ValueError(f"min_ngram={self.min_ngram} > max_ngram={self.max_ngram}")

  @property
  def tree(self) -> Tree:
    return Tree.branches(self.branches, self.depth)

  def hidden_layers(self, target: ModelConfig) -> tuple[int, ...]:
    return (target.num_layers,)  # The final-normed state.

  def init(self, prompt, prompt_lengths, capacity, hidden):
    return ()

  def propose(self, state, ctx: Context):
    starts, found, have = lexical_matches(ctx, self.max_ngram, self.min_ngram, self.branches)
    sem_starts, sem_found = self._semantic(ctx)
    starts = jnp.where(have[:, None], starts, sem_starts)
    found = jnp.where(have[:, None], found, sem_found)
    tokens, valid = continuations(ctx, starts, found, self.depth)
    return Draft(tokens=tokens, valid=valid), state

  def _semantic(self, ctx: Context):
    """Positions s <= total - 3 whose hidden state is closest to the one at total - 2 (which
    predicted the last token): the token after s + 1 is a guess for the next one."""
    hidden = ctx.hidden[0].astype(jnp.float32)
    unit = hidden / jnp.maximum(jnp.linalg.norm(hidden, axis=-1, keepdims=True), 1e-6)
    query = jnp.take_along_axis(unit, jnp.clip(ctx.total - 2, 0, unit.shape[1] - 1)[:, None, None],
                                1)[:, 0]
    similarity = jnp.einsum("bsd,bd->bs", unit, query)
    positions = jnp.arange(hidden.shape[1], dtype=jnp.int32)[None, :]
    similarity = jnp.where(positions <= (ctx.total - 3)[:, None], similarity, -2.0)
    score, index = jax.lax.top_k(similarity, self.branches)
    return index.astype(jnp.int32) + 2, score >= self.min_similarity
