"""The diffusion sampler: one `lax.while_loop` over denoising steps, traceable under jit.

Row b's canvas is prompt ++ [MASK] * gen_length, right-padded to a static width (padding is
hidden from attention). The generated region is cut into semi-autoregressive blocks; every
step runs one forward, proposes a token and a confidence for each masked position of the row's
current block, and the scheduler picks which of them to commit. Rows advance independently
(their own block, step and forward count), so a ragged batch gives each row what it would get
alone. Budgets (`steps`, thresholds, temperature) are traced; shapes are static.
"""

from __future__ import annotations

from typing import Protocol

import jax
import jax.numpy as jnp
from flax import struct

from jaxdec.diffusion.caches import CACHES, slot_order
from jaxdec.diffusion.proposals import EosFlags, position_keys, propose
from jaxdec.diffusion.schedulers import FixedSteps, Scheduler, StepInfo, rank_confidence
from jaxdec.model import KVCache, ModelConfig, decode_hidden, embed, unembed


@struct.dataclass
class DiffusionOutput:
  """tokens i32[B, gen_length]: the generated region (never cut); lengths i32[B]: tokens up to
  and including the first stop token (gen_length if none); stats: `nfe` i32[B] forwards used by
  each row, `tokens_per_forward` f32[B] = gen_length / nfe, `forwards` i32[] batched forwards."""

  tokens: jax.Array
  lengths: jax.Array
  stats: dict


class Denoiser(Protocol):
  """What the sampler needs from a model: hidden states for tokens at positions under a block
  visibility mask bool[B, T, T] (with an optional KVCache, as `jaxdec.model.forward`), and
  logits f32[B, N, V] from chosen hidden states. Tests plug in hand-built logits this way."""

  mask_token_id: int
  shifted_logits: bool

  def hidden(self, tokens: jax.Array, positions: jax.Array, cache: KVCache | None,
             mask: jax.Array) -> tuple[jax.Array, KVCache | None]: ...

  def logits(self, hidden: jax.Array) -> jax.Array: ...

  def init_cache(self, batch: int, length: int) -> KVCache: ...


@struct.dataclass
class ModelDenoiser:
  """A jaxdec decoder as a Denoiser (only the window's logits are projected to the vocabulary)."""

  params: dict
  config: ModelConfig = struct.field(pytree_node=False)

  @property
  def mask_token_id(self) -> int:
    return self.config.mask_token_id

  @property
  def shifted_logits(self) -> bool:
    return self.config.shifted_logits

  def hidden(self, tokens, positions, cache, mask):
    h, _, cache = decode_hidden(self.params, embed(self.params, tokens), positions, cache,
                                config=self.config, mask=mask)
    return h, cache

  def logits(self, hidden):
    return unembed(self.params, hidden, self.config)

  def init_cache(self, batch, length):
    return KVCache.init(self.config, batch, length, dtype=self.params["embed"].dtype)


@struct.dataclass
class _State:
  x: jax.Array  # i32[B, W]: the canvases.
  block: jax.Array  # i32[B]: current block (num_blocks = done).
  step: jax.Array  # i32[B]: forwards run on the current block.
  block_masks: jax.Array  # i32[B]: masks of the current block when it started.
  nfe: jax.Array  # i32[B]: forwards used by each row.
  forwards: jax.Array  # i32[]: batched forwards run.
  cache: KVCache | None


def _gather(a: jax.Array, index: jax.Array) -> jax.Array:
  """a[B, W, ...] at index i32[B, N] -> [B, N, ...]."""
  index = index.reshape(index.shape + (1,) * (a.ndim - 2))
  return jnp.take_along_axis(a, index, axis=1)


