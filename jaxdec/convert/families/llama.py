"""Llama (model_type "llama"), and `LlamaStyle`: the causal Llama block that Qwen2 / Qwen3 /
Mistral (qwen.py, mistral.py) each extend by one feature, and Dream / SDAR build on."""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxdec.convert.families.base import (IGNORED, LLAMA_CONSUMED, REQUIRED_VALUES, Family,
                                          check_fields, common_to_hf, eos, rope_from_hf,
                                          rope_to_hf, sizes, token_ids)
from jaxdec.convert.families.gemma import check_no_gemma_features
from jaxdec.model.config import Embeddings, Layer, ModelConfig, Rope, Sliding, SpecialTokens


@dataclasses.dataclass(frozen=True, kw_only=True)
class LlamaStyle(Family):
  """A causal Llama block with the Llama tensor names; the flags are the variants' one feature."""

  qkv_bias: bool = False  # Qwen2: q/k/v projection biases.
  qk_norm: bool = False  # Qwen3: per-head RMSNorm on q and k.
  windowed: bool = False  # Mistral: HF `sliding_window` applies (the others ignore the field).
  writes_attention_bias: bool = True  # Its config class has an `attention_bias` field.

  def from_hf(self, raw: dict[str, Any], generation: dict[str, Any] | None) -> ModelConfig:
    arch = self.model_type
    check_fields(raw, arch, LLAMA_CONSUMED, IGNORED, REQUIRED_VALUES)
    layer_types = raw.get("layer_types")
    if layer_types is not None and set(layer_types) != {"full_attention"}:
      raise ValueError(f"unsupported layer_types {sorted(set(layer_types))}: only full_attention")
    if raw.get("attention_bias", False):
      raise ValueError(f"unsupported attention_bias=True for {arch} (it adds an o_proj bias)")
    theta, scaling = rope_from_hf(raw)
    window = raw.get("sliding_window") if self.windowed else None
    return ModelConfig(
        **sizes(raw),
        sliding=None if window is None else Sliding(window=window),
        rope=Rope(theta=theta, scaling=scaling),
        layer=Layer(norm_eps=float(raw.get("rms_norm_eps", 1e-6)), qkv_bias=self.qkv_bias,
                    qk_norm=self.qk_norm),
        embeddings=Embeddings(tied=bool(raw.get("tie_word_embeddings", False))),
        tokens=SpecialTokens(bos=raw.get("bos_token_id"), eos=token_ids(eos(raw, generation)),
                             pad=raw.get("pad_token_id")),
        architecture=arch,
    )

  def to_hf(self, config: ModelConfig, dtype_name: str) -> dict[str, Any]:
    arch = self.model_type
    if not config.is_causal:
      raise ValueError("exporting a bidirectional (masked-diffusion) model as a causal LM would "
                       "change its behaviour; export supports causal models only")
    check_no_gemma_features(config)
    layer = config.layer
    if layer.qkv_bias != self.qkv_bias or layer.qk_norm != self.qk_norm:
      raise ValueError(f"config (layer.qkv_bias={layer.qkv_bias}, layer.qk_norm={layer.qk_norm}) "
                       f"cannot be expressed as HF architecture {arch!r}")
    if config.sliding is not None and not self.windowed:
      raise ValueError(f"sliding={config.sliding} is only exportable as mistral")
    rope = rope_to_hf(config.rope.theta, config.rope.scaling)
    out = {**common_to_hf(config, self.class_name, rope, dtype_name), "hidden_act": "silu"}
    if self.windowed:
      out["sliding_window"] = None if config.sliding is None else config.sliding.window
    if self.writes_attention_bias:
      out["attention_bias"] = False
    return out


LLAMA = LlamaStyle(model_type="llama", class_name="LlamaForCausalLM")
FAMILIES = (LLAMA,)
