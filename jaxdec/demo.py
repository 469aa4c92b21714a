"""`jaxdec demo`: complete held-out code with the shipped zoo and tabulate what each method costs;
then solve one gsm-synth problem by greedy AR, speculative decoding and parallel diffusion (each
with its gsm-synth zoo model, where installed), answers checked.

Each method is one row of the table; the speculative and diffusion suites contribute theirs.
"""

from __future__ import annotations

import sys
import time
from typing import Callable

import jax
import numpy as np

import jaxdec
from jaxdec import zoo
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
  from jaxdec.bench import diffusion, hpd, spec

  # The printed completions come from the first row: at 4M parameters greedy decoding repeats lines.
  return {"sampled AR, T=0.7 top-p 0.9 (pycode-ar)": _ar(jaxdec.Sampling.create(0.7, top_p=0.9)),
          "greedy AR (pycode-ar)": _ar(), **spec.DEMO_METHODS, **hpd.DEMO_METHODS,
          **diffusion.DEMO_METHODS}


COLUMNS = ["method", "tokens", "forwards", "tokens/forward", "tokens/s"]


def number(value) -> str:
  """The demo's one number format: thousands separated, floats to two decimals."""
  return f"{value:,.2f}" if isinstance(value, float) else f"{value:,}"


def legend(num_prompts: int, new_tokens: int) -> str:
  """What the table's columns count."""
  return (f"{num_prompts} held-out prompts x {new_tokens} new tokens (fewer where a row ends at "
          "EOS; diffusion fills whole blocks).\nforwards: target-model forward passes, prefill "
          "included (speculative: the target's, not the drafter's; diffusion: passes over the "
          "canvas).\ntokens/forward = tokens / forwards; tokens/s after compiling.")


def _show(tok, prompt, completion, method: str, index: int, bold: bool) -> str:
  """A prompt's last lines, then its completion under a header (the prompts end at a line
  break); bold as well when printing to a terminal."""
  tail = "\n".join(tok.decode(prompt).rstrip("\n").split("\n")[-4:])
  text = tok.decode(completion)
  if bold:
    text = f"\033[1m{text}\033[0m"
  return (f"--- held-out prompt {index}, its last lines ---\n{tail}\n"
          f"--- its completion by {method} ---\n{text}\n")


def _gsm_methods() -> dict[str, Callable]:
  """name -> fn(prompts) -> DecodeOutput for the gsm-synth section: greedy AR, and speculative
  decoding with gsm-draft and with gsm-mtp's heads and parallel diffusion with gsm-dlm where
  those are installed."""
  from jaxdec import diffusion, spec
  from jaxdec.bench import ssr as ssr_bench
  from jaxdec.tasks import gsm_synth

  installed, gen = set(zoo.available()), gsm_synth.GEN_LENGTH
  ar = jaxdec.load("zoo:gsm-ar")
  found = {"greedy AR (gsm-ar)": lambda p: jaxdec.generate(ar, p, max_new_tokens=gen)}
  ssr = ssr_bench.settings(jaxdec.load_tokenizer("zoo:gsm-ar"))
  found["SSR: answer drafted from partial-reasoning answers (gsm-ar)"] = (
      lambda p: jaxdec.ssr_generate(ar, p, ssr, max_new_tokens=gen))
  if "gsm-draft" in installed:
    drafter = spec.DraftModel(jaxdec.load("zoo:gsm-draft"), 4)
    found["speculative, 4 draft tokens (gsm-draft)"] = lambda p: jaxdec.speculative_generate(
        ar, p, drafter, max_new_tokens=gen)
  if "gsm-mtp" in installed:
    heads = jaxdec.load_drafter("zoo:gsm-mtp")
    found["speculative, Medusa heads (gsm-mtp)"] = lambda p: jaxdec.speculative_generate(
        ar, p, heads, max_new_tokens=gen)
  if "gsm-kforcing" in installed:
    student = jaxdec.load_push_forward("zoo:gsm-kforcing")
    found["speculative, K-Forcing drafter (gsm-kforcing)"] = lambda p: jaxdec.speculative_generate(
        ar, p, spec.KForcing(student), max_new_tokens=gen)
    found["K-Forcing alone, 4 tokens/forward, lossy (gsm-kforcing)"] = (
        lambda p: jaxdec.push_forward_generate(student, p, gen))
  if "gsm-eagle3" in installed:
    eagle = jaxdec.load_drafter("zoo:gsm-eagle3")
    found["speculative, EAGLE-3 dynamic tree (gsm-eagle3)"] = lambda p: jaxdec.speculative_generate(
        ar, p, eagle, max_new_tokens=gen)
  if "gsm-dlm" in installed:
    dlm = jaxdec.load("zoo:gsm-dlm")
    found["diffusion threshold 0.9 + dual cache (gsm-dlm)"] = lambda p: jaxdec.diffusion_generate(
        dlm, p, gen_length=gen, block_length=32, steps=gen, scheduler=diffusion.Threshold(0.9),
        cache=diffusion.DualCache(), stop_early=True)
    found["diffusion threshold 0.9 + T2T edits 0.5 + dual cache (gsm-dlm)"] = (
        lambda p: jaxdec.diffusion_generate(
            dlm, p, gen_length=gen, block_length=32, steps=gen,
            scheduler=diffusion.Editing(0.9, 0.5), cache=diffusion.DualCache(), stop_early=True))
    verified = diffusion.Editing(0.7, 1e-6, max_post_steps=33, verify=True)
    found["diffusion 0.7 + argmax edits, verified: lossless (gsm-dlm)"] = (
        lambda p: jaxdec.diffusion_generate(
            dlm, p, gen_length=gen, block_length=32, steps=gen, scheduler=verified,
            cache=diffusion.DualCache(), stop_early=True))
    if "gsm-dlm-draft" in installed:
      simsd = spec.SimSD(jaxdec.load("zoo:gsm-dlm-draft"), threshold=0.9, num_tokens=12)
      found["SimSD, block-diffusion draft (gsm-dlm + gsm-dlm-draft)"] = (
          lambda p: jaxdec.speculative_generate(dlm, p, simsd, max_new_tokens=gen))
  return found


