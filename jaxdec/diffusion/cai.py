"""CAI-DLLM: a block's first-step confidence decides its schedule (training-free).

Paper: easy tokens commit earlier, harder tokens get more denoising steps, and the schedule
adapts across output blocks, all from first-step confidence signals. We read it as: at a
block's first forward every candidate whose confidence is >= `easy` commits at once (and always
the most confident one); the rest, the block's hard tokens, are then decoded by LLaDA's
low-confidence rule over a budget of ceil(`budget` x steps x hard / masks) further forwards,
where steps / masks is LLaDA's own rate for the block (one token per forward when steps equal
the generation length). So a block that starts confident gets few steps and a hard one many,
and `budget` < 1 spends fewer forwards per hard token than LLaDA does.
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


@register_cli("scheduler", "cai", order=60, help="CAI-DLLM")
@struct.dataclass
class FirstStepConfidence(Scheduler):
  """CAI-DLLM. `easy`: first-step confidence at which a token commits at once; `budget`: forwards
  per hard token relative to LLaDA's rate (1 = LLaDA's). State per row: the block's hard-token
  count and its budget, fixed at the block's first forward."""

  easy: jax.Array | float = 0.9
  budget: jax.Array | float = 1.0
  confidence: Confidence = struct.field(pytree_node=False, default=Probability())

  def __post_init__(self):
    object.__setattr__(self, "easy", traced(self.easy))
    object.__setattr__(self, "budget", traced(self.budget))

  def check(self, batch: int) -> None:
    finite_values("FirstStepConfidence.easy", self.easy, batch, 0.0, 1.0)
    finite_values("FirstStepConfidence.budget", self.budget, batch, 0.0, float("inf"),
                  low_open=True)

  def init(self, batch: int, window: int):
    zeros = jnp.zeros((batch,), jnp.int32)
    return {"hard": zeros, "budget": zeros}

  def step(self, state, view: StepView):
    ranked, first = view.ranked, view.step == 0
    easy = view.candidates & ((ranked.confidence >= column(self.easy)) | (ranked.rank == 0))
    hard = view.masked - jnp.sum(easy, axis=1, dtype=jnp.int32)
    rate = view.steps.astype(jnp.float32) / jnp.maximum(view.block_masks, 1).astype(jnp.float32)
    planned = jnp.ceil(jnp.asarray(self.budget, jnp.float32) * rate * hard.astype(jnp.float32))
    planned = jnp.clip(planned.astype(jnp.int32), jnp.minimum(hard, 1), hard)
    state = {"hard": jnp.where(first, hard, state["hard"]),
             "budget": jnp.where(first, planned, state["budget"])}
    quota = transfer_count(state["hard"], jnp.maximum(state["budget"], 1), view.step - 1)
    select = jnp.where(first[:, None], easy, top(ranked, quota))
    tokens = commit(view, select)
    return Decision(tokens=tokens, finished=filled(tokens, view.mask_id)), state
