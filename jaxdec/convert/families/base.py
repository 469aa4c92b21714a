"""What every model family declares (`Family`), the shared Llama-style tensor names, and the
config.json helpers several families use (RoPE, token ids, the field allowlist check)."""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

from jaxdec.model.config import ModelConfig, RopeScaling


class TensorNames(NamedTuple):
  """A checkpoint's HF tensor names: `{layers}.{i}.{per_layer[param]}` for each stacked param."""

  embed: str
  final_norm: str
  head: str
  layers: str  # The prefix of the per-layer tensors.
  per_layer: dict[str, str]  # {jaxdec layer param: HF name inside the layer}.
  tied_head_ok: bool = True  # Some tied checkpoints store the head too (checked against embed).


LLAMA_TENSORS = TensorNames("model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
                            "model.layers", {
    "attn_norm": "input_layernorm.weight", "mlp_norm": "post_attention_layernorm.weight",
    "wq": "self_attn.q_proj.weight", "wk": "self_attn.k_proj.weight",
    "wv": "self_attn.v_proj.weight", "wo": "self_attn.o_proj.weight",
    "w_gate": "mlp.gate_proj.weight", "w_up": "mlp.up_proj.weight",
    "w_down": "mlp.down_proj.weight",
    "bq": "self_attn.q_proj.bias", "bk": "self_attn.k_proj.bias", "bv": "self_attn.v_proj.bias",
    "q_norm": "self_attn.q_norm.weight", "k_norm": "self_attn.k_norm.weight",
})


@dataclasses.dataclass(frozen=True, kw_only=True)
class Family:
  """One HF `model_type` (also `ModelConfig.architecture`): how its config.json maps to a
  ModelConfig and back, and what its tensors are called. Subclasses implement the two methods."""

  model_type: str
  class_name: str  # The `architectures` entry export writes.
  tensors: TensorNames = LLAMA_TENSORS
  # The layout always holds q/k/v biases (Qwen2's): a model without them exports zero ones.
  always_qkv_bias: bool = False

  def from_hf(self, raw: dict[str, Any], generation: dict[str, Any] | None) -> ModelConfig:
    """A parsed config.json (plus generation_config.json, or None) -> ModelConfig."""
    raise NotImplementedError

  def to_hf(self, config: ModelConfig, dtype_name: str) -> dict[str, Any]:
    """ModelConfig -> a config.json dict; raises ValueError for what the family cannot express."""
    raise NotImplementedError


# Fields that carry no information for inference (training-only, bookkeeping, or defaults that
# are mathematically equivalent, such as `pretraining_tp`).
IGNORED = frozenset({
    "architectures", "model_type", "transformers_version", "torch_dtype", "dtype", "use_cache",
    "initializer_range", "attention_dropout", "_name_or_path", "pretraining_tp",
    "output_attentions", "output_hidden_states", "return_dict", "max_window_layers",
})
# The fields a Llama-style config.json is read from.
LLAMA_CONSUMED = frozenset({
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "max_position_embeddings", "rms_norm_eps", "rope_theta",
    "rope_scaling", "rope_parameters", "tie_word_embeddings", "bos_token_id", "eos_token_id",
    "pad_token_id", "attention_bias", "sliding_window", "layer_types",
})
# Fields that must hold exactly this value, because the decoder implements only that case.
REQUIRED_VALUES = {
    "hidden_act": "silu",
    "mlp_bias": False,
    "use_mrope": False,
    "use_sliding_window": False,
}


