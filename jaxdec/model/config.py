"""Model configuration: one frozen, hashable dataclass that is static under `jax.jit`."""

from __future__ import annotations

import dataclasses
import math

from jaxdec.model.attention import BACKENDS
from jaxdec.model.masks import Bidirectional, BlockCausal, Causal, pattern_from_dict, pattern_to_dict
from jaxdec.model.params import param_shapes

ROPE_KINDS = ("linear", "llama3")
ACTIVATIONS = ("silu", "gelu_tanh")  # Of the gated MLP: SwiGLU (Llama), GeGLU (Gemma).


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
class ModelConfig:
  """A decoder-only transformer in the Llama family (Llama, Qwen2/3, Mistral, Gemma 2/3, LLaDA,
  Dream).

  Every field is a Python scalar or tuple, so the config hashes and can be a static jit
  argument; the weights live in a separate params pytree (see `model.params`). The Gemma fields
  default to off, which leaves the Llama program unchanged.
  """

  vocab_size: int
  hidden_size: int
  intermediate_size: int
  num_layers: int
  num_heads: int
  num_kv_heads: int
  head_dim: int
  max_position_embeddings: int
  rms_norm_eps: float = 1e-6
  rope_theta: float = 10000.0
  rope_scaling: RopeScaling | None = None
  tie_word_embeddings: bool = False
  qkv_bias: bool = False  # Qwen2: biases on the q/k/v projections.
  qk_norm: bool = False  # Qwen3: per-head RMSNorm on q and k before RoPE.
  sliding_window: int | None = None  # Mistral: a query sees at most this many keys.
  # Gemma: the layers that use `sliding_window` (True) or attend fully; None = every layer.
  sliding_layers: tuple[bool, ...] | None = None
  # Gemma 3: the sliding layers' RoPE base, unscaled; rope_theta and rope_scaling then apply to
  # the full-attention layers only. None = one RoPE for every layer.
  local_rope_theta: float | None = None
  embed_scale: bool = False  # Gemma: embeddings times sqrt(hidden_size), in the params' dtype.
  norm_unit_offset: bool = False  # Gemma: RMSNorm scales by (1 + weight), in fp32.
  post_norms: bool = False  # Gemma: RMSNorm on the attention and MLP outputs too (4 per layer).
  activation: str = "silu"  # One of ACTIVATIONS.
  query_pre_attn_scalar: float | None = None  # Gemma: scores scale by this ** -0.5, not head_dim's.
  attn_logit_softcap: float | None = None  # Gemma 2: scores -> cap * tanh(scores / cap).
  final_logit_softcap: float | None = None  # Gemma: logits -> cap * tanh(logits / cap).
  # Who sees whom: Causal() (AR models), Bidirectional() (LLaDA, Dream), BlockCausal(n).
  attention: Causal | Bidirectional | BlockCausal = Causal()
  # How attention runs: "xla" (dense mask, the default) or "pallas" (`pallas_kernels`' masked
  # flash attention; interpret mode off GPU/TPU). A runtime choice: not written by `to_dict`.
  attention_backend: str = "xla"
  shifted_logits: bool = False  # Dream: the logits at position i predict token i + 1.
  architecture: str = "llama"  # HF `model_type` used when exporting.
  bos_token_id: int | None = None
  eos_token_ids: tuple[int, ...] = ()
  pad_token_id: int | None = None
  mask_token_id: int | None = None  # The [MASK] id of a masked-diffusion model.

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
    if self.attention_backend not in BACKENDS:
      raise ValueError(f"ModelConfig.attention_backend must be one of {BACKENDS}, got "
                       f"{self.attention_backend!r}")
    if self.sliding_window is not None and self.sliding_window < 1:
      raise ValueError(f"sliding_window must be positive or None, got {self.sliding_window}")
    self._check_gemma_fields()
    if not isinstance(self.eos_token_ids, tuple):
      raise TypeError(f"eos_token_ids must be a tuple, got {type(self.eos_token_ids).__name__}")
    for name in ("bos_token_id", "pad_token_id", "mask_token_id"):
      value = getattr(self, name)
      if value is not None and not 0 <= value < self.vocab_size:
        raise ValueError(f"{name}={value} is outside the vocabulary [0, {self.vocab_size})")
    if self.attention.causal_given and self.mask_token_id is None:
      raise ValueError(f"attention={self.attention!r} hides mask tokens: set mask_token_id")
    for value in self.eos_token_ids:
      if not 0 <= value < self.vocab_size:
        raise ValueError(f"eos token id {value} is outside the vocabulary [0, {self.vocab_size})")

  def _check_gemma_fields(self) -> None:
    layers = self.sliding_layers
    if layers is not None:
      if not isinstance(layers, tuple) or any(not isinstance(s, bool) for s in layers):
        raise TypeError(f"sliding_layers must be a tuple of bools or None, got {layers!r}")
      if len(layers) != self.num_layers:
        raise ValueError(f"sliding_layers has {len(layers)} entries for "
                         f"num_layers={self.num_layers}")
      if self.sliding_window is None:
        raise ValueError("sliding_layers needs a sliding_window")
    if self.local_rope_theta is not None and layers is None:
      raise ValueError(f"local_rope_theta={self.local_rope_theta} needs sliding_layers (the layers "
                       f"it applies to)")
    if self.activation not in ACTIVATIONS:
      raise ValueError(f"activation must be one of {ACTIVATIONS}, got {self.activation!r}")
    for name in ("local_rope_theta", "query_pre_attn_scalar", "attn_logit_softcap",
                 "final_logit_softcap"):
      value = getattr(self, name)
      if value is not None and not value > 0:
        raise ValueError(f"ModelConfig.{name} must be positive or None, got {value!r}")

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
    return self.attention.causal_given and self.shifted_logits

  def causal_stream(self) -> "ModelConfig":
    """This config as the causal LM its given tokens form (`has_causal_stream`; itself when causal):
    with only given tokens in a forward, `causal_given` attention is causal attention, and output
    i predicts token i + 1 as an AR model's does. What the AR loops run such a model as."""
    if self.is_causal:
      return self
    if not self.has_causal_stream:
      raise ValueError(f"attention {self.attention} with shifted_logits={self.shifted_logits} has "
                       f"no causal stream: only BlockCausal(causal_given=True) with shifted "
                       f"logits (or a causal model) decodes left to right as an AR model")
    return dataclasses.replace(self, attention=Causal())

  @property
  def num_params(self) -> int:
    return sum(math.prod(shape) for shape in param_shapes(self).values())

  def to_dict(self) -> dict:
    data = dict(dataclasses.asdict(self), attention=pattern_to_dict(self.attention))
    del data["attention_backend"]
    return data

  @classmethod
  def from_dict(cls, data: dict) -> "ModelConfig":
    data = dict(data)
    if "causal" in data:  # Saved before attention patterns existed.
      data["attention"] = {"kind": "causal" if data.pop("causal") else "bidirectional"}
    unknown = set(data) - {f.name for f in dataclasses.fields(cls)}
    if unknown:
      raise ValueError(f"unknown ModelConfig fields: {sorted(unknown)}")
    if data.get("rope_scaling") is not None:
      data["rope_scaling"] = RopeScaling(**data["rope_scaling"])
    data["eos_token_ids"] = tuple(data.get("eos_token_ids", ()))
    if data.get("sliding_layers") is not None:  # A list once through JSON.
      data["sliding_layers"] = tuple(data["sliding_layers"])
    if "attention" in data:
      data["attention"] = pattern_from_dict(data["attention"])
    return cls(**data)
