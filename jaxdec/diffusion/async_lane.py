"""AsyncLane: the next block starts once the current one shows a reliable boundary.

Paper: block-wise decoding waits for a block to finish before the next begins; once a block
exposes a delimiter boundary or a stable prefix, fork a continuation lane that starts the next
block while a refine lane keeps resolving the rest of the prefix; the lanes of a row run
batched in one forward, terminate in cascade, and the lane tree fixes the output order. We read
it on a window of `lanes` consecutive blocks (a static maximum), one forward for all of them:
lane 0 is the current block; lane k + 1 opens once lane k is open and holds a committed
delimiter (a token in `delimiters`) with every position of lane k before it committed, or a
committed run from lane k's start of at least `stable` x block length. Open lanes commit by
Fast-dLLM's threshold `tau`; lane 0 always commits its most confident mask, so a block never
takes more forwards than the threshold rule gives it. The block is finished when lane 0 is
filled; the window then moves on, and the next lane, partly decoded, becomes lane 0. Output order
is the canvas order. Not modelled: the paper's lookahead draft reuse and compact cache refresh
(with `DualCache` the whole window is the query; on a bidirectional model it is refreshed at
every block start), and a lane already filled when it becomes lane 0 still costs one forward
before it ends.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxdec.decoding import finite_values
from jaxdec.diffusion.confidence import Confidence, Probability
from jaxdec.diffusion.schedulers import (Decision, Scheduler, StepView, column, commit, filled,
                                         rank_confidence, traced)
from jaxdec.plugins import register_cli


@register_cli("scheduler", "asynclane", order=100, help="AsyncLane")
@struct.dataclass
class AsyncLane(Scheduler):
  """AsyncLane on a threshold rule. `lanes` (static): blocks in flight; `delimiters` (static):
  token ids that mark a boundary (e.g. the tokenizer's newline); `stable`: the committed run, as
  a fraction of the block, that opens the next lane without a delimiter (> 1: never)."""

  tau: jax.Array | float = 0.9
  stable: jax.Array | float = 0.5
  lanes: int = struct.field(pytree_node=False, default=2)
  delimiters: tuple[int, ...] = struct.field(pytree_node=False, default=())
  confidence: Confidence = struct.field(pytree_node=False, default=Probability())

  def __post_init__(self):
    if not isinstance(self.lanes, int) or isinstance(self.lanes, bool) or self.lanes < 1:
      raise ValueError(f"AsyncLane.lanes must be an int >= 1, got {self.lanes!r}")
    if not all(isinstance(d, (int, np.integer)) and d >= 0 for d in self.delimiters):
      raise ValueError(f"AsyncLane.delimiters must be token ids (ints >= 0), got {self.delimiters!r}")
    object.__setattr__(self, "delimiters", tuple(int(d) for d in self.delimiters))
    object.__setattr__(self, "tau", traced(self.tau))
    object.__setattr__(self, "stable", traced(self.stable))

  @property
  def windows(self) -> int:
    return self.lanes

  def check(self, batch: int) -> None:
    finite_values("AsyncLane.tau", self.tau, batch, 0.0, 1.0)
    finite_values("AsyncLane.stable", self.stable, batch, 0.0)

  def step(self, state, view: StepView):
    batch, width = view.tokens.shape
    block = width // self.lanes
    lanes = lambda a: a.reshape(batch, self.lanes, block)
    done = lanes(view.tokens != view.mask_id)
    run = jnp.cumprod(done, axis=-1).astype(bool)  # Committed from the lane's start through here.
    delimiter = jnp.isin(view.tokens, jnp.asarray(self.delimiters, jnp.int32)) if self.delimiters \
        else jnp.zeros_like(view.tokens, bool)
    boundary = jnp.any(run & lanes(delimiter), axis=-1)
    long_run = jnp.sum(run, axis=-1, dtype=jnp.int32).astype(jnp.float32) >= column(self.stable) * block
    fork = boundary | long_run  # [B, lanes]
    opened = jnp.concatenate([jnp.ones((batch, 1), bool),
                              jnp.cumprod(fork[:, :-1], axis=1).astype(bool)], axis=1)
    open_candidates = view.candidates & jnp.repeat(opened, block, axis=1)
    first_lane = jnp.arange(width)[None, :] < block
    lead = rank_confidence(view.ranked.confidence, view.candidates & first_lane).rank == 0
    select = open_candidates & ((view.ranked.confidence >= column(self.tau)) |
                                (lead & first_lane))
    tokens = commit(view, select)
    return Decision(tokens=tokens, finished=filled(tokens[:, :block], view.mask_id)), state
