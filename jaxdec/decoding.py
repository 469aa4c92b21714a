"""The token loop's core, and what every decoding loop shares: the output type, prefill,
positions, budgets, RNG keys, and the host-side validation the API runs before it traces anything
(one place, one message per problem).

The core (in the shape of gemma's sampler loop) is `init` / `commit` / `run` / `output` over one
carry, `LoopState`: the committed sequence, per-row lengths, budgets, done flags and forward
counts, the controls' state (`jaxdec.controls`: logit rules, stop strings, log-probabilities,
streaming) and the method's own carry. A method is a step function `LoopState -> LoopState` that
runs its forwards, offers each row some tokens and hands them to `commit`, which cuts them at a
stop token, a stop string and the budget, writes them, records their log-probabilities, streams
them and updates the controls. AR decoding offers one token a step, speculative decoding the
accepted drafts plus one (`jaxdec.spec.loop`), standalone K-Forcing its k tokens, HPD one token
per stream (its streams are the loop's rows), SSR's answer phase runs the speculative step from
its reasoning phase's state. So every control reaches every token loop, written once.

Device-side helpers are pure and run inside any jit; validators (`prepare_prompts`,
`check_budget`, ...) run on the host, raise ValueError / TypeError naming the offending argument
and value, and return plain numpy arrays.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, Callable, Iterable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxdec.controls import Controls, ControlState, LogitsRules, StopStrings, token_logprobs
from jaxdec.model import (KVCache, Model, ModelConfig, decode_hidden, embed, hidden_mask_keys,
                          unembed)
from jaxdec.model.params import Params
from jaxdec.sampling import Sampling, check_values, sample_tokens


@struct.dataclass
class DecodeStats(Mapping):
  """What a decoding loop counted, read as a mapping (`stats["nfe"]`). Three keys mean the same
  in every loop: `nfe` i32[B] (forwards of the decoding model each row took part in, the
  prefill included), `steps` i32[] (loop iterations), `tokens_per_forward` f32[B] (tokens
  generated per row / nfe); `extra` holds each method's own (acceptance lengths, draft forwards,
  a scheduler's state, ...)."""

  nfe: jax.Array
  steps: jax.Array
  tokens_per_forward: jax.Array
  extra: dict = struct.field(default_factory=dict)

  _COMMON = ("nfe", "steps", "tokens_per_forward")

  @classmethod
  def create(cls, nfe, steps, tokens_per_forward, **extra) -> "DecodeStats":
    return cls(nfe=nfe, steps=steps, tokens_per_forward=tokens_per_forward, extra=extra)

  def __getitem__(self, key: str):
    if key in self._COMMON:
      return getattr(self, key)
    return self.extra[key]

  def __iter__(self):
    yield from self._COMMON
    yield from self.extra

  def __len__(self) -> int:
    return len(self._COMMON) + len(self.extra)


@struct.dataclass
class DecodeOutput:
  """The result of every decoding loop.

  tokens i32[B, T]: generated tokens only (not the prompt), padded after `lengths`;
  lengths i32[B]: tokens generated per row (a final stop token included);
  stats: `DecodeStats`, a mapping of arrays whose `nfe`, `steps` and `tokens_per_forward` mean
  the same in every loop, plus each method's own (acceptance lengths, draft forwards, ...);
  logprobs f32[B, T] or None: when asked for, each generated token's log-probability under the
  model's own distribution (log_softmax of its logits, before any rule or temperature).
  """

  tokens: jax.Array
  lengths: jax.Array
  stats: DecodeStats
  logprobs: jax.Array | None = None


# ---- the token loop's core ---------------------------------------------------------------------

@struct.dataclass
class Decoding:
  """What a token loop reads besides its carry: sampling (None: greedy) and its key, the stop
  tokens i32[E], the controls, and the pad id written after a row's last token."""

  sampling: Sampling | None
  key: jax.Array | None
  stop_tokens: jax.Array
  controls: Controls = Controls()
  pad_id: int = struct.field(pytree_node=False, default=0)


