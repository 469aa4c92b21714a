"""Fast-dLLM v2 (remote code `Fast_dLLM_QwenForCausalLM`, model_type "Fast_dLLM_Qwen"): Dream
with block-causal attention over `bd_size`-token blocks (block diffusion). Its released config
names the mask token only in the tokenizer, so jaxdec writes `mask_token_id` into config.json as
well, and `causal_given` for a model trained with jaxdec's variant of the pattern (BlockCausal)."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from jaxdec.convert.families.dream import Dream
from jaxdec.model.masks import BlockCausal


@dataclasses.dataclass(frozen=True, kw_only=True)
class FastDLLM(Dream):
  """Dream's reading and writing, with BlockCausal(bd_size, causal_given) attention."""

  attention_kind: ClassVar[type] = BlockCausal
  attention_name: ClassVar[str] = "block-causal"

  def _attention_from_hf(self, raw: dict[str, Any]) -> BlockCausal:
    if "bd_size" not in raw:
      raise ValueError(f"a {self.model_type} config needs bd_size (its block size)")
    return BlockCausal(raw["bd_size"], causal_given=bool(raw.get("causal_given", False)))

  def _attention_to_hf(self, attention: BlockCausal) -> dict[str, Any]:
    out = {"bd_size": attention.block_size}
    if attention.causal_given:  # Written only when set, as the release never carries it.
      out["causal_given"] = True
    return out


FAST_DLLM = FastDLLM(model_type="Fast_dLLM_Qwen", class_name="Fast_dLLM_QwenForCausalLM")
FAMILIES = (FAST_DLLM,)
