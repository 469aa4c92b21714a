"""The host side of `jaxdec.diffusion_generate`: its arguments validated (each in one place, a
ValueError / TypeError naming it) and packed as a `decoding.Job`, the defaults of the plug-ins
chosen, and the jittable `run` the job calls."""

from __future__ import annotations

import numpy as np

from jaxdec import decoding
from jaxdec.controls import Controls
from jaxdec.decoding import DecodeOutput, Job
from jaxdec.diffusion.caches import DiffusionCache, NoCache
from jaxdec.diffusion.confidence import Confidence
from jaxdec.diffusion.dream import Dream
from jaxdec.diffusion.llada import FixedSteps
from jaxdec.diffusion.proposals import EosFlags
from jaxdec.diffusion.sampler import diffusion_generate
from jaxdec.diffusion.schedulers import Scheduler
from jaxdec.model import Model


def run(model: Model, prompt, prompt_lengths, temperature, scheduler, steps, cache, cfg_scale,
        key, stop_tokens, *, controls: Controls, **static) -> DecodeOutput:
  """`diffusion_generate` for a loaded model (the `Job.run` of `prepare`)."""
  return diffusion_generate(model.params, prompt, prompt_lengths, key, config=model.config,
                            steps=steps, scheduler=scheduler, cache=cache,
                            temperature=temperature, cfg_scale=cfg_scale,
                            stop_tokens=stop_tokens, controls=controls, **static)


def check_lengths(model: Model, gen_length, block_length, steps) -> tuple[int, int, int]:
  """The model and the static lengths checked: (gen_length, block_length, steps) as ints."""
  decoding.check_model(model, causal=False)
  config = model.config
  if config.tokens.mask is None:
    raise ValueError("diffusion_generate needs a model with a mask token; model.config."
                     "tokens.mask is None")
  if config.sliding is not None:
    raise ValueError(f"diffusion_generate does not support sliding-window attention "
                     f"(sliding={config.sliding})")
  gen_length = decoding.positive_int("gen_length", gen_length)
  block_length = decoding.positive_int("block_length", block_length)
  steps = decoding.positive_int("steps", steps)
  if gen_length % block_length:
    raise ValueError(f"gen_length={gen_length} is not a multiple of block_length={block_length}")
  num_blocks = gen_length // block_length
  if steps % num_blocks:
    raise ValueError(f"steps={steps} is not divisible by the number of blocks "
                     f"gen_length // block_length = {num_blocks}")
  return gen_length, block_length, steps


def check_prompts(model: Model, prompts, lengths, gen_length: int):
  """Validated prompts: no mask token among them, and room for `gen_length` after each."""
  config = model.config
  prompt, prompt_lengths = decoding.prepare_prompts(prompts, lengths, config.vocab_size)
  real = np.arange(prompt.shape[1])[None, :] < prompt_lengths[:, None]
  if (real & (prompt == config.tokens.mask)).any():
    raise ValueError(f"prompts contain the mask token id {config.tokens.mask}")
  decoding.check_budget("gen_length", gen_length, prompt_lengths, config.max_position_embeddings)
  return prompt, prompt_lengths


def eos_flags(model: Model, logits_eos_inf: bool, confidence_eos_eot_inf: bool, eos_token_id,
              eot_token_id) -> EosFlags:
  """LLaDA's EOS flags; the ids default to the model's first and second EOS ids."""
  if not (logits_eos_inf or confidence_eos_eot_inf):
    return EosFlags()
  ids = model.config.tokens.eos
  eos = eos_token_id if eos_token_id is not None else (ids[0] if ids else None)
  eot = eot_token_id if eot_token_id is not None else (ids[1] if len(ids) > 1 else eos)
  if eos is None:
    raise ValueError("logits_eos_inf / confidence_eos_eot_inf need an EOS id: the model has no "
                     "EOS ids (tokens.eos), pass eos_token_id=")
  decoding.check_ids(np.array([eos, eot]), model.config.vocab_size, "eos_token_id / eot_token_id")
  return EosFlags(bool(logits_eos_inf), bool(confidence_eos_eot_inf), int(eos), int(eot))


def parts(model: Model, scheduler, cache, batch: int, guided: bool):
  """The scheduler (default: `Dream()` for shifted models, else `FixedSteps()`) and the cache
  (default `NoCache()`), checked against their protocols and this call."""
  if scheduler is None:
    scheduler = Dream() if model.config.embeddings.shifted_logits else FixedSteps()
  cache = NoCache() if cache is None else cache
  decoding.check_part(scheduler, Scheduler, "scheduler")
  decoding.check_part(cache, DiffusionCache, "cache")
  decoding.check_part(scheduler.confidence, Confidence, "scheduler.confidence", pytree=False)
  scheduler.check(batch)
  cache.check(guided)
  return scheduler, cache


def prepare(model: Model, prompts, gen_length=64, block_length=32, steps=64, scheduler=None,
            cache=None, temperature=0.0, key=None, *, lengths=None, cfg_scale=0.0,
            logits_eos_inf=False, confidence_eos_eot_inf=False, eos_token_id=None,
            eot_token_id=None, stop_tokens=None, stop_early=False,
            visible_suffix=None) -> Job:
  """`jaxdec.diffusion_generate`'s arguments (but the controls) validated, as a `Job`."""
  gen_length, block_length, steps = check_lengths(model, gen_length, block_length, steps)
  prompt, prompt_lengths = check_prompts(model, prompts, lengths, gen_length)
  batch = prompt.shape[0]
  cfg = decoding.finite_values("cfg_scale", cfg_scale, 1, 0.0)
  scheduler, cache = parts(model, scheduler, cache, batch, guided=cfg > 0)
  t = decoding.finite_values("temperature", temperature, batch, 0.0)
  # A key with temperature 0 is allowed: it is a sweep's greedy end (one compiled program).
  key = decoding.check_key(key, needed=bool((t > 0).any() or scheduler.confidence.needs_key),
                           what="temperature > 0 or a random confidence")
  eos = eos_flags(model, logits_eos_inf, confidence_eos_eot_inf, eos_token_id, eot_token_id)
  stops = decoding.stop_tokens(model.config, stop_tokens)
  static = (("gen_length", gen_length), ("block_length", block_length), ("eos", eos),
            ("stop_early", bool(stop_early)), ("visible_suffix", visible_suffix))
  return Job(model, run, (prompt, prompt_lengths, np.broadcast_to(t, (batch,)), scheduler),
             (np.int32(steps), cache, cfg if cfg > 0 else None, key, stops), static=static,
             parts=decoding.part_types(scheduler, scheduler.confidence, cache))
