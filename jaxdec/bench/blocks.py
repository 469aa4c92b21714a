"""`jaxdec bench blocks`: block-diffusion decoding of gsm-synth test problems with a block-causal
dLLM (default `zoo:gsm-dlm`), serial block decoding against the methods that beat it.

Every row decodes the same problems, batch 1, prompt by prompt, and stops at the answer's EOS.
The baseline is serial block decoding one token per forward, left to right, with the exact dual
cache: for a model whose given tokens form a causal LM (gsm-dlm) that is also the model's AR
greedy decoding, so every lossless row must match it token for token ('same as baseline').
SimSD rows draft each block with a small block-diffusion model (default `zoo:gsm-dlm-draft`) and
verify it in one target forward. Quality (accuracy) comes from all `num_prompts`; tokens/s from
interleaved medians over the first `timed_prompts`.
"""

from __future__ import annotations

import time
from typing import Callable, NamedTuple

import jax
import numpy as np

import jaxdec
from jaxdec import diffusion, spec
from jaxdec.bench.common import Timer, add_output_flags, report
from jaxdec.diffusion.editing import EditState
from jaxdec.tasks import gsm_synth


class Row(NamedTuple):
  name: str
  decode: Callable  # (target, draft, prompt i32 list, gen_length, block_length) -> Output
  lossless: bool  # Must give the baseline's tokens.
  versus: str | None = None  # The row it improves on: answers fixed / broken and speedup vs it.


def _serial(scheduler) -> Callable:
  def decode(target, draft, prompt, gen_length, block_length):
    return jaxdec.diffusion_generate(target, [prompt], gen_length=gen_length,
                                     block_length=block_length, steps=gen_length,
                                     scheduler=scheduler, cache=diffusion.DualCache(),
                                     stop_early=True)
  return decode


def _verified(make: Callable) -> Callable:
  """Serial decoding with a verified editing rule built by `make(block_length)`: its post steps
  must outlast a block (one edit per forward at least) for the output to be the greedy stream."""
  def decode(target, draft, prompt, gen_length, block_length):
    return _serial(make(block_length))(target, draft, prompt, gen_length, block_length)
  return decode


def _simsd(threshold: float, num_tokens: int, order: str = "left_to_right") -> Callable:
  def decode(target, draft, prompt, gen_length, block_length):
    drafter = spec.SimSD(draft, threshold=threshold, num_tokens=num_tokens, order=order)
    return jaxdec.speculative_generate(target, [prompt], drafter, max_new_tokens=gen_length)
  return decode


def _ar(target, draft, prompt, gen_length, block_length):
  return jaxdec.generate(target, [prompt], max_new_tokens=gen_length)


BASELINE = "serial, left to right, 1 token/forward + dual"
THRESHOLD = "serial, threshold 0.9 + dual"
EDITING = "serial, Editing 0.9 / T2T 0.5 + dual"
VERIFIED = "serial, Editing 0.7 / argmax edits, verified + dual"
# An editing threshold at or below 1 / vocab: edit wherever the argmax differs.
ARGMAX = 1e-6


def rows() -> list[Row]:
  return [
      Row(BASELINE, _serial(diffusion.FixedSteps(confidence=diffusion.LeftToRight())), True),
      Row("serial, LLaDA low-confidence, 1 token/forward + dual", _serial(diffusion.FixedSteps()),
          False),
      Row(THRESHOLD, _serial(diffusion.Threshold(0.9)), False),
      Row(EDITING, _serial(diffusion.Editing(0.9, 0.5)), False, THRESHOLD),
      Row("FlowBlock 2 blocks, gate 1.0, 0.9 / T2T 0.5",
          _serial(diffusion.FlowBlock(0.9, 0.5, gate=1.0, blocks=2)), False, EDITING),
      Row("FlowBlock 2 blocks, gate 0.75, 0.9 / T2T 0.5",
          _serial(diffusion.FlowBlock(0.9, 0.5, gate=0.75, blocks=2)), False, EDITING),
      Row(VERIFIED, _verified(lambda block: diffusion.Editing(
          0.7, ARGMAX, max_post_steps=block + 1, verify=True)), True),
      Row("FlowBlock 2 blocks, gate 1.0, 0.7 / argmax edits, verified", _verified(
          lambda block: diffusion.FlowBlock(0.7, ARGMAX, gate=1.0, blocks=2,
                                            max_post_steps=block + 1, verify=True)),
          True, VERIFIED),
      Row("causal stream, AR greedy (jaxdec.generate)", _ar, True),
      Row("SimSD, draft k=8, threshold 0.9", _simsd(0.9, 8), True),
      Row("SimSD, draft k=12, threshold 0.9", _simsd(0.9, 12), True),
      Row("SimSD, draft k=12, threshold 0.7, confidence order", _simsd(0.7, 12, "confidence"),
          True),
  ]


