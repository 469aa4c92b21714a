"""Autoregressive generation: one prefill, then one `lax.while_loop`, all traceable under jit.

Prompts are right-padded to a static length; each row keeps its own committed length in the
KV cache and its own output count, so a ragged batch gives each row exactly what it would get
alone. Budgets are traced (changing `max_new_tokens` does not recompile); the output buffer
size is static.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from jaxdec.decoding import DecodeOutput, clamp_budget, prefill, typed_key
from jaxdec.model import KVCache, ModelConfig, forward
from jaxdec.sampling import Sampling, sample_tokens


@struct.dataclass
class _LoopState:
  cache: KVCache
  tokens: jax.Array  # i32[B, T]
  count: jax.Array  # i32[B]: tokens generated so far.
  done: jax.Array  # bool[B]
  last: jax.Array  # i32[B]: the most recent token, fed to the next forward.
  steps: jax.Array  # i32[]: forwards run (prefill included).


def generate(params: dict, prompt: jax.Array, prompt_lengths: jax.Array, max_new_tokens: jax.Array,
             key: jax.Array | None, stop_tokens: jax.Array, *, config: ModelConfig,
             buffer_len: int, sampling: Sampling | None = None, pad_id: int = 0) -> DecodeOutput:
  """Generate up to `max_new_tokens` (i32 scalar or [B], at most `buffer_len`) tokens per row.

  Args:
    prompt: i32[B, P] right-padded prompts; prompt_lengths: i32[B], each >= 1.
    key: PRNG key, typed or legacy uint32[2] (unused when `sampling` is None: greedy).
    stop_tokens: i32[E]; a row stops after emitting any of them (E may be 0).
    buffer_len: static size T of the output buffer; the cache holds P + T slots.
  """
  batch, width = prompt.shape
  key = typed_key(key)
  rows = jnp.arange(batch, dtype=jnp.int32)
  budget = clamp_budget(max_new_tokens, batch, buffer_len)
  cache = KVCache.init(config, batch, width + buffer_len, dtype=params["embed"].dtype)
  logits, cache, _ = prefill(params, prompt, prompt_lengths, cache, config=config)
  first = sample_tokens(logits, sampling, key, rows, prompt_lengths)
  tokens = jnp.full((batch, buffer_len), pad_id, jnp.int32).at[:, 0].set(first)
  state = _LoopState(cache=cache, tokens=tokens, count=jnp.ones((batch,), jnp.int32),
                     done=jnp.isin(first, stop_tokens) | (budget <= 1), last=first,
                     steps=jnp.ones((), jnp.int32))

  def step(s: _LoopState) -> _LoopState:
    position = prompt_lengths + s.count - 1  # Position of `last`, the token being fed.
    logits, _, cache = forward(params, s.last[:, None], position[:, None], s.cache, config=config)
    token = sample_tokens(logits[:, 0], sampling, key, rows, position + 1)
    active = ~s.done
    tokens = s.tokens.at[rows, s.count].set(jnp.where(active, token, s.tokens[rows, s.count]),
                                            mode="drop")
    count = s.count + active.astype(jnp.int32)
    done = s.done | (active & (jnp.isin(token, stop_tokens) | (count >= budget)))
    cache = cache.with_length(jnp.where(active, cache.length, s.cache.length))
    return _LoopState(cache=cache, tokens=tokens, count=count, done=done,
                      last=jnp.where(active, token, s.last), steps=s.steps + 1)

  state = jax.lax.while_loop(lambda s: ~jnp.all(s.done), step, state)
  return DecodeOutput(tokens=state.tokens, lengths=state.count,
                      stats={"nfe": state.count, "steps": state.steps})
