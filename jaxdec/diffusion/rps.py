"""Ripple-Pivot Search (RPS): commit a mid-entropy pivot whose lookahead most lowers the
uncertainty of the rest, then let the base rule ride the ripple.

Paper: pick mid-entropy positions as pivot candidates (where to decode), evaluate their likely
assignments by lookahead (what to decode), keep the one that most reduces the uncertainty of the
remaining masked positions, then commit by the base rule. We read it as, at every step:
1. the base rule, Fast-dLLM's threshold `tau` (always at least one token), commits on this
   forward's logits;
2. pivot candidates are the `pivots` uncommitted masked positions with the lowest entropy inside
   [`low`, `high`] nats (too certain ones commit anyway, too uncertain ones are guesses); each
   is tried with its `assignments` most likely tokens;
3. all pivots x assignments hypotheses (the step's commits plus one pivot) run as one batched
   lookahead forward (one NFE); the hypothesis with the least summed entropy over the masked
   positions it leaves wins, and its pivot is committed;
4. with `ripple`, the base rule commits again on the winner's lookahead logits (no forced
   token): the ripple the pivot caused is used at no further forward.
A step costs two forwards. When no position is in the band the lookahead still runs (static
shapes) and the ripple commit is all it buys. Pivots and ripple commits are greedy (argmax).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from jaxdec.decoding import finite_values
from jaxdec.diffusion.confidence import Confidence, Probability
from jaxdec.diffusion.schedulers import (Decision, Scheduler, StepView, column, commit, filled,
                                         traced)
from jaxdec.plugins import register_cli

_NEG_INF = float("-inf")


def entropy(logits: jax.Array) -> jax.Array:
  """f32[..., N]: the entropy (nats) of each position's distribution."""
  logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
  return -jnp.sum(jnp.exp(logp) * logp, axis=-1)


def _no_mask(logits: jax.Array, mask_id: int) -> jax.Array:
  return logits.astype(jnp.float32).at[..., mask_id].set(_NEG_INF)


@register_cli("scheduler", "rps", order=90, help="Ripple-Pivot Search")
@struct.dataclass
class RipplePivot(Scheduler):
  """RPS on a threshold base rule. `tau`: the base rule's confidence; `low`, `high`: the pivot
  band (entropy, nats); `pivots`, `assignments` (static): hypotheses per step = their product;
  `ripple` (static): the base rule also commits on the chosen lookahead."""

  tau: jax.Array | float = 0.9
  low: jax.Array | float = 0.1
  high: jax.Array | float = 2.0
  pivots: int = struct.field(pytree_node=False, default=2)
  assignments: int = struct.field(pytree_node=False, default=2)
  ripple: bool = struct.field(pytree_node=False, default=True)
  confidence: Confidence = struct.field(pytree_node=False, default=Probability())

  def __post_init__(self):
    for name in ("pivots", "assignments"):
      value = getattr(self, name)
      if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"RipplePivot.{name} must be an int >= 1, got {value!r}")
    for name in ("tau", "low", "high"):
      object.__setattr__(self, name, traced(getattr(self, name)))

  def check(self, batch: int) -> None:
    finite_values("RipplePivot.tau", self.tau, batch, 0.0, 1.0)
    low = finite_values("RipplePivot.low", self.low, batch, 0.0)
    high = finite_values("RipplePivot.high", self.high, batch, 0.0)
    if (low > high).any():
      raise ValueError(f"RipplePivot.low must be <= high, got low={self.low!r}, high={self.high!r}")

  def step(self, state, view: StepView):
    ranked, tau = view.ranked, column(self.tau)
    base = view.candidates & ((ranked.confidence >= tau) | (ranked.rank == 0))
    tokens = commit(view, base)
    left = view.candidates & ~base
    spread = entropy(view.logits)
    band = left & (spread >= column(self.low)) & (spread <= column(self.high))
    valid, where = jax.lax.top_k(jnp.where(band, -spread, _NEG_INF), self.pivots)  # [B, P]
    valid = jnp.isfinite(valid)
    pivot_logits = jnp.take_along_axis(view.logits, where[:, :, None], axis=1)
    choice = jax.lax.top_k(_no_mask(pivot_logits, view.mask_id), self.assignments)[1]  # [B, P, A]
    batch, width = tokens.shape
    hyps = self.pivots * self.assignments
    where = jnp.repeat(where, self.assignments, axis=1)  # [B, H]
    valid = jnp.repeat(valid, self.assignments, axis=1)
    placed = (jnp.arange(width)[None, None, :] == where[:, :, None]) & valid[:, :, None]
    guess = choice.reshape(batch, hyps).astype(tokens.dtype)
    hypotheses = jnp.where(placed, guess[:, :, None], tokens[:, None, :])  # [B, H, N]
    ahead = view.lookahead(hypotheses)  # [B, H, N, V]: one batched forward.
    rest = left[:, None, :] & ~placed
    score = jnp.sum(jnp.where(rest, entropy(ahead), 0.0), axis=-1)
    best = jnp.argmin(jnp.where(valid, score, jnp.inf), axis=1)  # First on ties.
    pick = lambda a: jnp.take_along_axis(a, best.reshape((batch, 1) + (1,) * (a.ndim - 2)),
                                         axis=1)[:, 0]
    tokens, ahead, rest = pick(hypotheses), pick(ahead), pick(rest)
    if self.ripple:
      x0 = jnp.argmax(_no_mask(ahead, view.mask_id), axis=-1)  # As `propose`: [MASK] is
      probs = jax.nn.softmax(ahead.astype(jnp.float32), axis=-1)  # never proposed.
      sure = jnp.take_along_axis(probs, x0[..., None], axis=-1)[..., 0] >= tau
      tokens = jnp.where(rest & sure, x0.astype(tokens.dtype), tokens)
    return Decision(tokens=tokens, finished=filled(tokens, view.mask_id), lookaheads=1,
                    sequences=hyps), state
