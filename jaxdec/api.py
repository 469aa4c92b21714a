"""The public, jitted entry points: the only module that applies `jax.jit` and places inputs.

Each entry point validates on the host (`jaxdec.decoding` holds the validators, plug-in parts
check themselves through their protocols' `check`), so bad input raises a ValueError /
TypeError that names the problem instead of failing deep inside XLA. The un-jitted functions
(`jaxdec.ar`, `jaxdec.spec`, `jaxdec.diffusion`, `jaxdec.model.forward`) stay pure for callers
who want them inside their own jit.
"""

from __future__ import annotations

import functools
from typing import Sequence

import jax
import numpy as np

from jaxdec import ar, decoding, diffusion, hpd, sharding, spec, streaming
from jaxdec.controls import Controls
from jaxdec.decoding import DecodeOutput
from jaxdec.model import Model
from jaxdec.model import forward as _forward
from jaxdec.spec import kforcing
from jaxdec.sampling import Sampling


def _place(model: Model, *inputs):
  """Per-row inputs (prompts first; lengths, per-row settings) on the model's mesh, split over
  its data axis and padded to a multiple of it; unchanged without a mesh. With several
  processes, every process passes the same full batch (see `sharding.place_rows`)."""
  return sharding.place_rows(sharding.model_mesh(model), *inputs)


def _gather(model: Model, out, rows: int):
  """The outputs of the `rows` real rows, in full on every process (`sharding.gather_rows`)."""
  return sharding.gather_rows(sharding.model_mesh(model), out, rows)


@jax.jit
def _forward_jit(model: Model, tokens: jax.Array) -> jax.Array:
  positions = decoding.positions(*tokens.shape)
  return _forward(model.params, tokens, positions, config=model.config)[0]


def forward(model: Model, tokens) -> jax.Array:
  """tokens i32[B, L] -> logits f32[B, L, V] (no cache; attention as the model's config says)."""
  decoding.check_model(model)
  tokens = np.asarray(tokens)
  if tokens.ndim != 2 or not np.issubdtype(tokens.dtype, np.integer):
    raise TypeError(f"tokens must be an int array [B, L], got {tokens.dtype} with shape {tokens.shape}")
  if tokens.shape[1] < 1:
    raise ValueError("tokens is empty: need at least one token per row")
  if tokens.shape[1] > model.config.max_position_embeddings:
    raise ValueError(f"sequence length {tokens.shape[1]} exceeds the model's maximum of "
                     f"{model.config.max_position_embeddings} positions")
  decoding.check_ids(tokens, model.config.vocab_size, "tokens")
  (placed,) = _place(model, tokens.astype(np.int32))
  return _gather(model, _forward_jit(model, placed), tokens.shape[0])


def _ar_inputs(model, prompts, lengths, max_new_tokens, sampling, key, stop_tokens):
  """Validated (model, prompt, prompt_lengths, budget, sampling, key, stops) for the AR-style
  loops; the model as they run it (`decoding.ar_view`)."""
  model = decoding.ar_view(model)
  prompt, prompt_lengths = decoding.prepare_prompts(prompts, lengths, model.config.vocab_size)
  budget = decoding.check_budget("max_new_tokens", max_new_tokens, prompt_lengths,
                                 model.config.max_position_embeddings)
  sampling = decoding.check_sampling(sampling, prompt.shape[0])
  key = decoding.check_key(
      key, needed=sampling is not None, what="sampling",
      unused="sampling is None, which decodes greedily (no randomness); pass "
             "sampling=jaxdec.Sampling.create(temperature=...)")
  stops = decoding.stop_tokens(model.config, stop_tokens)
  return model, prompt, prompt_lengths, budget, sampling, key, stops


def _controls(model: Model, batch: int, **controls) -> Controls:
  return decoding.check_controls(model.config.vocab_size, batch, **controls)


def _with_hook(controls: Controls, stream: bool, call_id) -> Controls:
  return controls.replace(on_step=streaming.hook(call_id)) if stream else controls


