"""The reference the kernel must equal: jaxdec's XLA attention, which builds the dense mask
(`MaskSpec.dense`) and takes one softmax over every key slot. Being the default backend itself,
kernel == reference is what makes `attention="pallas"` decode the same tokens as `"xla"`."""

from __future__ import annotations

from jaxdec.model.attention import attention


def reference_attention(q, k, v, mask, *, scale=None, softcap=None):
  """q[B, T, H, hd], k/v[B, S, K, hd], mask: a `jaxdec.model.masks.MaskSpec` -> [B, T, H, hd]."""
  return attention(q, k, v, mask=mask, scale=scale, softcap=softcap, backend="xla")
