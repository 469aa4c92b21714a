"""Hugging Face `config.json` <-> ModelConfig, with an allowlist: unknown fields raise.

Both layouts are read: transformers v4's top-level `rope_theta` / `rope_scaling` and v5's
`rope_parameters`, with transformers' precedence when a config carries both (the legacy
`rope_scaling` wins). RoPE types jaxdec does not implement (yarn, dynamic, longrope, ...) raise.
Gemma 3 keeps one RoPE per layer type (v5: `rope_parameters` nested by layer type; v4:
`rope_theta` + `rope_scaling` for the full-attention layers, `rope_local_base_freq` for the
sliding ones). Export writes the v5 layout.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from jaxdec.model.config import ModelConfig, RopeScaling
from jaxdec.model.masks import Bidirectional, BlockCausal, Causal

LLAMA_FAMILY = ("llama", "mistral", "qwen2", "qwen3")
GEMMA_FAMILY = ("gemma2", "gemma3_text")
SHIFTED_DLLMS = ("Dream", "Fast_dLLM_Qwen")  # Qwen2-based, shifted, with a mask token.
SUPPORTED_ARCHITECTURES = LLAMA_FAMILY + GEMMA_FAMILY + ("llada",) + SHIFTED_DLLMS + ("sdar",)
_CLASS_NAMES = {"llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2", "qwen3": "Qwen3",
                "gemma2": "Gemma2", "gemma3_text": "Gemma3"}

# Fields that carry no information for inference (training-only, bookkeeping, or defaults that
# are mathematically equivalent, such as `pretraining_tp`).
_IGNORED = frozenset({
    "architectures", "model_type", "transformers_version", "torch_dtype", "dtype", "use_cache",
    "initializer_range", "attention_dropout", "_name_or_path", "pretraining_tp",
    "output_attentions", "output_hidden_states", "return_dict", "max_window_layers",
})
# The fields a Llama-family config.json is read from.
_LLAMA_CONSUMED = frozenset({
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "max_position_embeddings", "rms_norm_eps", "rope_theta",
    "rope_scaling", "rope_parameters", "tie_word_embeddings", "bos_token_id", "eos_token_id",
    "pad_token_id", "attention_bias", "sliding_window", "layer_types",
})
# Fields that must hold exactly this value, because the decoder implements only that case.
_REQUIRED_VALUES = {
    "hidden_act": "silu",
    "mlp_bias": False,
    "use_mrope": False,
    "use_sliding_window": False,
}


def _rope(raw: dict[str, Any]) -> tuple[float, RopeScaling | None]:
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


def _token_ids(value) -> tuple[int, ...]:
  if value is None:
    return ()
  return tuple(int(v) for v in (value if isinstance(value, (list, tuple)) else [value]))


def _check_fields(raw: dict[str, Any], arch: str, consumed, ignored, required: dict) -> None:
  unknown = set(raw) - set(consumed) - set(ignored) - set(required)
  if unknown:
    raise ValueError(f"unhandled config fields for {arch}: {sorted(unknown)}")
  for field, value in required.items():
    if field in raw and raw[field] != value:
      raise ValueError(f"unsupported config value {field}={raw[field]!r} (jaxdec supports {value!r})")


def _sizes(raw: dict[str, Any]) -> dict[str, int]:
  """The shape fields every causal family's config.json spells the same way."""
  heads = raw["num_attention_heads"]
  return dict(vocab_size=raw["vocab_size"], hidden_size=raw["hidden_size"],
              intermediate_size=raw["intermediate_size"], num_layers=raw["num_hidden_layers"],
              num_heads=heads, num_kv_heads=raw.get("num_key_value_heads") or heads,
              head_dim=raw.get("head_dim") or raw["hidden_size"] // heads,
              max_position_embeddings=raw["max_position_embeddings"])