@functools.partial(jax.jit, static_argnames=("buffer_len", "logprobs", "stream"))
def _generate_jit(model, prompt, prompt_lengths, sampling, max_new_tokens, key, stop_tokens,
                  rules, stops, call_id, *, buffer_len, logprobs, stream):
  controls = _with_hook(Controls(rules=rules, stops=stops, logprobs=logprobs), stream, call_id)
  return ar.generate(model.params, prompt, prompt_lengths, max_new_tokens, key, stop_tokens,
                     config=model.config, buffer_len=buffer_len, sampling=sampling,
                     pad_id=decoding.pad_id(model.config), controls=controls)


def _run(model: Model, jitted, per_row: tuple, args: tuple, controls: Controls, stream, *,
         cut: int | None = None, first=None, **static) -> DecodeOutput:
  """The shell every entry point shares after validation: place the per-row inputs (prompts
  first) and the controls' rules on the model's mesh, run the jitted loop while listening for a
  stream, gather the real rows, and cut the outputs to the budget `cut`. The jitted function
  takes (`first`, else the model; *per_row; *args; rules, stop strings, call id)."""
  rows = per_row[0].shape[0]
  *placed, rules = _place(model, *per_row, controls.rules)
  with streaming.listening(stream, rows) as call_id:
    out = jitted(model if first is None else first, *placed, *args, rules, controls.stops, call_id,
                 logprobs=controls.logprobs, stream=stream is not None, **static)
    out = jax.block_until_ready(out)
  out = _gather(model, out, rows)
  return out if cut is None else _cut(out, cut)


def _cut(out: DecodeOutput, budget: int) -> DecodeOutput:
  """Tokens (and log-probabilities) cut from the bucketed buffer to the budget."""
  logprobs = None if out.logprobs is None else out.logprobs[..., :budget]
  return out.replace(tokens=out.tokens[..., :budget], logprobs=logprobs)


def generate(model: Model, prompts, max_new_tokens: int = 64, sampling: Sampling | None = None,
             key: jax.Array | None = None, *, lengths=None,
             stop_tokens: Sequence[int] | None = None, stop_strings: Sequence[str] | None = None,
             tokenizer=None, min_new_tokens=0, repetition_penalty=1.0, logprobs: bool = False,
             stream: streaming.StreamCallback | None = None) -> DecodeOutput:
  """Autoregressive generation; greedy unless `sampling` is given.

  Args:
    prompts: a list of token-id lists (ragged), or an int array [B, L] with `lengths`.
    max_new_tokens: budget per row; traced, so nearby budgets share one compiled program.
    sampling: `jaxdec.Sampling.create(temperature=..., top_k=..., top_p=...)`, scalars or
      per-row values; rows with temperature 0 are greedy.
    key: PRNG key (`jax.random.key(seed)` or a legacy `PRNGKey`), required with `sampling`;
      token (row, position) uses fold_in(fold_in(key, row), position).
    stop_tokens: ids that end a row (default: the model's EOS ids; () disables stopping).
    stop_strings: texts that end a row where they complete (the completing token is kept);
      matched on the generated text only; needs `tokenizer`.
    min_new_tokens: per row or scalar; stop tokens and strings are suppressed before it.
    repetition_penalty: > 0, per row or scalar (1 = off); CTRL's rule, as transformers.
    logprobs: also return each generated token's log-probability under the model's own
      distribution (`out.logprobs` f32[B, max_new_tokens]).
    stream: called on the host with each step's new tokens (a list of one int array per row)
      while the loop runs; the results are the same as without it.
    These controls are traced (per-row values never recompile); see `jaxdec.controls`.

  Returns:
    DecodeOutput: `tokens` i32[B, max_new_tokens] (generated tokens only, padded),
    `lengths` i32[B] (a final stop token included), `stats` (`nfe`, `steps`), `logprobs`.
  """
  model, prompt, prompt_lengths, budget, sampling, key, stops = _ar_inputs(
      model, prompts, lengths, max_new_tokens, sampling, key, stop_tokens)
  controls = _controls(model, prompt.shape[0], min_new_tokens=min_new_tokens,
                       repetition_penalty=repetition_penalty, stop_strings=stop_strings,
                       tokenizer=tokenizer, logprobs=logprobs)
  return _run(model, _generate_jit, (prompt, prompt_lengths, sampling),
              (np.int32(budget), key, stops), controls, stream, cut=budget,
              buffer_len=decoding.bucket(budget))


