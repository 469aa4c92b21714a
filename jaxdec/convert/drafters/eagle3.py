"""EAGLE-3 drafters in the published layout (`convert.eagle3`), read as `spec.Eagle3` over a
target: the one given, else the base model their config.json names."""

from __future__ import annotations

from jaxdec.convert.eagle3 import ARCHITECTURES, is_eagle3_dir, read_eagle3
from jaxdec.spec.eagle import Eagle3

NAME = "EAGLE-3 drafter"
LOOKS_LIKE = (f"config.json with architectures {ARCHITECTURES[0]}, or with draft_vocab_size")


def recognise(directory: str) -> bool:
  return is_eagle3_dir(directory)


def read(directory: str, *, load, target=None, choices=None, tree_size=None,
         entropy_switching=False) -> Eagle3:
  if choices is not None or tree_size is not None or entropy_switching:
    raise ValueError(f"{directory} holds an EAGLE-3 drafter, which grows its own dynamic tree: "
                     f"choices, tree_size and entropy_switching are for Medusa heads; use "
                     f"drafter.with_tree(top_k=, depth=, size=)")
  return read_eagle3(directory, target, load=load)
