"""The registry of model families: HF `model_type` (also `ModelConfig.architecture`) -> Family.

A family module declares, in one place, a `Family` per `model_type` it covers: the config.json
fields it accepts and how they map to a ModelConfig (`from_hf`) and back (`to_hf`), and its
checkpoint's tensor names (`tensors`; `base.LLAMA_TENSORS` unless it says otherwise). The
generic machinery (reading config.json and checkpoint files, the tensor coverage check, dtypes)
lives in `hf_config`, `hf_weights` and `hf`, which look families up here.

Adding a model family: write `families/<name>.py` holding a `Family` subclass, or an instance of
an existing one (qwen.py and mistral.py are `LlamaStyle`s; fast_dllm.py subclasses `Dream`), and
end it with `FAMILIES = (...)`. Its `from_hf` passes config.json through `base.check_fields`, so
an unknown field raises rather than being dropped, and its `to_hf` raises for a ModelConfig the
format cannot express. Then add the module to `_MODULES` below, and its tiny config to the
round-trip test in tests/convert/test_hf.py (which fails until every family has one).
"""

from __future__ import annotations

from jaxdec.convert.families import dream, fast_dllm, gemma, llada, llama, mistral, qwen, sdar
from jaxdec.convert.families.base import LLAMA_TENSORS, Family, TensorNames

_MODULES = (llama, mistral, qwen, gemma, llada, dream, fast_dllm, sdar)


def _index(modules) -> dict[str, Family]:
  """{model_type: Family} in module order; a model_type declared twice raises."""
  index: dict[str, Family] = {}
  for module in modules:
    for family in module.FAMILIES:
      if family.model_type in index:
        raise ValueError(f"model_type {family.model_type!r} is declared twice (again in "
                         f"{module.__name__})")
      index[family.model_type] = family
  return index


FAMILIES: dict[str, Family] = _index(_MODULES)
SUPPORTED: tuple[str, ...] = tuple(FAMILIES)


def find(model_type) -> Family | None:
  """The family of `model_type`, or None when no module declares it."""
  return FAMILIES.get(model_type) if isinstance(model_type, str) else None


def get(model_type) -> Family:
  """The family of `model_type`; an unknown one raises, naming the supported ones."""
  family = find(model_type)
  if family is None:
    raise ValueError(f"unknown architecture model_type={model_type!r}; supported: {SUPPORTED}")
  return family


def model_types(kind: type) -> tuple[str, ...]:
  """The model_types whose family is a `kind` (e.g. every LlamaStyle one)."""
  return tuple(name for name, family in FAMILIES.items() if isinstance(family, kind))


__all__ = ["FAMILIES", "SUPPORTED", "Family", "TensorNames", "LLAMA_TENSORS", "find", "get",
           "model_types"]