def part_types(*parts) -> tuple:
  """The plug-ins' classes, a static jit argument: JAX's tree structures of two dataclass
  plug-ins with the same fields compare equal whatever their class (PrefixCache() and
  DualCache(), Threshold(0.9) and Factor(1.0)), so without it one could be served the other's
  compiled program."""
  return tuple(type(p) for p in parts)


@functools.partial(jax.jit, static_argnames=("buffer_len", "parts", "logprobs", "stream"))
def _speculative_jit(model, prompt, prompt_lengths, sampling, max_new_tokens, key, stop_tokens,
                     drafter, verifier, rules, stops, call_id, *, buffer_len, parts, logprobs,
                     stream):
  controls = _with_hook(Controls(rules=rules, stops=stops, logprobs=logprobs), stream, call_id)
  return spec.speculative_generate(model.params, prompt, prompt_lengths, max_new_tokens, key,
                                   stop_tokens, config=model.config, drafter=drafter,
                                   verifier=verifier, buffer_len=buffer_len, sampling=sampling,
                                   pad_id=decoding.pad_id(model.config), controls=controls)


def speculative_generate(model: Model, prompts, drafter, verifier=None, max_new_tokens: int = 64,
                         sampling: Sampling | None = None, key: jax.Array | None = None, *,
                         lengths=None, stop_tokens: Sequence[int] | None = None,
                         stop_strings: Sequence[str] | None = None, tokenizer=None,
                         min_new_tokens=0, repetition_penalty=1.0, logprobs: bool = False,
                         stream: streaming.StreamCallback | None = None) -> DecodeOutput:
  """Speculative decoding: `drafter` proposes, the target verifies in one forward per step.

  Args:
    drafter: a `jaxdec.spec.Drafter`: `DraftModel(draft_model, num_tokens)`,
      `PromptLookup(max_ngram, num_tokens)`, `AdaPLD(...)`, or your own.
    verifier: a `jaxdec.spec.Verifier`: `Greedy()` (default without sampling), `Exact()`
      (default with sampling; lossless in distribution), or the lossy `Truncation(top_k, top_p)`
      / `Collaborative(weight, max_overshoot)`, which change the output distribution.
    Other arguments as `generate`; with the controls, greedy output still equals `generate`'s
    with the same controls, and `Exact()` sampling equals it in distribution (the verifier sees
    the ruled logits).

  Returns:
    DecodeOutput like `generate`; `stats` adds per-row `acceptance_length` (tokens per target
    forward), `target_forwards`, `draft_forwards` and `accepted` (per step).
  """
  model, prompt, prompt_lengths, budget, sampling, key, stops = _ar_inputs(
      model, prompts, lengths, max_new_tokens, sampling, key, stop_tokens)
  controls = _controls(model, prompt.shape[0], min_new_tokens=min_new_tokens,
                       repetition_penalty=repetition_penalty, stop_strings=stop_strings,
                       tokenizer=tokenizer, logprobs=logprobs)
  if verifier is None:
    verifier = spec.Greedy() if sampling is None else spec.Exact()
  decoding.check_part(drafter, spec.Drafter, "drafter")
  decoding.check_part(verifier, spec.Verifier, "verifier")
  drafter.check(model.config)
  for branch in drafter.variants():
    verifier.check(branch.tree, sampling)
  return _run(model, _speculative_jit, (prompt, prompt_lengths, sampling),
              (np.int32(budget), key, stops, drafter, verifier), controls, stream, cut=budget,
              buffer_len=decoding.bucket(budget), parts=part_types(drafter, verifier))


