"""Candidate tokens and their confidences from one window's logits.

Two families, as upstream: LLaDA / Fast-dLLM draw x0 = argmax(logits / T + Gumbel) and rank by
the confidence of the *untempered* logits; Dream draws from softmax(logits / T) and ranks by the
tempered distribution (`tempered=True`). All in float32 (upstream: bf16 softmax for LLaDA and
Dream, float64 for Fast-dLLM; only near-ties can differ).

The mask token is never a candidate (its logit is -inf in the argmax only): upstream a predicted
[MASK] leaves the position masked and can stall a threshold loop forever.

Randomness is keyed by (row, position, the row's forward count), so a row's draws do not depend
on the batch around it or on how other rows progress.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxdec.diffusion.compat import llada_confidence_logits
from jaxdec.diffusion.confidence import Confidence, uniform_noise  # noqa: F401  (re-exported)
from jaxdec.sampling import token_keys


class EosFlags(NamedTuple):
  """LLaDA's optional EOS handling (static). `logits_eos_inf`: the EOS logit is -inf before the
  draw. `confidence_eos_eot_inf`: EOS / EoT candidates rank last (see
  `compat.llada_confidence_logits` for the upstream detail)."""

  logits_eos_inf: bool = False
  confidence_eos_eot_inf: bool = False
  eos_id: int | None = None
  eot_id: int | None = None


def position_keys(key: jax.Array, rows: jax.Array, positions: jax.Array, nfe: jax.Array) -> jax.Array:
  """Keys [B, N] for rows i32[B] at positions i32[B, N] on the rows' forward nfe i32[B]."""
  base = token_keys(key, rows[:, None], positions)
  nfe = jnp.broadcast_to(nfe[:, None], positions.shape)
  return jax.vmap(jax.random.fold_in)(base.reshape(-1), nfe.reshape(-1)).reshape(positions.shape)


def gumbel_noise(keys: jax.Array, vocab: int) -> jax.Array:
  """f32[B, N, V] standard Gumbel noise, one vector per key."""
  draw = lambda k: jax.random.gumbel(jax.random.fold_in(k, 0), (vocab,), jnp.float32)
  return jax.vmap(draw)(keys.reshape(-1)).reshape(keys.shape + (vocab,))


def propose(logits: jax.Array, temperature: jax.Array, keys: jax.Array | None, *,
            confidence: Confidence, tempered: bool, mask_id: int,
            eos: EosFlags = EosFlags()) -> tuple[jax.Array, jax.Array]:
  """logits f32[B, N, V], temperature f32[B] -> (x0 i32[B, N], confidence f32[B, N]).

  keys [B, N] (from `position_keys`) or None for greedy decoding, where temperature is ignored.
  """
  if eos.logits_eos_inf:
    logits = logits.at[..., eos.eos_id].set(-jnp.inf)
  t = temperature[:, None, None]
  sampled = t > 0
  scaled = jnp.where(sampled, logits / jnp.where(sampled, t, 1.0), logits) if keys is not None else logits
  pick = scaled.at[..., mask_id].set(-jnp.inf)
  if keys is not None:
    pick = jnp.where(sampled, pick + gumbel_noise(keys, logits.shape[-1]), pick)
  x0 = jnp.argmax(pick, axis=-1).astype(jnp.int32)
  base = scaled if tempered else logits
  if eos.confidence_eos_eot_inf:
    base = llada_confidence_logits(base, eos.eos_id, eos.eot_id,
                                   temperature[:, None, None] == 0 if keys is not None else True)
  return x0, confidence(base, x0, keys)
