"""Fast-dLLM's parallel commit rules (threshold, factor) and Fast-dLLM++'s Frechet profile rule.

Each block runs until it has no mask left; every step commits at least one token. Values are
traced, scalar or one per row, so one batch can sweep them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from jaxdec.decoding import finite_values
from jaxdec.diffusion.compat import factor_count
from jaxdec.diffusion.confidence import Confidence, Probability
from jaxdec.diffusion.schedulers import (Decision, Scheduler, StepView, column, commit, filled,
                                         top, traced)
from jaxdec.plugins import Param, register_cli


def _decide(view: StepView, select: jax.Array) -> Decision:
  tokens = commit(view, select)
  return Decision(tokens=tokens, finished=filled(tokens, view.mask_id))


@register_cli("scheduler", "threshold", order=20, help="Fast-dLLM's confidence threshold",
              params=(Param("threshold", float, "commit every mask this confident", arg="tau"),))
@struct.dataclass
class Threshold(Scheduler):
  """Commit every candidate whose confidence is >= tau, and always the most confident one."""

  tau: jax.Array | float = 0.9
  confidence: Confidence = struct.field(pytree_node=False, default=Probability())

  def __post_init__(self):
    object.__setattr__(self, "tau", traced(self.tau))

  def check(self, batch: int) -> None:
    finite_values("Threshold.tau", self.tau, batch, 0.0, 1.0)

  def step(self, state, view: StepView):
    ranked = view.ranked
    return _decide(view, (ranked.confidence >= column(self.tau)) | (ranked.rank == 0)), state


@register_cli("scheduler", "factor", order=30, help="Fast-dLLM's factor rule",
              params=(Param("factor", float, "its f"),))
@struct.dataclass
class Factor(Scheduler):
  """Fast-dLLM's factor rule (`get_transfer_index_dynamic`): scan the sorted confidences c_(i)
  (0-based) against 1 - f / (i + 2), the first always passing; commit up to the first failure
  (see `compat.factor_count` for upstream's handling of the last candidate)."""

  factor: jax.Array | float = 1.0
  confidence: Confidence = struct.field(pytree_node=False, default=Probability())

  def __post_init__(self):
    object.__setattr__(self, "factor", traced(self.factor))

  def check(self, batch: int) -> None:
    finite_values("Factor.factor", self.factor, batch, 0.0, float("inf"), low_open=True)

  def step(self, state, view: StepView):
    ordered = view.ranked.ordered
    i = jnp.arange(ordered.shape[-1], dtype=jnp.int32)[None, :]
    bound = jnp.where(i == 0, -1.0, 1.0 - column(self.factor) / (i + 2).astype(jnp.float32))
    fail = (ordered < bound) & (i < view.masked[:, None])
    stop = jnp.where(jnp.any(fail, axis=-1), jnp.argmax(fail, axis=-1).astype(jnp.int32),
                     view.masked - 1)
    return _decide(view, top(view.ranked, factor_count(stop, view.masked))), state


@register_cli("scheduler", "frechet", order=40, help="Fast-dLLM++'s Frechet profile rule",
              params=(Param("delta", float, "its delta"),))
@struct.dataclass
class Frechet(Scheduler):
  """Fast-dLLM++'s Frechet profile rule: with sorted confidences c_(1) >= ... >= c_(n), score
  G_n = (sum_{j<=n} c_(j) - (n - 1)) - (1 - c_(n)), G_1 = +inf; commit the top
  count(G_n > delta) (at least one)."""

  delta: jax.Array | float = 0.25
  confidence: Confidence = struct.field(pytree_node=False, default=Probability())

  def __post_init__(self):
    object.__setattr__(self, "delta", traced(self.delta))

  def check(self, batch: int) -> None:
    finite_values("Frechet.delta", self.delta, batch)

  def step(self, state, view: StepView):
    ordered = view.ranked.ordered
    i = jnp.arange(ordered.shape[-1], dtype=jnp.int32)[None, :]
    valid = i < view.masked[:, None]
    # G_n rewritten as sum_{j<=n} (c_(j) - 1) + c_(n): the same value without the cancellation of
    # sum(c) - (n - 1) in float32, which flipped knife-edge comparisons against the float64
    # reference when confidences saturate near 1.
    deficit = jnp.cumsum(jnp.where(valid, ordered - 1.0, 0.0), axis=-1)
    score = jnp.where(valid, deficit + ordered, -jnp.inf)
    score = jnp.where(i == 0, jnp.inf, score)
    count = jnp.maximum(jnp.sum(score > column(self.delta), axis=-1, dtype=jnp.int32), 1)
    return _decide(view, top(view.ranked, count)), state
