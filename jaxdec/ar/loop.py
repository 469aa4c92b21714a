"""Autoregressive generation: one prefill, then one `lax.while_loop`, all traceable under jit.

Prompts are right-padded to a static length; each row keeps its own committed length in the
KV cache and its own output count, so a ragged batch gives each row exactly what it would get
alone. Budgets are traced (changing `max_new_tokens` does not recompile); the output buffer
size is static.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import struct

from jaxdec.controls import Controls, ControlState
from jaxdec.decoding import DecodeOutput, clamp_budget, prefill, typed_key
from jaxdec.model import KVCache, ModelConfig, forward
from jaxdec.sampling import Sampling


@struct.dataclass
class _LoopState:
  cache: KVCache
  tokens: jax.Array  # i32[B, T]
  count: jax.Array  # i32[B]: tokens generated so far.
  done: jax.Array  # bool[B]
  last: jax.Array  # i32[B]: the most recent token, fed to the next forward.
  steps: jax.Array  # i32[]: forwards run (prefill included).
  controls: ControlState
  logprobs: jax.Array | None  # f32[B, T] with controls.logprobs, else None.


def generate(params: dict, prompt: jax.Array, prompt_lengths: jax.Array, max_new_tokens: jax.Array,
             key: jax.Array | None, stop_tokens: jax.Array, *, config: ModelConfig,
             buffer_len: int, sampling: Sampling | None = None, pad_id: int = 0,
             controls: Controls = Controls()) -> DecodeOutput:
  """Generate up to `max_new_tokens` (i32 scalar or [B], at most `buffer_len`) tokens per row.

  Args:
    prompt: i32[B, P] right-padded prompts; prompt_lengths: i32[B], each >= 1.
    key: PRNG key, typed or legacy uint32[2] (unused when `sampling` is None: greedy).
    stop_tokens: i32[E]; a row stops after emitting any of them (E may be 0).
    buffer_len: static size T of the output buffer; the cache holds P + T slots.
    controls: logit rules, stop strings, log-probabilities, a streaming hook (`jaxdec.controls`).
  """
  batch, width = prompt.shape
  key = typed_key(key)
  rows = jnp.arange(batch, dtype=jnp.int32)
  budget = clamp_budget(max_new_tokens, batch, buffer_len)
  cache = KVCache.init(config, batch, width + buffer_len, dtype=params["embed"].dtype)
  logits, cache, _ = prefill(params, prompt, prompt_lengths, cache, config=config)

  choose = functools.partial(controls.choose, sampling=sampling, key=key,
                             prompt_lengths=prompt_lengths, stop_tokens=stop_tokens)

  zeros = jnp.zeros((batch,), jnp.int32)
  first, stop, logp, ctl = choose(logits, controls.start(prompt, prompt_lengths, config.vocab_size),
                                  zeros, zeros == 0)
  tokens = jnp.full((batch, buffer_len), pad_id, jnp.int32).at[:, 0].set(first)
  logprobs = None if logp is None else jnp.zeros((batch, buffer_len)).at[:, 0].set(logp)
  state = _LoopState(cache=cache, tokens=tokens, count=jnp.ones((batch,), jnp.int32),
                     done=stop | (budget <= 1), last=first, steps=jnp.ones((), jnp.int32),
                     controls=ctl, logprobs=logprobs)

  def step(s: _LoopState) -> _LoopState:
    position = prompt_lengths + s.count - 1  # Position of `last`, the token being fed.
    logits, _, cache = forward(params, s.last[:, None], position[:, None], s.cache, config=config)
    active = ~s.done
    token, stop, logp, ctl = choose(logits[:, 0], s.controls, s.count, active)
    slot = jnp.where(active, s.count, buffer_len)  # Finished rows write nowhere.
    tokens = s.tokens.at[rows, slot].set(token, mode="drop")
    logprobs = None if logp is None else s.logprobs.at[rows, slot].set(logp, mode="drop")
    count = s.count + active.astype(jnp.int32)
    done = s.done | (active & (stop | (count >= budget)))
    cache = cache.with_length(jnp.where(active, cache.length, s.cache.length))
    return _LoopState(cache=cache, tokens=tokens, count=count, done=done,
                      last=jnp.where(active, token, s.last), steps=s.steps + 1, controls=ctl,
                      logprobs=logprobs)

  state = jax.lax.while_loop(lambda s: ~jnp.all(s.done), step, state)
  return DecodeOutput(tokens=state.tokens, lengths=state.count,
                      stats={"nfe": state.count, "steps": state.steps}, logprobs=state.logprobs)
