"""`jaxdec bench diffusion`: schedulers x caches on held-out code prompts with a masked-diffusion
model (default `zoo:pycode-dlm`).

The baseline is LLaDA's sampler with steps = gen_length (one token per forward, no cache). Every
configuration reports NFE and tokens per forward (per row, averaged), tokens/s (interleaved
medians, compile time apart), the speedup over the baseline, and its agreement with the
baseline's tokens (the fraction of generated positions that match, and of rows that match
entirely): parallel rules and caches are approximations of the baseline, not replicas. The
share of distinct 4-grams per row flags degenerate output: token loops drive it towards 0. Each
row also records the masks filled by each forward (the mean over the rows still decoding) and
how many rows were still decoding, forward by forward.

With `task="gsm-synth"` the prompts are test problems, rows stop at the block holding their
first EOS (`stop_early`), tokens are the answer's (to the first EOS), and an `accuracy` column
scores the answers: speed and quality of every rule side by side.
"""

from __future__ import annotations

import time
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import jaxdec
from jaxdec import diffusion
from jaxdec.bench.common import Timer, add_output_flags, check_plot, report
from jaxdec.diffusion import (AsyncLane, DualCache, Factor, FirstStepConfidence, FixedSteps, Frechet,
                              Persistence, PrefixCache, RipplePivot, Scaffold, Threshold)
from jaxdec.diffusion.caches import CanvasView
from jaxdec.model import forward
from jaxdec.model import (Bidirectional, BlockCausal, Embeddings, Model, ModelConfig,
                          SpecialTokens, init_params)

# A seeded random bidirectional model of pycode-dlm's size, for trying the suite without the zoo.
RANDOM_CONFIG = ModelConfig(vocab_size=4096, hidden_size=256, intermediate_size=704, num_layers=4,
                            num_heads=4, num_kv_heads=2, head_dim=64, max_position_embeddings=512,
                            attention=Bidirectional(), embeddings=Embeddings(tied=True),
                            tokens=SpecialTokens(bos=1, eos=(2,), pad=0, mask=3),
                            architecture="llada")


class Config(NamedTuple):
  name: str
  scheduler: object
  cache: object
  steps: Callable[[int], int]  # gen_length -> steps


BASELINE = "LLaDA steps=G"
REFERENCE = "threshold 0.9 + dual"  # Fast-dLLM's operating point: a second speedup column.


