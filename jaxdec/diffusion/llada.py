"""LLaDA's sampler (`generate.py`): a fixed number of steps per block, a fixed quota each."""

from __future__ import annotations

from flax import struct

from jaxdec.diffusion.confidence import Confidence, Probability
from jaxdec.diffusion.schedulers import Decision, Scheduler, StepView, commit, top, transfer_count
from jaxdec.plugins import register_cli


@register_cli("scheduler", "fixed", order=10, help="LLaDA, --steps per canvas")
@struct.dataclass
class FixedSteps(Scheduler):
  """Every block runs exactly `steps` forwards and step i commits `transfer_count(...)` of the
  block's masks, the most confident first. LLaDA's remasking='low_confidence' is
  `Probability()` (the default), 'random' is `RandomConfidence()`."""

  confidence: Confidence = struct.field(pytree_node=False, default=Probability())

  def check(self, batch: int) -> None:
    pass

  def step(self, state, view: StepView):
    tokens = commit(view, top(view.ranked, transfer_count(view.block_masks, view.steps, view.step)))
    return Decision(tokens=tokens, finished=view.step + 1 >= view.steps), state