def config_from_hf(raw: dict[str, Any], generation: dict[str, Any] | None = None) -> ModelConfig:
  """Translate a parsed HF config (plus optional generation_config) to a ModelConfig."""
  arch = raw.get("model_type")
  if arch == "llada":
    return _llada_config(raw)
  if arch in SHIFTED_DLLMS:
    return _dream_config(raw, generation)
  if arch == "sdar":
    return _sdar_config(raw, generation)
  if arch in GEMMA_FAMILY:
    return _gemma_config(raw, generation)
  if arch not in LLAMA_FAMILY:
    raise ValueError(f"unknown architecture model_type={arch!r}; supported: {SUPPORTED_ARCHITECTURES}")
  _check_fields(raw, arch, _LLAMA_CONSUMED, _IGNORED, _REQUIRED_VALUES)
  layer_types = raw.get("layer_types")
  if layer_types is not None and set(layer_types) != {"full_attention"}:
    raise ValueError(f"unsupported layer_types {sorted(set(layer_types))}: only full_attention")
  if raw.get("attention_bias", False):
    raise ValueError(f"unsupported attention_bias=True for {arch} (it adds an o_proj bias)")

  theta, scaling = _rope(raw)
  eos = _eos(raw, generation)
  window = raw.get("sliding_window") if arch == "mistral" else None
  return ModelConfig(
      **_sizes(raw),
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


def _eos(raw: dict[str, Any], generation: dict[str, Any] | None):
  """generation_config's eos_token_id when it has one (it lists every stop token), else config's."""
  if generation and "eos_token_id" in generation:
    return generation["eos_token_id"]
  return raw.get("eos_token_id")


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
  if arch == "llada":
    return _llada_to_hf(config, dtype_name)
  if arch in SHIFTED_DLLMS:
    return _dream_to_hf(config, dtype_name)
  if arch == "sdar":
    return _sdar_to_hf(config, dtype_name)
  if arch in GEMMA_FAMILY:
    return _gemma_to_hf(config, dtype_name)
  if arch not in LLAMA_FAMILY:
    raise ValueError(f"cannot export architecture {arch!r}; supported: {SUPPORTED_ARCHITECTURES}")
  if not config.is_causal:
    raise ValueError("exporting a bidirectional (masked-diffusion) model as a causal LM would "
                     "change its behaviour; export supports causal models only")
  _check_no_gemma_features(config)
  if config.qkv_bias != (arch == "qwen2") or config.qk_norm != (arch == "qwen3"):
    raise ValueError(f"config (qkv_bias={config.qkv_bias}, qk_norm={config.qk_norm}) cannot be "
                     f"expressed as HF architecture {arch!r}")
  if config.sliding_window is not None and arch != "mistral":
    raise ValueError(f"sliding_window={config.sliding_window} is only exportable as mistral")
  out = {**_common_to_hf(config, arch, _rope_to_hf(config.rope_theta, config.rope_scaling),
                         dtype_name), "hidden_act": "silu"}
  if arch == "mistral":
    out["sliding_window"] = config.sliding_window
  if arch in ("llama", "qwen3"):
    out["attention_bias"] = False
  return out


def _common_to_hf(config: ModelConfig, arch: str, rope: dict, dtype_name: str) -> dict[str, Any]:
  """The config.json fields every causal family's export shares."""
  eos = list(config.eos_token_ids)
  return {
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
      "bos_token_id": config.bos_token_id,
      "eos_token_id": eos[0] if len(eos) == 1 else (eos or None),
      "pad_token_id": config.pad_token_id,
      "dtype": dtype_name,
  }


def _rope_to_hf(theta: float, scaling: RopeScaling | None) -> dict[str, Any]:
  if scaling is None:
    return {"rope_theta": theta, "rope_type": "default"}
  rope = {"rope_theta": theta, "rope_type": scaling.kind, "factor": scaling.factor}
  if scaling.kind == "llama3":
    rope.update(low_freq_factor=scaling.low_freq_factor, high_freq_factor=scaling.high_freq_factor,
                original_max_position_embeddings=scaling.original_max_position_embeddings)
  return rope


# ModelConfig fields only Gemma checkpoints express, with their "off" values.
_GEMMA_FIELDS = {"sliding_layers": None, "local_rope_theta": None, "embed_scale": False,
                 "norm_unit_offset": False, "post_norms": False, "activation": "silu",
                 "query_pre_attn_scalar": None, "attn_logit_softcap": None,
                 "final_logit_softcap": None}


def _check_no_gemma_features(config: ModelConfig) -> None:
  """A Llama-family (or LLaDA / Dream) export would silently drop these."""
  on = {name: getattr(config, name) for name, off in _GEMMA_FIELDS.items()
        if getattr(config, name) != off}
  if on:
    raise ValueError(f"architecture {config.architecture!r} cannot express {on}; "
                     f"only {GEMMA_FAMILY} checkpoints carry them")


# ---- Gemma 2 / Gemma 3 text ----------------------------------------------------------------------
# Gemma2Config / Gemma3TextConfig defaults, applied as transformers does when a field is absent.
_GEMMA_DEFAULTS = {
    "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6,
    "pad_token_id": 0, "eos_token_id": 1, "bos_token_id": 2, "tie_word_embeddings": True,
    "query_pre_attn_scalar": 256, "sliding_window": 4096,
}
_GEMMA_ARCH_DEFAULTS = {
    "gemma2": {"max_position_embeddings": 8192, "final_logit_softcapping": 30.0,
               "attn_logit_softcapping": 50.0},
    "gemma3_text": {"max_position_embeddings": 131072, "final_logit_softcapping": None,
                    "attn_logit_softcapping": None},
}
_GEMMA_IGNORED = _IGNORED | {"cache_implementation", "sliding_window_pattern",
                             "_sliding_window_pattern"}
_GEMMA_REQUIRED = {"hidden_activation": "gelu_pytorch_tanh", "attention_bias": False}
_LAYER_TYPES = ("sliding_attention", "full_attention")


def _gemma_layer_types(raw: dict[str, Any], arch: str) -> tuple[bool, ...]:
  """Which layers slide, from `layer_types`, else transformers' default pattern (Gemma 2: every
  other layer from the first; Gemma 3: all but every `sliding_window_pattern`-th, default 6)."""
  layers = raw["num_hidden_layers"]
  types = raw.get("layer_types")
  if types is None:
    period = 2 if arch == "gemma2" else raw.get("sliding_window_pattern", 6)
    return tuple(bool((i + 1) % period) for i in range(layers))
  for value in types:
    if value not in _LAYER_TYPES:
      raise ValueError(f"unsupported layer_types value {value!r} for {arch}; jaxdec supports "
                       f"{_LAYER_TYPES}")
  if len(types) != layers:
    raise ValueError(f"layer_types has {len(types)} entries for num_hidden_layers={layers}")
  return tuple(value == "sliding_attention" for value in types)


def _gemma3_rope(raw: dict[str, Any]) -> tuple[float, RopeScaling | None, float]:
  """(global theta, global scaling, local theta) as Gemma3TextConfig reads them: a legacy
  `rope_scaling` updates the full-attention entry; `rope_theta` / `rope_local_base_freq` fill
  missing thetas (defaults 1e6 / 1e4). The sliding layers' RoPE must be unscaled."""
  nested = dict(raw.get("rope_parameters") or {})
  unknown = set(nested) - set(_LAYER_TYPES)
  if unknown:
    raise ValueError(f"gemma3_text rope_parameters must be nested by layer type {_LAYER_TYPES}, "
                     f"got keys {sorted(nested)}")
  full = dict(nested.get("full_attention") or {"rope_type": "default"})
  full.update(raw.get("rope_scaling") or {})
  full.setdefault("rope_theta", raw.get("rope_theta", 1_000_000.0))
  local = dict(nested.get("sliding_attention") or {"rope_type": "default"})
  local.setdefault("rope_theta", raw.get("rope_local_base_freq", 10_000.0))
  size = {"max_position_embeddings": raw["max_position_embeddings"]}
  theta, scaling = _rope(dict(size, rope_parameters=full))
  local_theta, local_scaling = _rope(dict(size, rope_parameters=local))
  if local_scaling is not None:
    raise ValueError(f"unsupported rope_parameters['sliding_attention'] rope_type "
                     f"{local_scaling.kind!r}: jaxdec scales only the full-attention layers' RoPE")
  return theta, scaling, local_theta


def _gemma_config(raw: dict[str, Any], generation: dict[str, Any] | None) -> ModelConfig:
  arch = raw["model_type"]
  consumed = {
      "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
      "num_key_value_heads", "head_dim", "max_position_embeddings", "rms_norm_eps",
      "rope_parameters", "rope_theta", "rope_scaling", "tie_word_embeddings", "bos_token_id",
      "eos_token_id", "pad_token_id", "sliding_window", "layer_types", "query_pre_attn_scalar",
      "final_logit_softcapping", "attn_logit_softcapping", "hidden_act", "sliding_window_size",
      "use_bidirectional_attention",
  } | ({"rope_local_base_freq"} if arch == "gemma3_text" else set())
  _check_fields(raw, arch, consumed, _GEMMA_IGNORED, _GEMMA_REQUIRED)
  if raw.get("use_bidirectional_attention"):  # Gemma 2 saves it as null, Gemma 3 as false.
    raise ValueError(f"unsupported config value use_bidirectional_attention="
                     f"{raw['use_bidirectional_attention']!r} (jaxdec supports False / None)")
  raw = {**_GEMMA_DEFAULTS, **_GEMMA_ARCH_DEFAULTS[arch], **raw}
  # Legacy Gemma 2 configs repeat these; transformers reads neither, so they must agree.
  if raw.get("hidden_act", raw["hidden_activation"]) != raw["hidden_activation"]:
    raise ValueError(f"unsupported config value hidden_act={raw['hidden_act']!r} beside "
                     f"hidden_activation={raw['hidden_activation']!r}")
  if raw.get("sliding_window_size", raw["sliding_window"]) != raw["sliding_window"]:
    raise ValueError(f"unsupported config value sliding_window_size={raw['sliding_window_size']!r} "
                     f"beside sliding_window={raw['sliding_window']!r}")
  sliding = _gemma_layer_types(raw, arch)
  window = raw["sliding_window"]
  if window is None and any(sliding):
    raise ValueError(f"{arch} has sliding_attention layers but sliding_window=None")
  if arch == "gemma2":
    (theta, scaling), local_theta = _rope(raw), None
    attn_softcap = raw["attn_logit_softcapping"]
  else:
    theta, scaling, local_theta = _gemma3_rope(raw)
    # Gemma3Attention never passes it to the attention function: transformers ignores the field.
    if raw["attn_logit_softcapping"] is not None:
      raise ValueError(f"unsupported config value attn_logit_softcapping="
                       f"{raw['attn_logit_softcapping']!r} for gemma3_text (transformers ignores "
                       f"it; jaxdec supports None)")
    attn_softcap = None
  return ModelConfig(
      **_sizes(raw),
      rms_norm_eps=float(raw["rms_norm_eps"]),
      rope_theta=theta,
      rope_scaling=scaling,
      tie_word_embeddings=bool(raw["tie_word_embeddings"]),
      qk_norm=arch == "gemma3_text",
      sliding_window=window if any(sliding) else None,
      sliding_layers=sliding if any(sliding) else None,
      local_rope_theta=local_theta if any(sliding) else None,
      embed_scale=True,
      norm_unit_offset=True,
      post_norms=True,
      activation="gelu_tanh",
      query_pre_attn_scalar=raw["query_pre_attn_scalar"],
      attn_logit_softcap=None if attn_softcap is None else float(attn_softcap),
      final_logit_softcap=(None if raw["final_logit_softcapping"] is None
                           else float(raw["final_logit_softcapping"])),
      architecture=arch,
      bos_token_id=raw["bos_token_id"],
      eos_token_ids=_token_ids(_eos(raw, generation)),
      pad_token_id=raw["pad_token_id"],
  )


def _int_if_whole(value):
  """transformers' strict Gemma configs type query_pre_attn_scalar as int."""
  return int(value) if value is not None and float(value).is_integer() else value


def _gemma_to_hf(config: ModelConfig, dtype_name: str) -> dict[str, Any]:
  arch = config.architecture
  gemma3 = arch == "gemma3_text"
  if not config.is_causal or config.shifted_logits or config.mask_token_id is not None:
    raise ValueError(f"{arch} export supports causal models only")
  fixed = {"embed_scale": True, "norm_unit_offset": True, "post_norms": True,
           "activation": "gelu_tanh", "qkv_bias": False, "qk_norm": gemma3}
  if arch == "gemma2":
    fixed.update(local_rope_theta=None)
  else:
    fixed.update(attn_logit_softcap=None)
  wrong = {name: getattr(config, name) for name, value in fixed.items()
           if getattr(config, name) != value}
  if config.sliding_window is not None and config.sliding_layers is None:
    wrong["sliding_layers"] = None  # Mistral-style windows on every layer: say so per layer.
  if gemma3 and config.sliding_layers is not None and config.local_rope_theta is None:
    wrong["local_rope_theta"] = None
  if wrong:
    raise ValueError(f"config fields {wrong} cannot be expressed as HF architecture {arch!r}")
  sliding = config.sliding_layers or (False,) * config.num_layers
  rope = _rope_to_hf(config.rope_theta, config.rope_scaling)
  if gemma3:
    local = config.local_rope_theta if config.local_rope_theta is not None else config.rope_theta
    rope = {"full_attention": rope, "sliding_attention": _rope_to_hf(local, None)}
  return {
      **_common_to_hf(config, arch, rope, dtype_name),
      "hidden_activation": "gelu_pytorch_tanh",
      "query_pre_attn_scalar": _int_if_whole(config.query_pre_attn_scalar or config.head_dim),
      "attn_logit_softcapping": config.attn_logit_softcap,
      "final_logit_softcapping": config.final_logit_softcap,
      "sliding_window": config.sliding_window,
      "layer_types": [_LAYER_TYPES[0] if s else _LAYER_TYPES[1] for s in sliding],
      "attention_bias": False,
      "use_bidirectional_attention": False,
  }


# LLaDA (OLMo-style remote-code config, model_type "llada"): a Llama block with full attention.
_LLADA_IGNORED = frozenset({
    "architectures", "model_type", "transformers_version", "torch_dtype", "dtype", "use_cache",
    "auto_map", "attention_dropout", "embedding_dropout", "residual_dropout", "init_device",
    "init_fn", "init_std", "init_cutoff_factor", "flash_attention", "precision", "mlp_ratio",
    "rope_full_precision", "alibi_bias_max", "attention_layer_norm_with_affine",
    "multi_query_attention",
})
_LLADA_REQUIRED = {
    "block_type": "llama", "activation_type": "silu", "layer_norm_type": "rms",
    "layer_norm_with_affine": True, "attention_layer_norm": False, "bias_for_layer_norm": False,
    "include_bias": False, "rope": True, "alibi": False, "input_emb_norm": False,
    "scale_logits": False, "block_group_size": 1, "clip_qkv": None,
}


def _llada_config(raw: dict[str, Any]) -> ModelConfig:
  consumed = {"d_model", "n_heads", "n_kv_heads", "n_layers", "mlp_hidden_size", "vocab_size",
              "embedding_size", "max_sequence_length", "rms_norm_eps", "rope_theta", "weight_tying",
              "include_qkv_bias", "mask_token_id", "bos_token_id", "eos_token_id", "pad_token_id"}
  _check_fields(raw, "llada", consumed, _LLADA_IGNORED, _LLADA_REQUIRED)
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
      rms_norm_eps=float(raw.get("rms_norm_eps", 1e-5)),
      rope_theta=float(raw.get("rope_theta", 10000.0)),
      tie_word_embeddings=bool(raw.get("weight_tying", False)),
      qkv_bias=bool(raw.get("include_qkv_bias", False)),
      attention=Bidirectional(),
      architecture="llada",
      bos_token_id=raw.get("bos_token_id"),
      eos_token_ids=_token_ids(raw.get("eos_token_id")),
      pad_token_id=raw.get("pad_token_id"),
      mask_token_id=raw["mask_token_id"],
  )


