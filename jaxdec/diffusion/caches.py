"""The diffusion cache protocol and its built-ins: how each step's window logits are computed.

A cache is asked once per step for the logits of the active window (`logits(state, denoiser,
view)`) and decides what to recompute and what to reuse; its state (K/V, bookkeeping) rides in
the loop carry. It also says which rows advance this step: a cache that refreshes for some rows
may hold the others back, so that a batch gives every row exactly what it would get alone.

- `NoCache`: a full forward over the canvas every step (exact; the default).
- `PrefixCache` / `DualCache` (Fast-dLLM): at the first step of every block one full forward
  refreshes the keys and values of the whole canvas (and its logits drive that step's commits);
  the block's later steps run only a query window and reuse the refreshed entries. On a
  bidirectional model the reused entries are stale (computed before this block's commits), so
  both are opt-in approximations; on a one-layer model they are exact, which the tests use.
  `PrefixCache` reuses the prefix before the block (the window is the block and everything
  after); `DualCache` reuses the prefix and the suffix (the window is the block alone).
  On a `BlockCausal` model (block diffusion: the denoiser has a `block_size`) both are exact and
  the same: later blocks are invisible and earlier ones final, so there is no refresh; the
  cache grows a block at a time (`Refreshed._extend`), and rows out of step never wait.

The refresh forward writes the canvas in *slot order* prefix ++ suffix ++ window (cache slots
carry their positions; attention is order-free), leaving the window's slots last, to be
rewritten by every later step. On a shifted (Dream) model the window starts one token early, so
that the block's first position is predicted by a fresh output.
"""

from __future__ import annotations

import abc
import functools
from typing import Any, Protocol

import jax
import jax.numpy as jnp
from flax import struct

from jaxdec.decoding import positions
from jaxdec.plugins import register_cli


@struct.dataclass
class CanvasView:
  """What a cache sees at one step. x i32[B, W]: the canvases (W static); start i32[B]: the
  active window's first canvas position; active bool[B]: rows still decoding; step i32[B]:
  forwards already run on the row's current block; lengths i32[B]: real canvas lengths; window:
  static window length N; gen_length, shift: static (shift 1 on models whose output i predicts
  position i + 1)."""

  x: jax.Array
  start: jax.Array
  active: jax.Array
  step: jax.Array
  lengths: jax.Array
  window: int = struct.field(pytree_node=False)
  gen_length: int = struct.field(pytree_node=False)
  shift: int = struct.field(pytree_node=False)

  def logit_index(self) -> jax.Array:
    """i32[B, N]: the outputs that predict the window's positions."""
    return positions(self.x.shape[0], self.window, self.start - self.shift)


class DiffusionCache(Protocol):
  """A pytree (e.g. a flax.struct.dataclass): settings as static fields, swept values as
  leaves. Subclasses inherit `check` and `prepare` (both no-ops)."""

  def check(self, guided: bool) -> None:
    """Raise ValueError if this cache cannot serve the call (`guided`: classifier-free guidance)."""

  def prepare(self, denoiser, prompt: jax.Array, prompt_lengths: jax.Array):
    """(denoiser, prompt, prompt_lengths, cache), run once before the loop: may replace what
    the sampler decodes (a cache that keeps only parts of a long prompt: prefilling.py)."""
    return denoiser, prompt, prompt_lengths, self

  @abc.abstractmethod
  def init(self, denoiser, batch: int, width: int) -> Any:
    """The state for `batch` canvases of static width `width`."""

  @abc.abstractmethod
  def logits(self, state: Any, denoiser, view: CanvasView) -> tuple[jax.Array, jax.Array, Any]:
    """(logits f32[B, N, V] of the window, advance bool[B]: rows whose step this is, state)."""


@struct.dataclass
class NoCache(DiffusionCache):
  """Recompute everything: one full forward over the canvas per step (exact)."""

  def init(self, denoiser, batch, width):
    return ()

  def logits(self, state, denoiser, view: CanvasView):
    batch, width = view.x.shape
    h, _ = denoiser.hidden(view.x, positions(batch, width), None, view.lengths)
    return denoiser.logits(h, view.logit_index()), view.active, state


def slot_order(start: jax.Array, window: jax.Array, length: jax.Array, width: int) -> jax.Array:
  """i32[B, width]: the canvas position held by each cache slot.

  Row b keeps [0, start) in place, moves the suffix [start + window, length) right after it and
  the window [start, start + window) to the end of its real tokens; padding (>= length) stays.
  """
  slot = jnp.arange(width, dtype=jnp.int32)[None, :]
  start, window, length = start[:, None], window[:, None], length[:, None]
  suffix_end = length - window
  return jnp.where(slot < start, slot,
                   jnp.where(slot < suffix_end, slot + window,
                             jnp.where(slot < length, start + slot - suffix_end, slot)))


def query(state, denoiser, view: CanvasView, first: jax.Array, size: int, real: jax.Array):
  """(hidden, cache): the canvas positions [first, first + size) run against the kept keys and
  values (written at the cache's length), of which the first `real` per row are real."""
  index = positions(view.x.shape[0], size, first)
  tokens = jnp.take_along_axis(view.x, jnp.minimum(index, view.x.shape[1] - 1), axis=1)
  return denoiser.hidden(tokens, index, state, real)