@struct.dataclass
class LoopState:
  """The carry of every token loop.

  seq i32[B, S]: prompt then generated tokens, committed in [0, total); prompt_lengths,
  total, budget i32[B] (tokens a row may generate); done bool[B]: finished rows are frozen;
  forwards i32[B]: forwards each row took part in (prefill included); steps i32[];
  controls: the controls' state; logprobs f32[B, S] aligned with seq (None unless asked for);
  method: the method's own carry (KV cache, draft state, ...).
  """

  seq: jax.Array
  prompt_lengths: jax.Array
  total: jax.Array
  budget: jax.Array
  done: jax.Array
  forwards: jax.Array
  steps: jax.Array
  controls: ControlState
  logprobs: jax.Array | None
  method: Any = None

  @property
  def generated(self) -> jax.Array:
    """i32[B]: tokens generated so far."""
    return self.total - self.prompt_lengths

  @property
  def active(self) -> jax.Array:
    return ~self.done


def init(d: Decoding, prompt: jax.Array, prompt_lengths: jax.Array, budget: jax.Array,
         capacity: int, vocab_size: int, method: Any = None) -> LoopState:
  """The carry before the first token: right-padded prompts i32[B, P] in a sequence buffer of
  `capacity` slots, budget i32[B] (at most capacity - P), no forward counted yet."""
  batch, width = prompt.shape
  seq = jnp.full((batch, capacity), d.pad_id, jnp.int32).at[:, :width].set(prompt)
  real = jnp.arange(capacity)[None, :] < prompt_lengths[:, None]
  logprobs = jnp.zeros((batch, capacity)) if d.controls.logprobs else None
  return LoopState(seq=jnp.where(real, seq, d.pad_id), prompt_lengths=prompt_lengths,
                   total=prompt_lengths, budget=budget, done=budget <= 0,
                   forwards=jnp.zeros((batch,), jnp.int32), steps=jnp.zeros((), jnp.int32),
                   controls=d.controls.start(prompt, prompt_lengths, vocab_size),
                   logprobs=logprobs, method=method)


def first_token(d: Decoding, s: LoopState, logits: jax.Array) -> LoopState:
  """Commit each row's first token, chosen from the prefill's logits f32[B, V] at its last
  prompt token (the prefill counts as every row's first forward)."""
  s, _ = commit(d, s, choose(d, s, logits)[:, None], jnp.ones_like(s.total), logits[:, None])
  return s.replace(forwards=s.forwards + 1)


def rule(d: Decoding, s: LoopState, logits: jax.Array, pending: jax.Array | None = None):
  """logits f32[B, W, V] -> the logits a token is chosen from (the controls' rules, for tokens
  generated at s.generated + 0..W-1; `pending` as `Controls.process`)."""
  width = logits.shape[1]
  generated = s.generated[:, None] + jnp.arange(width, dtype=jnp.int32)[None, :]
  return d.controls.process(logits, s.controls, generated, d.stop_tokens, pending)


def choose(d: Decoding, s: LoopState, logits: jax.Array) -> jax.Array:
  """i32[B]: the next token of each row from the model's logits f32[B, V] under the controls'
  rules, greedy or sampled with the key of (row, position)."""
  ruled = rule(d, s, logits[:, None])[:, 0]
  rows = jnp.arange(logits.shape[0], dtype=jnp.int32)
  return sample_tokens(ruled, d.sampling, d.key, rows, s.total)


def commit(d: Decoding, s: LoopState, tokens: jax.Array, offered: jax.Array,
           logits: jax.Array | None = None) -> tuple[LoopState, jax.Array]:
  """Append to each active row the first `offered` i32[B] of tokens i32[B, K], cut after a stop
  token or stop string and at the budget. `logits` f32[B, K, V]: the model's own logits each
  token was chosen from (for log-probabilities; unread unless they were asked for).

  Returns (the state, count i32[B]: tokens appended; 0 for finished rows)."""
  batch, k = tokens.shape
  rows = jnp.arange(batch, dtype=jnp.int32)[:, None]
  j = jnp.arange(k, dtype=jnp.int32)[None, :]
  string_hit, histories = d.controls.stop_hits(s.controls, tokens, s.generated)
  is_stop = (jnp.isin(tokens, d.stop_tokens) | string_hit) & (j < offered[:, None])
  first_stop = jnp.where(jnp.any(is_stop, 1), jnp.argmax(is_stop, 1), k)
  count = jnp.minimum(jnp.minimum(offered, s.budget - s.generated), first_stop + 1)
  count = jnp.where(s.done, 0, jnp.maximum(count, 0))
  write = j < count[:, None]
  slots = jnp.where(write, s.total[:, None] + j, s.seq.shape[1])
  seq = s.seq.at[rows, slots].set(tokens, mode="drop")
  logprobs = s.logprobs
  if logprobs is not None:
    logprobs = logprobs.at[rows, slots].set(token_logprobs(logits, tokens), mode="drop")
  total = s.total + count
  hit_stop = jnp.any(is_stop & write, axis=1)
  done = s.done | hit_stop | (total - s.prompt_lengths >= s.budget)
  controls = d.controls.advance(s.controls, tokens, count, histories)
  return s.replace(seq=seq, total=total, done=done, controls=controls, logprobs=logprobs), count


