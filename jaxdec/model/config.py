"""Model configuration: one frozen, hashable dataclass that is static under `jax.jit`.

`ModelConfig` is the shape (sizes, flat) plus one group per concern, each its own frozen
dataclass that checks its own fields: `attention` (who sees whom), `sliding` (windows), `rope`,
`layer` (inside a decoder layer), `embeddings` (the token <-> vector ends) and `tokens` (special
ids). A Llama reads only the defaults of the Gemma / Qwen / Dream options, grouped where they act.
"""

from __future__ import annotations

import dataclasses
import math

from jaxdec.model.attention import BACKENDS
from jaxdec.model.masks import Bidirectional, BlockCausal, Causal, pattern_from_dict, pattern_to_dict
from jaxdec.model.params import param_shapes

ROPE_KINDS = ("linear", "llama3")
ACTIVATIONS = ("silu", "gelu_tanh")  # Of the gated MLP: SwiGLU (Llama), GeGLU (Gemma).


def _positive_or_none(owner: str, name: str, value, none: bool = True) -> None:
  if (value is None and not none) or value is not None and (
      isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):
    raise ValueError(f"{owner}.{name} must be a positive number{' or None' if none else ''}, "
                     f"got {value!r}")


def _bools(owner: str, obj, names: tuple[str, ...]) -> None:
  for name in names:
    if not isinstance(getattr(obj, name), bool):
      raise TypeError(f"{owner}.{name} must be a bool, got {getattr(obj, name)!r}")


@dataclasses.dataclass(frozen=True)
class RopeScaling:
  """RoPE frequency scaling (HF `rope_parameters` with a non-default `rope_type`).

  `kind` is "linear" (divide every frequency by `factor`) or "llama3" (Llama 3.1's
  wavelength-dependent interpolation, which also uses the remaining fields).
  """

  kind: str
  factor: float
  low_freq_factor: float = 1.0
  high_freq_factor: float = 4.0
  original_max_position_embeddings: int = 8192

  def __post_init__(self):
    if self.kind not in ROPE_KINDS:
      raise ValueError(f"rope scaling kind must be one of {ROPE_KINDS}, got {self.kind!r}")
    if self.factor <= 0:
      raise ValueError(f"rope scaling factor must be positive, got {self.factor}")


@dataclasses.dataclass(frozen=True)
class Sliding:
  """Sliding-window attention: a query sees at most `window` keys, itself included. `layers`
  says per layer whether it slides (True) or attends fully (Gemma); None: every layer slides
  (Mistral)."""

  window: int
  layers: tuple[bool, ...] | None = None

  def __post_init__(self):
    if not isinstance(self.window, int) or isinstance(self.window, bool) or self.window < 1:
      raise ValueError(f"Sliding.window must be a positive int, got {self.window!r}")
    layers = self.layers
    if layers is not None and (not isinstance(layers, tuple)
                               or any(not isinstance(s, bool) for s in layers)):
      raise TypeError(f"Sliding.layers must be a tuple of bools or None, got {layers!r}")


@dataclasses.dataclass(frozen=True)
class Rope:
  """Rotary position embeddings: base `theta`, optional frequency `scaling`. `local_theta`
  (Gemma 3): the sliding layers' base, unscaled, while theta and scaling apply to the
  full-attention layers only; None: one RoPE for every layer."""

  theta: float = 10000.0
  scaling: RopeScaling | None = None
  local_theta: float | None = None

  def __post_init__(self):
    _positive_or_none("Rope", "theta", self.theta, none=False)
    if self.scaling is not None and not isinstance(self.scaling, RopeScaling):
      raise TypeError(f"Rope.scaling must be a RopeScaling or None, got {self.scaling!r}")
    _positive_or_none("Rope", "local_theta", self.local_theta)


