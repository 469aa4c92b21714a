"""`jaxdec bench archer`: Archer's prompt-K/V reuse against a full refresh every step, on long code
prompts with a bidirectional dLLM (default `zoo:pycode-dlm`; concatenated held-out stdlib files,
cut at a line break, the true continuation known).

A full refresh (`NoCache`) recomputes prompt and response at every step, which is what a
rollback-capable sampler needs when any response token may change; `Archer(bound)` recomputes the
response only and refreshes the prompt's entries once `bound` response tokens changed. Per
context length, per prompt (batch 1), side by side: tokens/s (timed interleaved, medians over
prompts), the share of tokens equal to the full refresh's, and two measures of quality against
the true continuation (the share of positions holding its token, and the tokens before the first
miss). The dual cache (Fast-dLLM: finished blocks frozen too) is shown for reference.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxdec import api
from jaxdec.bench.common import Timer, add_output_flags, report
from jaxdec.bench.prefilling import _masked_nll, _masks
from jaxdec.decoding import positions
from jaxdec.diffusion import Archer, DualCache, FixedSteps, ModelDenoiser, NoCache, Threshold

BASELINE = "full refresh"


@jax.jit
def _stale_nll(model, prompt, continuation, mask, stale):
  """ELBO term: -sum log p(masked continuation | the rest) for one mask (batch 1), the prompt's
  keys and values computed from the canvas with `stale` positions masked too, as Archer reuses
  them after those commits (stale all False: a full forward)."""
  denoiser = ModelDenoiser(model.params, model.config)
  mask_id, shift = model.config.tokens.mask, int(model.config.embeddings.shifted_logits)
  start, n = prompt.shape[1], continuation.shape[1]
  width = start + n
  old = jnp.concatenate([prompt, jnp.where(mask | stale, mask_id, continuation)], axis=1)
  new = jnp.concatenate([prompt, jnp.where(mask, mask_id, continuation)], axis=1)
  _, kept = denoiser.hidden(old, positions(1, width), denoiser.init_cache(1, width),
                            jnp.asarray([width], jnp.int32))
  index = positions(1, n + shift, start - shift)
  h, _ = denoiser.hidden(jnp.take_along_axis(new, index, axis=1), index,
                         kept.with_length(start - shift), jnp.asarray([n + shift], jnp.int32))
  return _masked_nll(denoiser, h, shift, continuation, mask)  # h starts `shift` before it.


def stale_bits_per_byte(model, tokenizer, prompt, continuation, commits: int, samples: int,
                        seed: int) -> float:
  """The continuation's ELBO bits per byte with prompt entries `commits` commits stale: each mask
  of l ~ U{1..n} tokens, plus `commits` of the given ones masked for the prompt's forward (the
  tokens committed since the refresh; 0: fresh). Same masks for every `commits` (`seed`)."""
  rng = np.random.RandomState(seed)
  masks, weights = _masks(rng, len(continuation), samples)
  order = [rng.permutation(len(continuation)) for _ in masks]
  p, c = jnp.asarray([prompt], jnp.int32), jnp.asarray([continuation], jnp.int32)
  nats = []
  for m, w, perm in zip(masks, weights, order):
    stale = np.zeros_like(m)
    stale[[i for i in perm if not m[i]][:commits]] = True
    nats.append(float(_stale_nll(model, p, c, jnp.asarray(m[None]), jnp.asarray(stale[None]))) * w)
  size = len(tokenizer.decode(continuation).encode("utf-8"))
  return float(np.mean(nats)) / math.log(2) / max(size, 1)


def run(model_path: str = "zoo:pycode-dlm", contexts=(1024, 2048), prompts: int = 4,
        gen_length: int = 64, block_length: int = 32, bounds=(4, 16, 64),
        threshold: float | None = None, elbo_samples: int = 8, repeats: int = 1,
        out: str | None = None) -> dict:
  """Rows per context: the full refresh, Archer at each of `bounds`, the dual cache. Scheduler:
  LLaDA's one token per forward, or threshold commits where `threshold` is given."""
  from jaxdec import load, load_tokenizer
  from jaxdec.corpus import long_context_prompts

  if not bounds or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in bounds):
    raise ValueError(f"bounds must be ints >= 1, got {bounds!r}")
  model, tokenizer = load(model_path), load_tokenizer(model_path)
  limit = model.config.max_position_embeddings
  scheduler = FixedSteps() if threshold is None else Threshold(threshold)
  settings = {BASELINE: NoCache(), **{f"Archer, bound {b}": Archer(b) for b in bounds},
              "dual cache (Fast-dLLM)": DualCache()}
  kw = dict(gen_length=gen_length, block_length=block_length, steps=gen_length,
            scheduler=scheduler)
  timer, rows = Timer(), []
  for length in contexts:
    if length + gen_length > limit:
      raise ValueError(f"context length {length} + gen_length {gen_length} exceeds the model's "
                       f"{limit} positions")
    tasks = long_context_prompts(tokenizer, prompts, length, gen_length)
    call = lambda p, c: jax.block_until_ready(api.diffusion_generate(model, [p], cache=c, **kw))
    calls = {name: [lambda p=p, c=c: call(p, c) for p, _ in tasks] for name, c in settings.items()}
    outs = {name: [np.asarray(fn().tokens[0]) for fn in fns] for name, fns in calls.items()}
    seconds = {name: [] for name in calls}
    for i in range(len(tasks)):
      times = timer.interleaved({name: fns[i] for name, fns in calls.items()}, repeats)
      for name in calls:
        seconds[name].append(times[name])
    tps = {name: gen_length / float(np.median(s)) for name, s in seconds.items()}
    bpb = {b: np.mean([stale_bits_per_byte(model, tokenizer, p, t[:gen_length], b - 1,
                                           elbo_samples, i) for i, (p, t) in enumerate(tasks)])
           for b in {1, *bounds}}  # Bound 1: fresh entries at every step.
    for name, cache in settings.items():
      bound = 1 if isinstance(cache, NoCache) else cache.bound if isinstance(cache, Archer) else None
      rows.append({
          "context": length, "cache": name,
          "prompt tokens": int(np.mean([len(p) for p, _ in tasks])), "tokens/s": tps[name],
          "speedup": tps[name] / tps[BASELINE],
          "agreement": float(np.mean([np.mean(a == b)
                                      for a, b in zip(outs[name], outs[BASELINE])])),
          **({} if bound is None else {
              "bits/byte": float(bpb[int(bound)]),
              "bits/byte change %": float(100 * (bpb[int(bound)] / bpb[1] - 1))})})
      print(f"context {length}, {name}: {rows[-1]['speedup']:.2f}x", flush=True)
  columns = ["context", "cache", "prompt tokens", "tokens/s", "speedup", "agreement",
             "bits/byte", "bits/byte change %"]
  print(f"bench archer: {model_path}, {prompts} long code prompts per context, gen "
        f"{gen_length}, block {block_length}, "
        f"{'LLaDA, 1 token/forward' if threshold is None else f'threshold {threshold}'}; "
        f"speedup and agreement vs '{BASELINE}'")
  return report(rows, columns, timer, {
      "suite": "archer", "model": model_path, "prompts": prompts, "gen_length": gen_length,
      "block_length": block_length, "bounds": list(bounds), "threshold": threshold,
      "elbo_samples": elbo_samples, "repeats": repeats}, out)


