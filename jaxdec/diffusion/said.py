"""SAID (Scaffold-Aware Iterative Decoding), block version, and its CHLG layer.

Upstream (`SAID-block/generate_said.py`): each block's offsets j are split into `num_stages`
stages by a 1-D checkerboard hierarchy: for k = 1 .. K-1 the offsets with j mod 2^k == 2^(k-1)
form U_k, the rest (j mod 2^(K-1) == 0, the coarsest grid) is generated first, then U_{K-1}, ...,
and U_1 (the odd offsets, about half the block) last: the reconstruction stage. Generation stages
get linearly decreasing step budgets summing to (steps per block - `rec_steps`), the
reconstruction stage gets `rec_steps`; inside a stage LLaDA's low-confidence loop runs over the
stage's positions only (its quotas, zero-quota steps included). An empty stage costs nothing.
K = 1 is LLaDA.

CHLG (paper: "assigns additional steps only to low-confidence tokens"; not in the released
code). We read it as: with `chlg_steps` > 0, the reconstruction stage commits only those of its
quota whose confidence is >= `chlg_level`; the positions it leaves get up to `chlg_steps` more
forwards (LLaDA quotas over them), spent only while such positions remain.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxdec.decoding import finite_values
from jaxdec.diffusion.confidence import Confidence, Probability
from jaxdec.diffusion.schedulers import (Decision, Scheduler, StepView, column, commit, filled,
                                         rank_confidence, top, traced, transfer_count)
from jaxdec.plugins import register_cli


def stage_of_offsets(block_length: int, num_stages: int) -> np.ndarray:
  """i32[block_length]: each block offset's stage (0 = generated first)."""
  stage = np.zeros(block_length, np.int32)
  for k in range(1, num_stages):
    stage[np.arange(block_length) % 2 ** k == 2 ** (k - 1)] = num_stages - k
  return stage


def stage_steps(num_stages: int, per_block: jax.Array, rec_steps: int) -> jax.Array:
  """i32[K]: upstream's `compute_stage_steps` for a traced steps-per-block (every generation
  stage gets at least one forward)."""
  per_block = jnp.asarray(per_block, jnp.int32)
  if num_stages == 1:
    return per_block[None]
  budget, n = per_block - rec_steps, num_stages - 1
  if n == 1:  # Upstream gives this stage no forward (its masks stay) when budget < 1.
    return jnp.stack([jnp.maximum(budget, 1), jnp.full((), rec_steps, jnp.int32)])
  s_min = jnp.maximum(1, budget // (2 * n))
  s_max = jnp.maximum(s_min, (2 * budget) // n - s_min)
  i = jnp.arange(n, dtype=jnp.float32)
  raw = s_max.astype(jnp.float32) + i * ((s_min - s_max).astype(jnp.float32) / (n - 1))
  steps = jnp.maximum(jnp.round(raw).astype(jnp.int32), 1)
  diff = budget - jnp.sum(steps)
  count = jnp.abs(diff) // n + (jnp.arange(n) < jnp.abs(diff) % n).astype(jnp.int32)
  steps = jnp.maximum(steps + jnp.sign(diff) * count, 1)
  return jnp.concatenate([steps, jnp.full((1,), rec_steps, jnp.int32)])


@register_cli("scheduler", "said", order=80, help="SAID, --steps per canvas")
@struct.dataclass
class Scaffold(Scheduler):
  """SAID-block: `num_stages` checkerboard stages per block (static), `rec_steps` forwards for
  the reconstruction stage (static), CHLG's `chlg_steps` (static; 0 = off) and `chlg_level`
  (traced). State per row: the current stage's masks when it started."""

  num_stages: int = struct.field(pytree_node=False, default=3)
  rec_steps: int = struct.field(pytree_node=False, default=2)
  chlg_steps: int = struct.field(pytree_node=False, default=0)
  chlg_level: jax.Array | float = 0.9
  confidence: Confidence = struct.field(pytree_node=False, default=Probability())

  def __post_init__(self):
    for name in ("num_stages", "rec_steps", "chlg_steps"):
      value, low = getattr(self, name), 0 if name == "chlg_steps" else 1
      if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < low:
        raise ValueError(f"Scaffold.{name} must be an int >= {low}, got {value!r}")
    object.__setattr__(self, "chlg_level", traced(self.chlg_level))

  def check(self, batch: int) -> None:
    finite_values("Scaffold.chlg_level", self.chlg_level, batch, 0.0, 1.0)

  def init(self, batch: int, window: int):
    return jnp.zeros((batch,), jnp.int32)

  def step(self, stage_masks, view: StepView):
    width, last = view.tokens.shape[1], self.num_stages - 1
    offsets = stage_of_offsets(width, self.num_stages)
    sizes = np.bincount(offsets, minlength=self.num_stages)
    steps = jnp.where(jnp.asarray(sizes > 0), stage_steps(self.num_stages, view.steps,
                                                          self.rec_steps), 0)
    if self.chlg_steps:  # CHLG's extra stage: the reconstruction positions once more.
      offsets = np.stack([offsets, np.where(offsets == last, last + 1, -1)])
      steps = jnp.concatenate([steps, jnp.full((1,), self.chlg_steps, jnp.int32)])
    else:
      offsets = offsets[None]
    ends = jnp.cumsum(steps)
    stage = jnp.sum(view.step[:, None] >= ends[None, :], axis=1, dtype=jnp.int32)
    stage = jnp.minimum(stage, len(steps) - 1)
    inner = view.step - jnp.where(stage > 0, ends[jnp.maximum(stage - 1, 0)], 0)
    in_stage = jnp.any(jnp.asarray(offsets)[None, :, :] == stage[:, None, None], axis=1)
    candidates = view.candidates & in_stage
    stage_masks = jnp.where(inner == 0, jnp.sum(candidates, axis=1, dtype=jnp.int32), stage_masks)
    ranked = rank_confidence(view.ranked.confidence, candidates)
    select = top(ranked, transfer_count(stage_masks, jnp.maximum(steps[stage], 1), inner))
    if self.chlg_steps:  # The reconstruction stage leaves its low-confidence tokens for later.
      confident = view.ranked.confidence >= column(self.chlg_level)
      select &= confident | (stage != last)[:, None]
    tokens = commit(view, select & candidates)
    done = view.step + 1 >= ends[-1]
    if self.chlg_steps:
      done |= (view.step + 1 >= ends[last]) & filled(tokens, view.mask_id)
    return Decision(tokens=tokens, finished=done), stage_masks
