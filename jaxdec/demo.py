"""`jaxdec demo`: complete held-out code with the shipped zoo and tabulate what each method costs.

Each method is one row of the table; the speculative and diffusion suites contribute theirs.
"""

from __future__ import annotations

import sys
import time
from typing import Callable

import jax
import numpy as np

import jaxdec
from jaxdec.bench.common import format_table
from jaxdec.corpus import held_out_prompts


def _ar(sampling=None):
  def method(models, prompts, new_tokens):
    out = jaxdec.generate(models["ar"], prompts, max_new_tokens=new_tokens, sampling=sampling,
                          key=None if sampling is None else jax.random.key(0))
    return out.tokens, out.lengths, out.stats["nfe"]

  return method


def methods() -> dict[str, Callable]:
  """name -> fn(models, prompts, new_tokens) -> (tokens i32[B, T], lengths i32[B], forwards i32[B])."""
  from jaxdec.bench import diffusion, spec

  # The printed completions come from the first row: at 4M parameters greedy decoding repeats lines.
  return {"sampled AR, T=0.7 top-p 0.9 (pycode-ar)": _ar(jaxdec.Sampling.create(0.7, top_p=0.9)),
          "greedy AR (pycode-ar)": _ar(), **spec.DEMO_METHODS, **diffusion.DEMO_METHODS}


def run(num_prompts: int = 3, new_tokens: int = 64, show: int = 2) -> list[dict]:
  models = {"ar": jaxdec.load("zoo:pycode-ar"), "draft": jaxdec.load("zoo:pycode-draft"),
            "dlm": jaxdec.load("zoo:pycode-dlm")}
  tok = jaxdec.load_tokenizer("zoo:pycode-ar")
  prompts = held_out_prompts(tok, num_prompts, prompt_tokens=128)
  rows = []
  for name, method in methods().items():
    method(models, prompts, new_tokens)  # Compile.
    t0 = time.perf_counter()
    tokens, lengths, forwards = jax.block_until_ready(method(models, prompts, new_tokens))
    elapsed = time.perf_counter() - t0
    lengths = np.asarray(lengths)
    rows.append({"method": name, "tokens": int(lengths.sum()),
                 "forwards": int(np.asarray(forwards).sum()),
                 "tokens/forward": float(lengths.sum() / max(np.asarray(forwards).sum(), 1)),
                 "tokens/s": float(lengths.sum() / elapsed)})
    if len(rows) == 1:
      for i in range(min(show, len(prompts))):
        tail = "\n".join(tok.decode(prompts[i]).split("\n")[-4:])
        completion = tok.decode(np.asarray(tokens[i, : lengths[i]]))
        bold, plain = ("\033[1m", "\033[0m") if sys.stdout.isatty() else ("", "")
        print(f"--- held-out prompt {i} (last lines; completion in bold) ---\n{tail}{bold}{completion}{plain}\n")
  print(format_table(rows, ["method", "tokens", "forwards", "tokens/forward", "tokens/s"]))
  return rows