def _ssr_decoding(model, stop_tokens, rules, stops, call_id, logprobs, stream):
  controls = _with_hook(Controls(rules=rules, stops=stops, logprobs=logprobs), stream, call_id)
  return decoding.Decoding(sampling=None, key=None, stop_tokens=stop_tokens, controls=controls,
                           pad_id=decoding.pad_id(model.config))


@functools.partial(jax.jit, static_argnames=("buffer_len", "logprobs", "stream"))
def _ssr_jit(model, prompt, prompt_lengths, max_new_tokens, stop_tokens, ssr, rules, stops,
             call_id, *, buffer_len, logprobs, stream):
  d = _ssr_decoding(model, stop_tokens, rules, stops, call_id, logprobs, stream)
  kw = dict(config=model.config, ssr=ssr, buffer_len=buffer_len)
  reasoned = spec.ssr.ssr_reason(model.params, d, prompt, prompt_lengths, max_new_tokens, **kw)
  return spec.ssr.ssr_answer(model.params, d, reasoned, **kw)


def ssr_inputs(model: Model, prompts, ssr, max_new_tokens: int, lengths=None, stop_tokens=None):
  """Validated (model, prompt, prompt_lengths, budget, stops, rows) for SSR's two phases (host
  arrays, not yet placed on the model's mesh); rows: the real rows."""
  if not isinstance(ssr, spec.SSR):
    raise TypeError(f"ssr must be a jaxdec.spec.SSR (SSR.for_tokenizer(tokenizer, budgets)), "
                    f"got {type(ssr).__name__}")
  model, prompt, prompt_lengths, budget, _, _, stops = _ar_inputs(
      model, prompts, lengths, max_new_tokens, None, None, stop_tokens)
  ssr.check(model.config)
  return model, prompt, prompt_lengths, budget, stops, prompt.shape[0]


def ssr_generate(model: Model, prompts, ssr, max_new_tokens: int = 448, *, lengths=None,
                 stop_tokens: Sequence[int] | None = None,
                 stop_strings: Sequence[str] | None = None, tokenizer=None, min_new_tokens=0,
                 repetition_penalty=1.0, logprobs: bool = False,
                 stream: streaming.StreamCallback | None = None) -> DecodeOutput:
  """SSR for a reasoning model (one that thinks inside `<think>` ... `</think>`): greedy
  decoding whose final answer is drafted from the model's own answers at partial reasoning
  budgets (`ssr`: `jaxdec.spec.SSR.for_tokenizer(tokenizer, budgets)`). The output equals
  `generate`'s greedy output with the same controls (stop strings, min_new_tokens, repetition
  penalty, logprobs, stream: as `generate`), token for token; `max_new_tokens` covers reasoning
  and answer (`jaxdec.spec.ssr`).

  Returns:
    DecodeOutput like `generate`; `stats` as `jaxdec.spec.ssr_generate`'s: `reasoning_length`,
    `answer_length`, `reason_forwards`, `answer_forwards`, `answer_acceptance_length`,
    `partial_answers`, ...
  """
  model, prompt, prompt_lengths, budget, stops, rows = ssr_inputs(
      model, prompts, ssr, max_new_tokens, lengths, stop_tokens)
  controls = _controls(model, rows, min_new_tokens=min_new_tokens,
                       repetition_penalty=repetition_penalty, stop_strings=stop_strings,
                       tokenizer=tokenizer, logprobs=logprobs)
  return _run(model, _ssr_jit, (prompt, prompt_lengths), (np.int32(budget), stops, ssr),
              controls, stream, cut=budget, buffer_len=decoding.bucket(budget))


