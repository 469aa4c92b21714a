"""The public, jitted entry points. The only module that applies `jax.jit` and shardings.

Inputs are validated here, on the host, so bad input raises a ValueError / TypeError that names
the problem instead of failing deep inside XLA. The un-jitted functions (`jaxdec.ar`,
`jaxdec.model.forward`) stay pure for callers who want them inside their own jit.
"""

from __future__ import annotations

import functools
import os
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxdec import ar, sharding, spec
from jaxdec.io import export_hf, load, load_tokenizer, save, shard  # noqa: F401  (re-exported)
from jaxdec.model import Model
from jaxdec.model import forward as _forward
from jaxdec.sampling import Sampling


# ---- validation ---------------------------------------------------------------------------------

def _bucket(n: int, minimum: int = 16) -> int:
  """Static sizes come from a few buckets (powers of two, then multiples of 1024) so that
  nearby lengths share one compiled program."""
  if n <= minimum:
    return minimum
  if n <= 1024:
    return 1 << (n - 1).bit_length()
  return -(-n // 1024) * 1024


def _check_model(model) -> None:
  if not isinstance(model, Model):
    raise TypeError(f"model must be a jaxdec Model (from jaxdec.load), got {type(model).__name__}")


def _check_ids(ids: np.ndarray, vocab_size: int, what: str) -> None:
  if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
    bad = ids[(ids < 0) | (ids >= vocab_size)][0]
    raise ValueError(f"{what} contains token id {int(bad)} outside the vocabulary [0, {vocab_size})")


def prepare_prompts(prompts, lengths, vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
  """Ragged list of token-id lists, or i32[B, L] with optional lengths -> (right-padded
  i32[B, bucket], i32[B] lengths)."""
  if isinstance(prompts, (list, tuple)):
    if lengths is not None:
      raise ValueError("`lengths` is only for array prompts; a list of lists carries its own")
    if not prompts:
      raise ValueError("prompts is empty: pass at least one prompt")
    rows = []
    for i, p in enumerate(prompts):
      row = np.asarray(p)
      if row.ndim != 1 or not (row.size == 0 or np.issubdtype(row.dtype, np.integer)):
        raise TypeError(f"prompt {i} must be a flat sequence of int token ids, got {row.dtype} "
                        f"with shape {row.shape}")
      rows.append(row.astype(np.int64))
    lengths = np.array([len(r) for r in rows], np.int64)
    width = max(int(lengths.max()), 1)
    array = np.zeros((len(rows), width), np.int64)
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
  _check_ids(array[real], vocab_size, "prompts")
  padded = np.zeros((array.shape[0], _bucket(array.shape[1])), np.int32)
  padded[:, : array.shape[1]] = np.where(real, array, 0)
  return padded, lengths.astype(np.int32)


def _check_budget(name: str, value, lengths: np.ndarray, max_positions: int) -> int:
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
    raise ValueError(f"{name} must be a positive int, got {value!r}")
  longest = int(lengths.max())
  if longest + value > max_positions:
    raise ValueError(f"prompt length {longest} + {name}={value} exceeds the model's maximum of "
                     f"{max_positions} positions")
  return int(value)


def _place(model: Model, *arrays):
  """Put batch-leading host arrays on the model's mesh (data-parallel), or leave them as is."""
  mesh = sharding.model_mesh(model)
  if mesh is None:
    return arrays
  batch = sharding.batch_sharding(mesh, arrays[0].shape[0])
  return tuple(jax.device_put(a, batch) for a in arrays)


# ---- entry points -------------------------------------------------------------------------------

@jax.jit
def _forward_jit(model: Model, tokens: jax.Array) -> jax.Array:
  positions = jnp.broadcast_to(jnp.arange(tokens.shape[1], dtype=jnp.int32), tokens.shape)
  logits, _, _ = _forward(model.params, tokens, positions, config=model.config)
  return logits


def forward(model: Model, tokens) -> jax.Array:
  """tokens i32[B, L] -> logits f32[B, L, V] (no cache; causal or bidirectional per config)."""
  _check_model(model)
  tokens = np.asarray(tokens)
  if tokens.ndim != 2 or not np.issubdtype(tokens.dtype, np.integer):
    raise TypeError(f"tokens must be an int array [B, L], got {tokens.dtype} with shape {tokens.shape}")
  if tokens.shape[1] < 1:
    raise ValueError("tokens is empty: need at least one token per row")
  if tokens.shape[1] > model.config.max_position_embeddings:
    raise ValueError(f"sequence length {tokens.shape[1]} exceeds the model's maximum of "
                     f"{model.config.max_position_embeddings} positions")
  _check_ids(tokens, model.config.vocab_size, "tokens")
  (tokens,) = _place(model, tokens.astype(np.int32))
  return _forward_jit(model, tokens)


@functools.partial(jax.jit, static_argnames=("buffer_len",))
def _generate_jit(model, prompt, prompt_lengths, max_new_tokens, key, stop_tokens, sampling, *,
                  buffer_len):
  pad_id = model.config.pad_token_id if model.config.pad_token_id is not None else 0
  return ar.generate(model.params, prompt, prompt_lengths, max_new_tokens, key, stop_tokens,
                     config=model.config, buffer_len=buffer_len, sampling=sampling, pad_id=pad_id)


def _stop_tokens(model: Model, stop_tokens) -> np.ndarray:
  ids = np.asarray(model.config.eos_token_ids if stop_tokens is None else list(stop_tokens),
                   np.int64).reshape(-1)
  _check_ids(ids, model.config.vocab_size, "stop_tokens")
  return ids.astype(np.int32)


def _sampling(sampling, key, batch: int):
  if sampling is None:
    return None, None
  if not isinstance(sampling, Sampling):
    raise TypeError(f"sampling must be jaxdec.Sampling or None (greedy), got {type(sampling).__name__}")
  if key is None:
    raise ValueError("sampling needs a PRNG key: pass key=jax.random.key(seed)")
  t, k, p = (np.asarray(x) for x in (sampling.temperature, sampling.top_k, sampling.top_p))
  for name, value in (("temperature", t), ("top_k", k), ("top_p", p)):
    if value.shape not in ((), (batch,)):
      raise ValueError(f"sampling.{name} must be a scalar or have shape ({batch},), got {value.shape}")
  if (t < 0).any():
    raise ValueError(f"sampling.temperature must be >= 0, got {t.tolist()}")
  if (k < 0).any():
    raise ValueError(f"sampling.top_k must be >= 0 (0 = off), got {k.tolist()}")
  if ((p <= 0) | (p > 1)).any():
    raise ValueError(f"sampling.top_p must be in (0, 1], got {p.tolist()}")
  return Sampling.create(t, k, p, batch=batch), key


def generate(model: Model, prompts, max_new_tokens: int = 64, sampling: Sampling | None = None,
             key: jax.Array | None = None, *, lengths=None,
             stop_tokens: Sequence[int] | None = None) -> ar.GenerateOutput:
  """Autoregressive generation; greedy unless `sampling` is given.

  Args:
    prompts: a list of token-id lists (ragged), or an int array [B, L] with `lengths`.
    max_new_tokens: budget per row; traced, so nearby budgets share one compiled program.
    sampling: `jaxdec.Sampling.create(temperature=..., top_k=..., top_p=...)`, scalars or
      per-row values; rows with temperature 0 are greedy.
    key: PRNG key, required with `sampling`; token (row, position) uses
      fold_in(fold_in(key, row), position).
    stop_tokens: ids that end a row (default: the model's EOS ids; () disables stopping).

  Returns:
    GenerateOutput: `tokens` i32[B, max_new_tokens] (generated tokens only, padded),
    `lengths` i32[B] (a final stop token included), `stats` (`nfe`, `steps`).
  """
  _check_model(model)
  prompt, prompt_lengths = prepare_prompts(prompts, lengths, model.config.vocab_size)
  budget = _check_budget("max_new_tokens", max_new_tokens, prompt_lengths,
                         model.config.max_position_embeddings)
  sampling, key = _sampling(sampling, key, prompt.shape[0])
  stops = _stop_tokens(model, stop_tokens)
  prompt, prompt_lengths = _place(model, prompt, prompt_lengths)
  out = _generate_jit(model, prompt, prompt_lengths, np.int32(budget), key, stops, sampling,
                      buffer_len=_bucket(budget))
  return out.replace(tokens=out.tokens[:, :budget])


# ---- speculative decoding ------------------------------------------------------------------------

@functools.partial(jax.jit, static_argnames=("buffer_len",))
def _speculative_jit(model, prompt, prompt_lengths, max_new_tokens, key, stop_tokens, sampling,
                     drafter, verifier, *, buffer_len):
  pad_id = model.config.pad_token_id if model.config.pad_token_id is not None else 0
  return spec.speculative_generate(model.params, prompt, prompt_lengths, max_new_tokens, key,
                                   stop_tokens, config=model.config, drafter=drafter,
                                   verifier=verifier, buffer_len=buffer_len, sampling=sampling,
                                   pad_id=pad_id)


_DRAFTERS = (spec.DraftModel, spec.PromptLookup, spec.AdaPLD)
_VERIFIERS = (spec.Greedy, spec.Exact, spec.Truncation, spec.Collaborative)


def _check_drafter(model: Model, drafter, verifier, prompt_lengths: np.ndarray, budget: int) -> None:
  if not isinstance(drafter, _DRAFTERS) and not all(
      hasattr(drafter, a) for a in ("tree", "init", "propose", "check")):
    raise TypeError(f"drafter must be one of {[d.__name__ for d in _DRAFTERS]} or implement the "
                    f"Drafter protocol, got {type(drafter).__name__}")
  if not callable(verifier):
    raise TypeError(f"verifier must be one of {[v.__name__ for v in _VERIFIERS]}, got "
                    f"{type(verifier).__name__}")
  drafter.check(model.config)
  if isinstance(drafter, spec.DraftModel):
    _check_budget("max_new_tokens + num_tokens", budget + drafter.num_tokens + 1, prompt_lengths,
                  drafter.model.config.max_position_embeddings)
  if not drafter.tree.is_chain and isinstance(verifier, spec.Collaborative):
    raise ValueError("Collaborative verification needs a chain drafter, got a tree of "
                     f"{drafter.tree.size} nodes")


def speculative_generate(model: Model, prompts, drafter, verifier=None, max_new_tokens: int = 64,
                         sampling: Sampling | None = None, key: jax.Array | None = None, *,
                         lengths=None, stop_tokens: Sequence[int] | None = None) -> ar.GenerateOutput:
  """Speculative decoding: `drafter` proposes, the target verifies in one forward per step.

  Args:
    drafter: `jaxdec.spec.DraftModel(draft_model, num_tokens)`, `PromptLookup(max_ngram,
      num_tokens)`, `AdaPLD(...)`, or any object implementing `jaxdec.spec.Drafter`.
    verifier: `Greedy()` (default without sampling), `Exact()` (default with sampling; lossless
      in distribution), or the lossy `Truncation(top_k, top_p)` / `Collaborative(weight,
      max_overshoot)`, which change the output distribution.
    Other arguments as `generate`.

  Returns:
    GenerateOutput like `generate`; `stats` adds per-row `acceptance_length` (tokens per target
    forward), `target_forwards`, `draft_forwards` and `accepted` (per step).
  """
  _check_model(model)
  prompt, prompt_lengths = prepare_prompts(prompts, lengths, model.config.vocab_size)
  budget = _check_budget("max_new_tokens", max_new_tokens, prompt_lengths,
                         model.config.max_position_embeddings)
  sampling, key = _sampling(sampling, key, prompt.shape[0])
  if verifier is None:
    verifier = spec.Greedy() if sampling is None else spec.Exact()
  _check_drafter(model, drafter, verifier, prompt_lengths, budget)
  stops = _stop_tokens(model, stop_tokens)
  prompt, prompt_lengths = _place(model, prompt, prompt_lengths)
  out = _speculative_jit(model, prompt, prompt_lengths, np.int32(budget), key, stops, sampling,
                         drafter, verifier, buffer_len=_bucket(budget))
  return out.replace(tokens=out.tokens[:, :budget])


# ---- diffusion -----------------------------------------------------------------------------------

from jaxdec import diffusion  # noqa: E402  (imported here to keep this section self-contained)


@functools.partial(jax.jit, static_argnames=("gen_length", "block_length", "cache", "eos"))
def _diffusion_jit(model, prompt, prompt_lengths, steps, scheduler, temperature, cfg_scale, key,
                   stop_tokens, *, gen_length, block_length, cache, eos):
  return diffusion.diffusion_generate(
      model.params, prompt, prompt_lengths, key, config=model.config, gen_length=gen_length,
      block_length=block_length, steps=steps, scheduler=scheduler, cache=cache,
      temperature=temperature, cfg_scale=cfg_scale, stop_tokens=stop_tokens, eos=eos)


def _positive_int(name: str, value) -> int:
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
    raise ValueError(f"{name} must be a positive int, got {value!r}")
  return int(value)


def _check_diffusion_model(model: Model, cache) -> None:
  config = model.config
  if config.causal:
    raise ValueError("diffusion_generate needs a bidirectional masked-diffusion model (LLaDA, "
                     "Dream, zoo:pycode-dlm); this model is causal: use jaxdec.generate")
  if config.mask_token_id is None:
    raise ValueError("diffusion_generate needs a model with a mask token; model.config."
                     "mask_token_id is None")
  if config.sliding_window is not None:
    raise ValueError(f"diffusion_generate does not support sliding-window attention "
                     f"(sliding_window={config.sliding_window})")
  if cache is not None and not isinstance(cache, diffusion.caches.CACHES):
    raise TypeError(f"cache must be None, jaxdec.diffusion.PrefixCache() or DualCache(), got "
                    f"{type(cache).__name__}")


def _eos_flags(model: Model, logits_eos_inf: bool, confidence_eos_eot_inf: bool, eos_token_id,
               eot_token_id) -> diffusion.EosFlags:
  if not (logits_eos_inf or confidence_eos_eot_inf):
    return diffusion.EosFlags()
  ids = model.config.eos_token_ids
  eos = eos_token_id if eos_token_id is not None else (ids[0] if ids else None)
  eot = eot_token_id if eot_token_id is not None else (ids[1] if len(ids) > 1 else eos)
  if eos is None:
    raise ValueError("logits_eos_inf / confidence_eos_eot_inf need an EOS id: the model has no "
                     "eos_token_ids, pass eos_token_id=")
  _check_ids(np.array([eos, eot]), model.config.vocab_size, "eos_token_id / eot_token_id")
  return diffusion.EosFlags(bool(logits_eos_inf), bool(confidence_eos_eot_inf), int(eos), int(eot))


def diffusion_generate(model: Model, prompts, gen_length: int = 64, block_length: int = 32,
                       steps: int = 64, scheduler=None, cache=None, temperature=0.0,
                       key: jax.Array | None = None, *, lengths=None, cfg_scale: float = 0.0,
                       logits_eos_inf: bool = False, confidence_eos_eot_inf: bool = False,
                       eos_token_id: int | None = None, eot_token_id: int | None = None,
                       stop_tokens: Sequence[int] | None = None) -> diffusion.DiffusionOutput:
  """Masked-diffusion decoding (LLaDA / Dream samplers, Fast-dLLM schedulers and caches).

  Args:
    prompts: a list of token-id lists (ragged), or an int array [B, L] with `lengths`; prompts
      may not contain the mask token.
    gen_length: tokens generated per row; a multiple of block_length (both static).
    steps: forwards of the step-counting schedulers, a multiple of gen_length // block_length;
      traced. Threshold rules ignore it (each block runs until no mask is left).
    scheduler: `jaxdec.diffusion.FixedSteps(remasking)` (LLaDA; the default), `Dream(alg)` (the
      default for shifted models), `Threshold(tau)`, `Factor(f)`, `Frechet(delta)`; their values
      (scalars, or one per row) are traced, so sweeping them does not recompile.
    cache: None (exact), `PrefixCache()` or `DualCache()` (Fast-dLLM; approximate).
    temperature: >= 0, scalar or per row; > 0 needs `key` (random remasking needs one too).
    cfg_scale: LLaDA's classifier-free guidance weight (0 = off; needs cache=None).
    logits_eos_inf, confidence_eos_eot_inf: LLaDA's EOS flags; the ids default to the model's
      first and second EOS ids (`eos_token_id`, `eot_token_id` override them).
    stop_tokens: ids that end `lengths` (default: the model's EOS ids; decoding never stops early).

  Returns:
    DiffusionOutput: `tokens` i32[B, gen_length], `lengths` i32[B], `stats` (`nfe` per row,
    `tokens_per_forward` per row, `forwards`).
  """
  _check_model(model)
  _check_diffusion_model(model, cache)
  config = model.config
  gen_length = _positive_int("gen_length", gen_length)
  block_length = _positive_int("block_length", block_length)
  steps = _positive_int("steps", steps)
  if gen_length % block_length:
    raise ValueError(f"gen_length={gen_length} is not a multiple of block_length={block_length}")
  num_blocks = gen_length // block_length
  if steps % num_blocks:
    raise ValueError(f"steps={steps} is not divisible by the number of blocks "
                     f"gen_length // block_length = {num_blocks}")
  prompt, prompt_lengths = prepare_prompts(prompts, lengths, config.vocab_size)
  real = np.arange(prompt.shape[1])[None, :] < prompt_lengths[:, None]
  if (real & (prompt == config.mask_token_id)).any():
    raise ValueError(f"prompts contain the mask token id {config.mask_token_id}")
  _check_budget("gen_length", gen_length, prompt_lengths, config.max_position_embeddings)

  if scheduler is None:
    scheduler = diffusion.Dream() if config.shifted_logits else diffusion.FixedSteps()
  if not isinstance(scheduler, diffusion.schedulers.SCHEDULERS):
    raise TypeError(f"scheduler must be one of "
                    f"{[s.__name__ for s in diffusion.schedulers.SCHEDULERS]}, got "
                    f"{type(scheduler).__name__}")
  scheduler.check()
  batch = prompt.shape[0]
  scheduler = jax.tree.map(lambda v: np.asarray(v, np.float32), scheduler,
                           is_leaf=lambda v: isinstance(v, (list, tuple)))
  for value in jax.tree.leaves(scheduler):
    if value.shape not in ((), (batch,)):
      raise ValueError(f"{type(scheduler).__name__} values must be scalars or have shape "
                       f"({batch},), got shape {value.shape}")
  t = np.asarray(temperature, np.float64)
  if t.shape not in ((), (batch,)) or not np.isfinite(t).all() or (t < 0).any():
    raise ValueError(f"temperature must be a finite value >= 0, scalar or of shape ({batch},), "
                     f"got {temperature!r}")
  needs_key = (t > 0).any() or getattr(scheduler, "remasking", None) == "random"
  if needs_key and key is None:
    raise ValueError("temperature > 0 or random remasking needs a PRNG key: pass "
                     "key=jax.random.key(seed)")
  cfg = float(cfg_scale)
  if not np.isfinite(cfg) or cfg < 0:
    raise ValueError(f"cfg_scale must be a finite value >= 0, got {cfg_scale!r}")
  if cfg > 0 and cache is not None:
    raise ValueError("classifier-free guidance (cfg_scale > 0) needs cache=None")
  eos = _eos_flags(model, logits_eos_inf, confidence_eos_eot_inf, eos_token_id, eot_token_id)
  stops = _stop_tokens(model, stop_tokens)
  prompt, prompt_lengths = _place(model, prompt, prompt_lengths)
  return _diffusion_jit(model, prompt, prompt_lengths, np.int32(steps), scheduler,
                        np.broadcast_to(t.astype(np.float32), (batch,)),
                        np.float32(cfg) if cfg > 0 else None, key, stops, gen_length=gen_length,
                        block_length=block_length, cache=cache, eos=eos)
