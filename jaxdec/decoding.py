"""What every decoding loop shares: the output type, prefill, positions, budgets, RNG keys, and
the host-side validation the API runs before it traces anything (one place, one message per
problem).

Device-side helpers (`prefill`, `positions`, `clamp_budget`, `typed_key`) are pure and run inside
any jit; validators (`prepare_prompts`, `check_budget`, ...) run on the host, raise ValueError /
TypeError naming the offending argument and value, and return plain numpy arrays.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxdec.model import (KVCache, Model, ModelConfig, decode_hidden, embed, hidden_mask_keys,
                          unembed)
from jaxdec.sampling import Sampling, check_values


@struct.dataclass
class DecodeOutput:
  """The result of every decoding loop.

  tokens i32[B, T]: generated tokens only (not the prompt), padded after `lengths`;
  lengths i32[B]: tokens generated per row (a final stop token included);
  stats: dict of arrays; every loop reports `nfe` i32[B] (target forwards per row), each adds
  its own (acceptance lengths, tokens per forward, ...);
  logprobs f32[B, T] or None: when asked for, each generated token's log-probability under the
  model's own distribution (log_softmax of its logits, before any rule or temperature).
  """

  tokens: jax.Array
  lengths: jax.Array
  stats: dict
  logprobs: jax.Array | None = None


# ---- device side -------------------------------------------------------------------------------

def positions(batch: int, width: int, start: jax.Array | int = 0) -> jax.Array:
  """i32[B, width]: start[b] + 0, 1, ..., width - 1 (start scalar or i32[B])."""
  offsets = jnp.arange(width, dtype=jnp.int32)[None, :]
  return jnp.broadcast_to(jnp.asarray(start, jnp.int32).reshape(-1, 1) + offsets, (batch, width))


def pad_id(config: ModelConfig) -> int:
  """The id written after a row's last token: the model's pad id, else 0."""
  return config.pad_token_id if config.pad_token_id is not None else 0


def clamp_budget(max_new_tokens: jax.Array | int, batch: int, buffer_len: int) -> jax.Array:
  """i32[B]: a scalar or per-row budget, at most the static output buffer."""
  budget = jnp.broadcast_to(jnp.asarray(max_new_tokens, jnp.int32), (batch,))
  return jnp.minimum(budget, buffer_len)


def typed_key(key: jax.Array | None) -> jax.Array | None:
  """Accept both key kinds: a typed key (`jax.random.key`) or a legacy uint32[2] (`PRNGKey`)."""
  if key is None or jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
    return key
  return jax.random.wrap_key_data(key)


def prefill(params: dict, prompt: jax.Array, prompt_lengths: jax.Array, cache: KVCache, *,
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
    ids = np.asarray(config.eos_token_ids, np.int64)
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