@functools.partial(jax.jit, static_argnames=("buffer_len", "logprobs", "stream"))
def _push_forward_jit(student, prompt, prompt_lengths, max_new_tokens, key, stop_tokens, rules,
                      stops, call_id, *, buffer_len, logprobs, stream):
  controls = _with_hook(Controls(rules=rules, stops=stops, logprobs=logprobs), stream, call_id)
  return kforcing.push_forward_generate(student, prompt, prompt_lengths, max_new_tokens, key,
                                        stop_tokens, buffer_len=buffer_len,
                                        pad_id=decoding.pad_id(student.model.config),
                                        controls=controls)


def push_forward_generate(student, prompts, max_new_tokens: int = 64, key: jax.Array | None = None,
                          *, lengths=None, stop_tokens: Sequence[int] | None = None,
                          stop_strings: Sequence[str] | None = None, tokenizer=None,
                          min_new_tokens=0, repetition_penalty=1.0, logprobs: bool = False,
                          stream: streaming.StreamCallback | None = None) -> DecodeOutput:
  """K-Forcing's standalone decoding: a `spec.kforcing.PushForward` student (from
  `jaxdec.load_push_forward`) emits its k tokens per forward with no verification. Lossy: the
  output follows the student's joint law, not the teacher's. Greedy (every noise u = 0, each
  token its slot's argmax) without `key`; with `key`, samples at the temperature the student was
  distilled at. Other arguments, the controls included, as `generate` (log-probabilities are
  the student's own).

  Returns:
    DecodeOutput; `stats`: `nfe` (student forwards per row, the prefill included), `steps`,
    `tokens_per_forward`.
  """
  if not isinstance(student, kforcing.PushForward):
    raise TypeError(f"student must be a jaxdec.spec.kforcing.PushForward (jaxdec.load_push_forward"
                    f"(path)), got {type(student).__name__}")
  model = student.model
  decoding.check_model(model, causal=True)
  prompt, prompt_lengths = decoding.prepare_prompts(prompts, lengths, model.config.vocab_size)
  budget = decoding.check_budget("max_new_tokens", max_new_tokens, prompt_lengths,
                                 model.config.max_position_embeddings)
  key = decoding.check_key(key, needed=False, what="sampling")
  stops = decoding.stop_tokens(model.config, stop_tokens)
  controls = _controls(model, prompt.shape[0], min_new_tokens=min_new_tokens,
                       repetition_penalty=repetition_penalty, stop_strings=stop_strings,
                       tokenizer=tokenizer, logprobs=logprobs)
  return _run(model, _push_forward_jit, (prompt, prompt_lengths), (np.int32(budget), key, stops),
              controls, stream, cut=budget, first=student, buffer_len=decoding.bucket(budget))


@functools.partial(jax.jit, static_argnames=("gen_length", "block_length", "eos", "stop_early",
                                             "visible_suffix", "parts", "logprobs", "stream"))
def _diffusion_jit(model, prompt, prompt_lengths, temperature, scheduler, steps, cache, cfg_scale,
                   key, stop_tokens, rules, stops, call_id, *, gen_length, block_length, eos,
                   stop_early, visible_suffix, parts, logprobs, stream):
  controls = _with_hook(Controls(rules=rules, stops=stops, logprobs=logprobs), stream, call_id)
  return diffusion.diffusion_generate(
      model.params, prompt, prompt_lengths, key, config=model.config, gen_length=gen_length,
      block_length=block_length, steps=steps, scheduler=scheduler, cache=cache,
      temperature=temperature, cfg_scale=cfg_scale, stop_tokens=stop_tokens, eos=eos,
      stop_early=stop_early, visible_suffix=visible_suffix, controls=controls)


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
  decoding.check_ids(np.array([eos, eot]), model.config.vocab_size, "eos_token_id / eot_token_id")
  return diffusion.EosFlags(bool(logits_eos_inf), bool(confidence_eos_eot_inf), int(eos), int(eot))


