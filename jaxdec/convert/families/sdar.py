"""SDAR (remote code `SDARForCausalLM`, model_type "sdar": JetLM/SDAR-1.7B-Chat, SDAR-8B-Chat):
Qwen3 weights and fields, a mask token, unshifted logits (position i predicts token i), and
block-causal attention. The release takes the block as a decoding setting (4 for SDAR-*-Chat)
and names `<|mask|>` only in the tokenizer, so jaxdec reads both from config.json
(`block_size`, `mask_token_id`) and writes both there on export."""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxdec.convert.families.base import (IGNORED, LLAMA_CONSUMED, REQUIRED_VALUES, Family,
                                          check_fields)
from jaxdec.convert.families.qwen import QWEN3
from jaxdec.model.config import ModelConfig
from jaxdec.model.masks import BlockCausal, Causal

# Ignored besides IGNORED, since the release's inference forward reads none of them: auto_map
# (remote-code class names), attn_implementation (which attention kernel), fuse_cross_entropy (a
# fused training loss; logits are computed at inference), debug, micro_forward, skip_checkpoint
# (training switches), ep_size, use_deepep (expert parallelism, for the MoE variant's code).
_IGNORED = IGNORED | {"auto_map", "attn_implementation", "fuse_cross_entropy", "debug",
                      "micro_forward", "skip_checkpoint", "ep_size", "use_deepep"}
# Required beside Qwen3's fields, with how to add each to a released config.json.
_FIELDS = {"block_size": 'add "block_size": 4 (SDAR-*-Chat\'s decoding block) to config.json',
           "mask_token_id": "add the tokenizer's <|mask|> id (151669 in SDAR-*-Chat) to "
                            "config.json"}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Sdar(Family):
  """A block-causal, unshifted Qwen3 with a mask token."""

  def from_hf(self, raw: dict[str, Any], generation: dict[str, Any] | None) -> ModelConfig:
    arch = self.model_type
    check_fields(raw, arch, LLAMA_CONSUMED | set(_FIELDS), _IGNORED, REQUIRED_VALUES)
    for field, hint in _FIELDS.items():
      if field not in raw:
        raise ValueError(f"an {arch} config needs {field} ({hint})")
    qwen3 = {k: v for k, v in raw.items() if k not in _IGNORED | set(_FIELDS)}
    base = QWEN3.from_hf(qwen3, generation)
    return dataclasses.replace(base, attention=BlockCausal(raw["block_size"]), architecture=arch,
                               tokens=dataclasses.replace(base.tokens, mask=raw["mask_token_id"]))

  def to_hf(self, config: ModelConfig, dtype_name: str) -> dict[str, Any]:
    attention = config.attention
    shifted, mask = config.embeddings.shifted_logits, config.tokens.mask
    if (not isinstance(attention, BlockCausal) or attention.causal_given or shifted
        or mask is None):
      raise ValueError(f"an {self.model_type} checkpoint is unshifted, block-causal "
                       f"(causal_given=False), with a mask token; got attention={attention!r}, "
                       f"embeddings.shifted_logits={shifted}, tokens.mask={mask}")
    qwen3 = dataclasses.replace(config, attention=Causal(), architecture=QWEN3.model_type,
                                tokens=dataclasses.replace(config.tokens, mask=None))
    out = QWEN3.to_hf(qwen3, dtype_name)
    out.update(architectures=[self.class_name], model_type=self.model_type,
               block_size=attention.block_size, mask_token_id=mask)
    return out


SDAR = Sdar(model_type="sdar", class_name="SDARForCausalLM")
FAMILIES = (SDAR,)