def _chosen(names: list[str] | None) -> list[Row]:
  known = {r.name: r for r in rows()}
  unknown = sorted(set(names or ()) - set(known))
  if unknown:
    raise ValueError(f"unknown rows {unknown}; known: {list(known)}")
  wanted = {BASELINE} | set(known if names is None else names)
  while extra := {known[n].versus for n in wanted if known[n].versus} - wanted:
    wanted |= extra  # With the rows they are compared with.
  return [r for r in rows() if r.name in wanted]


def _answer(out) -> np.ndarray:
  return np.asarray(out.tokens[0, : int(out.lengths[0])])


def _forwards(out) -> tuple[int, int]:
  """(target forwards, draft forwards) of a batch-1 output."""
  if "target_forwards" in out.stats:
    return int(out.stats["target_forwards"][0]), int(out.stats["draft_forwards"][0])
  return int(np.asarray(out.stats["nfe"])[0]), 0


def _edits(out) -> int:
  """T2T edits of a batch-1 output (0 for a method that does not edit)."""
  state = out.stats.get("scheduler")
  return int(np.asarray(state.edits)[0]) if isinstance(state, EditState) else 0


def run(model_path: str = "zoo:gsm-dlm", draft_path: str = "zoo:gsm-dlm-draft",
        num_prompts: int = 200, timed_prompts: int | None = 20, gen_length: int | None = None,
        block_length: int = 32, repeats: int = 3, names: list[str] | None = None,
        out: str | None = None) -> dict:
  """Every row (or the baseline and those in `names`) on the same problems; see the module."""
  if timed_prompts is not None and (isinstance(timed_prompts, bool) or
                                    not isinstance(timed_prompts, int) or timed_prompts < 1):
    raise ValueError(f"timed_prompts must be None or an int >= 1, got {timed_prompts!r}")
  chosen = _chosen(names)
  target = jaxdec.load(model_path, dtype=np.float32)
  draft = jaxdec.load(draft_path, dtype=np.float32)
  tokenizer = jaxdec.load_tokenizer(model_path)
  gen_length = gsm_synth.GEN_LENGTH if gen_length is None else gen_length
  problems = gsm_synth.problems("test", num_prompts, 0)
  prompts = [tokenizer.encode(p.prompt) for p in problems]
  timed = prompts[: timed_prompts or len(prompts)]

  def decode_all(r, some):
    def go():
      outs = [r.decode(target, draft, p, gen_length, block_length) for p in some]
      return jax.block_until_ready(outs)
    return go

  results, first_s = {}, {}
  for r in chosen:  # One pass over every problem: compiles, and gives quality and counts.
    t0 = time.perf_counter()
    results[r.name] = decode_all(r, prompts)()
    first_s[r.name] = time.perf_counter() - t0
  timer = Timer()
  medians = timer.interleaved({r.name: decode_all(r, timed) for r in chosen}, repeats)

  base = [_answer(o) for o in results[BASELINE]]
  texts = {r.name: [tokenizer.decode(_answer(o).tolist()) for o in results[r.name]]
           for r in chosen}
  right = {name: np.asarray([gsm_synth.extract_answer(t) == p.answer
                                 for t, p in zip(answers, problems)])
           for name, answers in texts.items()}
  table = []
  for r in chosen:
    outs = results[r.name]
    answers = [_answer(o) for o in outs]
    versus = {}
    if r.versus:  # Answers this row gets right that the row it improves on got wrong, and back.
      versus = {"versus": r.versus, "fixed": int(np.sum(right[r.name] & ~right[r.versus])),
                "broken": int(np.sum(~right[r.name] & right[r.versus])),
                "speedup vs versus": medians[r.versus] / medians[r.name]}
    target_fwd, draft_fwd = map(np.asarray, zip(*map(_forwards, outs)))
    made = np.asarray([len(a) for a in answers])
    table.append({
        "method": r.name, "lossless": r.lossless,
        "accuracy": float(np.mean(right[r.name])),
        "same as baseline": float(np.mean([np.array_equal(a, b) for a, b in zip(answers, base)])),
        "tokens/target forward": float(made.sum() / target_fwd.sum()),
        "draft forwards/token": float(draft_fwd.sum() / made.sum()),
        "tokens/s": float(made[: len(timed)].sum()) / medians[r.name],
        "speedup": medians[BASELINE] / medians[r.name],
        "T2T edits/answer": float(np.mean([_edits(o) for o in outs])),
        "first pass s": first_s[r.name], **versus})
  print(f"bench blocks: {model_path} ({target.config.num_params / 1e6:.2f}M params) + "
        f"{draft_path} ({draft.config.num_params / 1e6:.2f}M), {len(prompts)} gsm-synth test "
        f"problems (accuracy; tokens/s from the first {len(timed)}, median of {repeats} "
        f"interleaved runs), gen <= {gen_length}, block {block_length}, greedy, batch 1; "
        f"speedup vs '{BASELINE}'")
  columns = ["method", "accuracy", "same as baseline", "tokens/target forward",
             "draft forwards/token", "tokens/s", "speedup", "T2T edits/answer", "fixed",
             "broken", "speedup vs versus", "first pass s"]
  return report(table, columns, timer, {
      "suite": "blocks", "model": model_path, "draft": draft_path, "prompts": len(prompts),
      "timed_prompts": len(timed), "gen_length": gen_length, "block_length": block_length,
      "repeats": repeats, "baseline": BASELINE}, out)