def _diffusion_parts(model: Model, scheduler, cache, batch: int, guided: bool):
  if scheduler is None:
    scheduler = diffusion.Dream() if model.config.shifted_logits else diffusion.FixedSteps()
  cache = diffusion.NoCache() if cache is None else cache
  decoding.check_part(scheduler, diffusion.Scheduler, "scheduler")
  decoding.check_part(cache, diffusion.DiffusionCache, "cache")
  decoding.check_part(scheduler.confidence, diffusion.Confidence, "scheduler.confidence",
                      pytree=False)
  scheduler.check(batch)
  cache.check(guided)
  return scheduler, cache


def _diffusion_lengths(model: Model, gen_length, block_length, steps) -> tuple[int, int, int]:
  """The model and the static lengths checked: (gen_length, block_length, steps) as ints."""
  decoding.check_model(model, causal=False)
  config = model.config
  if config.mask_token_id is None:
    raise ValueError("diffusion_generate needs a model with a mask token; model.config."
                     "mask_token_id is None")
  if config.sliding_window is not None:
    raise ValueError(f"diffusion_generate does not support sliding-window attention "
                     f"(sliding_window={config.sliding_window})")
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


def _diffusion_prompts(model: Model, prompts, lengths, gen_length: int):
  """Validated prompts: no mask token among them, and room for `gen_length` after each."""
  config = model.config
  prompt, prompt_lengths = decoding.prepare_prompts(prompts, lengths, config.vocab_size)
  real = np.arange(prompt.shape[1])[None, :] < prompt_lengths[:, None]
  if (real & (prompt == config.mask_token_id)).any():
    raise ValueError(f"prompts contain the mask token id {config.mask_token_id}")
  decoding.check_budget("gen_length", gen_length, prompt_lengths, config.max_position_embeddings)
  return prompt, prompt_lengths