def _llada_to_hf(config: ModelConfig, dtype_name: str) -> dict[str, Any]:
  if config.is_causal or config.mask_token_id is None:
    raise ValueError("a llada checkpoint is a bidirectional model with a mask_token_id")
  _check_no_gemma_features(config)
  if config.qk_norm or config.sliding_window is not None or config.rope_scaling is not None:
    raise ValueError("llada has no qk_norm, sliding window or rope scaling")
  if config.head_dim * config.num_heads != config.hidden_size:
    raise ValueError(f"llada needs head_dim * num_heads == hidden_size, got {config.head_dim} * "
                     f"{config.num_heads} != {config.hidden_size}")
  eos = list(config.eos_token_ids)
  return {
      "architectures": ["LLaDAModelLM"], "model_type": "llada", "d_model": config.hidden_size,
      "n_heads": config.num_heads, "n_kv_heads": config.num_kv_heads, "n_layers": config.num_layers,
      "mlp_hidden_size": config.intermediate_size, "vocab_size": config.vocab_size,
      "embedding_size": config.vocab_size, "max_sequence_length": config.max_position_embeddings,
      "rms_norm_eps": config.rms_norm_eps, "rope_theta": config.rope_theta,
      "weight_tying": config.tie_word_embeddings, "include_qkv_bias": config.qkv_bias,
      "mask_token_id": config.mask_token_id, "bos_token_id": config.bos_token_id, "eos_token_id": eos[0] if len(eos) == 1 else (eos or None),
      "pad_token_id": config.pad_token_id, "dtype": dtype_name, **_LLADA_REQUIRED,
  }


