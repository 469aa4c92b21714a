"""The decoder: the only model entry point is `forward`.

Layers are stacked on a leading axis and run with `lax.scan`, so compile time does not grow
with depth. With a KV cache the cache buffers ride in the scan carry and are updated in place.
What differs between layers (Gemma's sliding window and RoPE base) is scanned too, as per-layer
arrays built from the static config (`_per_layer`); a config without such differences scans
none, and compiles to the program it always did.
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxdec.model.attention import attention
from jaxdec.model.config import ModelConfig
from jaxdec.model.kv_cache import KVCache, write_layer, write_slots
from jaxdec.model.layers import apply_rope, gated_mlp, lead, rms_norm, rope_cos_sin
from jaxdec.model.masks import MaskSpec, Segments
from jaxdec.model.params import Params


def embed(params: Params, tokens: jax.Array) -> jax.Array:
  """tokens i32[B, T] -> [B, T, D]."""
  return jnp.take(params.embed, tokens, axis=0)


def unembed(params: Params, hidden: jax.Array, config: ModelConfig) -> jax.Array:
  """Final-normed hidden [..., D] -> f32[..., V] logits (tied or untied head, soft-capped when
  the config says so)."""
  head = params.embed.T if config.embeddings.tied else params.lm_head
  logits = jnp.einsum("...d,dv->...v", hidden, head).astype(jnp.float32)
  if config.embeddings.final_logit_softcap is not None:
    cap = config.embeddings.final_logit_softcap
    logits = jnp.tanh(logits / cap) * cap
  return logits


def _norm(x, weight, config: ModelConfig):
  return rms_norm(x, weight, config.layer.norm_eps, config.layer.norm_unit_offset)


def project_qkv(h, p, cos, sin, config: ModelConfig):
  """Normed input h[B, T, D_in] -> RoPE'd q[B, T, H, hd], k, v[B, T, K, hd] with layer params p
  (D_in may differ from hidden_size: EAGLE-3's draft layer reads 2 x hidden_size)."""
  q = jnp.einsum("btd,dhk->bthk", h, p.wq)
  k = jnp.einsum("btd,dhk->bthk", h, p.wk)
  v = jnp.einsum("btd,dhk->bthk", h, p.wv)
  if config.layer.qkv_bias:
    q, k, v = q + lead(p.bq, q), k + lead(p.bk, k), v + lead(p.bv, v)
  if config.layer.qk_norm:
    q, k = _norm(q, p.q_norm, config), _norm(k, p.k_norm, config)
  return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v


def _layer(x, p, cos, sin, mask: MaskSpec, config: ModelConfig, kv=None):
  """One pre-norm block (plus Gemma's norms on the attention / MLP outputs: `layer.post_norms`).
  `kv` = (k_all, v_all, layer, start) when a cache is used."""
  q, k, v = project_qkv(_norm(x, p.attn_norm, config), p, cos, sin, config)
  if kv is not None:
    k_all, v_all, layer, start = kv
    k_all = write_layer(k_all, layer, k, start)
    v_all = write_layer(v_all, layer, v, start)
    k, v = k_all[layer], v_all[layer]
    kv = (k_all, v_all)
  c = config.layer
  scale = None if c.query_pre_attn_scalar is None else c.query_pre_attn_scalar ** -0.5
  out = attention(q, k, v, mask=mask, scale=scale, softcap=c.attn_logit_softcap,
                  backend=config.attention_backend)
  out = jnp.einsum("bthk,hkd->btd", out, p.wo)
  x = x + (_norm(out, p.post_attn_norm, config) if c.post_norms else out)
  h = _norm(x, p.mlp_norm, config)
  out = gated_mlp(h, p.w_gate, p.w_up, p.w_down, c.activation)
  x = x + (_norm(out, p.post_mlp_norm, config) if c.post_norms else out)
  return x, kv


# A window no position difference reaches: the full-attention layers of a sliding model.
_NO_WINDOW = np.iinfo(np.int32).max


def _per_layer(config: ModelConfig) -> dict:
  """What differs between layers, as arrays the layer scan slices: "window" i32[L] (sliding or
  full attention) and "rope" i32[L] (0: the global RoPE table, 1: the local one). Empty when
  every layer is alike."""
  sliding = config.sliding
  if sliding is None or sliding.layers is None:
    return {}
  out = {"window": jnp.asarray([sliding.window if s else _NO_WINDOW for s in sliding.layers],
                               jnp.int32)}
  if config.rope.local_theta is not None:
    out["rope"] = jnp.asarray(sliding.layers, jnp.int32)
  return out


def _rope_tables(positions: jax.Array, config: ModelConfig):
  """(cos, sin) f32[B, T, hd], or f32[2, B, T, hd] (global, local) with a local RoPE base."""
  cos, sin = rope_cos_sin(positions, config)
  if config.rope.local_theta is None:
    return cos, sin
  local_cos, local_sin = rope_cos_sin(positions, config, local=True)
  return jnp.stack([cos, local_cos]), jnp.stack([sin, local_sin])


def _layer_inputs(cos, sin, mask: MaskSpec, per_layer: dict):
  """This layer's RoPE table and mask, from its slice of `_per_layer`."""
  if "rope" in per_layer:
    cos, sin = cos[per_layer["rope"]], sin[per_layer["rope"]]
  if "window" in per_layer:
    mask = mask.replace(window=per_layer["window"])
  return cos, sin, mask


def hidden_mask_keys(tokens: jax.Array, config: ModelConfig) -> jax.Array | None:
  """bool[B, T]: the masks a `BlockCausal(causal_given=True)` model hides as keys (None else)."""
  if config.attention.causal_given:
    return tokens == config.tokens.mask
  return None


def mask_spec(positions: jax.Array, cache: KVCache | None, config: ModelConfig,
              tree: jax.Array | None = None, valid_lengths: jax.Array | None = None,
              hidden_keys: jax.Array | None = None, in_order: bool = False,
              segments: Segments | None = None) -> MaskSpec:
  """The MaskSpec of one forward of tokens at `positions` i32[B, T] (see `forward`); `in_order`:
  the positions are 0..T-1 in every row (`forward(positions=None)`)."""
  batch, steps = positions.shape
  valid = jnp.full((batch,), steps, jnp.int32) if valid_lengths is None else valid_lengths
  in_order = in_order and cache is None
  if cache is None:
    kv_positions, kv_length, start = positions, valid, jnp.zeros((batch,), jnp.int32)
  else:
    kv_positions = write_slots(cache.positions, positions, cache.length)
    kv_length, start = cache.length + valid, cache.length
  # Per-layer windows (config.sliding.layers) are set inside the layer scan.
  sliding = config.sliding
  window = sliding.window if sliding is not None and sliding.layers is None else None
  return MaskSpec(q_positions=positions, kv_positions=kv_positions, kv_length=kv_length,
                  pattern=config.attention, window=window, tree=tree, start=start,
                  hidden_keys=hidden_keys, in_order=in_order and segments is None,
                  segments=segments)


def _check_hidden_layers(hidden_layers: tuple[int, ...], config: ModelConfig) -> None:
  for idx in hidden_layers:
    if isinstance(idx, bool) or not isinstance(idx, int) or not 0 <= idx <= config.num_layers:
      raise ValueError(f"hidden layer index {idx!r} is outside [0, {config.num_layers}]")


def decode_hidden(params: Params, x: jax.Array, positions: jax.Array | None,
                  cache: KVCache | None = None, *,
                  config: ModelConfig, tree: jax.Array | None = None,
                  valid_lengths: jax.Array | None = None, hidden_layers: Sequence[int] = (),
                  hidden_keys: jax.Array | None = None, segments: Segments | None = None):
  """Run the layers on embeddings x[B, T, D] (`embed`); returns (final-normed hidden, selected,
  cache).

  See `forward` for the arguments; `hidden_keys` is `hidden_mask_keys(tokens)`, which `forward`
  computes itself. Split out so callers that need logits at only a few
  positions (prefill) can skip the full [B, T, V] projection. With `embeddings.scale` it scales
  x here (by sqrt(hidden_size) rounded to x's dtype, as HF does), so `hidden_layers` 0 is the
  scaled embedding, as in HF's hidden states.
  """
  hidden_layers = tuple(hidden_layers)
  _check_hidden_layers(hidden_layers, config)
  in_order = positions is None
  if in_order:
    if cache is not None:
      raise ValueError("positions=None means tokens 0..T-1 of a whole sequence: give positions "
                       "when decoding with a cache")
    positions = jnp.broadcast_to(jnp.arange(x.shape[1], dtype=jnp.int32), x.shape[:2])
  if config.embeddings.scale:
    x = x * jnp.asarray(np.float32(config.hidden_size ** 0.5)).astype(x.dtype)
  cos, sin = _rope_tables(positions, config)
  mask = mask_spec(positions, cache, config, tree, valid_lengths, hidden_keys, in_order,
                   segments)
  per_layer = _per_layer(config)
  # Only the requested layers' inputs are kept: slot[i] is where layer i's input goes (len() =
  # dropped), so memory grows with the selection, not with the depth.
  wanted = [i for i in hidden_layers if i < config.num_layers]
  slot = jnp.asarray([wanted.index(i) if i in wanted else len(wanted)
                      for i in range(config.num_layers)], jnp.int32)
  kept = jnp.zeros((len(wanted),) + x.shape, x.dtype)
  layer_ids = jnp.arange(config.num_layers, dtype=jnp.int32)

  if cache is None:
    def body(carry, xs):
      x, kept = carry
      p, layer, here = xs
      kept = kept.at[slot[layer]].set(x, mode="drop") if wanted else kept
      new_x, _ = _layer(x, p, *_layer_inputs(cos, sin, mask, here), config)
      return (new_x, kept), None

    (x, kept), _ = jax.lax.scan(body, (x, kept), (params.layers, layer_ids, per_layer))
  else:
    def body(carry, xs):
      x, kept, k_all, v_all = carry
      p, layer, here = xs
      kept = kept.at[slot[layer]].set(x, mode="drop") if wanted else kept
      new_x, (k_all, v_all) = _layer(x, p, *_layer_inputs(cos, sin, mask, here), config,
                                     kv=(k_all, v_all, layer, cache.length))
      return (new_x, kept, k_all, v_all), None

    # Two layers per loop iteration halve the per-iteration overhead that dominates small-batch
    # decode steps on CPU (measured: batch 1 +10% tokens/s, batch 8 -7%).
    (x, kept, k_all, v_all), _ = jax.lax.scan(
        body, (x, kept, cache.k, cache.v), (params.layers, layer_ids, per_layer), unroll=2)
    cache = KVCache(k=k_all, v=v_all, positions=mask.kv_positions, length=cache.length + positions.shape[1])

  h = _norm(x, params.final_norm, config)
  selected = None
  if hidden_layers:
    selected = jnp.stack([h if i == config.num_layers else kept[wanted.index(i)]
                          for i in hidden_layers])
  return h, selected, cache


def forward(params: Params, tokens: jax.Array, positions: jax.Array | None,
            cache: KVCache | None = None, *,
            config: ModelConfig, tree: jax.Array | None = None,
            valid_lengths: jax.Array | None = None, hidden_layers: Sequence[int] = (),
            segments: Segments | None = None):
  """Run the decoder on tokens i32[B, T] at positions i32[B, T].

  Args:
    positions: i32[B, T], or None for a whole sequence in order (0..T-1 in every row, no cache),
      which lets the "pallas" backend use JAX's shipped kernels (training forwards).
    cache: if given, the T tokens are written at slots [length, length + T) of each row and
      attend to the cache's real entries plus the block; the returned cache has `length + T`.
    tree: bool[B or 1, T, T] visibility among the T tokens (a draft tree's ancestor matrix),
      replacing the model's attention pattern there; keys in the cache keep the pattern.
    valid_lengths: i32[B] real tokens among the T per row; later ones are padding, hidden as keys.
    hidden_layers: static layer indices i in [0, num_layers]; i < num_layers selects the
      residual stream entering layer i (pre-norm), num_layers the final-normed state (HF's
      `hidden_states[i]` convention). Only the selected layers are kept.
    segments: `Segments` cutting each row into independent streams over shared contexts
      (Hyper-Parallel Decoding); its `kv` ids cover the key slots, this forward's included.

  Returns:
    (logits f32[B, T, V], hidden [len(hidden_layers), B, T, D] or None, cache or None).
  """
  h, hidden, cache = decode_hidden(params, embed(params, tokens), positions, cache, config=config,
                                   tree=tree, valid_lengths=valid_lengths,
                                   hidden_layers=hidden_layers,
                                   hidden_keys=hidden_mask_keys(tokens, config), segments=segments)
  return unembed(params, h, config), hidden, cache