def run(step: Callable[[LoopState], LoopState], state: LoopState) -> LoopState:
  """Steps until every row is done; each step counts itself."""
  return jax.lax.while_loop(lambda s: ~jnp.all(s.done),
                            lambda s: step(s).replace(steps=s.steps + 1), state)


def output(d: Decoding, s: LoopState, buffer_len: int, **stats) -> DecodeOutput:
  """The generated tokens (and log-probabilities) cut out of the sequence buffer, i32[B, T] with
  T = buffer_len, and the stats every loop reports plus `stats`."""
  batch, capacity = s.seq.shape
  lengths = s.generated
  offsets = jnp.minimum(positions(batch, buffer_len, s.prompt_lengths), capacity - 1)
  produced = jnp.arange(buffer_len)[None, :] < lengths[:, None]
  tokens = jnp.where(produced, jnp.take_along_axis(s.seq, offsets, 1), d.pad_id)
  logprobs = None
  if s.logprobs is not None:
    logprobs = jnp.where(produced, jnp.take_along_axis(s.logprobs, offsets, 1), 0.0)
  nfe = s.forwards
  per_forward = lengths.astype(jnp.float32) / jnp.maximum(nfe, 1).astype(jnp.float32)
  return DecodeOutput(tokens=tokens, lengths=lengths, logprobs=logprobs,
                      stats=DecodeStats.create(nfe, s.steps, per_forward, **stats))


# ---- device side -------------------------------------------------------------------------------

def positions(batch: int, width: int, start: jax.Array | int = 0) -> jax.Array:
  """i32[B, width]: start[b] + 0, 1, ..., width - 1 (start scalar or i32[B])."""
  offsets = jnp.arange(width, dtype=jnp.int32)[None, :]
  return jnp.broadcast_to(jnp.asarray(start, jnp.int32).reshape(-1, 1) + offsets, (batch, width))


def pad_id(config: ModelConfig) -> int:
  """The id written after a row's last token: the model's pad id, else 0."""
  return config.tokens.pad if config.tokens.pad is not None else 0


def clamp_budget(max_new_tokens: jax.Array | int, batch: int, buffer_len: int) -> jax.Array:
  """i32[B]: a scalar or per-row budget, at most the static output buffer."""
  budget = jnp.broadcast_to(jnp.asarray(max_new_tokens, jnp.int32), (batch,))
  return jnp.minimum(budget, buffer_len)


def typed_key(key: jax.Array | None) -> jax.Array | None:
  """Accept both key kinds: a typed key (`jax.random.key`) or a legacy uint32[2] (`PRNGKey`)."""
  if key is None or jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
    return key
  return jax.random.wrap_key_data(key)


def prefill(params: Params, prompt: jax.Array, prompt_lengths: jax.Array, cache: KVCache, *,
            config: ModelConfig, hidden_layers: Sequence[int] = ()):
  """Run right-padded prompts i32[B, P] into an empty cache.

  Returns (logits f32[B, V] at each row's last prompt token, the cache with
  `length = prompt_lengths` (slots written for padding are stale and get overwritten), hidden
  states [len(hidden_layers), B, P, D] at the requested layers or None).
  """
  batch, width = prompt.shape
  hidden, selected, cache = decode_hidden(params, embed(params, prompt), positions(batch, width),
                                          cache, config=config, hidden_layers=hidden_layers,
                                          hidden_keys=hidden_mask_keys(prompt, config))
  last = jnp.take_along_axis(hidden, (prompt_lengths - 1)[:, None, None], axis=1)[:, 0]
  return unembed(params, last, config), cache.with_length(prompt_lengths), selected


