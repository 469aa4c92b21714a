"""The tiny zoo: small models trained by jaxdec (on the CPython stdlib and on gsm-synth), shipped as
HF directories."""

from __future__ import annotations

import json
import os

ZOO_DIR = os.path.dirname(os.path.abspath(__file__))
METADATA_FILE = "zoo.json"  # Recipe, seed, steps, tokens seen, validation figures.


def available() -> list[str]:
  """Names of the shipped zoo models (directories holding a config.json)."""
  return sorted(d for d in os.listdir(ZOO_DIR)
                if os.path.exists(os.path.join(ZOO_DIR, d, "config.json")))


def resolve(name: str) -> str:
  """'zoo:NAME' (or 'NAME') -> the model's directory; ValueError naming what exists."""
  bare = name[len("zoo:"):] if name.startswith("zoo:") else name
  path = os.path.join(ZOO_DIR, bare)
  if not os.path.exists(os.path.join(path, "config.json")):
    raise ValueError(f"unknown zoo model {name!r}; available: {available() or 'none shipped yet'}")
  return path


def metadata(directory: str) -> dict:
  path = os.path.join(directory, METADATA_FILE)
  if not os.path.exists(path):
    return {}
  with open(path) as f:
    return json.load(f)


def inference_dtype(directory: str) -> str:
  """Zoo weights are stored in float16 to keep the repo small; on CPU float32 decodes faster, so
  zoo models load in float32 unless their metadata says otherwise."""
  return metadata(directory).get("inference_dtype", "float32")
