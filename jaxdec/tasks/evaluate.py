"""Exact-match evaluation of any decoder on a task's problems (`jaxdec eval --task`, the task
columns of `jaxdec bench`).

A decoder is `fn(prompts: list of token-id lists) -> DecodeOutput`, so greedy, sampled,
speculative and diffusion decoding are scored by the same code. Completions are cut at the
first stop token (`DecodeOutput.lengths`) and scored with the task's `extract_answer`. Timing
leaves compilation out: the first batch is decoded once before the clock starts.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Hashable, Sequence

import jax
import numpy as np

from jaxdec.tasks import gsm_synth


@dataclasses.dataclass
class Result:
  """Per-problem outcomes of one decoder on one list of problems."""

  problems: list
  completions: list[str]
  correct: list[bool]
  lengths: np.ndarray  # i32[N]: generated tokens up to and including the first stop token.
  forwards: np.ndarray  # i32[N]: target forwards per problem (diffusion: NFE).
  seconds: float  # Wall time of the timed pass (compilation excluded).

  @property
  def accuracy(self) -> float:
    return float(np.mean(self.correct))

  @property
  def tokens_per_forward(self) -> float:
    """Answer tokens (to the first stop token) per target forward, over all problems."""
    return float(self.lengths.sum() / max(int(self.forwards.sum()), 1))

  @property
  def tokens_per_second(self) -> float:
    return float(self.lengths.sum() / self.seconds)

  def by(self, key: Callable[[object], Hashable]) -> dict:
    """{group: (accuracy, problems)} for groups of problems keyed by `key(problem)`."""
    groups: dict = {}
    for problem, ok in zip(self.problems, self.correct):
      groups.setdefault(key(problem), []).append(ok)
    return {k: (float(np.mean(v)), len(v)) for k, v in sorted(groups.items())}

  def summary(self) -> dict:
    return {"problems": len(self.problems), "accuracy": self.accuracy,
            "mean length": float(self.lengths.mean()), "NFE": float(self.forwards.mean()),
            "tokens/forward": self.tokens_per_forward, "tokens/s": self.tokens_per_second}


def solve(decode: Callable, tokenizer, problems: Sequence, batch_size: int = 32,
          extract: Callable[[str], int | None] = gsm_synth.extract_answer,
          group_by: Callable[[object], float] | None = None) -> Result:
  """Decode every problem's prompt (BOS first, as the zoo trains) in batches of `batch_size`
  (a short last batch is padded with copies, so one program serves all) and score it.

  `group_by(problem)` (e.g. the reference solution's length) orders the problems before they
  are cut into batches, so that a batch holds similar lengths and a decoder that stops once every
  row has its EOS stops sooner; the Result keeps the given order. Rows are decoded independently,
  so answers do not depend on it."""
  if not problems:
    raise ValueError("solve needs at least one problem")
  if batch_size < 1:
    raise ValueError(f"batch_size must be >= 1, got {batch_size}")
  if group_by is not None:
    order = sorted(range(len(problems)), key=lambda i: group_by(problems[i]))
    result = solve(decode, tokenizer, [problems[i] for i in order], batch_size, extract)
    back = np.argsort(order)
    return Result(list(problems), [result.completions[i] for i in back],
                  [result.correct[i] for i in back], result.lengths[back], result.forwards[back],
                  result.seconds)
  prompts = [tokenizer.encode(p.prompt) for p in problems]
  batches = [prompts[i: i + batch_size] for i in range(0, len(prompts), batch_size)]
  full = lambda b: b + [b[-1]] * (batch_size - len(b)) if len(prompts) > batch_size else b
  jax.block_until_ready(decode(full(batches[0])).tokens)  # Compile outside the clock.
  start, outs = time.perf_counter(), []
  for batch in batches:
    out = decode(full(batch))
    outs.append((np.asarray(out.tokens)[: len(batch)], np.asarray(out.lengths)[: len(batch)],
                 np.asarray(out.stats["nfe"])[: len(batch)]))
  seconds = time.perf_counter() - start
  tokens = [row for t, _, _ in outs for row in t]
  lengths = np.concatenate([n for _, n, _ in outs])
  completions = [tokenizer.decode(row[: int(n)].tolist()) for row, n in zip(tokens, lengths)]
  correct = [extract(text) == p.answer for text, p in zip(completions, problems)]
  return Result(list(problems), completions, correct, lengths,
                np.concatenate([f for _, _, f in outs]), seconds)


def calibrate(decoders: dict[str, Callable], tokenizer, problems: Sequence, baseline: str,
              tolerance: float = 0.01, **solve_kw) -> tuple[str, dict[str, Result]]:
  """Pick an operating point the way CORA-Diff reports one: solve a calibration split (e.g.
  gsm-synth's `validation`) with the `baseline` decoder and every candidate in `decoders`
  (name -> decode), and return the candidate with the fewest forwards per problem among those
  whose accuracy is at least the baseline's less `tolerance`, with every Result. Freeze that
  choice, then report it on the test split."""
  if baseline not in decoders:
    raise ValueError(f"baseline {baseline!r} is not one of the decoders {sorted(decoders)}")
  if not 0 <= tolerance <= 1:
    raise ValueError(f"tolerance must be in [0, 1], got {tolerance}")
  results = {name: solve(decode, tokenizer, problems, **solve_kw)
             for name, decode in decoders.items()}
  floor = results[baseline].accuracy - tolerance
  kept = [n for n, r in results.items() if r.accuracy >= floor - 1e-12]
  return min(kept, key=lambda n: results[n].forwards.mean()), results
