"""LLaDA (OLMo-style remote-code config, model_type "llada"): a Llama block with full
(bidirectional) attention and a mask token, under OLMo's field and tensor names."""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxdec.convert.families.base import Family, TensorNames, check_fields, eos_to_hf, token_ids
from jaxdec.convert.families.gemma import check_no_gemma_features
from jaxdec.model.config import Embeddings, Layer, ModelConfig, Rope, SpecialTokens
from jaxdec.model.masks import Bidirectional

LLADA_TENSORS = TensorNames(
    "model.transformer.wte.weight", "model.transformer.ln_f.weight",
    "model.transformer.ff_out.weight", "model.transformer.blocks", {
        "attn_norm": "attn_norm.weight", "mlp_norm": "ff_norm.weight",
        "wq": "q_proj.weight", "wk": "k_proj.weight", "wv": "v_proj.weight",
        "wo": "attn_out.weight", "w_gate": "ff_proj.weight", "w_up": "up_proj.weight",
        "w_down": "ff_out.weight", "bq": "q_proj.bias", "bk": "k_proj.bias", "bv": "v_proj.bias",
    }, tied_head_ok=False)
_CONSUMED = frozenset({
    "d_model", "n_heads", "n_kv_heads", "n_layers", "mlp_hidden_size", "vocab_size",
    "embedding_size", "max_sequence_length", "rms_norm_eps", "rope_theta", "weight_tying",
    "include_qkv_bias", "mask_token_id", "bos_token_id", "eos_token_id", "pad_token_id",
})
_IGNORED = frozenset({
    "architectures", "model_type", "transformers_version", "torch_dtype", "dtype", "use_cache",
    "auto_map", "attention_dropout", "embedding_dropout", "residual_dropout", "init_device",
    "init_fn", "init_std", "init_cutoff_factor", "flash_attention", "precision", "mlp_ratio",
    "rope_full_precision", "alibi_bias_max", "attention_layer_norm_with_affine",
    "multi_query_attention",
})
# The OLMo switches jaxdec's block implements in one position only (export writes them).
_REQUIRED = {
    "block_type": "llama", "activation_type": "silu", "layer_norm_type": "rms",
    "layer_norm_with_affine": True, "attention_layer_norm": False, "bias_for_layer_norm": False,
    "include_bias": False, "rope": True, "alibi": False, "input_emb_norm": False,
    "scale_logits": False, "block_group_size": 1, "clip_qkv": None,
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Llada(Family):
  """Bidirectional, unshifted, with a mask token; head_dim is d_model / n_heads."""

  tensors: TensorNames = LLADA_TENSORS

  def from_hf(self, raw: dict[str, Any], generation: dict[str, Any] | None) -> ModelConfig:
    check_fields(raw, self.model_type, _CONSUMED, _IGNORED, _REQUIRED)
    heads = raw["n_heads"]
    return ModelConfig(
        vocab_size=raw.get("embedding_size") or raw["vocab_size"],
        hidden_size=raw["d_model"],
        intermediate_size=raw["mlp_hidden_size"],
        num_layers=raw["n_layers"],
        num_heads=heads,
        num_kv_heads=raw.get("n_kv_heads") or heads,
        head_dim=raw["d_model"] // heads,
        max_position_embeddings=raw["max_sequence_length"],
        attention=Bidirectional(),
        rope=Rope(theta=float(raw.get("rope_theta", 10000.0))),
        layer=Layer(norm_eps=float(raw.get("rms_norm_eps", 1e-5)),
                    qkv_bias=bool(raw.get("include_qkv_bias", False))),
        embeddings=Embeddings(tied=bool(raw.get("weight_tying", False))),
        tokens=SpecialTokens(bos=raw.get("bos_token_id"),
                             eos=token_ids(raw.get("eos_token_id")),  # generation_config unread.
                             pad=raw.get("pad_token_id"), mask=raw["mask_token_id"]),
        architecture=self.model_type,
    )

  def to_hf(self, config: ModelConfig, dtype_name: str) -> dict[str, Any]:
    if config.is_causal or config.tokens.mask is None:
      raise ValueError("a llada checkpoint is a bidirectional model with a mask token "
                       "(tokens.mask)")
    check_no_gemma_features(config)
    if config.layer.qk_norm or config.sliding is not None or config.rope.scaling is not None:
      raise ValueError("llada has no qk_norm, sliding window or rope scaling")
    if config.head_dim * config.num_heads != config.hidden_size:
      raise ValueError(f"llada needs head_dim * num_heads == hidden_size, got {config.head_dim} "
                       f"* {config.num_heads} != {config.hidden_size}")
    return {
        "architectures": [self.class_name], "model_type": self.model_type,
        "d_model": config.hidden_size, "n_heads": config.num_heads,
        "n_kv_heads": config.num_kv_heads, "n_layers": config.num_layers,
        "mlp_hidden_size": config.intermediate_size, "vocab_size": config.vocab_size,
        "embedding_size": config.vocab_size, "max_sequence_length": config.max_position_embeddings,
        "rms_norm_eps": config.layer.norm_eps, "rope_theta": config.rope.theta,
        "weight_tying": config.embeddings.tied, "include_qkv_bias": config.layer.qkv_bias,
        "mask_token_id": config.tokens.mask, "bos_token_id": config.tokens.bos,
        "eos_token_id": eos_to_hf(config.tokens.eos), "pad_token_id": config.tokens.pad,
        "dtype": dtype_name, **_REQUIRED,
    }


LLADA = Llada(model_type="llada", class_name="LLaDAModelLM")
FAMILIES = (LLADA,)
