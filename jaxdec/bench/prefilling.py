"""`jaxdec bench prefilling`: Prefilling-dLLM's chunk-sparse long-prompt decoding against dense
decoding, both Fast-dLLM threshold decoding with the dual cache, on long code prompts
(concatenated held-out stdlib files, cut at a line break; the true continuation is known).

At each context length, per prompt (batch 1), side by side:
- tokens/s of the whole call (the prompt's encoding included), dense and sparse timed
  interleaved, medians over prompts;
- bits per byte of the true continuation under the model given the whole prompt (dense) and given
  the kept chunks + query (sparse): the masked-diffusion ELBO (LLaDA's estimator: mask l ~ U{1..n}
  of the n tokens, weight n / l), with the same masks for both, so the two differ only by the
  prefix the model sees;
- agreement: the share of generated tokens equal to dense decoding's.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxdec import api
from jaxdec.bench.common import Timer, add_output_flags, report
from jaxdec.decoding import positions
from jaxdec.diffusion import DualCache, ModelDenoiser, Threshold
from jaxdec.diffusion.prefilling import PrefillingCache


def _masks(rng: np.random.RandomState, n: int, samples: int) -> tuple[np.ndarray, np.ndarray]:
  """(bool[samples, n] masks, f32[samples] weights n / l): l ~ U{1..n} tokens masked each."""
  masks = np.zeros((samples, n), bool)
  counts = rng.randint(1, n + 1, samples)
  for s, l in enumerate(counts):
    masks[s, rng.choice(n, l, replace=False)] = True
  return masks, (n / counts).astype(np.float32)


@jax.jit
def _dense_nll(model, prompt, continuation, mask):
  """ELBO term: -sum log p(masked continuation | prompt, the rest) for one mask (batch 1)."""
  denoiser = ModelDenoiser(model.params, model.config)
  noisy = jnp.where(mask, model.config.tokens.mask, continuation)
  tokens = jnp.concatenate([prompt, noisy], axis=1)
  width = tokens.shape[1]
  h, _ = denoiser.hidden(tokens, positions(1, width), None, jnp.asarray([width], jnp.int32))
  return _masked_nll(denoiser, h, prompt.shape[1], continuation, mask)


def _masked_nll(denoiser, h, start, continuation, mask):
  n = continuation.shape[1]
  shift = 1 if denoiser.shifted_logits else 0
  logits = denoiser.logits(h, positions(1, n, start - shift)).astype(jnp.float32)
  logp = jnp.take_along_axis(jax.nn.log_softmax(logits), continuation[..., None], axis=-1)[..., 0]
  return -jnp.sum(jnp.where(mask, logp, 0.0))


@jax.jit
def _sparse_nll(model, cache, prompt, continuation, mask):
  """The same term given only what `cache` keeps of the prompt (its chunks + query)."""
  denoiser = ModelDenoiser(model.params, model.config)
  lengths = jnp.asarray([prompt.shape[1]], jnp.int32)
  shifted, query, query_lengths, prepared = cache.prepare(denoiser, prompt, lengths)
  noisy = jnp.where(mask, model.config.tokens.mask, continuation)
  tokens = jnp.concatenate([query, noisy], axis=1)
  state = prepared.init(shifted, 1, tokens.shape[1])
  h, _ = shifted.hidden(tokens, positions(1, tokens.shape[1]), state,
                        query_lengths + continuation.shape[1])
  return _masked_nll(shifted, h, query.shape[1], continuation, mask)


def bits_per_byte(model, tokenizer, prompt, continuation, cache, samples: int, seed: int) -> float:
  """The ELBO bound on the continuation's bits per byte (dense if cache is None)."""
  masks, weights = _masks(np.random.RandomState(seed), len(continuation), samples)
  p, c = jnp.asarray([prompt], jnp.int32), jnp.asarray([continuation], jnp.int32)
  nats = [float(_dense_nll(model, p, c, jnp.asarray(m[None])) if cache is None else
                _sparse_nll(model, cache, p, c, jnp.asarray(m[None]))) * w
          for m, w in zip(masks, weights)]
  size = len(tokenizer.decode(continuation).encode("utf-8"))
  return float(np.mean(nats)) / math.log(2) / max(size, 1)


