"""The public, jitted entry points: the only module that applies `jax.jit` and places inputs.

Each method's host-side `prepare` validates its arguments (a ValueError / TypeError naming the
problem, never a failure deep inside XLA) and returns a `decoding.Job`, which `_run` runs. The
un-jitted functions (`jaxdec.ar`, `jaxdec.spec`, `jaxdec.diffusion`, ...) stay pure for callers
who want them inside their own jit."""

from __future__ import annotations

import functools
from typing import Sequence

import jax

from jaxdec import ar, decoding, hpd, sharding, streaming
from jaxdec.controls import Controls
from jaxdec.decoding import DecodeOutput
from jaxdec.diffusion import host as diffusion_host
from jaxdec.model import Model
from jaxdec.model import forward as _forward
from jaxdec.sampling import Sampling
from jaxdec.spec import kforcing, loop as spec_loop, ssr as spec_ssr


@jax.jit
def _forward_jit(model: Model, tokens: jax.Array) -> jax.Array:
  positions = decoding.positions(*tokens.shape)
  return _forward(model.params, tokens, positions, config=model.config)[0]


def forward(model: Model, tokens) -> jax.Array:
  """tokens i32[B, L] -> logits f32[B, L, V] (no cache; attention as the model's config says)."""
  tokens = decoding.check_tokens(model, tokens)
  mesh = sharding.model_mesh(model)
  (placed,) = sharding.place_rows(mesh, tokens)
  return sharding.gather_rows(mesh, _forward_jit(model, placed), tokens.shape[0])


@functools.partial(jax.jit, static_argnames=("run", "static", "parts", "logprobs", "stream"))
def _jitted(first, per_row, args, rules, stops, call_id, *, run, static, parts, logprobs, stream):
  """Every method's program: one per `run` and static setting (`parts` only keys the cache)."""
  del parts
  controls = Controls(rules=rules, stops=stops, logprobs=logprobs)
  if stream:
    controls = controls.replace(on_step=streaming.hook(call_id))
  return run(first, *per_row, *args, controls=controls, **dict(static))


def _run(job: decoding.Job, stream, **controls) -> DecodeOutput:
  """Validate the controls; place the per-row inputs and rules on the model's mesh (with several
  processes, every process passes the same full batch); run the jitted loop while listening for
  a stream; gather the real rows to every process and cut them to the budget."""
  controls = decoding.check_controls(job.model.config.vocab_size, job.rows, **controls)
  mesh = sharding.model_mesh(job.model)
  if job.to_loop is None:
    *per_row, rules = sharding.place_rows(mesh, *job.per_row, controls.rules)
  else:
    per_row, rules = job.per_row, job.to_loop(controls.rules)
  with streaming.listening(stream, job.rows, order=job.order) as call_id:
    out = _jitted(job.model if job.first is None else job.first, tuple(per_row), job.args, rules,
                  controls.stops, call_id, run=job.run, static=job.static, parts=job.parts,
                  logprobs=controls.logprobs, stream=stream is not None)
    out = jax.block_until_ready(out)
  if job.finish is not None:
    return job.finish(out)
  out = sharding.gather_rows(mesh, out, job.rows)
  if job.budget is None:
    return out
  logprobs = None if out.logprobs is None else out.logprobs[..., :job.budget]
  return out.replace(tokens=out.tokens[..., :job.budget], logprobs=logprobs)


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
  job = ar.prepare(model, prompts, max_new_tokens, sampling, key, lengths=lengths,
                   stop_tokens=stop_tokens)
  return _run(job, stream, stop_strings=stop_strings, tokenizer=tokenizer, logprobs=logprobs,
              min_new_tokens=min_new_tokens, repetition_penalty=repetition_penalty)


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
  job = spec_loop.prepare(model, prompts, drafter, verifier, max_new_tokens, sampling, key,
                          lengths=lengths, stop_tokens=stop_tokens)
  return _run(job, stream, stop_strings=stop_strings, tokenizer=tokenizer, logprobs=logprobs,
              min_new_tokens=min_new_tokens, repetition_penalty=repetition_penalty)