@dataclasses.dataclass(frozen=True)
class Layer:
  """Inside each decoder layer. The defaults are Llama's; the others' options:
  `qkv_bias` (Qwen2: biases on the q/k/v projections), `qk_norm` (Qwen3: per-head RMSNorm on q
  and k before RoPE), `norm_unit_offset` (Gemma: RMSNorm scales by 1 + weight, in fp32),
  `post_norms` (Gemma: RMSNorm on the attention and MLP outputs too, 4 norms a layer),
  `activation` (of the gated MLP, one of ACTIVATIONS), `query_pre_attn_scalar` (Gemma: scores
  scale by its ** -0.5, not head_dim's), `attn_logit_softcap` (Gemma 2: scores -> cap *
  tanh(scores / cap))."""

  activation: str = "silu"
  norm_eps: float = 1e-6
  norm_unit_offset: bool = False
  post_norms: bool = False
  qkv_bias: bool = False
  qk_norm: bool = False
  query_pre_attn_scalar: float | None = None
  attn_logit_softcap: float | None = None

  def __post_init__(self):
    if self.activation not in ACTIVATIONS:
      raise ValueError(f"Layer.activation must be one of {ACTIVATIONS}, got {self.activation!r}")
    if (isinstance(self.norm_eps, bool) or not isinstance(self.norm_eps, (int, float))
        or self.norm_eps < 0):
      raise ValueError(f"Layer.norm_eps must be a non-negative number, got {self.norm_eps!r}")
    _bools("Layer", self, ("norm_unit_offset", "post_norms", "qkv_bias", "qk_norm"))
    _positive_or_none("Layer", "query_pre_attn_scalar", self.query_pre_attn_scalar)
    _positive_or_none("Layer", "attn_logit_softcap", self.attn_logit_softcap)


@dataclasses.dataclass(frozen=True)
class Embeddings:
  """The two ends of the stack: token ids -> vectors and the last hidden state -> logits.
  `tied`: the output head is the embedding matrix transposed. `scale` (Gemma): embeddings times
  sqrt(hidden_size), in the params' dtype. `final_logit_softcap` (Gemma): logits -> cap *
  tanh(logits / cap). `shifted_logits` (Dream): the logits at position i predict token i + 1."""

  tied: bool = False
  scale: bool = False
  final_logit_softcap: float | None = None
  shifted_logits: bool = False

  def __post_init__(self):
    _bools("Embeddings", self, ("tied", "scale", "shifted_logits"))
    _positive_or_none("Embeddings", "final_logit_softcap", self.final_logit_softcap)


@dataclasses.dataclass(frozen=True)
class SpecialTokens:
  """Special token ids (ModelConfig checks that they are inside the vocabulary). `eos`: every id
  that ends a generation; `mask`: the [MASK] id of a masked-diffusion model."""

  bos: int | None = None
  eos: tuple[int, ...] = ()
  pad: int | None = None
  mask: int | None = None

  def __post_init__(self):
    if not isinstance(self.eos, tuple):
      raise TypeError(f"SpecialTokens.eos must be a tuple, got {type(self.eos).__name__}")
    for name, value in (("bos", self.bos), ("pad", self.pad), ("mask", self.mask),
                        *(("eos", v) for v in self.eos)):
      if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                or value < 0):
        raise ValueError(f"SpecialTokens.{name} ids must be non-negative ints, got {value!r}")


# The groups' classes by ModelConfig field, for from_dict.
GROUPS = {"sliding": Sliding, "rope": Rope, "layer": Layer, "embeddings": Embeddings,
          "tokens": SpecialTokens}
# Flat field names of jaxdec before the groups -> (group, field).
FLAT_FIELDS = {
    "sliding_window": ("sliding", "window"), "sliding_layers": ("sliding", "layers"),
    "rope_theta": ("rope", "theta"), "rope_scaling": ("rope", "scaling"),
    "local_rope_theta": ("rope", "local_theta"),
    "activation": ("layer", "activation"), "rms_norm_eps": ("layer", "norm_eps"),
    "norm_unit_offset": ("layer", "norm_unit_offset"), "post_norms": ("layer", "post_norms"),
    "qkv_bias": ("layer", "qkv_bias"), "qk_norm": ("layer", "qk_norm"),
    "query_pre_attn_scalar": ("layer", "query_pre_attn_scalar"),
    "attn_logit_softcap": ("layer", "attn_logit_softcap"),
    "tie_word_embeddings": ("embeddings", "tied"), "embed_scale": ("embeddings", "scale"),
    "final_logit_softcap": ("embeddings", "final_logit_softcap"),
    "shifted_logits": ("embeddings", "shifted_logits"),
    "bos_token_id": ("tokens", "bos"), "eos_token_ids": ("tokens", "eos"),
    "pad_token_id": ("tokens", "pad"), "mask_token_id": ("tokens", "mask"),
}


