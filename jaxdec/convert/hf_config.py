"""Hugging Face `config.json` <-> ModelConfig: the file reading, and dispatch on `model_type` to
the family that declares it (`jaxdec.convert.families`, one module per family, each with an
allowlist of fields: unknown fields raise).

Both layouts are read: transformers v4's top-level `rope_theta` / `rope_scaling` and v5's
`rope_parameters`, with transformers' precedence when a config carries both (`families.base.
rope_from_hf`). RoPE types jaxdec does not implement (yarn, dynamic, longrope, ...) raise.
Export writes the v5 layout.
"""

from __future__ import annotations

import json
import os
from typing import Any

from jaxdec.convert import families
from jaxdec.convert.families.base import rope_from_hf as _rope  # noqa: F401  (eagle3 reads it here)
from jaxdec.convert.families.dream import Dream
from jaxdec.convert.families.gemma import Gemma
from jaxdec.convert.families.llama import LlamaStyle
from jaxdec.model.config import ModelConfig

SUPPORTED_ARCHITECTURES = families.SUPPORTED
# Groups of model_types, by the family class that reads them.
LLAMA_FAMILY = families.model_types(LlamaStyle)
GEMMA_FAMILY = families.model_types(Gemma)
SHIFTED_DLLMS = families.model_types(Dream)  # Qwen2-based, shifted, with a mask token.


def config_from_hf(raw: dict[str, Any], generation: dict[str, Any] | None = None) -> ModelConfig:
  """Translate a parsed HF config (plus optional generation_config) to a ModelConfig."""
  return families.get(raw.get("model_type")).from_hf(raw, generation)


def read_hf_config(path: str) -> ModelConfig:
  """Read `config.json` (and `generation_config.json` when present) from an HF directory."""
  with open(os.path.join(path, "config.json")) as f:
    raw = json.load(f)
  generation = None
  gen_path = os.path.join(path, "generation_config.json")
  if os.path.exists(gen_path):
    with open(gen_path) as f:
      generation = json.load(f)
  return config_from_hf(raw, generation)


def config_to_hf(config: ModelConfig, dtype_name: str) -> dict[str, Any]:
  """ModelConfig -> an HF `config.json` dict (v5 layout) that transformers loads."""
  family = families.find(config.architecture)
  if family is None:
    raise ValueError(f"cannot export architecture {config.architecture!r}; supported: "
                     f"{SUPPORTED_ARCHITECTURES}")
  return family.to_hf(config, dtype_name)
