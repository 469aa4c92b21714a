"""Medusa heads in the published layout (`convert.medusa`), read as `spec.Heads` drafting their
saved tree (a chain without one), another tree (`choices`, `tree_size`), or as EntMTP's
`spec.EntropyTrees` (`entropy_switching`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxdec.convert.medusa import is_medusa_dir, read_medusa
from jaxdec.spec.entmtp import EntropyTrees
from jaxdec.spec.heads import Heads, sparse_tree

NAME = "Medusa heads"
LOOKS_LIKE = "config.json with medusa_num_heads"


def recognise(directory: str) -> bool:
  return is_medusa_dir(directory)


def read(directory: str, *, load=None, target=None, choices=None, tree_size=None,
         entropy_switching=False):
  del load, target  # Heads read the target's hidden states at decode time; nothing to load.
  params, config = read_medusa(directory)
  heads = Heads(jax.tree.map(jnp.asarray, params))
  ours = config.get("jaxdec") or {}
  saved = ours.get("choices")
  if entropy_switching:
    return _entropy_trees(directory, heads, ours, choices, tree_size)
  if tree_size is not None:
    if choices is not None:
      raise ValueError("give choices or tree_size, not both")
    if ours.get("accuracy") is None:
      raise ValueError(f"{directory} holds no per-rank head accuracies to build a tree from "
                       f"(only directories jaxdec exported do); pass choices instead")
    choices = sparse_tree(ours["accuracy"], tree_size)
  if choices is None and saved is not None:
    choices = tuple(tuple(p) for p in saved)
  return heads if choices is None else heads.with_choices(choices)


def _entropy_trees(directory: str, heads: Heads, ours: dict, choices, tree_size) -> EntropyTrees:
  """EntMTP from the entropy profile jaxdec exports with heads: each bucket's best tree of
  `tree_size` nodes (left out: the saved tree's size)."""
  profile = ours.get("entropy")
  if profile is None:
    raise ValueError(f"entropy switching builds its trees from the entropy profile jaxdec "
                     f"exports with heads; {directory} has none")
  if choices is not None:
    raise ValueError("give choices or entropy_switching, not both")
  size = tree_size or len(ours["choices"])
  return EntropyTrees(heads.params, tuple(sparse_tree(a, size) for a in profile["accuracy"]),
                      tuple(profile["thresholds"]), decay=profile["decay"])
