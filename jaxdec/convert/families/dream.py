"""Dream (remote code `DreamModel`, model_type "Dream"): Qwen2 weights and fields, full
attention, a mask token, and shifted logits (AR-initialised: position i predicts token i + 1).
`Dream` is also the base of Fast-dLLM v2 (fast_dllm.py), which differs only in its attention."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from jaxdec.convert.families.base import (IGNORED, LLAMA_CONSUMED, REQUIRED_VALUES, Family,
                                          check_fields)
from jaxdec.convert.families.qwen import QWEN2
from jaxdec.model.config import ModelConfig
from jaxdec.model.masks import Bidirectional, Causal

# Read here rather than by Qwen2 (`bd_size` / `causal_given` are Fast-dLLM's; Dream drops them).
_OWN_FIELDS = ("mask_token_id", "auto_map", "bd_size", "causal_given")
_QWEN2_FIELDS = (LLAMA_CONSUMED - {"attention_bias"}) | set(REQUIRED_VALUES)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Dream(Family):
  """A shifted Qwen2 with a mask token; subclasses change the attention pattern."""

  always_qkv_bias: bool = True
  attention_kind: ClassVar[type] = Bidirectional
  attention_name: ClassVar[str] = "bidirectional"

  def from_hf(self, raw: dict[str, Any], generation: dict[str, Any] | None) -> ModelConfig:
    arch = self.model_type
    qwen2 = {k: v for k, v in raw.items() if k not in _OWN_FIELDS}
    check_fields(qwen2, arch, _QWEN2_FIELDS, IGNORED, {})  # QWEN2 checks the values.
    if "mask_token_id" not in raw:
      raise ValueError(f"a {arch} config needs mask_token_id (add the tokenizer's mask token id)")
    attention = self._attention_from_hf(raw)
    base = QWEN2.from_hf(qwen2, generation)
    return dataclasses.replace(
        base, attention=attention, architecture=arch,
        embeddings=dataclasses.replace(base.embeddings, shifted_logits=True),
        tokens=dataclasses.replace(base.tokens, mask=raw["mask_token_id"]))

  def to_hf(self, config: ModelConfig, dtype_name: str) -> dict[str, Any]:
    arch = self.model_type
    shifted, mask = config.embeddings.shifted_logits, config.tokens.mask
    if (config.is_causal or not shifted or mask is None
        or not isinstance(config.attention, self.attention_kind)):
      raise ValueError(f"a {arch} checkpoint is shifted, with a mask token, and "
                       f"{self.attention_name}; got attention={config.attention!r}, "
                       f"embeddings.shifted_logits={shifted}, tokens.mask={mask}")
    qwen2 = dataclasses.replace(
        config, attention=Causal(), architecture=QWEN2.model_type,
        embeddings=dataclasses.replace(config.embeddings, shifted_logits=False),
        tokens=dataclasses.replace(config.tokens, mask=None))
    out = QWEN2.to_hf(qwen2, dtype_name)
    out.update(architectures=[self.class_name], model_type=arch, mask_token_id=mask,
               **self._attention_to_hf(config.attention))
    return out

  def _attention_from_hf(self, raw: dict[str, Any]):
    return Bidirectional()

  def _attention_to_hf(self, attention) -> dict[str, Any]:
    return {}


DREAM = Dream(model_type="Dream", class_name="DreamModel")
FAMILIES = (DREAM,)
