"""The attention kernels JAX ships, where they fit: whole sequences in order (token i at position
i, no cache, no tree), a causal or bidirectional pattern, and per-row lengths (right padding) —
the forwards of training. On a TPU that is splash attention (its static causal / full masks and
segment ids skip blocks; GQA native), on a GPU the Triton `mha` (segment ids; K/V repeated for
GQA, no soft-capping). Everything else goes to jaxdec's own `masked_attention`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

OPS = ("splash", "mha")


def op_for_platform() -> str | None:
  """The shipped op for this platform: "splash" on TPU, "mha" on GPU, None elsewhere (on a CPU
  jaxdec's own kernel runs, interpreted)."""
  from pallas_kernels.common import platform

  return {"tpu": "splash", "gpu": "mha"}.get(platform())


def fits(op: str, softcap: float | None, steps: int) -> bool:
  """Whether `op` runs a forward of `steps` tokens with these settings: splash tiles keys by
  lanes (steps a multiple of 128); mha tiles by 128 (or takes a shorter sequence whole) and
  has no soft-capping."""
  if op == "splash":
    return steps % 128 == 0
  return softcap is None and (steps < 128 or steps % 128 == 0)


def shipped_attention(q: jax.Array, k: jax.Array, v: jax.Array, lengths: jax.Array, *,
                      causal: bool, op: str, scale: float | None = None,
                      softcap: float | None = None, interpret: bool | None = None) -> jax.Array:
  """q[B, T, H, hd], k/v[B, T, K, hd], lengths i32[B] (slots >= length are padding, hidden as
  keys) -> [B, T, H, hd]. Padding queries' outputs are unspecified (callers ignore them)."""
  if op not in OPS:
    raise ValueError(f"unknown shipped op {op!r}; available: {OPS}")
  if not fits(op, softcap, q.shape[1]):
    raise ValueError(f"{op} cannot run {q.shape[1]} tokens with softcap={softcap} (see `fits`); "
                     f"use masked_attention")
  from pallas_kernels.common import default_interpret

  interpret = default_interpret() if interpret is None else interpret
  batch, steps, heads, head_dim = q.shape
  scale = head_dim ** -0.5 if scale is None else scale
  segments = (jnp.arange(steps, dtype=jnp.int32)[None] < lengths[:, None]).astype(jnp.int32)
  if op == "mha":
    from jax.experimental.pallas.ops.gpu.attention import mha

    group = heads // k.shape[2]
    k, v = jnp.repeat(k, group, axis=2), jnp.repeat(v, group, axis=2)
    return mha(q, k, v, segments, sm_scale=scale, causal=causal, interpret=interpret)
  return _splash(q, k, v, segments, causal=causal, scale=scale, softcap=softcap,
                 interpret=interpret)


def _splash(q, k, v, segments, *, causal, scale, softcap, interpret):
  from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as splash
  from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as masks

  steps, heads = q.shape[1], q.shape[2]
  block = min(512, steps)
  pattern = masks.CausalMask((steps, steps)) if causal else masks.FullMask((steps, steps))
  kernel = splash.make_splash_mha_single_device(
      masks.MultiHeadMask([pattern] * heads),
      block_sizes=splash.BlockSizes(block_q=block, block_kv=block, block_kv_compute=block,
                                    block_q_dkv=block, block_kv_dkv=block,
                                    block_kv_dkv_compute=block, block_q_dq=block, block_kv_dq=block),
      attn_logits_soft_cap=softcap, interpret=interpret)
  heads_first = lambda x: jnp.swapaxes(x, 1, 2)  # [B, T, H, hd] -> [B, H, T, hd]
  out = jax.vmap(lambda q, k, v, s: kernel(q, k, v, splash.SegmentIds(q=s, kv=s)))(
      heads_first(q * jnp.asarray(scale, q.dtype)), heads_first(k), heads_first(v), segments)
  return heads_first(out)
