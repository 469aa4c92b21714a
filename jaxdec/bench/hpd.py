"""`jaxdec bench hpd`: Hyper-Parallel Decoding (`jaxdec.parallel_generate`) against (a) every
`context + query` as its own row of one batched `jaxdec.generate` call and (b) one query at a
time, at several query counts, timed interleaved in one run. HPD runs twice: every document
stacked in one row, and one document per row (`rows=`).

Testbeds: code (zoo:pycode-ar; a held-out standard-library module's header as the context, its
functions' signature lines as queries, `jaxdec.tasks.code_queries`; more queries than one module
offers come from further modules, stacked as documents in the same row) and gsm-synth
(zoo:gsm-ar; stories with several independent questions, `gsm_synth.multi_question`, scored).
Every HPD output is checked token for token against both baselines. The ceiling column is what
one forward of all N queries' tokens costs against one of a single token on this machine
(N / that ratio is the most HPD can gain over one at a time: a CPU's forward grows with its
tokens, an accelerator's hardly does at these sizes).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

import jaxdec
from jaxdec import decoding
from jaxdec.bench.common import Timer, add_output_flags, report
from jaxdec.model import KVCache, forward
from jaxdec.tasks import code_queries, gsm_synth

TASKS = ("code", "gsm-synth")
_DEFAULTS = {"code": ("zoo:pycode-ar", 32, (4, 16, 64)),
             "gsm-synth": ("zoo:gsm-ar", gsm_synth.GEN_LENGTH, (4, 16))}
PER_DOCUMENT = {"code": 8, "gsm-synth": 16}  # Queries of one document at most (few held-out
# modules have more than 8 functions).
CONTEXT_CHARS = 300  # Code context: the header's last characters (pycode-ar has 256 positions).


def _code(tokenizer, count: int, seed: int):
  """(documents [(context ids, [query ids])], None): modules of up to 8 queries each."""
  most = PER_DOCUMENT["code"]
  modules = math.ceil(count / most)
  per = [most] * (modules - 1) + [count - most * (modules - 1)]
  docs = code_queries.stdlib_queries(min(count, most), modules, seed=seed,
                                     context_chars=CONTEXT_CHARS)
  return [(tokenizer.encode(d.context),
           [tokenizer.encode(q, add_bos=False) for q in d.queries[:k]])
          for d, k in zip(docs, per)], None


def _gsm(tokenizer, count: int, seed: int):
  """(documents, problems): stories of up to 16 questions."""
  stories = math.ceil(count / PER_DOCUMENT["gsm-synth"])
  k = count // stories
  docs, problems = [], []
  for story in gsm_synth.multi_question("test", stories, k, seed):
    docs.append((tokenizer.encode(story.context),
                 [tokenizer.encode(q, add_bos=False) for q in story.queries]))
    problems += story.problems
  return docs, problems


def _forwards(model, tokens: int, slots: int, count: int = 32):
  """A callable: `count` cached forwards of `tokens` new tokens over `slots` cache slots (batch
  1) in one compiled loop, as a decode loop runs them."""
  config = model.config
  cache = KVCache.init(config, 1, slots, dtype=model.params.embed.dtype)
  cache = cache.with_length(jnp.asarray([slots - tokens], jnp.int32))
  ids = jnp.zeros((1, tokens), jnp.int32)

  @jax.jit
  def run(params, cache):
    def body(_, carry):
      cache, total = carry
      logits, _, new = forward(params, ids, ids, cache, config=config)
      return new.with_length(cache.length), total + logits[0, 0, 0]
    return jax.lax.fori_loop(0, count, body, (cache, jnp.zeros((), jnp.float32)))[1]

  return lambda: jax.block_until_ready(run(model.params, cache))


def _cut(tokens, lengths):
  return [np.asarray(t[: int(n)]) for t, n in zip(tokens, lengths)]


def _measure(model, tokenizer, task: str, count: int, new_tokens: int, seed: int, timer: Timer,
             repeats: int) -> dict:
  """One table row: `count` queries decoded each way, timed interleaved, checked for identity."""
  docs, problems = (_code if task == "code" else _gsm)(tokenizer, count, seed)
  prompts = [list(c) + list(q) for c, qs in docs for q in qs]
  contexts = [list(c) for c, _ in docs]
  queries = [[list(q) for q in qs] for _, qs in docs]
  fns = {
      "HPD": lambda: jaxdec.parallel_generate(model, contexts, queries, new_tokens),
      # The same documents one per row: a batch of packed rows, each attending over its own.
      "HPD, a row per document": lambda: jaxdec.parallel_generate(
          model, contexts, queries, new_tokens, rows=len(docs)),
      "batched": lambda: jaxdec.generate(model, prompts, new_tokens),
      "one at a time": lambda: [jaxdec.generate(model, [p], new_tokens) for p in prompts],
  }
  # What one forward of all queries' tokens costs against one of a single token, over the
  # keys one stream attends to (its prompt and new tokens): the most HPD can gain over one at
  # a time on this machine (an accelerator runs both in about the same time).
  slots = decoding.bucket(max(len(p) for p in prompts) + new_tokens)
  fns["forward of N tokens"] = _forwards(model, len(prompts), slots)
  fns["forward of 1 token"] = _forwards(model, 1, slots)
  outs = {name: jax.block_until_ready(fn()) for name, fn in fns.items()}  # Compile + keep.
  medians = timer.interleaved(fns, repeats)
  forward_ratio = medians["forward of N tokens"] / medians["forward of 1 token"]
  hpd = _cut(outs["HPD"].tokens, outs["HPD"].lengths)
  per_row = _cut(outs["HPD, a row per document"].tokens, outs["HPD, a row per document"].lengths)
  batched = _cut(outs["batched"].tokens, outs["batched"].lengths)
  alone = [_cut(o.tokens, o.lengths)[0] for o in outs["one at a time"]]
  tokens = sum(len(t) for t in hpd)
  row = {
      "queries": len(prompts), "documents": len(docs), "new tokens": tokens,
      "HPD s": medians["HPD"], "batched s": medians["batched"],
      "one at a time s": medians["one at a time"],
      "HPD vs batched": medians["batched"] / medians["HPD"],
      "HPD vs one at a time": medians["one at a time"] / medians["HPD"],
      "row per document s": medians["HPD, a row per document"],
      "row per document vs batched": medians["batched"] / medians["HPD, a row per document"],
      "row per document vs one at a time": (medians["one at a time"]
                                            / medians["HPD, a row per document"]),
      "HPD tokens/forward": float(np.mean(outs["HPD"].stats["tokens_per_forward"])),
      "forward of N / of 1": forward_ratio,
      "ceiling vs one at a time": len(prompts) / forward_ratio,
      "same as batched": all(np.array_equal(a, b) for a, b in zip(hpd, batched))
                         and all(np.array_equal(a, b) for a, b in zip(per_row, batched)),
      "same as alone": all(np.array_equal(a, b) for a, b in zip(hpd, alone)),
  }
  if problems is not None:
    row["accuracy"] = gsm_synth.score([tokenizer.decode(t.tolist()) for t in hpd], problems)
  return row


def run(task: str = "code", model_path: str | None = None, counts=None,
        new_tokens: int | None = None, repeats: int = 3, seed: int = 0,
        out: str | None = None) -> dict:
  """HPD vs batched rows vs one query at a time for each query count in `counts` (left out:
  the task's model, new tokens and counts: code zoo:pycode-ar, 32, (4, 16, 64); gsm-synth
  zoo:gsm-ar, 448, (4, 16))."""
  if task not in TASKS:
    raise ValueError(f"task must be one of {TASKS}, got {task!r}")
  default_model, default_tokens, default_counts = _DEFAULTS[task]
  model_path = model_path or default_model
  new_tokens = new_tokens or default_tokens
  counts = tuple(counts or default_counts)
  if not counts or any(not isinstance(c, int) or c < 1 for c in counts):
    raise ValueError(f"counts must be positive ints, got {counts!r}")
  model, tokenizer = jaxdec.load(model_path), jaxdec.load_tokenizer(model_path)
  timer = Timer()
  rows = [_measure(model, tokenizer, task, count, new_tokens, seed, timer, repeats)
          for count in counts]
  columns = ["queries", "documents", *(["accuracy"] if task == "gsm-synth" else []),
             "new tokens", "HPD s", "batched s", "one at a time s", "HPD vs batched",
             "HPD vs one at a time", "row per document s", "row per document vs batched",
             "row per document vs one at a time", "HPD tokens/forward", "forward of N / of 1",
             "ceiling vs one at a time", "same as batched", "same as alone"]
  print(f"bench hpd: {task}, {model_path}, up to {new_tokens} new tokens per query, greedy, "
        f"median of {repeats} interleaved runs")
  return report(rows, columns, timer, {"suite": "hpd", "task": task, "model": model_path,
                                       "new_tokens": new_tokens, "repeats": repeats}, out)


def _demo(models, prompts, new_tokens):
  """The demo's prompts as queries after a shared context (their common prefix, at least the
  BOS token): one row for all of them."""
  shared = 0
  while all(len(p) > shared + 1 and p[shared] == prompts[0][shared] for p in prompts):
    shared += 1
  shared = max(shared, 1)
  out = jaxdec.parallel_generate(models["ar"], list(prompts[0][:shared]),
                                 [list(p[shared:]) for p in prompts], new_tokens)
  return out.tokens, out.lengths, np.broadcast_to(out.stats["nfe"][0], (len(prompts),))


DEMO_METHODS = {"HPD: all prompts in one row (pycode-ar)": _demo}


# ---- `jaxdec bench hpd` -------------------------------------------------------------------------

HELP = ("Hyper-Parallel Decoding (many queries over one context in one row) vs batched rows vs one "
        "query at a time")


def add_arguments(parser) -> None:
  """`jaxdec bench hpd`'s flags (the CLI adds the multi-process ones)."""
  parser.add_argument("--task", choices=("code", "gsm-synth"), default="code",
                      help="code: a module header + its function signatures (zoo:pycode-ar); "
                           "gsm-synth: stories with several questions (zoo:gsm-ar), scored")
  parser.add_argument("--model", help="left out: the task's zoo model")
  parser.add_argument("--queries", type=int, nargs="+",
                      help="query counts, one table row each (left out: code 4 16 64, gsm-synth "
                           "4 16)")
  parser.add_argument("--new-tokens", type=int,
                      help="tokens per query at most (left out: code 32, gsm-synth 448)")
  parser.add_argument("--repeats", type=int, default=3, help="timed runs (interleaved; medians)")
  add_output_flags(parser, "hpd")


def main(args) -> int:
  """`jaxdec bench hpd`: `run` with the parsed flags."""
  run(args.task, args.model, counts=args.queries, new_tokens=args.new_tokens,
      repeats=args.repeats, out=args.out)
  return 0
