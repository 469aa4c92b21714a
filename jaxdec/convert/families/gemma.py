"""Gemma 2 (model_type "gemma2") and Gemma 3 text ("gemma3_text"): a Llama block with GeGLU,
(1 + weight) RMSNorms after attention and MLP too, scaled embeddings, soft-caps, and sliding /
full layers. Gemma 3 adds q/k norms and keeps one RoPE per layer type (v5: `rope_parameters`
nested by layer type; v4: `rope_theta` + `rope_scaling` for the full-attention layers,
`rope_local_base_freq` for the sliding ones). Export writes the v5 layout."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from jaxdec.convert.families.base import (IGNORED, LLAMA_TENSORS, Family, TensorNames,
                                          check_fields, common_to_hf, eos, rope_from_hf,
                                          rope_to_hf, sizes, token_ids)
from jaxdec.model.config import (Embeddings, Layer, ModelConfig, Rope, RopeScaling, Sliding,
                                 SpecialTokens)

# Gemma's post_attention_layernorm normalises the attention output (Llama's is the MLP's pre-norm).
GEMMA_TENSORS = LLAMA_TENSORS._replace(per_layer={
    **LLAMA_TENSORS.per_layer, "post_attn_norm": "post_attention_layernorm.weight",
    "mlp_norm": "pre_feedforward_layernorm.weight",
    "post_mlp_norm": "post_feedforward_layernorm.weight",
})
# Gemma2Config / Gemma3TextConfig defaults, applied as transformers does when a field is absent.
_DEFAULTS = {
    "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6,
    "pad_token_id": 0, "eos_token_id": 1, "bos_token_id": 2, "tie_word_embeddings": True,
    "query_pre_attn_scalar": 256, "sliding_window": 4096,
}
_CONSUMED = frozenset({
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "max_position_embeddings", "rms_norm_eps",
    "rope_parameters", "rope_theta", "rope_scaling", "tie_word_embeddings", "bos_token_id",
    "eos_token_id", "pad_token_id", "sliding_window", "layer_types", "query_pre_attn_scalar",
    "final_logit_softcapping", "attn_logit_softcapping", "hidden_act", "sliding_window_size",
    "use_bidirectional_attention",
})
_IGNORED = IGNORED | {"cache_implementation", "sliding_window_pattern", "_sliding_window_pattern"}
_REQUIRED = {"hidden_activation": "gelu_pytorch_tanh", "attention_bias": False}
_LAYER_TYPES = ("sliding_attention", "full_attention")

# ModelConfig fields (dotted paths) only Gemma checkpoints express, with their "off" values.
_GEMMA_FIELDS = {"sliding.layers": None, "rope.local_theta": None, "embeddings.scale": False,
                 "layer.norm_unit_offset": False, "layer.post_norms": False,
                 "layer.activation": "silu", "layer.query_pre_attn_scalar": None,
                 "layer.attn_logit_softcap": None, "embeddings.final_logit_softcap": None}


def _field(config: ModelConfig, path: str):
  """A config field by its dotted path ("layer.qk_norm"); None inside a group set to None."""
  value = config
  for name in path.split("."):
    value = None if value is None else getattr(value, name)
  return value


def check_no_gemma_features(config: ModelConfig) -> None:
  """A non-Gemma export (Llama-style, LLaDA, Dream) would silently drop these."""
  on = {path: _field(config, path) for path, off in _GEMMA_FIELDS.items()
        if _field(config, path) != off}
  if on:
    raise ValueError(f"architecture {config.architecture!r} cannot express {on}; "
                     f"only {tuple(f.model_type for f in FAMILIES)} checkpoints carry them")


def _int_if_whole(value):
  """transformers' strict Gemma configs type query_pre_attn_scalar as int."""
  return int(value) if value is not None and float(value).is_integer() else value


