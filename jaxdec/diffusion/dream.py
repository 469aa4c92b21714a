"""Dream's sampler (`DreamGenerationMixin._sample`, alg != 'origin')."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from jaxdec.diffusion.compat import dream_timesteps
from jaxdec.diffusion.confidence import Confidence, NegEntropy
from jaxdec.diffusion.schedulers import Decision, Scheduler, StepView, commit, top
from jaxdec.plugins import register_cli


def dream_count(masked: jax.Array, steps: jax.Array, step: jax.Array, eps: float) -> jax.Array:
  """int(n * (1 - t[i+1] / t[i])) of the n current masks in float32; every mask at the last step."""
  t, s = dream_timesteps(step, steps, eps), dream_timesteps(step + 1, steps, eps)
  count = jnp.floor(masked.astype(jnp.float32) * (1.0 - s / t)).astype(jnp.int32)
  return jnp.where(step < steps - 1, count, masked)


@register_cli("scheduler", "dream", order=50, help="Dream, --steps per canvas")
@struct.dataclass
class Dream(Scheduler):
  """Step i of `steps` commits int(n * (1 - t[i+1]/t[i])) of the n current masks on a float32
  linspace(1, eps) schedule (the last step commits the rest), ranked by `confidence` after
  temperature scaling. Dream's alg 'maskgit_plus' is `Probability()`, 'topk_margin' `Margin()`,
  'entropy' `NegEntropy()` (the default)."""

  confidence: Confidence = struct.field(pytree_node=False, default=NegEntropy())
  eps: float = struct.field(pytree_node=False, default=1e-3)
  tempered = True

  def check(self, batch: int) -> None:
    if not 0 < self.eps < 1:
      raise ValueError(f"Dream.eps must be in (0, 1), got {self.eps!r}")

  def step(self, state, view: StepView):
    tokens = commit(view, top(view.ranked, dream_count(view.masked, view.steps, view.step, self.eps)))
    return Decision(tokens=tokens, finished=view.step + 1 >= view.steps), state