# Dream (remote code `DreamModel`, model_type "Dream"): Qwen2 weights and fields, full attention,
# a mask token, and shifted logits (AR-initialised: position i predicts token i + 1). Fast-dLLM v2
# (remote code `Fast_dLLM_QwenForCausalLM`, model_type "Fast_dLLM_Qwen"): the same with
# block-causal attention over `bd_size`-token blocks (block diffusion); its released config names
# the mask token only in the tokenizer, so jaxdec writes `mask_token_id` into config.json as well,
# and `causal_given` for a model trained with jaxdec's variant of the pattern (BlockCausal).
_DREAM_IGNORED = _IGNORED | {"auto_map"}
_CLASSES = {"Dream": "DreamModel", "Fast_dLLM_Qwen": "Fast_dLLM_QwenForCausalLM"}


def _dream_config(raw: dict[str, Any], generation: dict[str, Any] | None) -> ModelConfig:
  arch = raw["model_type"]
  qwen2 = {k: v for k, v in raw.items()
           if k not in ("mask_token_id", "auto_map", "bd_size", "causal_given")}
  unknown = set(qwen2) - set(_DREAM_IGNORED) - set(_REQUIRED_VALUES) - {
      "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
      "num_key_value_heads", "head_dim", "max_position_embeddings", "rms_norm_eps", "rope_theta",
      "rope_scaling", "rope_parameters", "tie_word_embeddings", "bos_token_id", "eos_token_id",
      "pad_token_id", "sliding_window", "layer_types"}
  if unknown:
    raise ValueError(f"unhandled config fields for {arch}: {sorted(unknown)}")
  if "mask_token_id" not in raw:
    raise ValueError(f"a {arch} config needs mask_token_id (add the tokenizer's mask token id)")
  if arch == "Fast_dLLM_Qwen":
    if "bd_size" not in raw:
      raise ValueError("a Fast_dLLM_Qwen config needs bd_size (its block size)")
    attention = BlockCausal(raw["bd_size"], causal_given=bool(raw.get("causal_given", False)))
  else:
    attention = Bidirectional()
  base = config_from_hf(dict(qwen2, model_type="qwen2"), generation)
  return dataclasses.replace(base, attention=attention, shifted_logits=True, architecture=arch,
                             mask_token_id=raw["mask_token_id"])