def rope_from_hf(raw: dict[str, Any]) -> tuple[float, RopeScaling | None]:
  """(rope_theta, scaling) as transformers v5 reads them, so jaxdec computes the logits it does.

  A non-empty legacy `rope_scaling` replaces `rope_parameters` wholesale (its theta included:
  the theta then comes from a top-level `rope_theta`, else 10000); llama3 scaling defaults
  `original_max_position_embeddings` to `max_position_embeddings`.
  """
  params = dict(raw.get("rope_scaling") or raw.get("rope_parameters") or {})
  theta = float(params.pop("rope_theta", raw.get("rope_theta", 10000.0)))
  kind = params.pop("rope_type", params.pop("type", "default"))
  if kind == "default":
    if params:
      raise ValueError(f"unhandled rope parameters for rope_type 'default': {sorted(params)}")
    return theta, None
  if kind not in ("linear", "llama3"):
    raise ValueError(f"unsupported rope_type {kind!r}; jaxdec implements default, linear, llama3")
  known = {"factor"} | ({"low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}
                        if kind == "llama3" else set())
  unknown = set(params) - known
  if unknown:
    raise ValueError(f"unhandled rope parameters for rope_type {kind!r}: {sorted(unknown)}")
  if "factor" not in params:
    raise ValueError(f"rope_type {kind!r} needs a factor, got rope parameters {sorted(params)}")
  if kind == "llama3":
    params.setdefault("original_max_position_embeddings", raw["max_position_embeddings"])
  return theta, RopeScaling(kind=kind, **params)


def rope_to_hf(theta: float, scaling: RopeScaling | None) -> dict[str, Any]:
  """The v5 `rope_parameters` entry for one RoPE."""
  if scaling is None:
    return {"rope_theta": theta, "rope_type": "default"}
  rope = {"rope_theta": theta, "rope_type": scaling.kind, "factor": scaling.factor}
  if scaling.kind == "llama3":
    rope.update(low_freq_factor=scaling.low_freq_factor, high_freq_factor=scaling.high_freq_factor,
                original_max_position_embeddings=scaling.original_max_position_embeddings)
  return rope


def token_ids(value) -> tuple[int, ...]:
  """An HF token id field (None, an int or a list) as a tuple."""
  if value is None:
    return ()
  return tuple(int(v) for v in (value if isinstance(value, (list, tuple)) else [value]))


def eos_to_hf(ids: tuple[int, ...]):
  """HF's spelling of a token id list: a bare int for one id, None for none."""
  return ids[0] if len(ids) == 1 else (list(ids) or None)


def eos(raw: dict[str, Any], generation: dict[str, Any] | None):
  """generation_config's eos_token_id when it has one (it lists every stop token), else config's."""
  if generation and "eos_token_id" in generation:
    return generation["eos_token_id"]
  return raw.get("eos_token_id")


def check_fields(raw: dict[str, Any], arch: str, consumed, ignored, required: dict) -> None:
  """The allowlist: a field outside it, or a required field with another value, raises."""
  unknown = set(raw) - set(consumed) - set(ignored) - set(required)
  if unknown:
    raise ValueError(f"unhandled config fields for {arch}: {sorted(unknown)}")
  for field, value in required.items():
    if field in raw and raw[field] != value:
      raise ValueError(f"unsupported config value {field}={raw[field]!r} (jaxdec supports "
                       f"{value!r})")


def sizes(raw: dict[str, Any]) -> dict[str, int]:
  """The shape fields every causal family's config.json spells the same way."""
  heads = raw["num_attention_heads"]
  return dict(vocab_size=raw["vocab_size"], hidden_size=raw["hidden_size"],
              intermediate_size=raw["intermediate_size"], num_layers=raw["num_hidden_layers"],
              num_heads=heads, num_kv_heads=raw.get("num_key_value_heads") or heads,
              head_dim=raw.get("head_dim") or raw["hidden_size"] // heads,
              max_position_embeddings=raw["max_position_embeddings"])


def common_to_hf(config: ModelConfig, class_name: str, rope: dict,
                 dtype_name: str) -> dict[str, Any]:
  """The config.json fields every causal family's export shares."""
  return {
      "architectures": [class_name],
      "model_type": config.architecture,
      "vocab_size": config.vocab_size,
      "hidden_size": config.hidden_size,
      "intermediate_size": config.intermediate_size,
      "num_hidden_layers": config.num_layers,
      "num_attention_heads": config.num_heads,
      "num_key_value_heads": config.num_kv_heads,
      "head_dim": config.head_dim,
      "max_position_embeddings": config.max_position_embeddings,
      "rms_norm_eps": config.layer.norm_eps,
      "rope_parameters": rope,
      "tie_word_embeddings": config.embeddings.tied,
      "bos_token_id": config.tokens.bos,
      "eos_token_id": eos_to_hf(config.tokens.eos),
      "pad_token_id": config.tokens.pad,
      "dtype": dtype_name,
  }
