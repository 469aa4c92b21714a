"""Drafter formats `jaxdec.load_drafter` reads: one module per format, found by listing this
package, so a new format is one new file.

Each format module declares
  NAME                    what the directory holds, for messages ("Medusa heads");
  LOOKS_LIKE              how such a directory is recognised, for the message naming the formats;
  recognise(directory)    True when the directory is in this format;
  read(directory, *, load, target, choices, tree_size, entropy_switching)
                          the drafter, refusing the options that do not apply to it by a
                          ValueError naming them. `load` (path, dtype=None -> Model) loads the
                          models a directory names or holds: conversion reads files, model
                          loading stays `jaxdec.io`'s, which passes its own.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from types import ModuleType

_CONTRACT = ("NAME", "LOOKS_LIKE", "recognise", "read")


def formats() -> tuple[ModuleType, ...]:
  """Every format module of this package, by name; one lacking the contract is a TypeError."""
  found = []
  for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    module = importlib.import_module(f"{__name__}.{info.name}")
    missing = [name for name in _CONTRACT if not hasattr(module, name)]
    if missing:
      raise TypeError(f"drafter format module {module.__name__} lacks {missing}")
    found.append(module)
  return tuple(found)


def format_of(directory: str) -> ModuleType:
  """The one format that recognises `directory`; none or several is a ValueError naming them."""
  if not os.path.isdir(directory):
    raise FileNotFoundError(f"drafter directory not found: {directory}")
  every = formats()
  found = [f for f in every if f.recognise(directory)]
  if not found:
    known = "; ".join(f"{f.NAME}: {f.LOOKS_LIKE}" for f in every)
    raise ValueError(f"{directory} is not a drafter directory jaxdec reads ({known})")
  if len(found) > 1:
    raise ValueError(f"{directory} looks like several drafter formats: "
                     f"{[f.NAME for f in found]}")
  return found[0]


def read_drafter(directory: str, *, load, target=None, choices=None, tree_size: int | None = None,
                 entropy_switching: bool = False):
  """The drafter in `directory`, read by its format (`format_of`)."""
  return format_of(directory).read(directory, load=load, target=target, choices=choices,
                                   tree_size=tree_size, entropy_switching=entropy_switching)
