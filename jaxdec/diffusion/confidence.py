"""Confidence measures: how sure the model is of each proposed token, which schedulers rank.

Each is a small static object with one call: `(logits f32[B, N, V], x0 i32[B, N], keys) ->
f32[B, N]`, higher = commit first. `logits` are the scores the proposal was drawn from (after
temperature for tempered samplers); keys [B, N] are per-position PRNG keys, None when greedy.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Protocol

import jax
import jax.numpy as jnp


class Confidence(Protocol):
  needs_key: bool  # True if the measure draws random numbers (then the API requires a key).

  @abc.abstractmethod
  def __call__(self, logits: jax.Array, x0: jax.Array, keys: jax.Array | None) -> jax.Array: ...


@dataclasses.dataclass(frozen=True)
class Probability:
  """p(x0): LLaDA's 'low_confidence' remasking, Dream's 'maskgit_plus', Fast-dLLM's rules."""

  needs_key = False

  def __call__(self, logits, x0, keys):
    probs = jax.nn.softmax(logits, axis=-1)
    return jnp.take_along_axis(probs, x0[..., None], axis=-1)[..., 0]


@dataclasses.dataclass(frozen=True)
class Margin:
  """p1 - p2, the gap between the two most likely tokens (Dream's 'topk_margin')."""

  needs_key = False

  def __call__(self, logits, x0, keys):
    best = jax.lax.top_k(jax.nn.softmax(logits, axis=-1), 2)[0]
    return best[..., 0] - best[..., 1]


@dataclasses.dataclass(frozen=True)
class NegEntropy:
  """sum p log p, the negative entropy of the prediction (Dream's 'entropy')."""

  needs_key = False

  def __call__(self, logits, x0, keys):
    probs = jax.nn.softmax(logits, axis=-1)
    return jnp.sum(probs * jnp.log(probs + 1e-10), axis=-1)


@dataclasses.dataclass(frozen=True)
class RandomConfidence:
  """A uniform draw per position: LLaDA's 'random' remasking (commit order at random)."""

  needs_key = True

  def __call__(self, logits, x0, keys):
    if keys is None:
      raise ValueError("RandomConfidence needs a PRNG key")
    return uniform_noise(keys)


@dataclasses.dataclass(frozen=True)
class LeftToRight:
  """Earlier positions first, whatever the model predicts: the window's masks are committed in
  reading order (`FixedSteps(confidence=LeftToRight())` with steps = gen_length decodes one token
  per forward, left to right: the serial order of an AR model, and on a model with a causal
  stream, `ModelConfig.has_causal_stream`, exactly that causal LM's greedy decoding)."""

  needs_key = False

  def __call__(self, logits, x0, keys):
    order = -jnp.arange(x0.shape[-1], dtype=jnp.float32)
    return jnp.broadcast_to(order, x0.shape)


def uniform_noise(keys: jax.Array) -> jax.Array:
  """f32[B, N] in [0, 1): one draw per key."""
  draw = lambda k: jax.random.uniform(jax.random.fold_in(k, 1), (), jnp.float32)
  return jax.vmap(draw)(keys.reshape(-1)).reshape(keys.shape)
