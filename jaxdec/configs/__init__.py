"""Training recipes shipped with the package: Python files whose `get_config()` returns a
`jaxdec.train.trainer.TrainConfig`.

`load_config("zoo:pycode-ar")` runs jaxdec/configs/zoo/pycode_ar.py (a name's dashes are the
file's underscores); any other argument is a path to such a file (a copy of a zoo recipe, your
own). Recipes import the library, never the CLI.
"""

from __future__ import annotations

import importlib.util
import os

ZOO_CONFIG_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "zoo")


def available() -> list[str]:
  """'zoo:NAME' of every shipped recipe."""
  return sorted(f"zoo:{name[:-3].replace('_', '-')}" for name in os.listdir(ZOO_CONFIG_DIR)
                if name.endswith(".py") and not name.startswith("_"))


def config_path(name_or_path: str) -> str:
  """The recipe file of 'zoo:NAME' or of a path; ValueError / FileNotFoundError naming it."""
  if not isinstance(name_or_path, (str, os.PathLike)):
    raise TypeError(f"config must be 'zoo:NAME' or a path, got {type(name_or_path).__name__}")
  name_or_path = os.fspath(name_or_path)
  if name_or_path.startswith("zoo:"):
    path = os.path.join(ZOO_CONFIG_DIR, name_or_path[len("zoo:"):].replace("-", "_") + ".py")
    if not os.path.isfile(path):
      raise ValueError(f"unknown zoo config {name_or_path!r}; available: {available()}")
    return path
  if not os.path.isfile(name_or_path):
    raise FileNotFoundError(f"config file not found: {name_or_path}")
  return name_or_path


def load_config(name_or_path: str):
  """Import the recipe of 'zoo:NAME' or a path to a Python file, and return its `get_config()`."""
  path = config_path(name_or_path)
  stem = os.path.splitext(os.path.basename(path))[0]
  spec = importlib.util.spec_from_file_location(f"jaxdec_config_{stem}", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  if not hasattr(module, "get_config"):
    raise ValueError(f"config {name_or_path!r} ({path}) defines no get_config()")
  return module.get_config()
