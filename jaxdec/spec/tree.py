"""Draft-tree topologies: static trees, per-row dynamic trees, and the batched arrays both become.

Node 0 is the root: the last committed token, fed to the target together with the drafts.
Nodes 1..N are drafts; `parents[i - 1]` is the parent of node i and must precede it. A chain of
K drafts is the tree with parents (0, 1, ..., K-1).

A `Tree` is one static topology for every row and step (a hashable jit argument; its arrays are
numpy, computed once). A `DynamicTree` only bounds the topology (size, depth, fan-out): the drafter
returns each row's parents with its drafts (EAGLE-2 grows a different tree per row and step).
Either way the loop and the verifiers read a `Topology`: the same arrays, batched. One routine
derives them from parents, in numpy for a static tree and in jnp for per-row trees.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct


def _layout(parents, max_depth: int, max_children: int, xp) -> dict:
  """Depths, ancestor mask, paths and children of trees parents i32[B, N], with `xp` numpy (a
  static tree, once, on the host) or jax.numpy (per-row trees inside the step): one routine for
  both. Nodes deeper than `max_depth` get cut paths and children past `max_children` are left out
  (callers keep within their bounds)."""
  batch, size = parents.shape
  nodes = xp.arange(size + 1, dtype=xp.int32)
  full = xp.concatenate([xp.zeros((batch, 1), xp.int32), parents.astype(xp.int32)], axis=1)
  # reach[i, j]: j is i or an ancestor of i at most 2^k levels up; squaring doubles k.
  reach = ((full[:, :, None] == nodes[None, None, :]) & (nodes > 0)[None, :, None]
           | xp.eye(size + 1, dtype=bool)[None])
  for _ in range(max(max_depth - 1, 0).bit_length()):
    as_float = reach.astype(xp.float32)  # 0/1 products: exact in any matmul precision.
    reach = (as_float @ as_float) > 0
  depths = xp.sum(reach, -1, dtype=xp.int32) - 1
  # paths[i, d - 1]: the one node on i's path at depth d.
  levels = xp.arange(1, max(max_depth, 1) + 1, dtype=xp.int32)
  at_level = reach[..., None] & (depths[:, None, :, None] == levels[None, None, None, :])
  paths = xp.sum(xp.where(at_level, nodes[None, None, :, None], 0), axis=2, dtype=xp.int32)
  # Node i is its parent's child number rank(i): the count of its earlier siblings.
  earlier = (nodes[None, :] < nodes[:, None]) & (nodes > 0)[None, :]
  rank = xp.sum((full[:, :, None] == full[:, None, :]) & earlier[None], -1, dtype=xp.int32)
  slots = xp.arange(max_children, dtype=xp.int32)
  is_child = ((full[:, None, None, :] == nodes[None, :, None, None])  # [B, parent, slot, node]
              & (rank[:, None, None, :] == slots[None, None, :, None]) & (nodes > 0)[None, None, None, :])
  children = xp.where(xp.any(is_child, -1),
                      xp.sum(xp.where(is_child, nodes[None, None, None, :], 0), -1, dtype=xp.int32), -1)
  return dict(parents=full[:, 1:], depths=depths, ancestor_mask=reach, paths=paths,
              children=children)


@struct.dataclass
class Topology:
  """Batched tree arrays (N drafts, B rows): parents i32[B, N]; depths i32[B, N + 1] (root 0);
  ancestor_mask bool[B, N + 1, N + 1] (node i sees node j iff j is i or one of its ancestors:
  the mask the target attends with); paths i32[B, N + 1, max(max_depth, 1)] (the nodes at depths
  1..depth(i) on the way to node i, 0-padded); children i32[B, N + 1, max_children] (each node's
  children in index order, -1-padded)."""

  parents: jax.Array
  depths: jax.Array
  ancestor_mask: jax.Array
  paths: jax.Array
  children: jax.Array
  max_depth: int = struct.field(pytree_node=False)
  is_chain: bool = struct.field(pytree_node=False)

  @classmethod
  def of(cls, tree: "Tree", batch: int) -> "Topology":
    """A static tree's arrays, the same for every row."""
    rows = lambda x: jnp.broadcast_to(jnp.asarray(x), (batch,) + x.shape)
    return cls(parents=rows(np.asarray(tree.parents, np.int32)), depths=rows(tree.depths),
               ancestor_mask=rows(tree.ancestor_mask), paths=rows(tree.paths),
               children=rows(tree.children), max_depth=tree.max_depth, is_chain=tree.is_chain)

  @classmethod
  def from_parents(cls, parents: jax.Array, max_depth: int, max_children: int) -> "Topology":
    """The arrays of per-row trees parents i32[B, N] (each parent 0 or an earlier node).

    The caller guarantees the bounds: no node deeper than `max_depth`, no node with more than
    `max_children` children (a drafter's contract, not checked inside jit: deeper nodes would
    get cut paths, extra children would be left out)."""
    return cls(**_layout(parents, max_depth, max_children, jnp), max_depth=max_depth,
               is_chain=False)


