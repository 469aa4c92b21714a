"""Candidate tokens and their confidences from one block's logits.

Two families, as upstream: LLaDA / Fast-dLLM draw x0 = argmax(logits / T + Gumbel) and rank by
p(x0) under the *untempered* softmax; Dream draws from softmax(logits / T) and takes every
confidence from that tempered distribution. All in float32 (upstream: bf16 softmax for LLaDA and
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

from jaxdec.sampling import token_keys

CONFIDENCES = ("probability", "random", "margin", "neg_entropy")


class EosFlags(NamedTuple):
  """LLaDA's optional EOS handling (static). `logits_eos_inf`: the EOS logit is -inf before the
  draw. `confidence_eos_eot_inf`: after the draw the EoT logit (and, at temperature 0, also the
  EOS logit, an upstream quirk: the two tensors alias) is -inf in the confidence softmax, so an
  EOS/EoT candidate keeps its token but ranks last."""

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


def uniform_noise(keys: jax.Array) -> jax.Array:
  """f32[B, N] in [0, 1): the `random` remasking confidence."""
  draw = lambda k: jax.random.uniform(jax.random.fold_in(k, 1), (), jnp.float32)
  return jax.vmap(draw)(keys.reshape(-1)).reshape(keys.shape)


def _set(logits: jax.Array, token: int, value: float = -jnp.inf) -> jax.Array:
  return logits.at[..., token].set(value)


def propose(logits: jax.Array, temperature: jax.Array, keys: jax.Array | None, *, confidence: str,
            tempered: bool, mask_id: int, eos: EosFlags = EosFlags()) -> tuple[jax.Array, jax.Array]:
  """logits f32[B, N, V], temperature f32[B] -> (x0 i32[B, N], confidence f32[B, N]).

  keys [B, N] (from `position_keys`) or None for greedy decoding, where temperature is ignored.
  """
  if confidence not in CONFIDENCES:
    raise ValueError(f"unknown confidence {confidence!r}; expected one of {CONFIDENCES}")
  if eos.logits_eos_inf:
    logits = _set(logits, eos.eos_id)
  t = temperature[:, None, None]
  sampled = t > 0
  scaled = jnp.where(sampled, logits / jnp.where(sampled, t, 1.0), logits) if keys is not None else logits
  pick = _set(scaled, mask_id)
  if keys is not None:
    pick = jnp.where(sampled, pick + gumbel_noise(keys, logits.shape[-1]), pick)
  x0 = jnp.argmax(pick, axis=-1).astype(jnp.int32)

  base = scaled if tempered else logits
  if eos.confidence_eos_eot_inf:
    base = _set(base, eos.eot_id)
    greedy = temperature[:, None, None] == 0 if keys is not None else True
    base = jnp.where(greedy, _set(base, eos.eos_id), base)
  if confidence == "random":
    if keys is None:
      raise ValueError("random remasking needs a PRNG key")
    return x0, uniform_noise(keys)
  probs = jax.nn.softmax(base, axis=-1)
  if confidence == "probability":
    conf = jnp.take_along_axis(probs, x0[..., None], axis=-1)[..., 0]
  elif confidence == "margin":
    best = jax.lax.top_k(probs, 2)[0]
    conf = best[..., 0] - best[..., 1]
  else:
    conf = jnp.sum(probs * jnp.log(probs + 1e-10), axis=-1)
  return x0, conf
