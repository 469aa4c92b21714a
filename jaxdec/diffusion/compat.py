"""Upstream-parity quirks, kept apart from the rules they touch.

jaxdec's diffusion samplers reproduce the reference implementations token for token (checked
against numpy ports of LLaDA, Dream, Fast-dLLM and Fast-dLLM++ in the tests). Where a reference
does something for an accidental reason, the behaviour lives here, named and explained, so the
rules themselves read as the papers state them:

- `dream_timesteps`: Dream's schedule is `torch.linspace` in float32, whose CPU kernel uses fused
  multiply-adds, and the commit count truncates with int(): emulated exactly (`fma32`).
- `factor_count`: Fast-dLLM's factor rule commits every candidate when only the last one fails
  its bound (an off-by-one in `get_transfer_index_dynamic`).
- `llada_confidence_logits`: with `confidence_eos_eot_inf`, LLaDA sets the EoT logit to -inf
  in the confidence softmax, and at temperature 0 the EOS logit too (two tensors alias).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def _split(a: jax.Array) -> tuple[jax.Array, jax.Array]:
  """a = hi + lo exactly, hi with 12 significant bits (bit masking: immune to FMA contraction)."""
  bits = jax.lax.bitcast_convert_type(a, jnp.uint32) & jnp.uint32(0xFFFFF000)
  hi = jax.lax.bitcast_convert_type(bits, jnp.float32)
  return hi, a - hi


def fma32(a: jax.Array, b: jax.Array, c: jax.Array) -> jax.Array:
  """a * b + c in float32 with one rounding (Dekker two-product + two-sum)."""
  p = a * b
  ah, al = _split(a)
  bh, bl = _split(b)
  err = al * bl - (((p - ah * bh) - al * bh) - ah * bl)  # a * b == p + err exactly.
  s = p + c
  v = s - p
  t = (p - (s - v)) + (c - v)  # p + c == s + t exactly.
  return s + (t + err)


def dream_timesteps(i: jax.Array, steps: jax.Array, eps: float) -> jax.Array:
  """f32: element i of torch.linspace(1, eps, steps + 1) (float32, CPU kernel): start + step * i
  in the first half, end - step * (steps - i) in the second, each one fused multiply-add."""
  start, end = jnp.float32(1.0), jnp.float32(eps)
  delta = (end - start) / steps.astype(jnp.float32)
  first = i < (steps + 1) // 2
  ahead = fma32(delta, i.astype(jnp.float32), start)
  behind = fma32(-delta, (steps - i).astype(jnp.float32), end)
  return jnp.where(first, ahead, behind)


def factor_count(stop: jax.Array, masked: jax.Array) -> jax.Array:
  """Candidates the factor rule commits when sorted candidate `stop` i32[B] is the first to fail
  (masked - 1 when none fails): at least one, and, as upstream, all of them when only the last
  one failed."""
  return jnp.where((stop == 0) | (stop == masked - 1), stop + 1, stop)


def llada_confidence_logits(logits: jax.Array, eos_id: int, eot_id: int,
                            greedy: jax.Array | bool) -> jax.Array:
  """LLaDA's `confidence_eos_eot_inf`: EoT ranks last, and EOS too where the row is greedy
  (`greedy` bool[B, 1, 1] or True): an EOS/EoT candidate keeps its token but commits last."""
  logits = logits.at[..., eot_id].set(-jnp.inf)
  return jnp.where(greedy, logits.at[..., eos_id].set(-jnp.inf), logits)
