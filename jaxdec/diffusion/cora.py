"""CORA-Diff: confidence-and-persistence gating on top of LLaDA's fixed-horizon rule.

Paper: keep the original transfer rule and accept, among the positions it leaves unresolved,
those whose prediction is confident and persistent; accepted tokens stay visible as context,
and the block ends once every position is resolved. We read it as: every step commits LLaDA's
quota (`transfer_count` of the block's starting masks over the per-block steps, most confident
first, unchanged), and also every other masked position whose current confidence is >= `tau`
and whose proposal has been the same token for the last `persistence` forwards of this block
(this one included; confidence is asked of the current forward only). The horizon stays LLaDA's,
so a block never takes more forwards than LLaDA gives it, and ends sooner when gating has
resolved its positions early.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from jaxdec.decoding import finite_values
from jaxdec.diffusion.confidence import Confidence, Probability
from jaxdec.diffusion.schedulers import (Decision, Scheduler, StepView, column, commit, filled,
                                         top, traced, transfer_count)
from jaxdec.plugins import register_cli


@register_cli("scheduler", "cora", order=70, help="CORA-Diff")
@struct.dataclass
class Persistence(Scheduler):
  """CORA-Diff. `tau`: confidence a residual position needs; `persistence`: forwards in a row its
  proposal must have stayed the same (1 = confidence alone). State per row: the last proposals
  and how many forwards each has persisted."""

  tau: jax.Array | float = 0.9
  persistence: jax.Array | float = 2
  confidence: Confidence = struct.field(pytree_node=False, default=Probability())

  def __post_init__(self):
    object.__setattr__(self, "tau", traced(self.tau))
    object.__setattr__(self, "persistence", traced(self.persistence))

  def check(self, batch: int) -> None:
    finite_values("Persistence.tau", self.tau, batch, 0.0, 1.0)
    finite_values("Persistence.persistence", self.persistence, batch, 1.0, 1e6)

  def init(self, batch: int, window: int):
    return {"x0": jnp.zeros((batch, window), jnp.int32),
            "run": jnp.zeros((batch, window), jnp.int32)}

  def step(self, state, view: StepView):
    same = (view.step > 0)[:, None] & (view.x0 == state["x0"])
    run = jnp.where(same, state["run"] + 1, 1)
    quota = transfer_count(view.block_masks, view.steps, view.step)
    gated = (view.ranked.confidence >= column(self.tau)) & (run.astype(jnp.float32) >= column(self.persistence))
    tokens = commit(view, top(view.ranked, quota) | gated)
    finished = filled(tokens, view.mask_id) | (view.step + 1 >= view.steps)
    return Decision(tokens=tokens, finished=finished), {"x0": view.x0, "run": run}