@dataclasses.dataclass(frozen=True)
class Tree:
  parents: tuple[int, ...]

  is_dynamic = False

  def __post_init__(self):
    if not isinstance(self.parents, tuple) or not self.parents:
      raise ValueError(f"a tree needs at least one draft node given as a tuple of parents, got "
                       f"{self.parents!r}")
    for node, parent in enumerate(self.parents, start=1):
      if not isinstance(parent, (int, np.integer)) or not 0 <= parent < node:
        raise ValueError(f"not a tree: node {node} has parent {parent!r}; each node's parent must "
                         f"be the root (0) or an earlier node (1..{node - 1})")

  @classmethod
  def chain(cls, length: int) -> "Tree":
    if not isinstance(length, int) or length < 1:
      raise ValueError(f"a chain needs at least one draft token, got {length!r}")
    return cls(tuple(range(length)))

  @classmethod
  def branches(cls, count: int, depth: int) -> "Tree":
    """`count` independent chains of `depth` drafts hanging off the root."""
    if count < 1 or depth < 1:
      raise ValueError(f"branches needs count >= 1 and depth >= 1, got {count}, {depth}")
    parents = []
    for b in range(count):
      first = 1 + b * depth
      parents += [0] + list(range(first, first + depth - 1))
    return cls(tuple(parents))

  @property
  def size(self) -> int:
    """Number of draft nodes N (the target processes N + 1 tokens per step)."""
    return len(self.parents)

  @property
  def is_chain(self) -> bool:
    return self.parents == tuple(range(self.size))

  @functools.cached_property
  def _arrays(self) -> dict[str, np.ndarray]:
    """The layout of this one tree (bounded by its size), cut to its depth and fan-out."""
    arrays = {k: v[0] for k, v in _layout(np.array([self.parents]), self.size, self.size,
                                          np).items()}
    arrays["paths"] = arrays["paths"][:, : max(int(arrays["depths"].max()), 1)]
    arrays["children"] = arrays["children"][:, : int((arrays["children"] >= 0).sum(1).max())]
    return arrays

  @property
  def depths(self) -> np.ndarray:
    """i32[N + 1]: root 0, each node one deeper than its parent."""
    return self._arrays["depths"]

  @property
  def max_depth(self) -> int:
    return int(self.depths.max())

  @property
  def ancestor_mask(self) -> np.ndarray:
    """bool[N + 1, N + 1]: node i may attend to node j iff j is i or one of its ancestors."""
    return self._arrays["ancestor_mask"]

  @property
  def paths(self) -> np.ndarray:
    """i32[N + 1, max(max_depth, 1)]: the nodes at depths 1..depth(i) on the way to node i
    (0-padded)."""
    return self._arrays["paths"]

  @property
  def children(self) -> np.ndarray:
    """i32[N + 1, max_children]: children of each node in index order, padded with -1."""
    return self._arrays["children"]

  def topology(self, draft, batch: int) -> Topology:
    """The batched arrays for one step's `draft` (a static tree's drafts carry no parents)."""
    if draft.parents is not None:
      raise TypeError(f"the drafter has a static Tree of {self.size} nodes but returned "
                      f"Draft.parents; only a DynamicTree drafter returns its topology")
    return Topology.of(self, batch)


@dataclasses.dataclass(frozen=True)
class DynamicTree:
  """The static bounds of a per-row, per-step tree: `size` draft nodes, none deeper than
  `max_depth`, none with more than `max_children` children. The drafter returns the actual
  parents in `Draft.parents` and must keep within these bounds (not checked at run time)."""

  size: int
  max_depth: int
  max_children: int

  is_chain = False
  is_dynamic = True

  def __post_init__(self):
    for name in ("size", "max_depth", "max_children"):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"DynamicTree.{name} must be an int >= 1, got {value!r}")
    for name in ("max_depth", "max_children"):
      if getattr(self, name) > self.size:
        raise ValueError(f"DynamicTree.{name} must be <= size {self.size}, got "
                         f"{getattr(self, name)!r}")

  def topology(self, draft, batch: int) -> Topology:
    """The batched arrays of the trees in `draft.parents`."""
    if draft.parents is None:
      raise TypeError(f"the drafter has a DynamicTree of {self.size} nodes but returned "
                      f"Draft.parents=None; it must return each row's parents i32[B, {self.size}]")
    return Topology.from_parents(draft.parents, self.max_depth, self.max_children)