def _dream_to_hf(config: ModelConfig, dtype_name: str) -> dict[str, Any]:
  arch = config.architecture
  if (config.is_causal or not config.shifted_logits or config.mask_token_id is None
      or isinstance(config.attention, BlockCausal) != (arch == "Fast_dLLM_Qwen")):
    raise ValueError(f"a {arch} checkpoint is shifted, with a mask_token_id, and "
                     f"{'block-causal' if arch == 'Fast_dLLM_Qwen' else 'bidirectional'}; got "
                     f"attention={config.attention!r}, shifted_logits={config.shifted_logits}, "
                     f"mask_token_id={config.mask_token_id}")
  qwen2 = dataclasses.replace(config, attention=Causal(), shifted_logits=False, architecture="qwen2",
                              mask_token_id=None)
  out = config_to_hf(qwen2, dtype_name)
  out.update(architectures=[_CLASSES[arch]], model_type=arch, mask_token_id=config.mask_token_id)
  if isinstance(config.attention, BlockCausal):
    out["bd_size"] = config.attention.block_size
    if config.attention.causal_given:
      out["causal_given"] = True
  return out


# SDAR (remote code `SDARForCausalLM`, model_type "sdar": JetLM/SDAR-1.7B-Chat, SDAR-8B-Chat): Qwen3
# weights and fields, a mask token, unshifted logits (position i predicts token i), and
# block-causal attention. The release takes the block as a decoding setting (4 for SDAR-*-Chat)
# and names `<|mask|>` only in the tokenizer, so jaxdec reads both from config.json
# (`block_size`, `mask_token_id`) and writes both there on export.
# Ignored besides _IGNORED, since the release's inference forward reads none of them: auto_map
# (remote-code class names), attn_implementation (which attention kernel), fuse_cross_entropy (a
# fused training loss; logits are computed at inference), debug, micro_forward, skip_checkpoint
# (training switches), ep_size, use_deepep (expert parallelism, for the MoE variant's code).
_SDAR_IGNORED = _IGNORED | {"auto_map", "attn_implementation", "fuse_cross_entropy", "debug",
                            "micro_forward", "skip_checkpoint", "ep_size", "use_deepep"}