def run(model_path: str = "zoo:pycode-dlm", lengths=(2048, 4096, 8160), prompts: int = 3,
        gen_length: int = 32, continuation: int = 64, elbo_samples: int = 8,
        caches: dict[str, PrefillingCache] | None = None, threshold: float = 0.9,
        repeats: int = 1, out: str | None = None) -> dict:
  """One row per context length and sparse setting (`caches`: name -> PrefillingCache; default
  the paper's draft score): dense vs sparse tokens/s, speedup, bits per byte, agreement."""
  from jaxdec import load, load_tokenizer
  from jaxdec.corpus import long_context_prompts

  caches = {"draft score": PrefillingCache()} if caches is None else caches
  model, tokenizer = load(model_path), load_tokenizer(model_path)
  timer = Timer()
  limit = model.config.max_position_embeddings
  rows = []
  for length in lengths:
    if length + gen_length > limit:
      raise ValueError(f"context length {length} + gen_length {gen_length} exceeds the model's "
                       f"{limit} positions")
    tasks = long_context_prompts(tokenizer, prompts, length, max(continuation, gen_length))
    kw = dict(gen_length=gen_length, block_length=gen_length, steps=gen_length,
              scheduler=Threshold(threshold))
    call = lambda p, c: jax.block_until_ready(api.diffusion_generate(model, [p], cache=c, **kw))
    settings = {"dense": DualCache(), **caches}
    calls = {name: [lambda p=p, c=c: call(p, c) for p, _ in tasks] for name, c in settings.items()}
    outs = {name: [fn() for fn in fns] for name, fns in calls.items()}  # Compiles once each.
    seconds = {name: [] for name in calls}
    for i in range(len(tasks)):
      times = timer.interleaved({name: fns[i] for name, fns in calls.items()}, repeats)
      for name in calls:
        seconds[name].append(times[name])
    bpb = {name: np.mean([bits_per_byte(model, tokenizer, p, t[:continuation],
                                        None if name == "dense" else c, elbo_samples, i)
                          for i, (p, t) in enumerate(tasks)])
           for name, c in settings.items()}
    tps = {name: gen_length / float(np.median(s)) for name, s in seconds.items()}
    for name in caches:
      agree = np.mean([np.mean(np.asarray(a.tokens) == np.asarray(b.tokens))
                       for a, b in zip(outs["dense"], outs[name])])
      rows.append({"context": length, "sparse": name,
                   "prompt tokens": int(np.mean([len(p) for p, _ in tasks])),
                   "dense tok/s": tps["dense"], "sparse tok/s": tps[name],
                   "speedup": tps[name] / tps["dense"], "dense bits/byte": float(bpb["dense"]),
                   "sparse bits/byte": float(bpb[name]),
                   "bits/byte change %": float(100 * (bpb[name] / bpb["dense"] - 1)),
                   "token agreement": float(agree)})
      print(f"context {length}, {name}: {rows[-1]['speedup']:.2f}x, bits/byte "
            f"{bpb['dense']:.3f} -> {bpb[name]:.3f}", flush=True)
  columns = ["context", "sparse", "prompt tokens", "dense tok/s", "sparse tok/s", "speedup",
             "dense bits/byte", "sparse bits/byte", "bits/byte change %", "token agreement"]
  fields = ("chunk_size", "top_k", "query_tokens", "score", "draft_tokens", "positions",
            "token_capacity")
  return report(rows, columns, timer, {
      "suite": "prefilling", "model": model_path, "prompts": prompts, "gen_length": gen_length,
      "continuation": continuation, "elbo_samples": elbo_samples, "threshold": threshold,
      "caches": {name: {f: getattr(c, f) for f in fields} for name, c in caches.items()}}, out)


# ---- `jaxdec bench prefilling` ------------------------------------------------------------------

HELP = ("Prefilling-dLLM's chunk-sparse long-prompt decoding vs dense (threshold + dual cache): "
        "tokens/s and the continuation's bits per byte by context length")


def add_arguments(parser) -> None:
  """`jaxdec bench prefilling`'s flags (the CLI adds the multi-process ones)."""
  parser.add_argument("--model", default="zoo:pycode-dlm", help="a masked-diffusion model")
  parser.add_argument("--lengths", type=int, nargs="+", default=[2048, 4096, 8160],
                      help="prompt lengths in tokens (prompt + gen_length within the model's "
                           "positions), one row each")
  parser.add_argument("--prompts", type=int, default=3, help="long code prompts per length")
  parser.add_argument("--gen-length", type=int, default=32, help="tokens generated (one block)")
  parser.add_argument("--continuation", type=int, default=64,
                      help="tokens of the true continuation scored (ELBO)")
  parser.add_argument("--elbo-samples", type=int, default=8, help="masks per ELBO estimate")
  parser.add_argument("--chunk-size", type=int, default=256, help="context tokens per chunk")
  parser.add_argument("--top-k", type=int, default=4, help="chunks kept")
  parser.add_argument("--query-tokens", type=int, default=64,
                      help="the prompt's last tokens, always kept (the query)")
  parser.add_argument("--score", nargs="+", default=["draft"], choices=("draft", "keys"),
                      help="chunk scores, one sparse row each")
  parser.add_argument("--positions", default="continuous", choices=("continuous", "reuse"),
                      help="where the kept chunks and the query sit")
  parser.add_argument("--token-capacity", type=int, default=None,
                      help="tokens kept per chunk (default: all)")
  parser.add_argument("--repeats", type=int, default=1,
                      help="timed runs per prompt (interleaved)")
  add_output_flags(parser, "prefilling")


def main(args) -> int:
  """`jaxdec bench prefilling`: `run` with one sparse cache per --score."""
  caches = {f"{score} score": PrefillingCache(
      chunk_size=args.chunk_size, top_k=args.top_k, query_tokens=args.query_tokens, score=score,
      positions=args.positions, token_capacity=args.token_capacity) for score in args.score}
  run(args.model, tuple(args.lengths), prompts=args.prompts, gen_length=args.gen_length,
      continuation=args.continuation, elbo_samples=args.elbo_samples, caches=caches,
      repeats=args.repeats, out=args.out)
  return 0
