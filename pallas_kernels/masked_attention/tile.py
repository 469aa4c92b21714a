"""One [block_q, block_k] tile's masked scores, shared by the forward (`kernel`) and the backward
(`backward`) so that neither imports the other; and `Static`, what both are specialised on."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class Static:
  """What a compiled kernel is specialised on (hashable: custom_vjp's non-differentiable part)."""

  bq: int
  bk: int
  pattern: object
  scale: float
  softcap: float | None
  hidden: bool
  segments: bool
  variant: str
  interpret: bool

  def tile_args(self) -> dict:
    return dict(pattern=self.pattern, scale=self.scale, softcap=self.softcap, hidden=self.hidden,
                segments=self.segments)


def _visible(qmeta, kmeta, tree, window, pattern, hidden: bool, segments: bool):
  """bool[bq, bk] for one tile: `MaskSpec.dense`, from the metadata."""
  q_pos, k_pos = qmeta[:, 0:1], kmeta[0:1, :]
  visible = pattern.visible(q_pos, k_pos)
  if tree is not None:
    column = kmeta[2:3, :]
    ids = jax.lax.broadcasted_iota(jnp.int32, (tree.shape[1], column.shape[1]), 0)
    one_hot = (ids == column).astype(jnp.float32)
    from_tree = jnp.dot(tree, one_hot, preferred_element_type=jnp.float32) > 0.5
    visible = jnp.where(column >= 0, from_tree, visible)
  if hidden:
    given_query, hidden_key = qmeta[:, 1:2] > 0, kmeta[3:4, :] > 0
    visible &= (~hidden_key | (q_pos == k_pos)) & (~given_query | (k_pos <= q_pos))
  if segments:
    k_seg = kmeta[4:5, :]
    visible &= (k_seg == qmeta[:, 2:3]) | (k_seg == qmeta[:, 3:4])
  return visible & (kmeta[1:2, :] > 0) & ((q_pos - k_pos) < window)


def scores(q, k, qmeta, kmeta, tree, window, *, pattern, scale, softcap, hidden, segments):
  """(masked scores f32[bq, bk] (-inf where hidden), the soft-capped scores before masking)."""
  s = jax.lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
  s = s * scale
  if softcap is not None:
    s = jnp.tanh(s / softcap) * softcap
  return jnp.where(_visible(qmeta, kmeta, tree, window, pattern, hidden, segments), s,
                   -jnp.inf), s