def denoise(denoiser: Denoiser, prompt: jax.Array, prompt_lengths: jax.Array,
            key: jax.Array | None = None, *, gen_length: int, block_length: int,
            steps: jax.Array | int, scheduler: Scheduler | None = None, cache=None,
            temperature: jax.Array | float = 0.0, cfg_scale: jax.Array | float | None = None,
            stop_tokens: jax.Array | None = None, eos: EosFlags = EosFlags(),
            pad_id: int = 0) -> DiffusionOutput:
  """Fill gen_length masks after each prompt; see `diffusion_generate` for the arguments."""
  scheduler = FixedSteps() if scheduler is None else scheduler
  if gen_length % block_length:
    raise ValueError(f"gen_length={gen_length} is not a multiple of block_length={block_length}")
  num_blocks = gen_length // block_length
  if isinstance(steps, int) and (steps < num_blocks or steps % num_blocks):
    raise ValueError(f"steps={steps} is not a positive multiple of the {num_blocks} blocks")
  if cache is not None and not isinstance(cache, CACHES):
    raise TypeError(f"cache must be None, PrefixCache() or DualCache(), got {type(cache).__name__}")
  if cache is not None and cfg_scale is not None:
    raise ValueError("classifier-free guidance runs without a cache (cache=None)")
  if (eos.logits_eos_inf or eos.confidence_eos_eot_inf) and (eos.eos_id is None or eos.eot_id is None):
    raise ValueError(f"the EOS flags need eos_id and eot_id, got {eos}")
  batch, width = prompt.shape
  canvas = width + gen_length
  shift = int(denoiser.shifted_logits)
  mask_id = denoiser.mask_token_id
  confidence = scheduler.confidence
  rows = jnp.arange(batch, dtype=jnp.int32)
  per_block = jnp.asarray(steps, jnp.int32) // num_blocks
  temperature = jnp.broadcast_to(jnp.asarray(temperature, jnp.float32), (batch,))
  stop_tokens = jnp.zeros((0,), jnp.int32) if stop_tokens is None else stop_tokens

  slot = jnp.arange(canvas, dtype=jnp.int32)[None, :]
  lengths = prompt_lengths + gen_length  # i32[B]: real canvas length.
  padded = jnp.pad(prompt, ((0, 0), (0, gen_length)))
  x = jnp.where(slot < prompt_lengths[:, None], padded,
                jnp.where(slot < lengths[:, None], mask_id, pad_id)).astype(jnp.int32)
  positions = jnp.broadcast_to(slot, (batch, canvas))
  full_mask = jnp.broadcast_to((slot < lengths[:, None])[:, None, :], (batch, canvas, canvas))
  offsets = jnp.arange(block_length, dtype=jnp.int32)[None, :]

  def full_logits(x, start):
    """No cache: the whole canvas, logits of the block's window only."""
    index = start[:, None] - shift + offsets
    if cfg_scale is None:
      h, _ = denoiser.hidden(x, positions, None, full_mask)
      return denoiser.logits(_gather(h, index))
    # LLaDA's unsupervised CFG: the unconditional canvas masks the prompt.
    blank = jnp.where(slot < prompt_lengths[:, None], mask_id, x)
    two = lambda a: jnp.concatenate([a, a])
    h, _ = denoiser.hidden(jnp.concatenate([x, blank]), two(positions), None, two(full_mask))
    cond, uncond = jnp.split(denoiser.logits(_gather(h, two(index))), 2)
    return uncond + (jnp.asarray(cfg_scale, jnp.float32) + 1.0) * (cond - uncond)

  def window(start):
    """(first query position i32[B], real window length i32[B]) of the cached forwards."""
    first = start - shift
    size = cache.window(block_length, gen_length, shift)
    return first, jnp.minimum(size, lengths - first)

  def refresh(s, start, active):
    first, real = window(start)
    order = slot_order(first, real, lengths, canvas)
    h, fresh = denoiser.hidden(jnp.take_along_axis(s.x, order, axis=1), order,
                               denoiser.init_cache(batch, canvas), full_mask)
    logits = denoiser.logits(_gather(h, (lengths - real)[:, None] + offsets))
    go = active & (s.step == 0)
    pick = lambda new, old: jnp.where(go.reshape((1, batch, 1, 1, 1)), new, old)
    kept = KVCache(k=pick(fresh.k, s.cache.k), v=pick(fresh.v, s.cache.v),
                   length=jnp.where(go, lengths - real, s.cache.length))
    return logits, kept, go

  def cached(s, start, active):
    first, real = window(start)
    size = cache.window(block_length, gen_length, shift)
    index = first[:, None] + jnp.arange(size, dtype=jnp.int32)[None, :]
    tokens = jnp.take_along_axis(s.x, jnp.minimum(index, canvas - 1), axis=1)
    visible = jnp.arange(size, dtype=jnp.int32)[None, None, :] < real[:, None, None]
    h, out = denoiser.hidden(tokens, index, s.cache, jnp.broadcast_to(visible, (batch, size, size)))
    return denoiser.logits(h[:, :block_length]), out.with_length(s.cache.length), active

  def body(s: _State) -> _State:
    active = s.block < num_blocks
    start = prompt_lengths + jnp.minimum(s.block, num_blocks - 1) * block_length
    if cache is None:
      logits, new_cache, advance = full_logits(s.x, start), None, active
    else:
      logits, new_cache, advance = jax.lax.cond(jnp.any(active & (s.step == 0)), refresh, cached,
                                                s, start, active)
    place = start[:, None] + offsets  # i32[B, N]: canvas positions of the block.
    block = jnp.take_along_axis(s.x, place, axis=1)
    candidates = block == mask_id
    keys = None if key is None else position_keys(key, rows, place, s.nfe)
    x0, conf = propose(logits, temperature, keys, confidence=confidence,
                       tempered=scheduler.tempered, mask_id=mask_id, eos=eos)
    masked = jnp.sum(candidates, axis=1, dtype=jnp.int32)
    block_masks = jnp.where(s.step == 0, masked, s.block_masks)
    info = StepInfo(step=s.step, steps=per_block, block_masks=block_masks, masked=masked)
    commit = scheduler.select(rank_confidence(conf, candidates), info)
    commit &= candidates & advance[:, None]
    block = jnp.where(commit, x0, block)
    step = s.step + advance.astype(jnp.int32)
    if scheduler.fills_block:
      finished = advance & ~jnp.any(block == mask_id, axis=1)
    else:
      finished = advance & (step >= per_block)
    return _State(x=s.x.at[rows[:, None], place].set(block),
                  block=s.block + finished.astype(jnp.int32),
                  step=jnp.where(finished, 0, step), block_masks=block_masks,
                  nfe=s.nfe + advance.astype(jnp.int32), forwards=s.forwards + 1, cache=new_cache)

  zeros = jnp.zeros((batch,), jnp.int32)
  state = _State(x=x, block=zeros, step=zeros, block_masks=zeros, nfe=zeros,
                 forwards=jnp.zeros((), jnp.int32),
                 cache=None if cache is None else denoiser.init_cache(batch, canvas))
  state = jax.lax.while_loop(lambda s: jnp.any(s.block < num_blocks), body, state)

  tokens = jnp.take_along_axis(
      state.x, prompt_lengths[:, None] + jnp.arange(gen_length, dtype=jnp.int32)[None, :], axis=1)
  stops = jnp.isin(tokens, stop_tokens)
  out_lengths = jnp.where(jnp.any(stops, axis=1), jnp.argmax(stops, axis=1) + 1, gen_length)
  stats = {"nfe": state.nfe, "forwards": state.forwards,
           "tokens_per_forward": jnp.float32(gen_length) / state.nfe.astype(jnp.float32)}
  return DiffusionOutput(tokens=tokens, lengths=out_lengths.astype(jnp.int32), stats=stats)