def configs() -> list[Config]:
  full = lambda g: g
  return [
      Config("LLaDA steps=G", FixedSteps(), None, full),
      Config("LLaDA steps=G/2", FixedSteps(), None, lambda g: g // 2),
      Config("LLaDA steps=G + dual", FixedSteps(), DualCache(), full),
      Config("threshold 0.9", Threshold(0.9), None, full),
      Config("threshold 0.9 + prefix", Threshold(0.9), PrefixCache(), full),
      Config("threshold 0.9 + dual", Threshold(0.9), DualCache(), full),
      Config("factor 1.0 + dual", Factor(1.0), DualCache(), full),
      Config("frechet 0.25 + dual", Frechet(0.25), DualCache(), full),
      Config("CAI 0.9", FirstStepConfidence(0.9), None, full),
      Config("CAI 0.9 + dual", FirstStepConfidence(0.9), DualCache(), full),
      Config("CORA 0.9 x2", Persistence(0.9, 2), None, full),
      Config("CORA 0.9 x2 + dual", Persistence(0.9, 2), DualCache(), full),
      Config("RPS 0.9", RipplePivot(0.9), None, full),
      Config("RPS 0.9 + dual", RipplePivot(0.9), DualCache(), full),
      Config("SAID steps=G/4", Scaffold(), None, lambda g: g // 4),
      Config("AsyncLane 0.9, 2 lanes + dual", AsyncLane(0.9, stable=0.5), DualCache(), full),
      Config("SAID steps=G/4 + CHLG 0.9 + dual", Scaffold(chlg_steps=4), DualCache(),
             lambda g: g // 4),
  ]


def load_bench_model(path: str) -> tuple[Model, object]:
  """(model, tokenizer or None); 'random' = a seeded random-init model of pycode-dlm's size."""
  if path == "random":
    return Model(RANDOM_CONFIG, init_params(RANDOM_CONFIG, jax.random.key(0), std=0.5)), None
  return jaxdec.load(path, dtype=np.float32), jaxdec.load_tokenizer(path)


def _prompts(tokenizer, count: int, prompt_tokens: int, vocab: int,
             task: str | None = None) -> tuple[list[list[int]], list | None]:
  """(prompts, the task's problems or None)."""
  if task is not None:
    if task != "gsm-synth":
      raise ValueError(f"task must be 'gsm-synth' or None, got {task!r}")
    if tokenizer is None:
      raise ValueError("task='gsm-synth' needs a trained model with its tokenizer (e.g. "
                       "zoo:gsm-dlm), not 'random'")
    from jaxdec.tasks import gsm_synth

    problems = gsm_synth.problems("test", count, 0)
    return [tokenizer.encode(p.prompt) for p in problems], problems
  if tokenizer is None:
    rng = np.random.RandomState(0)
    return [rng.randint(4, vocab, prompt_tokens).tolist() for _ in range(count)], None
  from jaxdec.corpus import held_out_prompts

  return held_out_prompts(tokenizer, count, prompt_tokens=prompt_tokens), None


def distinct_ngrams(tokens: np.ndarray, n: int = 4) -> float:
  """Mean over rows of (distinct n-grams / n-grams) in i32[B, T]."""
  shares = [len(set(zip(*(row[i:] for i in range(n))))) / max(len(row) - n + 1, 1)
            for row in np.asarray(tokens).tolist()]
  return float(np.mean(shares))


def per_forward(committed: np.ndarray, nfe: np.ndarray) -> tuple[list[float], list[int]]:
  """From the sampler's `committed` i32[B, G] and `nfe` i32[B]: (masks filled by forward n,
  the mean over the rows still decoding at n; how many rows those are), n < max nfe."""
  steps = min(int(nfe.max()), committed.shape[1])
  decoding = np.arange(steps)[None, :] < nfe[:, None]  # bool[B, steps]
  counts = decoding.sum(axis=0)
  return (committed[:, :steps].sum(axis=0) / counts).tolist(), counts.tolist()


def figures(record: dict) -> dict:
  """{'speedup': bars of every configuration's speedup over the baseline, 'tokens_per_forward':
  masks filled per forward and tokens generated vs forwards (the smallest batch size's rows),
  and 'accuracy_vs_speed' (with a task; else 'agreement_vs_speed', agreement with the baseline)
  against tokens/s}."""
  from jaxdec import plots

  rows = record["rows"]
  batches = sorted({r["batch"] for r in rows})
  label = (lambda r: r["config"]) if len(batches) == 1 else (
      lambda r: f"{r['config']}, batch {r['batch']}")
  setting = (f"{record['model']}, {record['prompts']} prompts, gen {record['gen_length']}, "
             f"block {record['block_length']}, greedy")
  first = [r for r in rows if r["batch"] == batches[0]]
  figs = {
      "speedup": plots.speedup_bars([label(r) for r in rows], [r["speedup"] for r in rows],
                                    baseline=rows[0]["config"],
                                    title=f"bench diffusion: {setting}"),
      "tokens_per_forward": plots.tokens_per_forward_curves(
          {r["config"]: r["tokens per forward by step"] for r in first},
          {r["config"]: r["rows by step"] for r in first}, gen_length=record["gen_length"],
          title=f"bench diffusion: {setting}, batch {batches[0]}"),
  }
  quality = "accuracy" if "accuracy" in rows[0] else "agreement"
  figs[f"{quality}_vs_speed"] = plots.accuracy_vs_speed(
      first, label="config", quality=quality,
      title=f"bench diffusion: {setting}, batch {batches[0]}")
  return figs


def judge_bits_per_byte(judge: Model, tokenizer, prompts: list[list[int]],
                        tokens: np.ndarray) -> float:
  """Bits per byte of the generated continuations under an AR `judge` that shares the
  tokenizer, each scored given its prompt: how plausible the text is, whatever the baseline
  wrote (agreement says how close to it)."""
  nats, size = 0.0, 0
  for prompt, row in zip(prompts, tokens):
    ids = jnp.asarray([list(prompt) + row.tolist()], jnp.int32)
    logits = forward(judge.params, ids[:, :-1], jnp.arange(ids.shape[1] - 1)[None],
                     config=judge.config)[0]
    logp = jax.nn.log_softmax(logits[0, len(prompt) - 1:].astype(jnp.float32), axis=-1)
    nats -= float(jnp.sum(jnp.take_along_axis(logp, ids[0, len(prompt):, None], axis=-1)))
    size += len(tokenizer.decode(row.tolist()).encode("utf-8"))
  return nats / max(size, 1) / np.log(2.0)


def _score(tokenizer, problems, tokens: np.ndarray, lengths: np.ndarray) -> float:
  from jaxdec.tasks import gsm_synth

  texts = [tokenizer.decode(row[: int(n)].tolist()) for row, n in zip(tokens, lengths)]
  return gsm_synth.score(texts, problems)


def _chosen(names: list[str] | None, baseline: str = BASELINE) -> list[Config]:
  """The baseline first, then the configurations in `names` (all when None)."""
  known = [c.name for c in configs()]
  unknown = sorted(set(names or ()) - set(known)) + ([] if baseline in known else [baseline])
  if unknown:
    raise ValueError(f"unknown configurations {unknown}; known: {known}")
  by_name = {c.name: c for c in configs()}
  return [by_name[baseline]] + [c for c in configs() if c.name != baseline and
                                (names is None or c.name in names)]


def _first_calls(fns: dict) -> tuple[dict, dict]:
  """Run each configuration once (compiling it): ({name: (tokens, nfe, committed, lengths)},
  {name: seconds}, {name: forward counts})."""
  results, seconds, counts = {}, {}, {}
  for name, fn in fns.items():
    t0 = time.perf_counter()
    outs = fn()
    seconds[name] = time.perf_counter() - t0
    results[name] = tuple(np.concatenate([np.asarray(get(o)) for o in outs]) for get in (
        lambda o: o.tokens, lambda o: o.stats["nfe"], lambda o: o.stats["committed"],
        lambda o: o.lengths))
    counts[name] = {k: np.concatenate([np.asarray(o.stats[k]) for o in outs]) for k in
                    ("decoded", "lookaheads", "lookahead_sequences")}
    counts[name]["batched"] = np.asarray([int(o.stats["forwards"]) for o in outs])  # Per batch.
  return results, seconds, counts


def forward_costs(model: Model, batch: int, prompt_width: int, gen_length: int,
                  windows: set[int], timer: Timer, repeats: int) -> dict:
  """Median seconds of one batched forward of each kind the sampler runs, through the caches
  themselves: 'full' (no cache: the whole canvas), 'refresh' (a refreshed cache's block start:
  the whole canvas, keys and values kept) and ('cached', N) (a dual cache's step: a window of N
  positions against the kept keys and values)."""
  denoiser = diffusion.ModelDenoiser(model.params, model.config)
  width, shift = prompt_width + gen_length, int(model.config.embeddings.shifted_logits)
  x = jnp.full((batch, width), model.config.tokens.mask, jnp.int32)
  lengths = jnp.full((batch,), width, jnp.int32)

  def kind(cache, window, step):
    view = CanvasView(x=x, start=jnp.full((batch,), prompt_width + shift, jnp.int32),
                      active=jnp.ones((batch,), bool), step=jnp.full((batch,), step, jnp.int32),
                      lengths=lengths, window=window, gen_length=gen_length, shift=shift)
    state = cache.init(denoiser, batch, width)
    if step:  # A cache past its first forward (a block-causal model's primes an empty one).
      state = state.with_length(jnp.full((batch,), prompt_width, jnp.int32))
    call = jax.jit(lambda st, v: cache.logits(st, denoiser, v)[0])
    return lambda: jax.block_until_ready(call(state, view))

  fns = {"full": kind(diffusion.NoCache(), min(windows), 0),
         "refresh": kind(DualCache(), min(windows), 0)}
  fns.update({("cached", n): kind(DualCache(), n, 1) for n in sorted(windows)})
  for fn in fns.values():
    fn()  # Compile.
  return timer.interleaved(fns, repeats)


def decomposition(c: Config, counts: dict, nfe: np.ndarray, block_length: int,
                  costs: dict, seconds: float, block_causal: bool = False) -> dict:
  """Where a configuration's time goes (the survey's latency decomposition): forwards per row by
  kind (a refreshed cache's block starts, its cached window steps, full canvas forwards without
  a cache, a scheduler's lookaheads), and the time outside the model: the measured time less
  each batched forward priced at its kind's measured cost (an estimate: a lookahead of H
  hypotheses is priced as H forwards of its kind; below 0 when the standalone forwards cost more
  than the loop's own, which happens on CPU: read it as a bound, not a measurement). On a
  block-causal model a cache refreshes only at the first step (the prompt and the first window);
  every later step is a cached window (a block longer: the previous block is rewritten)."""
  looks, sequences = counts["lookaheads"], counts["lookahead_sequences"]
  main = nfe - looks
  blocks = np.ones_like(main) if block_causal else -(-counts["decoded"] // block_length)
  window = block_length * c.scheduler.windows
  if isinstance(c.cache, (PrefixCache, DualCache)):
    kinds = {"refresh": blocks, "cached": main - blocks, "full": 0 * main}
    step_cost = costs[("cached", window)]
  else:
    kinds = {"refresh": 0 * main, "cached": 0 * main, "full": main}
    step_cost = costs["full"]
  priced = {"full": costs["full"], "refresh": costs["refresh"], "cached": step_cost}
  per_row = sum(kinds[k].mean() * priced[k] for k in kinds) + sequences.mean() * step_cost
  model_s = counts["batched"] * per_row / max(nfe.mean(), 1e-9)
  return {**{f"{k} fwd": float(v.mean()) for k, v in kinds.items()},
          "lookahead fwd": float(looks.mean()),
          "outside model": (seconds - model_s) / seconds}


def _timed_counts(counts: dict, timed: int, batch_size: int) -> dict:
  """A configuration's forward counts over the timed prompts (whole batches) alone."""
  rows = {k: v[:timed] for k, v in counts.items() if k != "batched"}
  return {**rows, "batched": int(counts["batched"][: -(-timed // batch_size)].sum())}


def _rows(chosen, batch_size, results, counts, first_call, medians, costs, *, task, tokenizer,
          problems, judged, prompts, gen_length, block_length, block_causal,
          timed: int) -> list[dict]:
  """One table row per configuration of one batch size, compared with the first (the baseline);
  quality from every prompt, tokens/s from the first `timed`."""
  base_tokens = results[chosen[0].name][0]
  reference = medians.get(REFERENCE)
  rows = []
  for c in chosen:
    tokens, nfe, committed, lengths = results[c.name]
    same = tokens == base_tokens
    curve, decoding = per_forward(committed, nfe)
    made = lengths if task is not None else np.full_like(nfe, gen_length)  # Tokens per row.
    extra = {} if task is None else {"accuracy": _score(tokenizer, problems, tokens, lengths),
                                     "mean length": float(lengths.mean())}
    if judged is not None:
      extra["judge bpb"] = judge_bits_per_byte(judged, tokenizer, prompts, tokens)
    rows.append({"batch": batch_size, "config": c.name, **extra, "NFE": float(nfe.mean()),
                 "tokens/forward": float(np.mean(made / nfe)),
                 "tokens/s": float(made[:timed].sum()) / medians[c.name],
                 "speedup": medians[chosen[0].name] / medians[c.name],
                 **({} if reference is None else {"vs threshold+dual": reference / medians[c.name]}),
                 "agreement": float(same.mean()), "rows equal": float(same.all(axis=1).mean()),
                 "distinct 4-grams": distinct_ngrams(tokens),
                 "compile s": max(first_call[c.name] - medians[c.name] * len(made) / timed, 0.0),
                 # Forwards by kind from every row; the time outside the model from the timed.
                 **decomposition(c, counts[c.name], nfe, block_length, costs, medians[c.name],
                                 block_causal),
                 "outside model": decomposition(
                     c, _timed_counts(counts[c.name], timed, batch_size), nfe[:timed],
                     block_length, costs, medians[c.name], block_causal)["outside model"],
                 "forward ms": {str(k): 1e3 * v for k, v in costs.items()},
                 "tokens per forward by step": curve, "rows by step": decoding})
  return rows


def _print_header(model_path, model, prompts, prompt_tokens, task, judge, gen_length, block_length,
                  repeats, baseline, cost_lines, timed_prompts) -> None:
  """What the table measured, and how ('judge': the AR model that scored continuations, or None)."""
  what = (f"{len(prompts)} held-out prompts of <= {prompt_tokens} tokens"
          + (f" (continuations scored by {judge} in bits per byte)" if judge else "")
          if task is None else
          f"{len(prompts)} {task} test problems (rows stop at their answer's EOS block; tokens "
          "are the answer's)")
  print(f"bench diffusion: {model_path} ({model.config.num_params / 1e6:.2f}M params), {what}, "
        f"gen {gen_length}, block {block_length}, greedy, median of {repeats} interleaved runs"
        + ("" if timed_prompts is None or timed_prompts >= len(prompts) else
           f" of the first {timed_prompts} (whole batches; quality from all)")
        + f"; speedup and agreement vs '{baseline}' at the same batch size")
  print("forwards per row by kind: a cache's block-start refresh, its cached window steps, full "
        "canvas forwards (no cache), a scheduler's lookaheads; 'outside model': the share of the "
        "time not spent in forwards (each batched forward priced at its kind's cost: "
        + "; ".join(cost_lines) + ")")


def _load_judge(judge: str | None, model: Model) -> Model | None:
  """The AR model that scores code continuations (None: off); it must share the tokenizer."""
  if judge is None:
    return None
  judged = jaxdec.load(judge, dtype=np.float32)
  if judged.config.vocab_size != model.config.vocab_size:
    raise ValueError(f"judge {judge} has {judged.config.vocab_size} ids, the model "
                     f"{model.config.vocab_size}: it must share the tokenizer")
  return judged


def _runner(model: Model, c: Config, batches: list, gen_length: int, block_length: int,
            task: str | None) -> Callable:
  """A callable that decodes `batches` with configuration `c` (rows stop early on a task)."""
  def go():
    outs = [jaxdec.diffusion_generate(model, b, gen_length=gen_length, block_length=block_length,
                                      steps=c.steps(gen_length), scheduler=c.scheduler,
                                      cache=c.cache, stop_tokens=() if task is None else None,
                                      stop_early=task is not None)
            for b in batches]
    return jax.block_until_ready(outs)
  return go


def run(model_path: str | None = None, batch_sizes=(1,), num_prompts: int = 4,
        gen_length: int | None = None, block_length: int = 32, prompt_tokens: int = 128,
        repeats: int = 3, names: list[str] | None = None, out: str | None = None,
        plot: bool = False, task: str | None = None, judge: str | None = "zoo:pycode-ar",
        timed_prompts: int | None = None, baseline: str = BASELINE) -> dict:
  """Time every configuration (or those in `names`) against `baseline`, per batch size;
  `plot` also writes `figures(record)` as PNGs next to `out`. Left out, the model and gen_length
  are the task's (code: zoo:pycode-dlm, 256; gsm-synth: zoo:gsm-dlm, 448). On code, `judge` (an
  AR model with the same tokenizer; None: off) scores every configuration's continuations in
  bits per byte.

  Quality (accuracy, agreement, NFE, tokens per forward) comes from one pass over all
  `num_prompts`; the timed, interleaved repeats run the first `timed_prompts` (rounded up to
  whole batches; None: all), since accuracy needs hundreds of problems and a speed ratio does
  not. On a block-causal model (gsm-dlm) 'LLaDA steps=G + dual' gives LLaDA's tokens exactly
  (its cache is exact), so it may stand in as the baseline where the uncached run is too slow to
  score many problems (the uncached one's 'rows equal' shows it)."""
  check_plot(plot, out)
  if timed_prompts is not None and (isinstance(timed_prompts, bool) or
                                    not isinstance(timed_prompts, int) or timed_prompts < 1):
    raise ValueError(f"timed_prompts must be None or an int >= 1, got {timed_prompts!r}")
  chosen = _chosen(names, baseline)
  if model_path is None:
    model_path = "zoo:pycode-dlm" if task is None else "zoo:gsm-dlm"
  model, tokenizer = load_bench_model(model_path)
  prompts, problems = _prompts(tokenizer, num_prompts, prompt_tokens, model.config.vocab_size,
                               task)
  if gen_length is None:
    from jaxdec.tasks import gsm_synth

    gen_length = 256 if task is None else gsm_synth.GEN_LENGTH
  judged = None if task is not None or tokenizer is None else _load_judge(judge, model)
  known = [c.name for c in chosen]
  timer = Timer()
  rows, cost_lines = [], []
  for batch_size in batch_sizes:
    batches = [prompts[i: i + batch_size] for i in range(0, len(prompts), batch_size)]
    timed = min(len(prompts), -(-(timed_prompts or len(prompts)) // batch_size) * batch_size)

    run_all = lambda c, some=batches: _runner(model, c, some, gen_length, block_length, task)
    results, first_call, counts = _first_calls({c.name: run_all(c) for c in chosen})
    medians = timer.interleaved({c.name: run_all(c, batches[: -(-timed // batch_size)])
                                 for c in chosen}, repeats)
    costs = forward_costs(model, min(batch_size, len(prompts)), max(len(p) for p in prompts),
                          gen_length, {block_length * c.scheduler.windows for c in chosen},
                          timer, repeats)
    cost_lines.append(f"batch {batch_size}: " + ", ".join(
        f"{k if isinstance(k, str) else f'cached {k[1]}'} {1e3 * v:.1f} ms"
        for k, v in costs.items()))
    rows += _rows(chosen, batch_size, results, counts, first_call, medians, costs, task=task,
                  tokenizer=tokenizer, problems=problems, judged=judged, prompts=prompts,
                  gen_length=gen_length, block_length=block_length,
                  block_causal=isinstance(model.config.attention, BlockCausal), timed=timed)
  _print_header(model_path, model, prompts, prompt_tokens, task, judge if judged is not None
                else None, gen_length, block_length, repeats, known[0], cost_lines, timed_prompts)
  columns = ["batch", "config", *(["accuracy", "mean length"] if task else []),
             *(["judge bpb"] if judged is not None else []), "NFE",
             "tokens/forward", "tokens/s", "speedup",
             *(["vs threshold+dual"] if REFERENCE in known else []), "agreement", "rows equal",
             "distinct 4-grams", "compile s", "refresh fwd", "cached fwd", "full fwd",
             "lookahead fwd", "outside model"]
  return report(rows, columns, timer, {
      "suite": "diffusion", "task": task, "model": model_path, "params": model.config.num_params,
      "prompts": len(prompts), "prompt_tokens": prompt_tokens, "gen_length": gen_length,
      "block_length": block_length, "repeats": repeats, "baseline": known[0],
      "timed_prompts": min(len(prompts), timed_prompts or len(prompts))}, out,
      figures if plot else None)


# Rows for `jaxdec demo` (merged by jaxdec.demo.run; each fn(models, prompts, new_tokens) ->
# (tokens i32[B, T], lengths i32[B], forwards i32[B])); they need models["dlm"] = pycode-dlm.

def _demo(scheduler, cache, block_length: int = 32):
  def method(models, prompts, new_tokens):
    gen = -(-new_tokens // block_length) * block_length
    out = jaxdec.diffusion_generate(models["dlm"], prompts, gen_length=gen,
                                    block_length=block_length, steps=gen, scheduler=scheduler,
                                    cache=cache)
    return out.tokens, out.lengths, out.stats["nfe"]
  return method


DEMO_METHODS = {
    "diffusion LLaDA, steps = length (pycode-dlm)": _demo(FixedSteps(), None),
    "diffusion threshold 0.9 + dual cache (pycode-dlm)": _demo(Threshold(0.9), DualCache()),
}


# ---- `jaxdec bench diffusion` -------------------------------------------------------------------

HELP = "diffusion schedulers x caches vs the LLaDA baseline"


def add_arguments(parser) -> None:
  """`jaxdec bench diffusion`'s flags (the CLI adds the multi-process ones)."""

  parser.add_argument("--model",
                      help="'random' (seeded, pycode-dlm's size), zoo:NAME or a checkpoint dir "
                           "(left out: zoo:pycode-dlm, with --task gsm-synth zoo:gsm-dlm)")
  parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1],
                      help="batch sizes to measure")
  parser.add_argument("--prompts", type=int, default=4,
                      help="held-out code prompts (or task problems)")
  parser.add_argument("--task", choices=("gsm-synth",),
                      help="prompts from this task's test problems, with an accuracy column "
                           "(rows stop at their answer's EOS)")
  parser.add_argument("--judge", default="zoo:pycode-ar",
                      help="on code prompts: an AR model sharing the tokenizer that scores every "
                           "configuration's continuations in bits per byte ('none': off)")
  parser.add_argument("--gen-length", type=int,
                      help="canvas tokens per prompt (left out: 256, or the task's, gsm-synth "
                           "448)")
  parser.add_argument("--block-length", type=int, default=32, help="tokens a block")
  parser.add_argument("--repeats", type=int, default=3, help="timed runs (interleaved; medians)")
  parser.add_argument("--configs", nargs="*",
                      help="run only these configurations (names as printed)")
  parser.add_argument("--baseline", default="LLaDA steps=G",
                      help="the configuration the others are compared with (on a block-causal "
                           "model such as zoo:gsm-dlm, 'LLaDA steps=G + dual' gives the same "
                           "tokens)")
  parser.add_argument("--timed-prompts", type=int,
                      help="time only the first N prompts (quality still from all --prompts; "
                           "left out: all)")
  add_output_flags(parser, "diffusion",
                   "OUT_speedup.png (speedup over the baseline per configuration) and "
                   "OUT_tokens_per_forward.png")


def main(args) -> int:
  """`jaxdec bench diffusion`: `run` with the parsed flags."""
  run(args.model, batch_sizes=tuple(args.batch_sizes), num_prompts=args.prompts,
      gen_length=args.gen_length, block_length=args.block_length, repeats=args.repeats,
      names=args.configs, out=args.out, plot=args.plot, task=args.task,
      judge=None if args.judge == "none" else args.judge, timed_prompts=args.timed_prompts,
      baseline=args.baseline)
  return 0
