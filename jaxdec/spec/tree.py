"""Static draft-tree topologies.

Node 0 is the root: the last committed token, fed to the target together with the drafts.
Nodes 1..N are drafts; `parents[i - 1]` is the parent of node i and must precede it. A chain of
K drafts is the tree with parents (0, 1, ..., K-1). Everything derived here (depths, the
ancestor mask the target attends with, root-to-node paths, child lists) is numpy, computed once,
so a topology is a static, hashable jit argument.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np


@dataclasses.dataclass(frozen=True)
class Tree:
  parents: tuple[int, ...]

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
  def depths(self) -> np.ndarray:
    """i32[N + 1]: root 0, each node one deeper than its parent."""
    depth = np.zeros(self.size + 1, np.int32)
    for node, parent in enumerate(self.parents, start=1):
      depth[node] = depth[parent] + 1
    return depth

  @property
  def max_depth(self) -> int:
    return int(self.depths.max())

  @functools.cached_property
  def ancestor_mask(self) -> np.ndarray:
    """bool[N + 1, N + 1]: node i may attend to node j iff j is i or one of its ancestors."""
    mask = np.eye(self.size + 1, dtype=bool)
    for node, parent in enumerate(self.parents, start=1):
      mask[node] |= mask[parent]
    return mask

  @functools.cached_property
  def paths(self) -> np.ndarray:
    """i32[N + 1, max_depth]: the nodes at depths 1..depth(i) on the way to node i (0-padded)."""
    out = np.zeros((self.size + 1, max(self.max_depth, 1)), np.int32)
    for node in range(1, self.size + 1):
      chain = [n for n in np.flatnonzero(self.ancestor_mask[node]) if n != 0]
      chain.sort(key=lambda n: self.depths[n])
      out[node, : len(chain)] = chain
    return out

  @functools.cached_property
  def children(self) -> np.ndarray:
    """i32[N + 1, max_children]: children of each node in index order, padded with -1."""
    kids = [[] for _ in range(self.size + 1)]
    for node, parent in enumerate(self.parents, start=1):
      kids[parent].append(node)
    width = max(len(k) for k in kids)
    out = np.full((self.size + 1, width), -1, np.int32)
    for node, k in enumerate(kids):
      out[node, : len(k)] = k
    return out
