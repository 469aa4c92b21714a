"""Joint mask-to-token (M2T) and token-to-token (T2T) threshold decoding (LLaDA2.1), for models
trained to revise committed tokens (T2T editing training: some unmasked inputs replaced by random
tokens, the true token predicted there too).

Each step, within the active block:
- M2T: every mask whose confidence is >= `threshold` is committed, and always the most confident
  one (so a block cannot stall);
- T2T: every token committed at an earlier step is replaced by the model's proposal there when that
  proposal differs from it and its probability is >= `editing_threshold` (<= 0 turns editing off).
After the block's last mask is filled, the block keeps refining while edits happen, for at most
`max_post_steps` more forwards (0: finish as soon as no mask is left).

`verify=True` (jaxdec's option, not diffusers') finishes a block only after a forward that saw it
with no mask made no edit, so every token has been checked against a prediction made from its
final context; the forward that fills the last masks no longer ends the block. On a model whose
given tokens form a causal LM (`causal_given`, shifted logits), an `editing_threshold` at or below
1 / vocab (edit wherever the argmax differs) and `max_post_steps` > block length, the block is then
exactly the stream's greedy decoding: Jacobi iteration with diffusion drafts, lossless.

This is the rule of diffusers' `BlockRefinementScheduler` (`threshold`, `editing_threshold`,
`max_post_steps`, one forced commit per step). LLaDA2.1's speed mode is a low `threshold` that
relies on T2T repairs, its quality mode conservative values of both; the exact values are not
published, so both are parameters. On a model never trained to edit, the outputs at committed
positions are untrained and T2T is not meaningful.

The state counts each row's edits (`edits`, `stats["scheduler"]` of the sampler's output).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from jaxdec.decoding import finite_values
from jaxdec.diffusion.confidence import Confidence, Probability
from jaxdec.diffusion.schedulers import Decision, Scheduler, StepView, column, commit, traced


@struct.dataclass
class EditState:
  post: jax.Array  # i32[B]: forwards run on the current block since its last mask was filled.
  edits: jax.Array  # i32[B]: tokens the row has replaced by T2T edits so far.


@struct.dataclass
class Editing(Scheduler):
  """M2T commits above `threshold` and T2T edits above `editing_threshold` (module docstring)."""

  threshold: jax.Array | float = 0.7
  editing_threshold: jax.Array | float = 0.5
  max_post_steps: int = struct.field(pytree_node=False, default=16)
  verify: bool = struct.field(pytree_node=False, default=False)
  confidence: Confidence = struct.field(pytree_node=False, default=Probability())

  def __post_init__(self):
    object.__setattr__(self, "threshold", traced(self.threshold))
    object.__setattr__(self, "editing_threshold", traced(self.editing_threshold))

  def check(self, batch: int) -> None:
    finite_values("Editing.threshold", self.threshold, batch, 0.0, 1.0)
    finite_values("Editing.editing_threshold", self.editing_threshold, batch, -1.0, 1.0)
    check_settling("Editing", self.max_post_steps, self.verify)

  def init(self, batch: int, window: int) -> EditState:
    zeros = jnp.zeros((batch,), jnp.int32)
    return EditState(post=zeros, edits=zeros)

  def step(self, state: EditState, view: StepView):
    ranked = view.ranked
    tokens = commit(view, (ranked.confidence >= column(self.threshold)) | (ranked.rank == 0))
    edit = edits(view, self.editing_threshold)
    tokens = jnp.where(edit, view.x0, tokens)
    count = jnp.sum(edit, axis=1, dtype=jnp.int32)
    full = ~jnp.any(tokens == view.mask_id, axis=1)
    was_full = view.masked == 0  # This forward ran on a block with no mask: a post step.
    post = state.post + was_full.astype(jnp.int32)
    finished = settles(full, was_full, count == 0, post, self.max_post_steps, self.verify)
    return (Decision(tokens=tokens, finished=finished),
            EditState(post=jnp.where(finished, 0, post), edits=state.edits + count))


def check_settling(owner: str, max_post_steps, verify) -> None:
  """Raise on a bad `max_post_steps` (ValueError) or `verify` (TypeError) of `owner`."""
  if isinstance(max_post_steps, bool) or not isinstance(max_post_steps, int) or max_post_steps < 0:
    raise ValueError(f"{owner}.max_post_steps must be an int >= 0, got {max_post_steps!r}")
  if not isinstance(verify, bool):
    raise TypeError(f"{owner}.verify must be a bool, got {verify!r}")


def settles(full, was_full, unedited, post, max_post_steps: int, verify: bool) -> jax.Array:
  """bool[B]: the block is finished — no mask left and no edit this forward (with `verify`, in a
  forward that already saw no mask), or `max_post_steps` forwards run since its masks ran out."""
  quiet = (was_full if verify else full) & unedited
  return quiet | (full & (post >= max_post_steps))


def edits(view: StepView, editing_threshold) -> jax.Array:
  """bool[B, N]: the T2T edits of a step — committed tokens (not masks, on the canvas) whose
  proposal differs and has probability >= editing_threshold (none where the threshold is <= 0)."""
  probs = jax.nn.softmax(view.logits.astype(jnp.float32), axis=-1)
  p = jnp.take_along_axis(probs, view.x0[..., None], axis=-1)[..., 0]
  bound = column(editing_threshold)
  return (view.inside & (view.tokens != view.mask_id) & (view.x0 != view.tokens) & (p >= bound)
          & (bound > 0))