class Refreshed(DiffusionCache):
  """Fast-dLLM's scheme, for caches to subclass. Two hooks: `query_length` (the query window's
  static length: what is recomputed between refreshes) and `refresh_base` (the cache a refresh
  writes the canvas into, and what it keeps in front of it)."""

  @abc.abstractmethod
  def query_length(self, view: CanvasView) -> int:
    """The static length of the query window the cached steps recompute."""

  def check(self, guided: bool) -> None:
    if guided:
      raise ValueError(f"classifier-free guidance (cfg_scale > 0) needs cache=None, got "
                       f"{type(self).__name__}()")

  def init(self, denoiser, batch, width):
    return denoiser.init_cache(batch, width)

  def logits(self, state, denoiser, view: CanvasView):
    block = denoiser.block_size
    if block is not None:  # Exact and never refreshed: see `_extend`.
      first = jnp.all(state.length == 0)  # Nothing kept yet: the prompt's keys and values.
      return jax.lax.cond(first, self._prime, functools.partial(self._extend, block=block),
                          state, denoiser, view)
    # While any row starts a block, the whole batch runs the refresh forward, and only the rows
    # starting a block take a step; the others wait one iteration. That is what keeps a batch
    # equal to one-by-one runs: every row's step sees exactly the forward it would see alone.
    refresh = jnp.any(view.active & (view.step == 0))
    return jax.lax.cond(refresh, self._refresh, self._cached, state, denoiser, view)

  def _prime(self, state, denoiser, view: CanvasView):
    """A block-causal model's first step: the prompts and the first window (nothing after it can
    be seen), keys and values kept in position order (slot = position)."""
    batch, width = view.x.shape
    size = min(width - view.gen_length + view.window, width)
    index = positions(batch, size)
    h, out = denoiser.hidden(view.x[:, :size], index, state.with_length(0),
                             jnp.minimum(size, view.lengths))
    return denoiser.logits(h, view.logit_index()), view.active, out

  def _extend(self, state, denoiser, view: CanvasView, *, block: int):
    """A block-causal model's later steps: a query window of the block before the active window
    and the window itself, written over their slots; every slot before it holds a final block's
    keys and values, and nothing after the window is visible. So each step is exact, the cache
    grows by a block whenever a row starts one (the previous block's final tokens are rewritten
    in the step that starts it), and no row ever waits for another's refresh. While no row
    starts a block the previous block is already final in the cache, so the query is the window
    alone (and the output before it, on shifted models)."""
    starting = jnp.any(view.active & (view.step == 0))
    return jax.lax.cond(starting, functools.partial(self._extend_from, before=block),
                        functools.partial(self._extend_from, before=view.shift),
                        state, denoiser, view)

  def _extend_from(self, state, denoiser, view: CanvasView, *, before: int):
    """`_extend`'s forward: the `before` positions in front of the window and the window."""
    size = before + view.window
    first = jnp.maximum(view.start - before, 0)
    h, out = query(state.with_length(first), denoiser, view, first, size,
                    jnp.minimum(size, view.lengths - first))
    logits = denoiser.logits(h, positions(view.x.shape[0], view.window,
                                          view.start - view.shift - first))
    return logits, view.active, out

  def _window(self, view: CanvasView):
    """(first query position i32[B], real query length i32[B], static query length)."""
    first = view.start - view.shift
    size = self.query_length(view)
    return first, jnp.minimum(size, view.lengths - first), size

  def refresh_base(self, state, denoiser, batch: int, width: int):
    """(the cache a refresh writes the canvas into, i32[B] or 0: the fixed entries it keeps in
    front of the canvas; none by default, a long prompt's chosen chunks in prefilling.py)."""
    return denoiser.init_cache(batch, width), 0

  def _refresh(self, state, denoiser, view: CanvasView):
    batch, width = view.x.shape
    first, real, _ = self._window(view)
    order = slot_order(first, real, view.lengths, width)
    base, kept_before = self.refresh_base(state, denoiser, batch, width)
    h, fresh = denoiser.hidden(jnp.take_along_axis(view.x, order, axis=1), order, base,
                               view.lengths)
    logits = denoiser.logits(h, positions(batch, view.window, view.lengths - real))
    go = view.active & (view.step == 0)
    kept = fresh.with_length(kept_before + view.lengths - real).where(go, state)
    return logits, go, kept

  def _cached(self, state, denoiser, view: CanvasView):
    first, real, size = self._window(view)
    h, out = query(state, denoiser, view, first, size, real)
    logits = denoiser.logits(h, positions(view.x.shape[0], view.window))
    return logits, view.active, out.with_length(state.length)


@register_cli("cache", "prefix", order=10, help="Fast-dLLM's approximate prefix KV cache")
@struct.dataclass
class PrefixCache(Refreshed):
  """Reuse keys/values of the positions before the current block (Fast-dLLM prefix cache)."""

  def query_length(self, view: CanvasView) -> int:
    return view.gen_length + view.shift


@register_cli("cache", "dual", order=20, help="Fast-dLLM's approximate dual KV cache")
@struct.dataclass
class DualCache(Refreshed):
  """Reuse keys/values before and after the current block (Fast-dLLM dual cache)."""

  def query_length(self, view: CanvasView) -> int:
    return view.window + view.shift
