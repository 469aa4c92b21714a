"""Archer's prompt-K/V reuse: the response is recomputed at every step, the prompt's keys and
values are reused while the response stays within a bounded neighbourhood of the state they were
computed in.

Paper (abstract only): a rollback-capable dLLM (T2T editing, remasking) may change any response
token at any step, so the response cannot be cached the way Fast-dLLM caches finished blocks;
the prompt can, within a bounded state neighbourhood, delaying the feedback of tentative response
tokens into the prompt's representation. Our reading, as a `DiffusionCache`:
- a *refresh* is one full forward over the canvas; its logits drive that step and the prompt's
  keys and values (every position before the response; on a shifted model all but the last
  prompt token, whose output predicts the response's first position) are kept;
- every other step runs the whole response (the window plus every committed or edited token
  after the prompt, `gen_length` query tokens) against the kept prompt entries;
- a row refreshes when at least `bound` response positions hold a different token than when its
  prompt entries were computed (and at its first step). `bound=1` refreshes after every change:
  a full refresh every step, i.e. `NoCache`.
The drift measure (changed tokens, not steps or blocks) is our choice, as is counting masks
filled as changes; `bound` is traced, so sweeping it reuses one compiled program.

On a bidirectional model reused prompt entries are stale (they saw the response as it was), so
this is an approximation whose error `bound` controls; on a block-causal model generation starts
on a block boundary and the prompt never sees the response, so it is exact and refreshes only
once. A batch
gives every row what it would get alone: while a row refreshes, rows that need no refresh wait
for that forward (as the dual cache's refresh does).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxdec.decoding import finite_values, positions
from jaxdec.diffusion.caches import CanvasView, DiffusionCache, query
from jaxdec.diffusion.schedulers import traced
from jaxdec.model.kv_cache import KVCache
from jaxdec.plugins import register_cli


@struct.dataclass
class ArcherState:
  kv: KVCache  # The prompt's keys and values (slot = position; the response's slots scratch).
  seen: jax.Array  # i32[B, W]: the canvas they were computed from (-1 before the first).


@register_cli("cache", "archer", order=40,
              help="the prompt's K/V reused until 8 response tokens changed, the response "
                   "recomputed every step")
@struct.dataclass
class Archer(DiffusionCache):
  """Reuse the prompt's K/V until `bound` response tokens changed since they were computed;
  recompute the whole response every step (module docstring)."""

  bound: jax.Array | int = 8

  def __post_init__(self):
    object.__setattr__(self, "bound", traced(self.bound))

  def check(self, guided: bool) -> None:
    if guided:
      raise ValueError("classifier-free guidance (cfg_scale > 0) needs cache=None, got Archer()")
    try:
      bound = np.asarray(self.bound, np.float64)
    except jax.errors.TracerArrayConversionError:
      return  # Swept inside the caller's jit: checked where it is concrete.
    finite_values("Archer.bound", bound.tolist(), 1, 1.0)
    if bound != np.round(bound):
      raise ValueError(f"Archer.bound must be a whole number of tokens, got {bound.tolist()!r}")

  def init(self, denoiser, batch, width):
    return ArcherState(kv=denoiser.init_cache(batch, width),
                       seen=jnp.full((batch, width), -1, jnp.int32))

  def logits(self, state: ArcherState, denoiser, view: CanvasView):
    response = view.lengths - view.gen_length  # i32[B]: the response's first canvas position.
    slot = jnp.arange(view.x.shape[1])[None, :]
    inside = (slot >= response[:, None]) & (slot < view.lengths[:, None])
    drift = jnp.sum(inside & (view.x != state.seen), axis=1, dtype=jnp.float32)
    never = state.seen[:, 0] < 0  # No prompt entries yet.
    drifted = drift >= jnp.reshape(self.bound, ())
    if denoiser.block_size is not None:
      drifted = jnp.zeros_like(drifted)  # Block-causal: the prompt's entries never go stale.
    stale = view.active & (never | drifted)
    return jax.lax.cond(jnp.any(stale), self._refresh, self._reuse, state, denoiser, view,
                        stale, response)

  def _refresh(self, state, denoiser, view: CanvasView, stale, response):
    """A full forward; the rows that needed it take their step and keep its prompt entries."""
    batch, width = view.x.shape
    h, fresh = denoiser.hidden(view.x, positions(batch, width), denoiser.init_cache(batch, width),
                               view.lengths)
    kept = ArcherState(kv=fresh.with_length(response - view.shift).where(stale, state.kv),
                       seen=jnp.where(stale[:, None], view.x, state.seen))
    return denoiser.logits(h, view.logit_index()), stale, kept

  def _reuse(self, state, denoiser, view: CanvasView, stale, response):
    """The response (from the output that predicts its first position) over the kept prompt."""
    first = response - view.shift
    size = view.gen_length + view.shift
    h, _ = query(state.kv, denoiser, view, first, size, jnp.minimum(size, view.lengths - first))
    logits = denoiser.logits(h, positions(view.x.shape[0], view.window,
                                          view.start - view.shift - first))
    return logits, view.active, state