_SDAR_FIELDS = {"block_size": 'add "block_size": 4 (SDAR-*-Chat\'s decoding block) to config.json',
                "mask_token_id": "add the tokenizer's <|mask|> id (151669 in SDAR-*-Chat) to "
                                 "config.json"}


def _sdar_config(raw: dict[str, Any], generation: dict[str, Any] | None) -> ModelConfig:
  _check_fields(raw, "sdar", _LLAMA_CONSUMED | set(_SDAR_FIELDS), _SDAR_IGNORED, _REQUIRED_VALUES)
  for field, hint in _SDAR_FIELDS.items():
    if field not in raw:
      raise ValueError(f"an sdar config needs {field} ({hint})")
  qwen3 = {k: v for k, v in raw.items() if k not in _SDAR_IGNORED | set(_SDAR_FIELDS)}
  base = config_from_hf(dict(qwen3, model_type="qwen3"), generation)
  return dataclasses.replace(base, attention=BlockCausal(raw["block_size"]), architecture="sdar",
                             mask_token_id=raw["mask_token_id"])


def _sdar_to_hf(config: ModelConfig, dtype_name: str) -> dict[str, Any]:
  attention = config.attention
  if (not isinstance(attention, BlockCausal) or attention.causal_given or config.shifted_logits
      or config.mask_token_id is None):
    raise ValueError(f"an sdar checkpoint is unshifted, block-causal (causal_given=False), with a "
                     f"mask_token_id; got attention={attention!r}, shifted_logits="
                     f"{config.shifted_logits}, mask_token_id={config.mask_token_id}")
  qwen3 = dataclasses.replace(config, attention=Causal(), architecture="qwen3", mask_token_id=None)
  out = config_to_hf(qwen3, dtype_name)
  out.update(architectures=["SDARForCausalLM"], model_type="sdar",
             block_size=attention.block_size, mask_token_id=config.mask_token_id)
  return out