def regroup(data: dict) -> dict:
  """A saved config dict in the grouped form `ModelConfig.to_dict` writes. Flat dicts from
  earlier jaxdec versions (`rms_norm_eps`, ..., and the older `causal` flag) are regrouped;
  fields are moved, never filled in, so callers can still tell what was saved."""
  data = dict(data)
  if "causal" in data:  # Saved before attention patterns existed.
    data["attention"] = {"kind": "causal" if data.pop("causal") else "bidirectional"}
  flat = {name: data.pop(name) for name in list(data) if name in FLAT_FIELDS}
  if not flat:
    return data
  mixed = sorted({FLAT_FIELDS[name][0] for name in flat} & set(data))
  if mixed:
    raise ValueError(f"config mixes flat fields {sorted(flat)} with the groups {mixed}")
  groups: dict[str, dict] = {}
  for name, value in flat.items():
    group, field = FLAT_FIELDS[name]
    groups.setdefault(group, {})[field] = value
  sliding = groups.pop("sliding", {})
  if sliding.get("window") is not None or sliding.get("layers") is not None:
    data["sliding"] = sliding
  elif sliding:
    data["sliding"] = None
  return {**data, **groups}


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """A decoder-only transformer in the Llama family (Llama, Qwen2/3, Mistral, Gemma 2/3, LLaDA,
  Dream): its shape, flat, and one group per concern (see the module docstring).

  Every field is a Python scalar, tuple or frozen group of them, so the config hashes and can be
  a static jit argument; the weights live in a separate params pytree (see `model.params`). The
  groups default to Llama's choices; the other families' options there default to off.
  """

  vocab_size: int
  hidden_size: int
  intermediate_size: int
  num_layers: int
  num_heads: int
  num_kv_heads: int
  head_dim: int
  max_position_embeddings: int
  # Who sees whom: Causal() (AR models), Bidirectional() (LLaDA, Dream), BlockCausal(n).
  attention: Causal | Bidirectional | BlockCausal = Causal()
  sliding: Sliding | None = None  # Mistral / Gemma windows; None: every query sees every key.
  rope: Rope = Rope()
  layer: Layer = Layer()
  embeddings: Embeddings = Embeddings()
  tokens: SpecialTokens = SpecialTokens()
  architecture: str = "llama"  # HF `model_type` used when exporting.
  # How attention runs: "xla" (dense mask, the default) or "pallas" (`pallas_kernels`' masked
  # flash attention; interpret mode off GPU/TPU). A runtime choice: not written by `to_dict`.
  attention_backend: str = "xla"

  def __post_init__(self):
    for name in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads",
                 "num_kv_heads", "head_dim", "max_position_embeddings"):
      value = getattr(self, name)
      if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"ModelConfig.{name} must be a positive int, got {value!r}")
    if self.num_heads % self.num_kv_heads:
      raise ValueError(f"num_heads={self.num_heads} is not a multiple of "
                       f"num_kv_heads={self.num_kv_heads}")
    if self.head_dim % 2:
      raise ValueError(f"head_dim must be even for rotary embeddings, got {self.head_dim}")
    if not isinstance(self.attention, (Causal, Bidirectional, BlockCausal)):
      raise TypeError(f"ModelConfig.attention must be Causal(), Bidirectional() or "
                      f"BlockCausal(block_size), got {self.attention!r}")
    for name, cls in GROUPS.items():
      value = getattr(self, name)
      if not isinstance(value, cls) and not (name == "sliding" and value is None):
        raise TypeError(f"ModelConfig.{name} must be a {cls.__name__}"
                        f"{' or None' if name == 'sliding' else ''}, got {value!r}")
    if self.attention_backend not in BACKENDS:
      raise ValueError(f"ModelConfig.attention_backend must be one of {BACKENDS}, got "
                       f"{self.attention_backend!r}")
    self._check_across_groups()

  def _check_across_groups(self) -> None:
    layers = None if self.sliding is None else self.sliding.layers
    if layers is not None and len(layers) != self.num_layers:
      raise ValueError(f"sliding.layers has {len(layers)} entries for "
                       f"num_layers={self.num_layers}")
    if self.rope.local_theta is not None and layers is None:
      raise ValueError(f"rope.local_theta={self.rope.local_theta} needs sliding.layers (the "
                       f"layers it applies to)")
    t = self.tokens
    if self.attention.causal_given and t.mask is None:
      raise ValueError(f"attention={self.attention!r} hides mask tokens: set tokens.mask")
    for name, value in (("bos", t.bos), ("pad", t.pad), ("mask", t.mask),
                        *(("eos", v) for v in t.eos)):
      if value is not None and not value < self.vocab_size:
        raise ValueError(f"tokens.{name}={value} is outside the vocabulary "
                         f"[0, {self.vocab_size})")

  @property
  def is_causal(self) -> bool:
    """True for autoregressive models (each token sees only the past)."""
    return isinstance(self.attention, Causal)

  @property
  def has_causal_stream(self) -> bool:
    """True for block-diffusion models whose given tokens form a causal LM: `BlockCausal(
    causal_given=True)` with shifted logits (zoo:gsm-dlm). Decoding such a model one token at a
    time left to right, each block's next mask predicted by the given token before it, runs
    exactly that causal LM (`causal_stream`)."""
    return self.attention.causal_given and self.embeddings.shifted_logits

  def causal_stream(self) -> "ModelConfig":
    """This config as the causal LM its given tokens form (`has_causal_stream`; itself when causal):
    with only given tokens in a forward, `causal_given` attention is causal attention, and output
    i predicts token i + 1 as an AR model's does. What the AR loops run such a model as."""
    if self.is_causal:
      return self
    if not self.has_causal_stream:
      raise ValueError(f"attention {self.attention} with shifted_logits="
                       f"{self.embeddings.shifted_logits} has no causal stream: only "
                       f"BlockCausal(causal_given=True) with shifted logits (or a causal model) "
                       f"decodes left to right as an AR model")
    return dataclasses.replace(self, attention=Causal())

  @property
  def num_params(self) -> int:
    return sum(math.prod(shape) for shape in param_shapes(self).values())

  def to_dict(self) -> dict:
    """The grouped form, JSON-able but for tuples (`from_dict` reads it back)."""
    data = dict(dataclasses.asdict(self), attention=pattern_to_dict(self.attention))
    del data["attention_backend"]
    return data

  @classmethod
  def from_dict(cls, data: dict) -> "ModelConfig":
    """Reads `to_dict`'s grouped form, after JSON too, and the flat form of earlier jaxdec
    versions (orbax `jaxdec_config.json`, training checkpoints), via `regroup`."""
    data = regroup(data)
    unknown = set(data) - {f.name for f in dataclasses.fields(cls)}
    if unknown:
      raise ValueError(f"unknown ModelConfig fields: {sorted(unknown)}")
    for name, group in GROUPS.items():
      if data.get(name) is not None:
        data[name] = _group_from_dict(name, group, data[name])
    if "attention" in data:
      data["attention"] = pattern_from_dict(data["attention"])
    return cls(**data)


def _group_from_dict(name: str, group: type, data: dict):
  """One group from its dict; JSON's lists become the tuples the group holds."""
  if not isinstance(data, dict):
    raise TypeError(f"ModelConfig.{name} must be a dict when read, got {data!r}")
  data = dict(data)
  unknown = set(data) - {f.name for f in dataclasses.fields(group)}
  if unknown:
    raise ValueError(f"unknown ModelConfig.{name} fields: {sorted(unknown)}")
  if group is Rope and data.get("scaling") is not None:
    data["scaling"] = RopeScaling(**data["scaling"])
  if group is Sliding and data.get("layers") is not None:
    data["layers"] = tuple(data["layers"])
  if group is SpecialTokens and "eos" in data:
    data["eos"] = tuple(data["eos"])
  return group(**data)
