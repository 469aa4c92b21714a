"""SSR's rows for `jaxdec bench spec --task gsm-synth`: the whole run (a row like the other
drafters') and a phase table, reasoning and answer timed apart.

Greedy AR's phases are cut at the same token SSR's are (the end of "</think>\\n"): its reasoning
time is greedy AR run with that many new tokens, through the same compiled loop (same buffers)
as the full run, and its answer time is the full run's minus that. SSR's phases are its two
jitted functions timed on their own. Batch 1, prompt by prompt, medians of interleaved repeats.
"""

from __future__ import annotations

import functools

import jax
import numpy as np

import jaxdec
from jaxdec import ar, decoding, spec
from jaxdec.bench.common import Timer, format_table

BUDGETS = tuple(range(32, 448, 32))  # A partial answer at every 32 reasoning tokens (line end).
NUM_TOKENS = 3  # Drafted per answer step: each verified token costs compute on a CPU (with
# gsm-ar here a forward of 2 / 4 / 5 tokens costs 1.2x / 1.4x / 1.5x one of 1); answer latency vs
# greedy AR on 24 problems: 0.89 / 0.82 / 0.96 with 2 / 3 / 4 drafted.


def settings(tokenizer, budgets=BUDGETS, num_tokens: int = NUM_TOKENS) -> spec.SSR:
  return spec.SSR.for_tokenizer(tokenizer, budgets, answer_tokens=64, num_tokens=num_tokens)


def label(ssr: spec.SSR) -> str:
  step = np.diff(np.asarray(ssr.budgets))
  every = f"every {int(step[0])}" if step.size and (step == step[0]).all() else "at budgets"
  return f"jaxdec SSR (partial answers {every} tokens, {ssr.num_tokens} drafted)"


def run_rows(model, ssr: spec.SSR, prompts, new_tokens: int):
  """Per prompt (tokens, target forwards, accepted), as `bench.spec._run_jaxdec`."""
  outs = []
  for p in prompts:
    out = jaxdec.ssr_generate(model, [p], ssr, max_new_tokens=new_tokens)
    jax.block_until_ready(out.tokens)
    outs.append((np.asarray(out.tokens[0, : int(out.lengths[0])]), int(out.stats["nfe"][0]),
                 out.stats["accepted"]))
  return outs


def _resume(reasoned, known: int, slots: int):
  """(row, length, buffer): the prompt plus its reasoning, 64-padded, from which greedy AR decodes
  the answer alone with the rest of the full run's `slots` cache slots (so its steps attend over
  as many as the full run's)."""
  width = -(-known // 64) * 64
  row = np.zeros((1, width), np.int32)
  row[0, :known] = np.asarray(reasoned.seq[0, :known])
  return row, np.asarray([known], np.int32), slots - width


def phases(model, ssr: spec.SSR, prompts, new_tokens: int, repeats: int,
           timer: Timer) -> list[dict]:
  """Greedy AR vs SSR, reasoning and answer phases timed apart (module docstring)."""
  config, pad = model.config, decoding.pad_id(model.config)
  buffer_len = decoding.bucket(new_tokens)
  jobs = [spec.ssr.prepare(model, [p], ssr, new_tokens) for p in prompts]
  inputs = [(*job.per_row, *job.args[:2]) for job in jobs]  # (prompt, lengths, budget, stops)
  d = decoding.Decoding(sampling=None, key=None, stop_tokens=inputs[0][3], pad_id=pad)
  static = dict(config=config, ssr=ssr, buffer_len=buffer_len)
  ssr_reason = jax.jit(functools.partial(spec.ssr.ssr_reason, **static))
  ssr_answer = jax.jit(functools.partial(spec.ssr.ssr_answer, **static))

  @functools.lru_cache(maxsize=None)
  def plain(buffer: int):  # Greedy AR compiled for `buffer` new tokens.
    return jax.jit(functools.partial(ar.generate, config=config, buffer_len=buffer, pad_id=pad))

  def reason(i):
    prompt, lengths, budget, _ = inputs[i]
    return ssr_reason(model.params, d, prompt, lengths, budget)

  reasoned = [jax.block_until_ready(reason(i)) for i in range(len(prompts))]
  cut = [int(r.total[0] - inp[1][0]) for r, inp in zip(reasoned, inputs)]  # To "</think>\n".

  def answer(i):
    return ssr_answer(model.params, d, reasoned[i])

  def greedy(i, tokens):
    prompt, lengths, _, stops = inputs[i]
    return plain(buffer_len)(model.params, prompt, lengths, np.int32(tokens), None, stops)

  resumes = [_resume(r, len(p) + c, inp[0].shape[1] + buffer_len)
             for p, r, c, inp in zip(prompts, reasoned, cut, inputs)]

  def resumed(i, tokens):
    row, known, buffer = resumes[i]
    return plain(buffer)(model.params, row, known, np.int32(min(tokens, buffer)), None,
                         inputs[i][3])

  def each(fn):
    return lambda: [jax.block_until_ready(fn(i)) for i in range(len(prompts))]

  fns = {"AR": each(lambda i: greedy(i, new_tokens)),
         "AR reasoning": each(lambda i: greedy(i, cut[i])),
         "AR answer": each(lambda i: resumed(i, new_tokens - cut[i])),
         "AR answer prefill": each(lambda i: resumed(i, 1)),
         "SSR reasoning": each(reason), "SSR answer": each(answer)}
  outs = {name: fn() for name, fn in fns.items()}  # Compile, and keep the outputs.
  same = all(np.array_equal(np.asarray(a.tokens), np.asarray(b.tokens))
             and int(a.lengths[0]) == int(b.lengths[0])
             for a, b in zip(outs["AR"], outs["SSR answer"]))
  t = timer.interleaved(fns, repeats)
  stats = [{k: np.asarray(v)[0] for k, v in o.stats.items() if np.ndim(v)}
           for o in outs["SSR answer"]]
  first = [int(s["accepted"][0]) for s in stats if s["accepted"][0] >= 0]
  answer_tokens = sum(int(s["answer_length"]) for s in stats)
  answer_forwards = sum(int(s["answer_forwards"]) for s in stats)
  plain_answer = t["AR answer"] - t["AR answer prefill"]
  rows = [
      {"method": "greedy AR", "reasoning s": t["AR reasoning"], "answer s": plain_answer,
       "total s": t["AR"], "answer tau": 1.0, "answer latency vs AR": 1.0,
       "total vs AR": 1.0},
      {"method": label(ssr), "reasoning s": t["SSR reasoning"], "answer s": t["SSR answer"],
       "total s": t["SSR reasoning"] + t["SSR answer"],
       "answer tau": answer_tokens / max(answer_forwards, 1),
       "answer latency vs AR": t["SSR answer"] / plain_answer,
       "total vs AR": (t["SSR reasoning"] + t["SSR answer"]) / t["AR"],
       "first answer step accepted": float(np.mean(first)) if first else 0.0,
       "partial answers": float(np.mean([int(s["partial_answers"]) for s in stats])),
       "same as AR": same},
  ]
  return rows


PHASE_COLUMNS = ["method", "reasoning s", "answer s", "total s", "answer tau",
                 "first answer step accepted", "partial answers", "answer latency vs AR",
                 "total vs AR", "same as AR"]


def print_phases(rows: list[dict], prompts: int, repeats: int) -> None:
  print(f"SSR phases: {prompts} gsm-synth test problems, batch 1, median of {repeats}; greedy "
        f"AR's phases cut where SSR's are (after '</think>\\n')")
  print(format_table(rows, PHASE_COLUMNS))