def gsm_section(index: int = 0) -> list[dict]:
  """Solve gsm-synth test problem `index` with each of `_gsm_methods`; print the question, each
  method's answer with its check against the exact one, and the cost table; return the rows."""
  from jaxdec.tasks import gsm_synth

  problem = gsm_synth.problems("test", index + 1, 0)[index]
  tok = jaxdec.load_tokenizer("zoo:gsm-ar")
  prompt = [tok.encode(problem.prompt)]
  print(f"--- gsm-synth test problem {index} (answer {problem.answer}) ---\n{problem.question}")
  rows = []
  for name, method in _gsm_methods().items():
    method(prompt)  # Compile.
    t0 = time.perf_counter()
    out = jax.block_until_ready(method(prompt))
    elapsed = time.perf_counter() - t0
    length, forwards = int(out.lengths[0]), int(out.stats["nfe"][0])
    text = tok.decode(np.asarray(out.tokens[0, :length]).tolist())
    answer = gsm_synth.extract_answer(text)
    verdict = "correct" if answer == problem.answer else f"wrong (expected {problem.answer})"
    print(f"--- {name}: #### {answer}, {verdict} ---\n{text.split('</think>')[-1].strip()}")
    rows.append({"method": name, "answer": answer, "correct": answer == problem.answer,
                 "tokens": length, "forwards": forwards, "tokens/forward": length / forwards,
                 "tokens/s": length / elapsed})
  columns = ["method", "correct", "tokens", "forwards", "tokens/forward", "tokens/s"]
  print(format_table([{c: r[c] if c in ("method", "correct") else number(r[c]) for c in columns}
                      for r in rows], columns))
  return rows


GSM_MODELS = ("gsm-ar",)  # The section runs with these; it adds gsm-draft and gsm-dlm rows.


def run(num_prompts: int = 3, new_tokens: int = 64, show: int = 2,
        gsm: bool | None = None) -> list[dict]:
  """Print `show` completions, the table of every method's cost and its legend, then (`gsm`;
  left out: when the gsm-synth zoo models are installed) the gsm-synth section; return the code
  table's rows (raw numbers)."""
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
    lengths, forwards = np.asarray(lengths), np.asarray(forwards)
    total = int(lengths.sum())
    rows.append({"method": name, "tokens": total, "forwards": int(forwards.sum()),
                 "tokens/forward": total / max(int(forwards.sum()), 1),
                 "tokens/s": total / elapsed})
    if len(rows) == 1:
      bold = sys.stdout.isatty()
      for i in range(min(show, len(prompts))):
        print(_show(tok, prompts[i], np.asarray(tokens[i, : lengths[i]]), name, i, bold))
  cells = [{c: r[c] if c == "method" else number(r[c]) for c in COLUMNS} for r in rows]
  print(format_table(cells, COLUMNS))
  print(legend(len(prompts), new_tokens))
  if gsm or (gsm is None and set(GSM_MODELS) <= set(zoo.available())):
    print()
    gsm_section()
  return rows
