"""Hugging Face `config.json` <-> ModelConfig, with an allowlist: unknown fields raise.

Both layouts are read: transformers v4's top-level `rope_theta` / `rope_scaling` and v5's
`rope_parameters`. Export writes the v5 layout.
"""

from __future__ import annotations

import json
import os
from typing import Any

from jaxdec.model.config import ModelConfig, RopeScaling

SUPPORTED_ARCHITECTURES = ("llama", "mistral", "qwen2", "qwen3")
_CLASS_NAMES = {"llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2", "qwen3": "Qwen3"}

# Fields that carry no information for inference (training-only, bookkeeping, or defaults that
# are mathematically equivalent, such as `pretraining_tp`).
_IGNORED = frozenset({
    "architectures", "model_type", "transformers_version", "torch_dtype", "dtype", "use_cache",
    "initializer_range", "attention_dropout", "_name_or_path", "pretraining_tp",
    "output_attentions", "output_hidden_states", "return_dict", "max_window_layers",
})
# Fields that must hold exactly this value, because the decoder implements only that case.
_REQUIRED_VALUES = {
    "hidden_act": "silu",
    "mlp_bias": False,
    "use_mrope": False,
    "use_sliding_window": False,
}


def _rope(raw: dict[str, Any]) -> tuple[float, RopeScaling | None]:
  params = raw.get("rope_parameters")
  if params is None:  # transformers v4 layout.
    params = dict(raw.get("rope_scaling") or {})
    params.setdefault("rope_theta", raw.get("rope_theta", 10000.0))
  params = dict(params)
  theta = float(params.pop("rope_theta", raw.get("rope_theta", 10000.0)))
  kind = params.pop("rope_type", params.pop("type", "default"))
  if kind == "default":
    if params:
      raise ValueError(f"unhandled rope parameters for rope_type 'default': {sorted(params)}")
    return theta, None
  if kind not in ("linear", "llama3"):
    raise ValueError(f"unsupported rope_type {kind!r}; jaxdec implements default, linear, llama3")
  known = {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}
  unknown = set(params) - known
  if unknown:
    raise ValueError(f"unhandled rope parameters for rope_type {kind!r}: {sorted(unknown)}")
  return theta, RopeScaling(kind=kind, **params)


def _token_ids(value) -> tuple[int, ...]:
  if value is None:
    return ()
  return tuple(int(v) for v in (value if isinstance(value, (list, tuple)) else [value]))


def config_from_hf(raw: dict[str, Any], generation: dict[str, Any] | None = None) -> ModelConfig:
  """Translate a parsed HF config (plus optional generation_config) to a ModelConfig."""
  arch = raw.get("model_type")
  if arch not in SUPPORTED_ARCHITECTURES:
    raise ValueError(f"unknown architecture model_type={arch!r}; supported: {SUPPORTED_ARCHITECTURES}")
  consumed = {
      "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
      "num_key_value_heads", "head_dim", "max_position_embeddings", "rms_norm_eps", "rope_theta",
      "rope_scaling", "rope_parameters", "tie_word_embeddings", "bos_token_id", "eos_token_id",
      "pad_token_id", "attention_bias", "sliding_window", "layer_types",
  }
  unknown = set(raw) - consumed - _IGNORED - set(_REQUIRED_VALUES)
  if unknown:
    raise ValueError(f"unhandled config fields for {arch}: {sorted(unknown)}")
  for field, required in _REQUIRED_VALUES.items():
    if field in raw and raw[field] != required:
      raise ValueError(f"unsupported config value {field}={raw[field]!r} (jaxdec supports {required!r})")
  layer_types = raw.get("layer_types")
  if layer_types is not None and set(layer_types) != {"full_attention"}:
    raise ValueError(f"unsupported layer_types {sorted(set(layer_types))}: only full_attention")
  if raw.get("attention_bias", False):
    raise ValueError(f"unsupported attention_bias=True for {arch} (it adds an o_proj bias)")

  heads = raw["num_attention_heads"]
  theta, scaling = _rope(raw)
  eos = generation.get("eos_token_id") if generation and "eos_token_id" in generation else raw.get("eos_token_id")
  window = raw.get("sliding_window") if arch == "mistral" else None
  return ModelConfig(
      vocab_size=raw["vocab_size"],
      hidden_size=raw["hidden_size"],
      intermediate_size=raw["intermediate_size"],
      num_layers=raw["num_hidden_layers"],
      num_heads=heads,
      num_kv_heads=raw.get("num_key_value_heads") or heads,
      head_dim=raw.get("head_dim") or raw["hidden_size"] // heads,
      max_position_embeddings=raw["max_position_embeddings"],
      rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
      rope_theta=theta,
      rope_scaling=scaling,
      tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
      qkv_bias=arch == "qwen2",
      qk_norm=arch == "qwen3",
      sliding_window=window,
      architecture=arch,
      bos_token_id=raw.get("bos_token_id"),
      eos_token_ids=_token_ids(eos),
      pad_token_id=raw.get("pad_token_id"),
  )


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
  arch = config.architecture
  if arch not in SUPPORTED_ARCHITECTURES:
    raise ValueError(f"cannot export architecture {arch!r}; supported: {SUPPORTED_ARCHITECTURES}")
  if not config.causal:
    raise ValueError("exporting a bidirectional (masked-diffusion) model as a causal LM would "
                     "change its behaviour; export supports causal models only")
  if config.qkv_bias != (arch == "qwen2") or config.qk_norm != (arch == "qwen3"):
    raise ValueError(f"config (qkv_bias={config.qkv_bias}, qk_norm={config.qk_norm}) cannot be "
                     f"expressed as HF architecture {arch!r}")
  if config.sliding_window is not None and arch != "mistral":
    raise ValueError(f"sliding_window={config.sliding_window} is only exportable as mistral")
  rope = {"rope_theta": config.rope_theta, "rope_type": "default"}
  if config.rope_scaling is not None:
    s = config.rope_scaling
    rope = {"rope_theta": config.rope_theta, "rope_type": s.kind, "factor": s.factor}
    if s.kind == "llama3":
      rope.update(low_freq_factor=s.low_freq_factor, high_freq_factor=s.high_freq_factor,
                  original_max_position_embeddings=s.original_max_position_embeddings)
  eos = list(config.eos_token_ids)
  out = {
      "architectures": [f"{_CLASS_NAMES[arch]}ForCausalLM"],
      "model_type": arch,
      "vocab_size": config.vocab_size,
      "hidden_size": config.hidden_size,
      "intermediate_size": config.intermediate_size,
      "num_hidden_layers": config.num_layers,
      "num_attention_heads": config.num_heads,
      "num_key_value_heads": config.num_kv_heads,
      "head_dim": config.head_dim,
      "max_position_embeddings": config.max_position_embeddings,
      "rms_norm_eps": config.rms_norm_eps,
      "rope_parameters": rope,
      "tie_word_embeddings": config.tie_word_embeddings,
      "hidden_act": "silu",
      "bos_token_id": config.bos_token_id,
      "eos_token_id": eos[0] if len(eos) == 1 else (eos or None),
      "pad_token_id": config.pad_token_id,
      "dtype": dtype_name,
  }
  if arch == "mistral":
    out["sliding_window"] = config.sliding_window
  if arch in ("llama", "qwen3"):
    out["attention_bias"] = False
  return out