def diffusion_generate(model: Model, prompts, gen_length: int = 64, block_length: int = 32,
                       steps: int = 64, scheduler=None, cache=None, temperature=0.0,
                       key: jax.Array | None = None, *, lengths=None, cfg_scale: float = 0.0,
                       logits_eos_inf: bool = False, confidence_eos_eot_inf: bool = False,
                       eos_token_id: int | None = None, eot_token_id: int | None = None,
                       stop_tokens: Sequence[int] | None = None,
                       stop_early: bool = False,
                       visible_suffix: int | None = None,
                       stop_strings: Sequence[str] | None = None, tokenizer=None,
                       min_new_tokens=0, repetition_penalty=1.0, logprobs: bool = False,
                       stream: streaming.StreamCallback | None = None) -> DecodeOutput:
  """Masked-diffusion decoding (LLaDA / Dream samplers, Fast-dLLM schedulers and caches).

  Args:
    prompts: a list of token-id lists (ragged), or an int array [B, L] with `lengths`; prompts
      may not contain the mask token.
    gen_length: tokens generated per row; a multiple of block_length (both static).
    steps: forwards of the step-counting schedulers, a multiple of gen_length // block_length;
      traced. Threshold rules ignore it (each block runs until no mask is left).
    scheduler: a `jaxdec.diffusion.Scheduler`: `FixedSteps()` (LLaDA; the default), `Dream()`
      (the default for shifted models), `Threshold(tau)`, `Factor(f)`, `Frechet(delta)`, or your
      own; their values (scalars, or one per row) are traced, so sweeping them does not recompile.
    cache: a `jaxdec.diffusion.DiffusionCache`: None (exact), `PrefixCache()` or `DualCache()`
      (Fast-dLLM; approximate), `PrefillingCache(...)` (long prompts: the dual cache over a few
      chunks of the prompt chosen once, Prefilling-dLLM), or your own.
    temperature: >= 0, scalar or per row; > 0 needs `key` (a random confidence needs one too).
    cfg_scale: LLaDA's classifier-free guidance weight (0 = off; needs cache=None).
    logits_eos_inf, confidence_eos_eot_inf: LLaDA's EOS flags; the ids default to the model's
      first and second EOS ids (`eos_token_id`, `eot_token_id` override them).
    stop_tokens: ids that end `lengths` (default: the model's EOS ids).
    stop_early: end a row once a block it finishes holds a stop token (its later blocks come back
      as pad, no forwards spent on them); off (LLaDA's reference sampler): every block decoded.
    visible_suffix: None (LLaDA, Dream): the model sees the whole canvas, the masks of every
      later block included; k >= 0: only k positions after the active window, the rest hidden
      from attention (0: as block-diffusion models decode). A `BlockCausal` model (block
      diffusion) never sees later blocks whatever this is; block_length must equal its
      block_size.
    stop_strings, tokenizer, min_new_tokens, repetition_penalty, logprobs, stream: the controls
      of `generate`, validated the same way, read for a decoder that fills its canvas out of
      order (`jaxdec.diffusion.sampler`'s docstring): a stop string ends `lengths` where it
      completes; the penalty acts on the prompt's and the committed tokens at every step;
      `out.logprobs` f32[B, gen_length] come from the step that last wrote each token; `stream`
      gets a row's block once it is finished.

  Returns:
    DecodeOutput: `tokens` i32[B, gen_length], `lengths` i32[B], `logprobs` (None unless asked
    for), `stats` (`nfe` per row, `decoded` canvas tokens per row, `tokens_per_forward` =
    decoded / nfe per row, `forwards`, `lookaheads` / `lookahead_sequences`: a scheduler's
    lookahead forwards per row and the sequences they ran).
  """
  gen_length, block_length, steps = _diffusion_lengths(model, gen_length, block_length, steps)
  prompt, prompt_lengths = _diffusion_prompts(model, prompts, lengths, gen_length)
  batch = prompt.shape[0]
  cfg = decoding.finite_values("cfg_scale", cfg_scale, 1, 0.0)
  scheduler, cache = _diffusion_parts(model, scheduler, cache, batch, guided=cfg > 0)
  t = decoding.finite_values("temperature", temperature, batch, 0.0)
  # A key with temperature 0 is allowed: it is a sweep's greedy end (one compiled program).
  key = decoding.check_key(key, needed=bool((t > 0).any() or scheduler.confidence.needs_key),
                           what="temperature > 0 or a random confidence")
  eos = _eos_flags(model, logits_eos_inf, confidence_eos_eot_inf, eos_token_id, eot_token_id)
  stops = decoding.stop_tokens(model.config, stop_tokens)
  controls = _controls(model, batch, min_new_tokens=min_new_tokens, logprobs=logprobs,
                       repetition_penalty=repetition_penalty, stop_strings=stop_strings,
                       tokenizer=tokenizer)
  per_row = (prompt, prompt_lengths, np.broadcast_to(t, (batch,)), scheduler)
  return _run(model, _diffusion_jit, per_row,
              (np.int32(steps), cache, cfg if cfg > 0 else None, key, stops), controls, stream,
              gen_length=gen_length, block_length=block_length, eos=eos,
              stop_early=bool(stop_early), visible_suffix=visible_suffix,
              parts=part_types(scheduler, scheduler.confidence, cache))


@functools.partial(jax.jit, static_argnames=("buffer_len", "logprobs", "stream"))
def _parallel_jit(model, tokens, positions, segments, reads, lengths, ends, max_new_tokens, key,
                  stop_tokens, sampling, rules, stops, call_id, *, buffer_len, logprobs, stream):
  controls = _with_hook(Controls(rules=rules, stops=stops, logprobs=logprobs), stream, call_id)
  return hpd.parallel_generate(model.params, tokens, positions, segments, reads, lengths, ends,
                               max_new_tokens, key, stop_tokens, config=model.config,
                               buffer_len=buffer_len, sampling=sampling,
                               pad_id=decoding.pad_id(model.config), controls=controls)