# ---- `jaxdec bench archer` ----------------------------------------------------------------------

HELP = ("Archer's prompt-K/V reuse vs a full refresh every step on long code prompts: tokens/s, "
        "agreement, and the continuation's bits per byte at each drift bound")


def add_arguments(parser) -> None:
  """`jaxdec bench archer`'s flags (the CLI adds the multi-process ones)."""
  parser.add_argument("--model", default="zoo:pycode-dlm",
                      help="a bidirectional masked-diffusion model")
  parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048],
                      help="prompt lengths in tokens, one group of rows each")
  parser.add_argument("--prompts", type=int, default=4, help="long code prompts per length")
  parser.add_argument("--gen-length", type=int, default=64, help="tokens generated")
  parser.add_argument("--block-length", type=int, default=32, help="tokens a block")
  parser.add_argument("--bounds", type=int, nargs="+", default=[4, 16, 64],
                      help="Archer's drift bounds (response tokens changed before a refresh)")
  parser.add_argument("--threshold", type=float, default=None,
                      help="threshold commits (left out: LLaDA's one token per forward)")
  parser.add_argument("--elbo-samples", type=int, default=8, help="masks per ELBO estimate")
  parser.add_argument("--repeats", type=int, default=1, help="timed runs (interleaved; medians)")
  add_output_flags(parser, "archer")


def main(args) -> int:
  """`jaxdec bench archer`: `run` with the parsed flags."""
  run(args.model, tuple(args.lengths), prompts=args.prompts, gen_length=args.gen_length,
      block_length=args.block_length, bounds=tuple(args.bounds), threshold=args.threshold,
      elbo_samples=args.elbo_samples, repeats=args.repeats, out=args.out)
  return 0