def _softcap(value) -> float | None:
  return None if value is None else float(value)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Gemma(Family):
  """What Gemma 2 and 3 share; the subclasses say how they differ (class attributes, hooks)."""

  tensors: TensorNames = GEMMA_TENSORS
  qk_norm: bool = False
  consumed: ClassVar[frozenset] = _CONSUMED  # The config.json fields read.
  defaults: ClassVar[dict] = {}  # This version's config-class defaults beside _DEFAULTS.
  off: ClassVar[dict] = {}  # ModelConfig fields (paths) it cannot express, with the value needed.

  def from_hf(self, raw: dict[str, Any], generation: dict[str, Any] | None) -> ModelConfig:
    arch = self.model_type
    check_fields(raw, arch, self.consumed, _IGNORED, _REQUIRED)
    if raw.get("use_bidirectional_attention"):  # Gemma 2 saves it as null, Gemma 3 as false.
      raise ValueError(f"unsupported config value use_bidirectional_attention="
                       f"{raw['use_bidirectional_attention']!r} (jaxdec supports False / None)")
    raw = {**_DEFAULTS, **self.defaults, **raw}
    _check_legacy_fields(raw)
    sliding = self._sliding_layers(raw)
    window = raw["sliding_window"]
    if window is None and any(sliding):
      raise ValueError(f"{arch} has sliding_attention layers but sliding_window=None")
    theta, scaling, local_theta = self._rope(raw)
    slides = any(sliding)
    return ModelConfig(
        **sizes(raw),
        sliding=Sliding(window=window, layers=sliding) if slides else None,
        rope=Rope(theta=theta, scaling=scaling, local_theta=local_theta if slides else None),
        layer=Layer(activation="gelu_tanh", norm_eps=float(raw["rms_norm_eps"]),
                    norm_unit_offset=True, post_norms=True, qk_norm=self.qk_norm,
                    query_pre_attn_scalar=raw["query_pre_attn_scalar"],
                    attn_logit_softcap=_softcap(self._attn_softcap(raw))),
        embeddings=Embeddings(tied=bool(raw["tie_word_embeddings"]), scale=True,
                              final_logit_softcap=_softcap(raw["final_logit_softcapping"])),
        tokens=SpecialTokens(bos=raw["bos_token_id"], eos=token_ids(eos(raw, generation)),
                             pad=raw["pad_token_id"]),
        architecture=arch,
    )

  def to_hf(self, config: ModelConfig, dtype_name: str) -> dict[str, Any]:
    arch = self.model_type
    if (not config.is_causal or config.embeddings.shifted_logits
        or config.tokens.mask is not None):
      raise ValueError(f"{arch} export supports causal models only")
    wrong = self._inexpressible(config)
    if wrong:
      raise ValueError(f"config fields {wrong} cannot be expressed as HF architecture {arch!r}")
    sliding = _field(config, "sliding.layers") or (False,) * config.num_layers
    layer = config.layer
    return {
        **common_to_hf(config, self.class_name, self._rope_to_hf(config), dtype_name),
        "hidden_activation": "gelu_pytorch_tanh",
        "query_pre_attn_scalar": _int_if_whole(layer.query_pre_attn_scalar or config.head_dim),
        "attn_logit_softcapping": layer.attn_logit_softcap,
        "final_logit_softcapping": config.embeddings.final_logit_softcap,
        "sliding_window": _field(config, "sliding.window"),
        "layer_types": [_LAYER_TYPES[0] if s else _LAYER_TYPES[1] for s in sliding],
        "attention_bias": False,
        "use_bidirectional_attention": False,
    }

  def _inexpressible(self, config: ModelConfig) -> dict[str, Any]:
    fixed = {"embeddings.scale": True, "layer.norm_unit_offset": True, "layer.post_norms": True,
             "layer.activation": "gelu_tanh", "layer.qkv_bias": False,
             "layer.qk_norm": self.qk_norm, **self.off}
    wrong = {path: _field(config, path) for path, value in fixed.items()
             if _field(config, path) != value}
    if config.sliding is not None and config.sliding.layers is None:
      wrong["sliding.layers"] = None  # Mistral-style windows on every layer: say so per layer.
    return wrong

  def _sliding_layers(self, raw: dict[str, Any]) -> tuple[bool, ...]:
    """Which layers slide, from `layer_types`, else transformers' default pattern."""
    layers = raw["num_hidden_layers"]
    types = raw.get("layer_types")
    if types is None:
      period = self._period(raw)
      return tuple(bool((i + 1) % period) for i in range(layers))
    for value in types:
      if value not in _LAYER_TYPES:
        raise ValueError(f"unsupported layer_types value {value!r} for {self.model_type}; jaxdec "
                         f"supports {_LAYER_TYPES}")
    if len(types) != layers:
      raise ValueError(f"layer_types has {len(types)} entries for num_hidden_layers={layers}")
    return tuple(value == "sliding_attention" for value in types)