def parallel_generate(model: Model, context, queries, max_new_tokens: int = 32,
                      sampling: Sampling | None = None, key: jax.Array | None = None, *,
                      stop_tokens: Sequence[int] | None = None, rows: int = 1,
                      stop_strings: Sequence[str] | None = None, tokenizer=None,
                      min_new_tokens=0, repetition_penalty=1.0, logprobs: bool = False,
                      stream: streaming.StreamCallback | None = None) -> DecodeOutput:
  """Hyper-Parallel Decoding: decode many independent queries that continue one shared context
  in one row (`jaxdec.hpd`): the context's K/V are computed once, each query continues the
  context's positions in a segment that sees the context and itself only, and every query
  advances one token per forward until its own stop token or budget.

  Args:
    context: the shared context's token ids; or a list of contexts (documents) stacked in one
      row, each document's queries seeing only its own context.
    queries: token-id lists, each continuing the context (non-empty); with several documents,
      one list of queries per document.
    max_new_tokens: tokens per query at most; the context, the longest query and this must fit
      the model's positions.
    sampling, key: as `generate` (scalars, or one value per query); a query's token at a
      position is drawn with a key of its own, independent of the others.
    stop_tokens: ids that end a query (default: the model's EOS ids; () disables stopping).
    rows: spread the documents over this many rows (each document whole, round robin), a batch
      of packed rows.
    stop_strings, tokenizer, min_new_tokens, repetition_penalty, logprobs: as `generate`, per
      query (values scalar or one per query); a query's repetition penalty sees its context and
      its query as its prompt.
    stream: as `generate`, with one list entry per query (in the order of the output rows).

  Returns:
    DecodeOutput with one row per query (documents' queries one after another): `tokens`
    i32[Q, max_new_tokens], `lengths` i32[Q] (a final stop token included); greedy output
    equals `generate(model, [context + query])` for each query. `stats`: `nfe` (forwards per
    packed row), `tokens_per_forward` (tokens generated per forward in each packed row),
    `forwards_per_query` (forwards each query took part in, the prefill included).
  """
  model = decoding.ar_view(model)
  documents = hpd.documents(context, queries)
  rows = decoding.positive_int("rows", rows)
  budget = decoding.positive_int("max_new_tokens", max_new_tokens)
  if rows > len(documents):
    raise ValueError(f"rows={rows} exceeds the {len(documents)} documents to spread over them")
  hpd.check_documents(documents, model.config, budget)
  flat = [q for _, qs in documents for q in qs]
  sampling = decoding.check_sampling(sampling, len(flat))
  key = decoding.check_key(
      key, needed=sampling is not None, what="sampling",
      unused="sampling is None, which decodes greedily (no randomness); pass "
             "sampling=jaxdec.Sampling.create(temperature=...)")
  stops = decoding.stop_tokens(model.config, stop_tokens)
  controls = _controls(model, len(flat), min_new_tokens=min_new_tokens,
                       repetition_penalty=repetition_penalty, stop_strings=stop_strings,
                       tokenizer=tokenizer, logprobs=logprobs)
  packed = hpd.layout(documents, rows)
  streams = packed.ends.shape[1]
  index = np.asarray([r * streams + n for r, n in packed.order])
  per_slot = lambda x: hpd.per_slot(x, index, rows * streams)  # Per query -> per (row, stream).
  sampling = None if sampling is None else per_slot(sampling)
  rules = None if controls.rules is None else per_slot(controls.rules)
  with streaming.listening(stream, rows * streams, order=index) as call_id:
    out = _parallel_jit(model, packed.tokens, packed.positions, packed.segments, packed.reads,
                        packed.lengths, packed.ends, np.int32(budget), key, stops, sampling, rules,
                        controls.stops, call_id, buffer_len=decoding.bucket(budget),
                        logprobs=controls.logprobs, stream=stream is not None)
    out = jax.block_until_ready(out)
  return hpd.by_query(out, index, budget)