def ssr_generate(model: Model, prompts, ssr, max_new_tokens: int = 448, *, lengths=None,
                 stop_tokens: Sequence[int] | None = None,
                 stop_strings: Sequence[str] | None = None, tokenizer=None, min_new_tokens=0,
                 repetition_penalty=1.0, logprobs: bool = False,
                 stream: streaming.StreamCallback | None = None) -> DecodeOutput:
  """SSR for a reasoning model (one that thinks inside `<think>` ... `</think>`): greedy
  decoding whose final answer is drafted from the model's own answers at partial reasoning
  budgets (`ssr`: `jaxdec.spec.SSR.for_tokenizer(tokenizer, budgets)`). The output equals
  `generate`'s greedy output with the same controls, token for token; `max_new_tokens` covers
  reasoning and answer. `stats` as `jaxdec.spec.ssr_generate`'s (`reasoning_length`, ...).
  """
  job = spec_ssr.prepare(model, prompts, ssr, max_new_tokens, lengths=lengths,
                         stop_tokens=stop_tokens)
  return _run(job, stream, stop_strings=stop_strings, tokenizer=tokenizer, logprobs=logprobs,
              min_new_tokens=min_new_tokens, repetition_penalty=repetition_penalty)


def push_forward_generate(student, prompts, max_new_tokens: int = 64, key: jax.Array | None = None,
                          *, lengths=None, stop_tokens: Sequence[int] | None = None,
                          stop_strings: Sequence[str] | None = None, tokenizer=None,
                          min_new_tokens=0, repetition_penalty=1.0, logprobs: bool = False,
                          stream: streaming.StreamCallback | None = None) -> DecodeOutput:
  """K-Forcing's standalone decoding: a `spec.kforcing.PushForward` student (from
  `jaxdec.load_push_forward`) emits its k tokens per forward with no verification. Lossy: the
  output follows the student's joint law, not the teacher's. Greedy (every noise u = 0) without
  `key`; with `key`, samples at the temperature the student was distilled at. Other arguments,
  the controls included, as `generate` (log-probabilities are the student's own). `stats`:
  `nfe` (student forwards per row, the prefill included), `steps`, `tokens_per_forward`.
  """
  job = kforcing.prepare(student, prompts, max_new_tokens, key, lengths=lengths,
                         stop_tokens=stop_tokens)
  return _run(job, stream, stop_strings=stop_strings, tokenizer=tokenizer, logprobs=logprobs,
              min_new_tokens=min_new_tokens, repetition_penalty=repetition_penalty)