# ---- `jaxdec bench blocks` ----------------------------------------------------------------------

HELP = ("block-diffusion decoding on gsm-synth: serial block decoding vs T2T editing, FlowBlock "
        "and SimSD")


def add_arguments(parser) -> None:
  """`jaxdec bench blocks`' flags (the CLI adds the multi-process ones)."""
  parser.add_argument("--model", default="zoo:gsm-dlm",
                      help="block-causal target whose given tokens form a causal LM")
  parser.add_argument("--draft", default="zoo:gsm-dlm-draft",
                      help="SimSD's draft block-diffusion model (the target's tokenizer)")
  parser.add_argument("--prompts", type=int, default=200,
                      help="test problems (accuracy from all)")
  parser.add_argument("--timed-prompts", type=int, default=20,
                      help="problems timed (interleaved repeats)")
  parser.add_argument("--gen-length", type=int,
                      help="new tokens at most (left out: the task's, 448)")
  parser.add_argument("--block-length", type=int, default=32, help="tokens a block")
  parser.add_argument("--repeats", type=int, default=3, help="timed runs (interleaved; medians)")
  parser.add_argument("--rows", nargs="*", help="run only these rows (names as printed; the "
                                                "baseline always runs)")
  add_output_flags(parser, "blocks")


def main(args) -> int:
  """`jaxdec bench blocks`: `run` with the parsed flags."""
  run(args.model, args.draft, num_prompts=args.prompts, timed_prompts=args.timed_prompts,
      gen_length=args.gen_length, block_length=args.block_length, repeats=args.repeats,
      names=args.rows, out=args.out)
  return 0
