"""Autoregressive generation over the token loop's core (`jaxdec.decoding`): one prefill, then
one `lax.while_loop` whose step feeds each row's last token and commits the next, all traceable
under jit.

Prompts are right-padded to a static length; each row keeps its own committed length in the
KV cache and its own output count, so a ragged batch gives each row exactly what it would get
alone. Budgets are traced (changing `max_new_tokens` does not recompile); the output buffer
size is static.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxdec import decoding
from jaxdec.controls import Controls
from jaxdec.decoding import (DecodeOutput, Decoding, Job, LoopState, clamp_budget, prefill,
                             typed_key)
from jaxdec.model import KVCache, Model, ModelConfig, forward
from jaxdec.model.params import Params
from jaxdec.sampling import Sampling


@struct.dataclass
class ARCarry:
  """AR's part of the loop carry: the KV cache (the committed tokens but the last) and the last
  committed token i32[B], fed next (carried, so a step reads no sequence slot)."""

  cache: KVCache
  last: jax.Array


def step(params: Params, d: Decoding, s: LoopState, *, config: ModelConfig) -> LoopState:
  """One token per row: feed the last committed token (the cache holds the ones before it),
  choose the next under the controls, commit it."""
  m: ARCarry = s.method
  logits, _, cache = forward(params, m.last[:, None], (s.total - 1)[:, None], m.cache,
                             config=config)
  token = decoding.choose(d, s, logits[:, 0])
  active = s.active
  s, _ = decoding.commit(d, s, token[:, None], jnp.ones_like(s.total), logits)
  cache = cache.with_length(jnp.where(active, cache.length, m.cache.length))
  return s.replace(method=ARCarry(cache=cache, last=jnp.where(active, token, m.last)),
                   forwards=s.forwards + active.astype(jnp.int32))


def start(params: Params, d: Decoding, prompt: jax.Array, prompt_lengths: jax.Array,
          budget: jax.Array, *, config: ModelConfig, buffer_len: int) -> LoopState:
  """Prefill and the first token; the carry holds the KV cache of P + T slots."""
  batch, width = prompt.shape
  capacity = width + buffer_len
  cache = KVCache.init(config, batch, capacity, dtype=params.embed.dtype)
  logits, cache, _ = prefill(params, prompt, prompt_lengths, cache, config=config)
  s = decoding.init(d, prompt, prompt_lengths, budget, capacity, config.vocab_size)
  s = decoding.first_token(d, s, logits)
  last = jnp.take_along_axis(s.seq, (s.total - 1)[:, None], axis=1)[:, 0]
  return s.replace(method=ARCarry(cache=cache, last=last))


def generate(params: Params, prompt: jax.Array, prompt_lengths: jax.Array, max_new_tokens: jax.Array,
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
  d = Decoding(sampling=sampling, key=typed_key(key), stop_tokens=stop_tokens, controls=controls,
               pad_id=pad_id)
  budget = clamp_budget(max_new_tokens, prompt.shape[0], buffer_len)
  s = start(params, d, prompt, prompt_lengths, budget, config=config, buffer_len=buffer_len)
  s = decoding.run(lambda s: step(params, d, s, config=config), s)
  return decoding.output(d, s, buffer_len)


def run(model: Model, prompt, prompt_lengths, sampling, max_new_tokens, key, stop_tokens, *,
        controls: Controls, buffer_len: int) -> DecodeOutput:
  """`generate` for a loaded model (the `Job.run` of `prepare`)."""
  return generate(model.params, prompt, prompt_lengths, max_new_tokens, key, stop_tokens,
                  config=model.config, buffer_len=buffer_len, sampling=sampling,
                  pad_id=decoding.pad_id(model.config), controls=controls)


def prepare(model: Model, prompts, max_new_tokens, sampling=None, key=None, *, lengths=None,
            stop_tokens=None) -> Job:
  """`jaxdec.generate`'s arguments validated on the host, as a `Job`."""
  a = decoding.ar_inputs(model, prompts, lengths, max_new_tokens, sampling, key, stop_tokens)
  return Job(a.model, run, (a.prompt, a.prompt_lengths, a.sampling),
             (np.int32(a.budget), a.key, a.stops),
             static=(("buffer_len", decoding.bucket(a.budget)),), budget=a.budget)
