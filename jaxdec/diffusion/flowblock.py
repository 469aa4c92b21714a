"""FlowBlock's gated wavefront: later blocks are drafted before earlier ones are final, and T2T
editing repairs what they drafted on a stale upstream.

Paper: serial block decoding makes a block wait for its predecessor to be final; a self-correcting
dLLM can instead draft a block on a predecessor that is still changing and fix it later by
token-to-token edits, so a bounded wavefront of blocks is refined together, a block entering it
only when a readiness gate holds, and blocks commit in order. Our reading, on the sampler's window
of `blocks` consecutive blocks (the wavefront bound, static):
- block 0 of the window is the oldest unfinished block; block k + 1 is in the wavefront when
  block k is, and at least `gate` of block k's positions were committed when this forward ran
  (the gate reads the tokens the logits were computed from; commits never revert, so a block
  once admitted stays);
- every block in the wavefront commits its masks whose confidence is >= `threshold` (M2T), block
  0 also its most confident mask (a block never takes more forwards than the serial rule gives
  it), and every token committed at an earlier step is edited to the model's proposal when that
  differs with probability >= `editing_threshold` (T2T, as `Editing`);
- block 0 commits (the window moves on) once it has no mask and made no edit this forward (with
  `verify`, in a forward that already saw it with no mask, as `Editing(verify=True)`), or after
  `max_post_steps` forwards without a mask; its K/V are then final, so a block-causal
  model's cache keeps them exactly (blocks attend causally to earlier blocks, the wavefront
  included).
Heterogeneous wavefront packing is the sampler's batching: every row has its own block, step and
wavefront, and all rows' windows run as one static-shaped forward; a row whose wavefront holds
fewer blocks still computes the whole window (the unadmitted blocks are masks it does not
commit). With `blocks=1`, or a gate that never opens, this is `Editing` exactly.
"""

from __future__ import annotations

import jax.numpy as jnp
from flax import struct

from jaxdec.decoding import finite_values
from jaxdec.diffusion.confidence import Confidence, Probability
from jaxdec.diffusion.editing import EditState, check_settling, edits, settles
from jaxdec.diffusion.schedulers import (Decision, Scheduler, StepView, column, commit,
                                         rank_confidence, traced)


def admitted(tokens: jnp.ndarray, mask_id: int, blocks: int, gate) -> jnp.ndarray:
  """bool[B, blocks]: the window's blocks in the wavefront — block 0, and block k + 1 when block
  k is in it and at least `gate` of block k is committed. Windows start on a block boundary and
  the canvas holds whole blocks, so a block of the window is all on the canvas or all past it
  (where nothing is admitted to any effect: no decision there is kept)."""
  batch, width = tokens.shape
  share = jnp.mean((tokens != mask_id).reshape(batch, blocks, width // blocks), axis=-1)
  ready = share >= column(gate)
  return jnp.concatenate([jnp.ones((batch, 1), bool),
                          jnp.cumprod(ready[:, :-1], axis=1).astype(bool)], axis=1)


@struct.dataclass
class FlowBlock(Scheduler):
  """A wavefront of up to `blocks` blocks, admitted by `gate`, refined by M2T commits above
  `threshold` and T2T edits above `editing_threshold`, committed in order (module docstring)."""

  threshold: jnp.ndarray | float = 0.7
  editing_threshold: jnp.ndarray | float = 0.5
  gate: jnp.ndarray | float = 0.5
  blocks: int = struct.field(pytree_node=False, default=2)
  max_post_steps: int = struct.field(pytree_node=False, default=16)
  verify: bool = struct.field(pytree_node=False, default=False)
  confidence: Confidence = struct.field(pytree_node=False, default=Probability())

  def __post_init__(self):
    if isinstance(self.blocks, bool) or not isinstance(self.blocks, int) or self.blocks < 1:
      raise ValueError(f"FlowBlock.blocks must be an int >= 1, got {self.blocks!r}")
    for name in ("threshold", "editing_threshold", "gate"):
      object.__setattr__(self, name, traced(getattr(self, name)))

  @property
  def windows(self) -> int:
    return self.blocks

  def check(self, batch: int) -> None:
    finite_values("FlowBlock.threshold", self.threshold, batch, 0.0, 1.0)
    finite_values("FlowBlock.editing_threshold", self.editing_threshold, batch, -1.0, 1.0)
    finite_values("FlowBlock.gate", self.gate, batch, 0.0, 1.0)
    check_settling("FlowBlock", self.max_post_steps, self.verify)

  def init(self, batch: int, window: int) -> EditState:
    zeros = jnp.zeros((batch,), jnp.int32)
    return EditState(post=zeros, edits=zeros)

  def step(self, state: EditState, view: StepView):
    batch, width = view.tokens.shape
    block = width // self.blocks
    wavefront = jnp.repeat(admitted(view.tokens, view.mask_id, self.blocks, self.gate), block,
                           axis=1)
    first = jnp.arange(width)[None, :] < block
    lead = rank_confidence(view.ranked.confidence, view.candidates & first).rank == 0
    select = wavefront & ((view.ranked.confidence >= column(self.threshold)) | (lead & first))
    edit = wavefront & edits(view, self.editing_threshold)
    tokens = jnp.where(edit, view.x0, commit(view, select))
    full = ~jnp.any((tokens == view.mask_id) & first, axis=1)
    was_full = ~jnp.any(view.candidates & first, axis=1)  # A post step of block 0.
    post = state.post + was_full.astype(jnp.int32)
    finished = settles(full, was_full, ~jnp.any(edit & first, axis=1), post,
                       self.max_post_steps, self.verify)
    return (Decision(tokens=tokens, finished=finished),
            EditState(post=jnp.where(finished, 0, post),
                      edits=state.edits + jnp.sum(edit, axis=1, dtype=jnp.int32)))