def rows_until_stop(tokens: jax.Array, stop_tokens: jax.Array) -> jax.Array:
  """i32[B]: tokens up to and including the first stop token of each row (T if none)."""
  stops = jnp.isin(tokens, stop_tokens)
  return jnp.where(jnp.any(stops, axis=1), jnp.argmax(stops, axis=1) + 1,
                   tokens.shape[1]).astype(jnp.int32)


def check_returned(part, method: str, **fields) -> None:
  """Trace-time check of what a plug-in's method returned: each field is (array, expected shape),
  None in the shape for any size. A wrong shape raises a TypeError naming the part, the method
  and the field, instead of a shape error from deep inside the loop."""
  for field, (value, want) in fields.items():
    got = getattr(value, "shape", None)
    if got is None or len(got) != len(want) or any(w is not None and g != w
                                                    for g, w in zip(got, want)):
      shown = tuple("*" if w is None else w for w in want)
      raise TypeError(f"{type(part).__name__}.{method} returned {field} with shape {got}, "
                      f"expected {shown}")


# ---- host-side validation ----------------------------------------------------------------------

def bucket(n: int, minimum: int = 16) -> int:
  """Static sizes come from a few buckets (powers of two, then multiples of 1024) so that
  nearby lengths share one compiled program."""
  if n <= minimum:
    return minimum
  if n <= 1024:
    return 1 << (n - 1).bit_length()
  return -(-n // 1024) * 1024


def check_model(model, *, causal: bool | None = None) -> None:
  """A jaxdec Model; `causal=True` refuses masked-diffusion models, `False` refuses AR ones."""
  if not isinstance(model, Model):
    raise TypeError(f"model must be a jaxdec Model (from jaxdec.load), got {type(model).__name__}")
  if causal and not (model.config.is_causal or model.config.has_causal_stream):
    raise ValueError(f"this model's attention is {model.config.attention} (a masked-diffusion "
                     f"model: it predicts masked positions, not the next token); decode it with "
                     f"jaxdec.diffusion_generate")
  if causal is False and model.config.is_causal:
    raise ValueError("diffusion_generate needs a bidirectional masked-diffusion model (LLaDA, "
                     "Dream, zoo:pycode-dlm); this model is causal: use jaxdec.generate")


def ar_view(model) -> Model:
  """The model the AR loops run: itself when causal, the causal LM its given tokens form when
  it is a block-diffusion model with one (`ModelConfig.causal_stream`: zoo:gsm-dlm decoded one
  token at a time, left to right)."""
  check_model(model, causal=True)
  if model.config.is_causal:
    return model
  return model.replace(config=model.config.causal_stream())


def check_tokens(model, tokens) -> np.ndarray:
  """Token ids i32[B, L] for a plain forward of `model`: L >= 1 and within its positions."""
  check_model(model)
  tokens = np.asarray(tokens)
  if tokens.ndim != 2 or not np.issubdtype(tokens.dtype, np.integer):
    raise TypeError(f"tokens must be an int array [B, L], got {tokens.dtype} with shape {tokens.shape}")
  if tokens.shape[1] < 1:
    raise ValueError("tokens is empty: need at least one token per row")
  if tokens.shape[1] > model.config.max_position_embeddings:
    raise ValueError(f"sequence length {tokens.shape[1]} exceeds the model's maximum of "
                     f"{model.config.max_position_embeddings} positions")
  check_ids(tokens, model.config.vocab_size, "tokens")
  return tokens.astype(np.int32)


def positive_int(name: str, value) -> int:
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
    raise ValueError(f"{name} must be a positive int, got {value!r}")
  return int(value)


def check_ids(ids: np.ndarray, vocab_size: int, what: str) -> None:
  if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
    bad = ids[(ids < 0) | (ids >= vocab_size)][0]
    raise ValueError(f"{what} contains token id {int(bad)} outside the vocabulary [0, {vocab_size})")


def _ragged_rows(prompts) -> list[np.ndarray]:
  if all(isinstance(p, (int, np.integer)) for p in prompts):
    raise TypeError(f"prompts must be a list of prompts (token-id lists), got one flat list of "
                    f"{len(prompts)} ints; for a single prompt wrap it in a list: [ids]")
  rows = []
  for i, p in enumerate(prompts):
    row = np.asarray(p)
    if row.ndim != 1 or not (row.size == 0 or np.issubdtype(row.dtype, np.integer)):
      raise TypeError(f"prompt {i} must be a flat sequence of int token ids, got {row.dtype} "
                      f"with shape {row.shape}")
    rows.append(row.astype(np.int64))
  return rows


def prepare_prompts(prompts, lengths, vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
  """Ragged list of token-id lists, or i32[B, L] with optional lengths -> (right-padded
  i32[B, bucket], i32[B] lengths)."""
  if isinstance(prompts, (list, tuple)):
    if lengths is not None:
      raise ValueError("`lengths` is only for array prompts; a list of lists carries its own")
    if not prompts:
      raise ValueError("prompts is empty: pass at least one prompt")
    rows = _ragged_rows(prompts)
    lengths = np.array([len(r) for r in rows], np.int64)
    array = np.zeros((len(rows), max(int(lengths.max()), 1)), np.int64)
    for i, r in enumerate(rows):
      array[i, : len(r)] = r
  else:
    array = np.asarray(prompts)
    if array.ndim != 2 or not np.issubdtype(array.dtype, np.integer):
      raise TypeError(f"prompts must be a list of token-id lists or an int array [B, L], got "
                      f"{array.dtype} with shape {array.shape}")
    lengths = (np.full((array.shape[0],), array.shape[1], np.int64) if lengths is None
               else np.asarray(lengths).astype(np.int64))
    if lengths.shape != (array.shape[0],):
      raise ValueError(f"lengths must have shape ({array.shape[0]},), got {lengths.shape}")
    if (lengths > array.shape[1]).any():
      raise ValueError(f"lengths {lengths.tolist()} exceed the prompt width {array.shape[1]}")
  empty = np.flatnonzero(lengths < 1)
  if empty.size:
    raise ValueError(f"prompt {int(empty[0])} is empty: every prompt needs at least one token")
  real = np.arange(array.shape[1])[None, :] < lengths[:, None]
  check_ids(array[real], vocab_size, "prompts")
  padded = np.zeros((array.shape[0], bucket(array.shape[1])), np.int32)
  padded[:, : array.shape[1]] = np.where(real, array, 0)
  return padded, lengths.astype(np.int32)


def check_budget(name: str, value, lengths: np.ndarray, max_positions: int) -> int:
  """A positive int budget such that the longest prompt plus it fits the model's positions."""
  value = positive_int(name, value)
  longest = int(lengths.max())
  if longest + value > max_positions:
    raise ValueError(f"prompt length {longest} + {name}={value} exceeds the model's maximum of "
                     f"{max_positions} positions")
  return value


def stop_tokens(config: ModelConfig, stop_tokens: Iterable[int] | None) -> np.ndarray:
  """i32[E]: the given ids, or the model's EOS ids by default; () disables stopping."""
  if stop_tokens is None:
    ids = np.asarray(config.tokens.eos, np.int64)
  else:
    if isinstance(stop_tokens, (int, np.integer)) or not isinstance(stop_tokens, Iterable):
      raise TypeError(f"stop_tokens must be a sequence of token ids, got "
                      f"{type(stop_tokens).__name__} {stop_tokens!r}; for one id write "
                      f"[{stop_tokens!r}]")
    ids = np.asarray(list(stop_tokens))
    if ids.size and not np.issubdtype(ids.dtype, np.integer):
      raise TypeError(f"stop_tokens must be int token ids, got {ids.dtype} values {ids.tolist()}")
  ids = ids.astype(np.int64).reshape(-1)
  check_ids(ids, config.vocab_size, "stop_tokens")
  return ids.astype(np.int32)


def check_key(key, *, needed: bool, what: str, unused: str | None = None) -> jax.Array | None:
  """A PRNG key (typed or legacy uint32[2]) when `needed` (for `what`). With `unused` (why, and
  what to do), a key nobody would use is an error rather than a silent greedy run."""
  if key is None:
    if needed:
      raise ValueError(f"{what} needs a PRNG key: pass key=jax.random.key(seed)")
    return None
  if not needed and unused is not None:
    raise ValueError(f"a key was given but {unused}")
  key = jnp.asarray(key) if not isinstance(key, jax.Array) else key
  if not jnp.issubdtype(key.dtype, jax.dtypes.prng_key) and key.shape != (2,):
    raise TypeError(f"key must be a PRNG key (jax.random.key(seed) or jax.random.PRNGKey(seed)), "
                    f"got {key.dtype} with shape {key.shape}")
  return typed_key(key)


def check_sampling(sampling, batch: int) -> Sampling | None:
  """None (greedy) or a `Sampling` with finite values in range, scalar or one per row."""
  if sampling is None:
    return None
  if not isinstance(sampling, Sampling):
    raise TypeError(f"sampling must be jaxdec.Sampling or None (greedy), got {type(sampling).__name__}")
  t, k, p = (np.asarray(x) for x in (sampling.temperature, sampling.top_k, sampling.top_p))
  for name, value in (("temperature", t), ("top_k", k), ("top_p", p)):
    if value.shape not in ((), (batch,)):
      raise ValueError(f"sampling.{name} must be a scalar or have shape ({batch},), got {value.shape}")
  check_values(t, k, p)  # Again: a Sampling built without `create` skipped it.
  return Sampling.create(t, k, p, batch=batch)


def check_part(part, protocol: type, what: str, pytree: bool = True) -> None:
  """`part` implements `protocol`: an instance (not the class) with every member the protocol
  declares, and a pytree of arrays (a jit argument) or, with pytree=False, hashable (a static
  setting). Raises TypeError naming the part and what is wrong."""
  name = getattr(part, "__name__", type(part).__name__)
  if isinstance(part, type):
    raise TypeError(f"{what} must be an instance, got the class {name}: pass {name}(...)")
  members = [m for m in vars(protocol).get("__annotations__", {})]
  members += [m for m, v in vars(protocol).items() if callable(v) and not m.startswith("_")]
  if "__call__" in vars(protocol):
    members.append("__call__")
  missing = sorted({m for m in members if not hasattr(part, m)})
  if missing:
    raise TypeError(f"{what} {name} does not implement the {protocol.__name__} protocol: it lacks "
                    f"{', '.join(missing)}")
  if not pytree:
    try:
      hash(part)
    except TypeError:
      raise TypeError(f"{what} {name} must be hashable (a frozen dataclass): it is a static "
                      f"setting of the compiled program") from None
    return
  for leaf in jax.tree.leaves(part):
    if not isinstance(leaf, (jax.Array, np.ndarray, np.generic, int, float, bool)):
      raise TypeError(f"{what} {name} must be a pytree of arrays (decorate it with "
                      f"flax.struct.dataclass, sizes and settings as static fields); it holds a "
                      f"{type(leaf).__name__} leaf")


def counts(name: str, value, batch: int) -> np.ndarray:
  """A non-negative int scalar or one per row; i32."""
  array = np.asarray(value)
  if array.dtype == bool or not np.issubdtype(array.dtype, np.integer):
    raise TypeError(f"{name} must be an int or one int per row, got {value!r}")
  if array.shape not in ((), (batch,)):
    raise ValueError(f"{name} must be a scalar or have shape ({batch},) (one per row), got shape "
                     f"{array.shape}")
  if (array < 0).any():
    raise ValueError(f"{name} must be >= 0, got {value!r}")
  return array.astype(np.int32)


def finite_values(name: str, value, batch: int, low: float = -math.inf, high: float = math.inf,
                  low_open: bool = False) -> np.ndarray:
  """A real scalar or one value per row, finite and in [low, high] (or (low, high]); f32."""
  try:
    array = np.asarray(value, np.float64)
  except (TypeError, ValueError):
    raise TypeError(f"{name} must be a real number or one per row, got "
                    f"{type(value).__name__}") from None
  if array.shape not in ((), (batch,)):
    raise ValueError(f"{name} must be a scalar or have shape ({batch},) (one per row), got shape "
                     f"{array.shape}")
  below = (array <= low) if low_open else (array < low)
  if not np.isfinite(array).all() or below.any() or (array > high).any():
    bounds = f"{'(' if low_open else '['}{low}, {high}]"
    raise ValueError(f"{name} must be finite and in {bounds}, got {value!r}")
  return array.astype(np.float32)


def check_controls(vocab_size: int, batch: int, *, min_new_tokens=0, repetition_penalty=1.0,
                   stop_strings=None, tokenizer=None, logprobs: bool = False) -> Controls:
  """The validated controls of one call (rules and stop strings None when unused) for a model
  of `vocab_size` tokens: every decoding entry point validates them here."""
  penalty = finite_values("repetition_penalty", repetition_penalty, batch, 0.0, low_open=True)
  least = counts("min_new_tokens", min_new_tokens, batch)
  rules = None
  if (penalty != 1.0).any() or (least > 0).any():
    rules = LogitsRules(repetition_penalty=np.broadcast_to(penalty, (batch,)),
                        min_new_tokens=np.broadcast_to(least, (batch,)))
  stops = None
  if stop_strings is not None and not isinstance(stop_strings, str) and len(stop_strings) == 0:
    stop_strings = None  # [] means none, as stop_tokens=() does.
  if tokenizer is not None:
    tokenizer.check_fits(vocab_size)
  if stop_strings is not None:
    if tokenizer is None:
      raise ValueError("stop_strings need the model's tokenizer to match text: pass tokenizer="
                       "jaxdec.load_tokenizer(...)")
    stops = StopStrings.create(tokenizer, stop_strings, vocab_size)
  if not isinstance(logprobs, bool):
    raise TypeError(f"logprobs must be True or False, got {logprobs!r}")
  return Controls(rules=rules, stops=stops, logprobs=logprobs)


# ---- one call, validated -----------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Job:
  """One validated call, ready to run: each method's host-side `prepare` builds it and
  `jaxdec.api` runs every job the same way (validate the controls for `rows`, place the per-row
  inputs on the model's mesh, jit `run`, listen for a stream, gather, cut to `budget`).

  `run(first, *per_row, *args, controls=..., **dict(static))` is jittable and returns a
  `DecodeOutput`; `first` is the model unless the method runs something else (K-Forcing's
  student). `parts`: the plug-ins' classes (`part_types`), static, so two plug-ins with the same
  fields never share a compiled program. HPD's queries are not the loop's rows: `to_loop` maps
  the per-row controls onto the loop's rows (no mesh placement then), `order` says which loop
  rows a stream delivers, and `finish` turns the loop's output into one row per query.
  """

  model: Model
  run: Callable[..., DecodeOutput]
  per_row: tuple
  args: tuple = ()
  static: tuple = ()
  parts: tuple = ()
  first: Any = None
  budget: int | None = None
  to_loop: Callable | None = None
  order: np.ndarray | None = None
  finish: Callable[[DecodeOutput], DecodeOutput] | None = None

  @property
  def rows(self) -> int:
    """The call's rows: the ones its controls and its stream are given for."""
    return len(self.order) if self.order is not None else np.shape(self.per_row[0])[0]


def part_types(*parts) -> tuple:
  """The plug-ins' classes, a static jit argument: JAX's tree structures of two dataclass
  plug-ins with the same fields compare equal whatever their class (PrefixCache() and
  DualCache(), Threshold(0.9) and Factor(1.0)), so without it one could be served the other's
  compiled program."""
  return tuple(type(p) for p in parts)


class ARInputs(NamedTuple):
  model: Model
  prompt: np.ndarray
  prompt_lengths: np.ndarray
  budget: int
  sampling: Sampling | None
  key: jax.Array | None
  stops: np.ndarray


def ar_inputs(model, prompts, lengths, max_new_tokens, sampling=None, key=None,
              stop_ids=None) -> ARInputs:
  """The validated inputs of the loops that decode left to right (AR, speculative, SSR), the
  model as they run it (`ar_view`)."""
  model = ar_view(model)
  prompt, prompt_lengths = prepare_prompts(prompts, lengths, model.config.vocab_size)
  budget = check_budget("max_new_tokens", max_new_tokens, prompt_lengths,
                        model.config.max_position_embeddings)
  sampling = check_sampling(sampling, prompt.shape[0])
  key = check_key(key, needed=sampling is not None, what="sampling",
                  unused="sampling is None, which decodes greedily (no randomness); pass "
                         "sampling=jaxdec.Sampling.create(temperature=...)")
  return ARInputs(model, prompt, prompt_lengths, budget, sampling, key,
                  stop_tokens(model.config, stop_ids))