def _check_legacy_fields(raw: dict[str, Any]) -> None:
  """Legacy Gemma 2 configs repeat these; transformers reads neither, so they must agree."""
  if raw.get("hidden_act", raw["hidden_activation"]) != raw["hidden_activation"]:
    raise ValueError(f"unsupported config value hidden_act={raw['hidden_act']!r} beside "
                     f"hidden_activation={raw['hidden_activation']!r}")
  if raw.get("sliding_window_size", raw["sliding_window"]) != raw["sliding_window"]:
    raise ValueError(f"unsupported config value sliding_window_size={raw['sliding_window_size']!r} "
                     f"beside sliding_window={raw['sliding_window']!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Gemma2(Gemma):
  """Every other layer slides (from the first); one RoPE; attention logits soft-capped."""

  defaults: ClassVar[dict] = {"max_position_embeddings": 8192, "final_logit_softcapping": 30.0,
                              "attn_logit_softcapping": 50.0}
  off: ClassVar[dict] = {"rope.local_theta": None}

  def _period(self, raw: dict[str, Any]) -> int:
    return 2

  def _rope(self, raw: dict[str, Any]) -> tuple[float, RopeScaling | None, float | None]:
    return (*rope_from_hf(raw), None)

  def _attn_softcap(self, raw: dict[str, Any]):
    return raw["attn_logit_softcapping"]

  def _rope_to_hf(self, config: ModelConfig) -> dict[str, Any]:
    return rope_to_hf(config.rope.theta, config.rope.scaling)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Gemma3(Gemma):
  """All but every `sliding_window_pattern`-th layer (default 6) slide; a RoPE per layer type."""

  qk_norm: bool = True
  consumed: ClassVar[frozenset] = _CONSUMED | {"rope_local_base_freq"}
  defaults: ClassVar[dict] = {"max_position_embeddings": 131072, "final_logit_softcapping": None,
                              "attn_logit_softcapping": None}
  off: ClassVar[dict] = {"layer.attn_logit_softcap": None}

  def _period(self, raw: dict[str, Any]) -> int:
    return raw.get("sliding_window_pattern", 6)

  def _rope(self, raw: dict[str, Any]) -> tuple[float, RopeScaling | None, float]:
    """Gemma3TextConfig's reading: a legacy `rope_scaling` updates the full-attention entry;
    `rope_theta` / `rope_local_base_freq` fill missing thetas (defaults 1e6 / 1e4). The sliding
    layers' RoPE must be unscaled."""
    nested = dict(raw.get("rope_parameters") or {})
    unknown = set(nested) - set(_LAYER_TYPES)
    if unknown:
      raise ValueError(f"gemma3_text rope_parameters must be nested by layer type "
                       f"{_LAYER_TYPES}, got keys {sorted(nested)}")
    full = dict(nested.get("full_attention") or {"rope_type": "default"})
    full.update(raw.get("rope_scaling") or {})
    full.setdefault("rope_theta", raw.get("rope_theta", 1_000_000.0))
    local = dict(nested.get("sliding_attention") or {"rope_type": "default"})
    local.setdefault("rope_theta", raw.get("rope_local_base_freq", 10_000.0))
    size = {"max_position_embeddings": raw["max_position_embeddings"]}
    theta, scaling = rope_from_hf(dict(size, rope_parameters=full))
    local_theta, local_scaling = rope_from_hf(dict(size, rope_parameters=local))
    if local_scaling is not None:
      raise ValueError(f"unsupported rope_parameters['sliding_attention'] rope_type "
                       f"{local_scaling.kind!r}: jaxdec scales only the full-attention layers' "
                       f"RoPE")
    return theta, scaling, local_theta

  def _attn_softcap(self, raw: dict[str, Any]):
    """Gemma3Attention never passes it to the attention function: transformers ignores it."""
    if raw["attn_logit_softcapping"] is not None:
      raise ValueError(f"unsupported config value attn_logit_softcapping="
                       f"{raw['attn_logit_softcapping']!r} for gemma3_text (transformers ignores "
                       f"it; jaxdec supports None)")
    return None

  def _inexpressible(self, config: ModelConfig) -> dict[str, Any]:
    wrong = super()._inexpressible(config)
    if _field(config, "sliding.layers") is not None and config.rope.local_theta is None:
      wrong["rope.local_theta"] = None
    return wrong

  def _rope_to_hf(self, config: ModelConfig) -> dict[str, Any]:
    rope = config.rope
    local = rope.local_theta if rope.local_theta is not None else rope.theta
    return {"full_attention": rope_to_hf(rope.theta, rope.scaling),
            "sliding_attention": rope_to_hf(local, None)}


GEMMA2 = Gemma2(model_type="gemma2", class_name="Gemma2ForCausalLM")
GEMMA3 = Gemma3(model_type="gemma3_text", class_name="Gemma3ForCausalLM")
FAMILIES = (GEMMA2, GEMMA3)