def diffusion_generate(model: Model, prompts, gen_length: int = 64, block_length: int = 32,
                       steps: int = 64, scheduler=None, cache=None, temperature=0.0,
                       key: jax.Array | None = None, *, lengths=None, cfg_scale: float = 0.0,
                       logits_eos_inf: bool = False, confidence_eos_eot_inf: bool = False,
                       eos_token_id: int | None = None, eot_token_id: int | None = None,
                       stop_tokens: Sequence[int] | None = None, stop_early: bool = False,
                       visible_suffix: int | None = None,
                       stop_strings: Sequence[str] | None = None, tokenizer=None,
                       min_new_tokens=0, repetition_penalty=1.0, logprobs: bool = False,
                       stream: streaming.StreamCallback | None = None) -> DecodeOutput:
  """Masked-diffusion decoding (LLaDA / Dream samplers, Fast-dLLM schedulers and caches).

  Args:
    prompts: as `generate`; prompts may not contain the mask token.
    gen_length: tokens generated per row; a multiple of block_length (both static).
    steps: forwards of the step-counting schedulers, a multiple of gen_length // block_length;
      traced. Threshold rules ignore it (each block runs until no mask is left).
    scheduler: a `jaxdec.diffusion.Scheduler`: `FixedSteps()` (LLaDA; the default), `Dream()`
      (the default for shifted models), `Threshold(tau)`, `Factor(f)`, `Frechet(delta)`, or your
      own; their values (scalars, or one per row) are traced: sweeping them does not recompile.
    cache: a `jaxdec.diffusion.DiffusionCache`: None (exact), `PrefixCache()`, `DualCache()`
      (approximate), `PrefillingCache(...)`, `Archer(...)`, or your own.
    temperature: >= 0, scalar or per row; > 0 needs `key` (a random confidence needs one too).
    cfg_scale: LLaDA's classifier-free guidance weight (0 = off; needs cache=None).
    logits_eos_inf, confidence_eos_eot_inf: LLaDA's EOS flags; the ids default to the model's
      first and second EOS ids (`eos_token_id`, `eot_token_id` override them).
    stop_tokens: ids that end `lengths` (default: the model's EOS ids).
    stop_early: end a row once a block it finishes holds a stop token (later blocks: pad, no
      forwards); off (LLaDA's reference sampler): every block decoded.
    visible_suffix: None (LLaDA, Dream): the model sees the whole canvas; k >= 0: only k
      positions after the active window (0: as block-diffusion models decode). A `BlockCausal`
      model never sees later blocks; block_length must equal its block_size.
    The controls as `generate`, read for a decoder that fills its canvas out of order
    (`jaxdec.diffusion.sampler`); `stream` gets a row's block once it is finished.

  Returns:
    DecodeOutput: `tokens` i32[B, gen_length], `lengths` i32[B], `logprobs`, `stats` (`nfe`,
    `decoded`, `tokens_per_forward` = decoded / nfe per row, `lookaheads`, ...).
  """
  job = diffusion_host.prepare(
      model, prompts, gen_length, block_length, steps, scheduler, cache, temperature, key,
      lengths=lengths, cfg_scale=cfg_scale, logits_eos_inf=logits_eos_inf,
      confidence_eos_eot_inf=confidence_eos_eot_inf, eos_token_id=eos_token_id,
      eot_token_id=eot_token_id, stop_tokens=stop_tokens, stop_early=stop_early,
      visible_suffix=visible_suffix)
  return _run(job, stream, stop_strings=stop_strings, tokenizer=tokenizer, logprobs=logprobs,
              min_new_tokens=min_new_tokens, repetition_penalty=repetition_penalty)


def parallel_generate(model: Model, context, queries, max_new_tokens: int = 32,
                      sampling: Sampling | None = None, key: jax.Array | None = None, *,
                      stop_tokens: Sequence[int] | None = None, rows: int = 1,
                      stop_strings: Sequence[str] | None = None, tokenizer=None,
                      min_new_tokens=0, repetition_penalty=1.0, logprobs: bool = False,
                      stream: streaming.StreamCallback | None = None) -> DecodeOutput:
  """Hyper-Parallel Decoding (`jaxdec.hpd`): queries that continue one shared context decoded in
  one row, the context's K/V computed once, each query seeing the context and itself only.

  Args:
    context: the shared context's token ids; or a list of contexts (documents) stacked in one
      row, each document's queries seeing only its own context.
    queries: token-id lists, each continuing the context (non-empty); with several documents,
      one list of queries per document.
    max_new_tokens: tokens per query at most.
    rows: spread the documents over this many rows (each document whole, round robin).
    Other arguments as `generate`, per query (values scalar or one per query); a query's
    repetition penalty sees its context and its query as its prompt; `stream` gets one list
    entry per query.

  Returns:
    DecodeOutput with one row per query (documents' queries one after another); greedy output
    equals `generate(model, [context + query])` for each query. `stats`: `nfe` and
    `tokens_per_forward` per packed row, `forwards_per_query`.
  """
  job = hpd.prepare(model, context, queries, max_new_tokens, sampling, key,
                    stop_tokens=stop_tokens, rows=rows)
  return _run(job, stream, stop_strings=stop_strings, tokenizer=tokenizer, logprobs=logprobs,
              min_new_tokens=min_new_tokens, repetition_penalty=repetition_penalty)