def diffusion_generate(params: dict, prompt: jax.Array, prompt_lengths: jax.Array,
                       key: jax.Array | None = None, *, config: ModelConfig, gen_length: int,
                       block_length: int, steps: jax.Array | int, scheduler: Scheduler | None = None,
                       cache=None, temperature: jax.Array | float = 0.0,
                       cfg_scale: jax.Array | float | None = None,
                       stop_tokens: jax.Array | None = None,
                       eos: EosFlags = EosFlags()) -> DiffusionOutput:
  """Masked-diffusion decoding with a bidirectional jaxdec model (LLaDA, Dream, pycode-dlm).

  Args:
    prompt: i32[B, P] right-padded prompts; prompt_lengths: i32[B], each >= 1.
    key: PRNG key, or None for greedy decoding (temperature is then ignored).
    gen_length, block_length: static; gen_length is a multiple of block_length.
    steps: total forwards of the step-counting schedulers (FixedSteps, Dream), split evenly over
      the blocks; traced. Threshold rules run each block until it has no mask left.
    scheduler: FixedSteps() (LLaDA, the default), Dream(alg), Threshold(tau), Factor(f),
      Frechet(delta); on a shifted model (Dream) position i is predicted by output i - 1.
    cache: None (exact), PrefixCache() or DualCache() (Fast-dLLM, approximate).
    temperature: f32 scalar or [B]; LLaDA-family rows draw with Gumbel noise, Dream rows from
      the tempered softmax.
    cfg_scale: LLaDA's classifier-free guidance weight w (None = off, a static switch; the value
      is traced): logits = u + (w + 1)(c - u), u from the canvas with the prompt masked.
    stop_tokens: i32[E]: `lengths` cuts after the first of them (decoding never stops early).
    eos: LLaDA's EOS flags (`EosFlags`).
  """
  if config.causal:
    raise ValueError("the diffusion sampler needs a bidirectional model; this config is causal "
                     "(an autoregressive model: use jaxdec.generate)")
  if config.mask_token_id is None:
    raise ValueError("the diffusion sampler needs a model with a mask_token_id")
  pad_id = config.pad_token_id if config.pad_token_id is not None else 0
  return denoise(ModelDenoiser(params, config), prompt, prompt_lengths, key,
                 gen_length=gen_length, block_length=block_length, steps=steps,
                 scheduler=scheduler, cache=cache, temperature=temperature, cfg_scale=cfg_scale,
                 stop_tokens=stop_tokens, eos=eos, pad_id=pad_id)
