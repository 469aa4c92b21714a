"""The scheduler protocol: which positions of the active window change at each denoising step.

Each step the sampler hands the scheduler a `StepView` of the row's active window: its tokens,
the masked candidates, the proposals x0 and their confidences (also ranked), the window's
logits, where the row stands in its block, and a `lookahead` callback that runs one more model
forward on a modified window (counted in NFE). The scheduler returns a `Decision`: the window's
new tokens (commit proposals, keep, re-mask committed positions, or edit them) and whether the
row's current block is finished. Its own state rides in the loop carry (`init` / `step`).

Subclass `Scheduler` for the defaults (stateless, one window, untempered); any object with the
same members works too. Hyper-parameters users sweep are traced leaves (scalars or one value per
row), so a sweep reuses one compiled program.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, Callable, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxdec.diffusion.confidence import Confidence

_LOWEST = float(jnp.finfo(jnp.float32).min)


@struct.dataclass
class Ranked:
  """One window's confidences, ranked. Candidates (masked positions) come first, by confidence
  then position; a NaN confidence ranks last among candidates, so every step can commit."""

  confidence: jax.Array  # f32[B, N]; -inf off the candidates.
  rank: jax.Array  # i32[B, N]: 0 = most confident candidate.
  ordered: jax.Array  # f32[B, N]: confidences in rank order (-inf after the candidates).


def rank_confidence(confidence: jax.Array, candidates: jax.Array) -> Ranked:
  """confidence f32[B, N], candidates bool[B, N] -> Ranked (a stable descending sort)."""
  key = jnp.where(candidates, jnp.nan_to_num(confidence, nan=_LOWEST), -jnp.inf)
  order = jnp.argsort(-key, axis=-1, stable=True)
  rank = jnp.argsort(order, axis=-1).astype(jnp.int32)
  return Ranked(confidence=key, rank=rank, ordered=jnp.take_along_axis(key, order, axis=-1))


@dataclasses.dataclass(frozen=True)
class StepView:
  """What a scheduler sees at one step (N = the active window's length).

  tokens i32[B, N]: the window now; inside bool[B, N]: its positions on the canvas (a window of
  several blocks reaches past the last one near the end; tokens there are not the row's and no
  decision there is kept); candidates bool[B, N]: its masked positions (inside); x0 i32[B, N]:
  the proposals; ranked: their confidences; logits f32[B, N, V]; step i32[B]: forwards already
  run on the current block; steps i32[]: the step budget per block (total steps // blocks);
  block_masks i32[B]: candidates when the block started; masked i32[B]: candidates now;
  block i32[B]: the current block's index; mask_id: the [MASK] id;
  lookahead(tokens i32[B, N]) -> logits f32[B, N, V]: one more forward with the window set to
  `tokens`; tokens i32[B, H, N] -> f32[B, H, N, V] runs H hypotheses per row as one batched
  forward. A scheduler that calls it reports what it ran in its `Decision`.
  """

  tokens: jax.Array
  inside: jax.Array
  candidates: jax.Array
  x0: jax.Array
  ranked: Ranked
  logits: jax.Array
  step: jax.Array
  steps: jax.Array
  block_masks: jax.Array
  masked: jax.Array
  block: jax.Array
  mask_id: int
  lookahead: Callable[[jax.Array], jax.Array]


class Decision(NamedTuple):
  """tokens i32[B, N]: the window after this step; finished bool[B]: the row's block is done;
  lookaheads: the `StepView.lookahead` forwards this step ran (int or i32[B]; each counts as
  one forward of the row), sequences: the sequences they ran (H for a [B, H, N] call)."""

  tokens: jax.Array
  finished: jax.Array
  lookaheads: jax.Array | int = 0
  sequences: jax.Array | int = 0


class Scheduler(Protocol):
  """confidence: what to rank by; tempered: confidences after temperature scaling (Dream) or
  before (LLaDA); windows: how many consecutive blocks are active at once (the window is
  windows * block_length positions from the current block's start). Subclasses inherit the
  defaults: untempered, one window, no state."""

  confidence: Confidence
  tempered: bool = False
  windows: int = 1

  def check(self, batch: int) -> None:
    """Raise ValueError on bad concrete hyper-parameters (called by the API on the host)."""

  def init(self, batch: int, window: int) -> Any:
    """The scheduler's state for a batch (default: none): a pytree whose leaves lead with the
    batch axis; a row that does not advance at a step (a cache held it back) keeps its state."""
    return ()

  @abc.abstractmethod
  def step(self, state: Any, view: StepView) -> tuple[Decision, Any]:
    """The decision for this step, and the next state."""


# ---- helpers shared by the rules --------------------------------------------------------------

def top(ranked: Ranked, count: jax.Array) -> jax.Array:
  """bool[B, N]: the `count` i32[B] best-ranked positions of each row."""
  return ranked.rank < count[:, None]


def commit(view: StepView, select: jax.Array) -> jax.Array:
  """The window with the selected candidates set to their proposals."""
  return jnp.where(select & view.candidates, view.x0, view.tokens)


def filled(tokens: jax.Array, mask_id: int) -> jax.Array:
  """bool[B]: no mask left in the window (the rule for blocks that run until decoded)."""
  return ~jnp.any(tokens == mask_id, axis=1)


def transfer_count(block_masks: jax.Array, steps: jax.Array, step: jax.Array) -> jax.Array:
  """LLaDA's `get_num_transfer_tokens`, column `step`: m // steps, plus 1 in the first m % steps
  steps. Steps past the masks get 0 and still cost a forward."""
  return block_masks // steps + (step < block_masks % steps).astype(jnp.int32)


def traced(value):
  """A hyper-parameter as a traced leaf: Python scalars and sequences become f32 numpy arrays
  (one compiled program for every value); arrays and tracers pass through."""
  if isinstance(value, (bool, int, float, list, tuple, np.number)):
    return np.asarray(value, np.float32)
  return value


def column(value) -> jax.Array:
  """A traced hyper-parameter, scalar or per row [B], shaped to broadcast against [B, N]."""
  value = jnp.asarray(value, jnp.float32)
  return value[:, None] if value.ndim == 1 else value
