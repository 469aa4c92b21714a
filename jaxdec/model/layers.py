"""Building blocks of the decoder, written to match Hugging Face's numerics (fp32 norms and RoPE)."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxdec.model.config import ModelConfig


def lead(w: jax.Array, x: jax.Array) -> jax.Array:
  """Give w leading unit axes to match x's rank (rank promotion is explicit in jaxdec)."""
  return w.reshape((1,) * (x.ndim - w.ndim) + w.shape)


def rms_norm(x: jax.Array, weight: jax.Array, eps: float, unit_offset: bool = False) -> jax.Array:
  """RMSNorm over the last axis, computed in fp32 as HF does: Llama casts back before the weight,
  Gemma (`unit_offset`) scales by (1 + weight) in fp32 and casts after."""
  x32 = x.astype(jnp.float32)
  normed = x32 * jax.lax.rsqrt(jnp.mean(jnp.square(x32), axis=-1, keepdims=True) + eps)
  if unit_offset:
    return (normed * (1.0 + lead(weight, x).astype(jnp.float32))).astype(x.dtype)
  return lead(weight, x) * normed.astype(x.dtype)


def rope_inv_freq(config: ModelConfig, local: bool = False) -> np.ndarray:
  """f32[head_dim // 2] inverse frequencies, with optional linear / llama3 scaling; `local`: those
  of the sliding layers (`rope.local_theta`, unscaled).

  Computed in float32 in the same order of operations as transformers' rope init functions.
  """
  dim = config.head_dim
  theta = config.rope.local_theta if local else config.rope.theta
  exponent = np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)
  inv_freq = (np.float32(1.0) / np.power(np.float32(theta), exponent)).astype(np.float32)
  scaling = None if local else config.rope.scaling
  if scaling is None:
    return inv_freq
  if scaling.kind == "linear":
    return (inv_freq / np.float32(scaling.factor)).astype(np.float32)
  # llama3: keep high frequencies, divide low frequencies by `factor`, interpolate in between.
  old_len = scaling.original_max_position_embeddings
  low_wavelen = old_len / scaling.low_freq_factor
  high_wavelen = old_len / scaling.high_freq_factor
  wavelen = (np.float32(2 * math.pi) / inv_freq).astype(np.float32)
  scaled = np.where(wavelen > low_wavelen, inv_freq / np.float32(scaling.factor), inv_freq)
  smooth = ((old_len / wavelen - scaling.low_freq_factor)
            / (scaling.high_freq_factor - scaling.low_freq_factor)).astype(np.float32)
  smoothed = (1 - smooth) * scaled / np.float32(scaling.factor) + smooth * scaled
  is_medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
  return np.where(is_medium, smoothed, scaled).astype(np.float32)


def rope_cos_sin(positions: jax.Array, config: ModelConfig,
                 local: bool = False) -> tuple[jax.Array, jax.Array]:
  """positions i32[B, T] -> (cos, sin) f32[B, T, head_dim], HF's concatenated-halves layout."""
  inv_freq = jnp.asarray(rope_inv_freq(config, local))
  freqs = positions.astype(jnp.float32)[..., None] * inv_freq[None, None, :]
  emb = jnp.concatenate([freqs, freqs], axis=-1)
  return jnp.cos(emb), jnp.sin(emb)


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
  """Rotate-half RoPE on x[B, T, heads, head_dim] (no q/k permutation of HF weights needed)."""
  half = x.shape[-1] // 2
  rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
  cos = cos[:, :, None, :].astype(x.dtype)
  sin = sin[:, :, None, :].astype(x.dtype)
  return x * cos + rotated * sin


# The gated MLP's activations by `ModelConfig.layer.activation`; gelu_tanh is torch's
# gelu(approximate="tanh") (HF's gelu_pytorch_tanh).
ACTIVATION_FNS = {"silu": jax.nn.silu,
                  "gelu_tanh": functools.partial(jax.nn.gelu, approximate=True)}


def gated_mlp(x: jax.Array, w_gate: jax.Array, w_up: jax.Array, w_down: jax.Array,
              activation: str = "silu") -> jax.Array:
  """down(act(gate(x)) * up(x)) on x[B, T, D]: SwiGLU with silu, GeGLU with gelu_tanh."""
  gate = jnp.einsum("btd,df->btf", x, w_gate)
  up = jnp.einsum("btd,df->btf", x, w_up)
  return jnp.einsum("btf,fd->btd", ACTIVATION_FNS[activation](gate) * up, w_down)
