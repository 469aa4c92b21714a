"""`jaxdec bench spec`: speculative decoding on held-out code prompts with the zoo, against jaxdec
greedy AR and, on the same exported weights in the same run, transformers' greedy `generate`,
assisted generation (draft model) and prompt lookup.

Every row decodes the same prompts greedily (batch 1, prompt by prompt, EOS stops a row) and is
checked token for token against jaxdec greedy AR. tau = tokens emitted per target forward
(prefill included); transformers' target forwards are counted with a forward hook. jaxdec's
speculative rows also record how many drafts each verification step accepted, as a histogram.
With `task="gsm-synth"` the prompts are test problems (default models zoo:gsm-ar and
zoo:gsm-draft, `gsm_synth.GEN_LENGTH` new tokens) and an `accuracy` column scores each method's answers.
"""

from __future__ import annotations

import os
import tempfile
import time

import jax
import numpy as np

import jaxdec
from jaxdec import spec, zoo
from jaxdec.bench import ssr as ssr_bench
from jaxdec.bench.common import Timer, add_output_flags, check_plot, report
from jaxdec.corpus import held_out_prompts
from jaxdec.tasks import gsm_synth


def _jaxdec_methods(draft, num_tokens, heads_path: str | None, student_path: str | None = None,
                    eagle_path: str | None = None):
  methods = {"jaxdec greedy AR": None}
  for k in num_tokens:
    methods[f"jaxdec draft model k={k}"] = spec.DraftModel(draft, k)
  methods["jaxdec prompt lookup (n<=3, 4 tokens)"] = spec.PromptLookup(3, 4)
  methods["jaxdec AdaPLD (3 branches x 4)"] = spec.AdaPLD(max_ngram=3, min_ngram=2, depth=4, branches=3)
  if heads_path is not None:  # Trained heads: their chain, then the best trees of a few sizes.
    heads = jaxdec.load_drafter(heads_path)
    methods[f"jaxdec Medusa heads chain ({heads.num_heads})"] = spec.Heads(heads.params)
    for size in HEAD_TREE_SIZES:
      methods[f"jaxdec Medusa heads tree ({size} nodes)"] = jaxdec.load_drafter(heads_path,
                                                                              tree_size=size)
      methods[f"jaxdec EntMTP ({size}-node trees by entropy)"] = jaxdec.load_drafter(
          heads_path, tree_size=size, entropy_switching=True)
  if student_path is not None:
    student = jaxdec.load_drafter(student_path)
    methods[f"jaxdec K-Forcing drafter (k={student.student.num_tokens}, one forward)"] = student
  if eagle_path is not None:  # The shipped dynamic tree, a chain as deep, a static tree.
    eagle = jaxdec.load_drafter(eagle_path)
    methods[f"jaxdec EAGLE-3 chain (k={eagle.depth})"] = eagle.with_tree(top_k=1)
    methods[f"jaxdec EAGLE-3 static tree ({len(EAGLE_STATIC_TREE)} nodes)"] = eagle.with_tree(
        choices=EAGLE_STATIC_TREE)
    methods[f"jaxdec EAGLE-3 dynamic tree (top-{eagle.top_k}, depth {eagle.depth}, "
            f"{eagle.size} nodes)"] = eagle
  return methods


def _run_jaxdec(model, prompts, new_tokens, drafter):
  """Per prompt (tokens, target forwards, accepted i32[1, steps] or None for AR); `accepted`
  stays on the device (read after timing)."""
  outs = []
  for p in prompts:
    if drafter is None:
      out = jaxdec.generate(model, [p], max_new_tokens=new_tokens)
      forwards, accepted = out.stats["nfe"], None
    else:
      out = jaxdec.speculative_generate(model, [p], drafter, max_new_tokens=new_tokens)
      forwards, accepted = out.stats["target_forwards"], out.stats["accepted"]
    jax.block_until_ready(out.tokens)
    outs.append((np.asarray(out.tokens[0, : int(out.lengths[0])]), int(forwards[0]), accepted))
  return outs


def accepted_histogram(outs, drafter) -> list[int]:
  """[steps that accepted 0 drafts, 1 draft, ..., the drafter's depth] over all prompts."""
  accepted = np.concatenate([np.asarray(a).reshape(-1) for _, _, a in outs])
  return np.bincount(accepted[accepted >= 0], minlength=drafter.tree.max_depth + 1).tolist()


class _CountingHF:
  """transformers model plus a forward-call counter."""

  def __init__(self, directory):
    import torch
    import transformers

    self.torch = torch
    self.model = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
    self.calls = 0
    self.model.register_forward_hook(lambda *a: setattr(self, "calls", self.calls + 1))


def _run_hf(target: _CountingHF, prompts, new_tokens, eos, **kwargs):
  torch = target.torch
  outs = []
  for p in prompts:
    ids = torch.tensor([p], dtype=torch.long)
    target.calls = 0
    with torch.no_grad():
      out = target.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                                  do_sample=False, eos_token_id=eos, pad_token_id=0, **kwargs)
    outs.append((out[0, len(p):].numpy(), target.calls, None))
  return outs


def figures(record: dict) -> dict:
  """{'speedup': bars of every method's speedup over jaxdec greedy AR, 'acceptance': per jaxdec
  drafter, a histogram of the tokens each verification step emitted}."""
  from jaxdec import plots

  rows = record["rows"]
  setting = (f"{record['target']} + {record['draft']}, {record['prompts']} prompts, "
             f"{record['new_tokens']} new tokens, greedy, batch 1")
  return {
      "speedup": plots.speedup_bars(
          [r["method"] for r in rows], [r["speedup vs jaxdec AR"] for r in rows],
          baseline="jaxdec greedy AR", title=f"bench spec: {setting}",
          peers=[r["method"].startswith("transformers") for r in rows]),
      "acceptance": plots.acceptance_histograms(
          {r["method"]: r["accepted histogram"] for r in rows if "accepted histogram" in r},
          title=f"bench spec acceptance: {setting}"),
  }


def _hf_methods(model, draft, prompts, new_tokens, eos, directory: str) -> dict:
  """transformers' greedy, assisted and prompt-lookup generation on the same weights, exported
  into `directory`."""
  import torch

  torch.set_num_threads(os.cpu_count() or 1)
  target_dir, draft_dir = os.path.join(directory, "target"), os.path.join(directory, "draft")
  jaxdec.export_hf(model, None, target_dir)
  jaxdec.export_hf(draft, None, draft_dir)
  hf_target, hf_draft = _CountingHF(target_dir), _CountingHF(draft_dir)
  return {
      "transformers greedy": lambda: _run_hf(hf_target, prompts, new_tokens, eos),
      "transformers assisted (draft model, defaults)": lambda: _run_hf(
          hf_target, prompts, new_tokens, eos, assistant_model=hf_draft.model),
      "transformers prompt lookup (n<=3, 4 tokens)": lambda: _run_hf(
          hf_target, prompts, new_tokens, eos, prompt_lookup_num_tokens=4,
          max_matching_ngram_size=3)}


_DEFAULTS = {None: ("zoo:pycode-ar", "zoo:pycode-draft", 64),
             "gsm-synth": ("zoo:gsm-ar", "zoo:gsm-draft", gsm_synth.GEN_LENGTH)}
_HEADS = {"zoo:pycode-ar": "zoo:pycode-mtp", "zoo:gsm-ar": "zoo:gsm-mtp"}  # Shipped heads.
_STUDENTS = {"zoo:gsm-ar": "zoo:gsm-kforcing"}  # Shipped K-Forcing students.
_EAGLES = {"zoo:pycode-ar": "zoo:pycode-eagle3", "zoo:gsm-ar": "zoo:gsm-eagle3"}
# A static EAGLE tree of 12 nodes (rank paths): the top-1 chain to depth 6 with second choices
# near the root, where a small drafter is least sure.
EAGLE_STATIC_TREE = ((0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0), (0, 0, 1), (0, 1, 0),
                     (0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 0, 0, 0), (0, 0, 0, 0, 0, 0))
HEAD_TREE_SIZES = (8, 16)


def _shipped(name: str | None) -> str | None:
  """A 'zoo:NAME' when that model is installed, else None."""
  return name if name is not None and name[len("zoo:"):] in zoo.available() else None


def _workload(task, tokenizer, num_prompts: int, prompt_tokens: int):
  """(prompts, the task's problems or None)."""
  if task is None:
    return held_out_prompts(tokenizer, num_prompts, prompt_tokens=prompt_tokens), None

  problems = gsm_synth.problems("test", num_prompts, 0)
  return [tokenizer.encode(p.prompt) for p in problems], problems


def _rows(results: dict, medians: dict, compile_s: dict, drafters: dict, problems, tokenizer):
  """The table: each method's tau, tokens/s and speedup against jaxdec's greedy AR, whether it
  gave AR's tokens, its accuracy on a task and its drafters' accepted-length histogram."""
  reference = results["jaxdec greedy AR"]
  base_time = medians["jaxdec greedy AR"]
  rows = []
  for name, outs in results.items():
    tokens = sum(len(t) for t, _, _ in outs)
    forwards = sum(f for _, f, _ in outs)
    rows.append({
        "method": name, "tau": tokens / forwards, "target forwards": forwards, "tokens": tokens,
        "tokens/s": tokens / medians[name], "speedup vs jaxdec AR": base_time / medians[name],
        "same as AR": all(np.array_equal(a[0], b[0]) for a, b in zip(outs, reference)),
        "first call s": compile_s[name],
    })
    if problems is not None:
      rows[-1]["accuracy"] = gsm_synth.score([tokenizer.decode(t.tolist()) for t, _, _ in outs],
                                             problems)
    if drafters.get(name) is not None:
      rows[-1]["accepted histogram"] = accepted_histogram(outs, drafters[name])
  return rows


def run(target_path: str | None = None, draft_path: str | None = None, num_prompts: int = 8,
        prompt_tokens: int = 128, new_tokens: int | None = None, num_tokens=(3, 4, 6),
        repeats: int = 3, peers: bool = True, out: str | None = None, plot: bool = False,
        task: str | None = None, heads_path: str | None = None) -> dict:
  """Every method on the same prompts, timed interleaved; `plot` also writes `figures(record)`
  as PNGs next to `out`. Left out, the models and new_tokens are the task's (code: zoo:pycode-ar,
  zoo:pycode-draft, 64; gsm-synth: zoo:gsm-ar, zoo:gsm-draft, 448), and the Medusa heads rows
  use the zoo's heads for a zoo target (`heads_path`: other heads; 'none': no heads rows), the
  K-Forcing row the zoo's student (gsm-ar's)."""
  if task not in _DEFAULTS:
    raise ValueError(f"task must be one of {[t for t in _DEFAULTS if t]} or None, got {task!r}")
  check_plot(plot, out)
  default_target, default_draft, default_tokens = _DEFAULTS[task]
  target_path, draft_path = target_path or default_target, draft_path or default_draft
  new_tokens = default_tokens if new_tokens is None else new_tokens
  model, draft = jaxdec.load(target_path), jaxdec.load(draft_path)
  tokenizer = jaxdec.load_tokenizer(target_path)
  prompts, problems = _workload(task, tokenizer, num_prompts, prompt_tokens)
  eos = list(model.config.tokens.eos)
  if heads_path is None:
    heads_path = _HEADS.get(target_path)
    if heads_path is not None and heads_path[len("zoo:"):] not in zoo.available():
      heads_path = None
  student_path, eagle_path = (_shipped(table.get(target_path)) for table in (_STUDENTS, _EAGLES))
  drafters = _jaxdec_methods(draft, num_tokens, None if heads_path == "none" else heads_path,
                             student_path, eagle_path)
  fns = {name: (lambda d=d: _run_jaxdec(model, prompts, new_tokens, d))
         for name, d in drafters.items()}
  ssr = ssr_bench.settings(tokenizer) if task == "gsm-synth" else None
  if ssr is not None:  # SSR: the same model drafts its answer from partial-reasoning answers.
    fns[ssr_bench.label(ssr)] = lambda: ssr_bench.run_rows(model, ssr, prompts, new_tokens)
  tmp = tempfile.TemporaryDirectory()
  if peers:
    fns.update(_hf_methods(model, draft, prompts, new_tokens, eos, tmp.name))

  results, compile_s = {}, {}
  for name, fn in fns.items():  # First call: compile (jaxdec) / warm-up (torch); keep outputs.
    t0 = time.perf_counter()
    results[name] = fn()
    compile_s[name] = time.perf_counter() - t0
  timer = Timer()
  medians = timer.interleaved(fns, repeats)
  tmp.cleanup()

  rows = _rows(results, medians, compile_s, drafters, problems, tokenizer)
  columns = ["method", *(["accuracy"] if task else []), "tau", "target forwards", "tokens/s",
             "speedup vs jaxdec AR", "same as AR", "first call s"]
  what = (f"{len(prompts)} held-out prompts of <= {prompt_tokens} tokens" if task is None else
          f"{len(prompts)} {task} test problems")
  print(f"bench spec: {target_path} + {draft_path}, {what}, {new_tokens} new tokens, greedy, "
        f"batch 1, median of {repeats}")
  record = {"suite": "spec", "task": task, "target": target_path, "draft": draft_path,
            "prompts": len(prompts), "new_tokens": new_tokens, "repeats": repeats}
  if ssr is not None:
    record["ssr_phases"] = ssr_bench.phases(model, ssr, prompts, new_tokens, repeats, timer)
    ssr_bench.print_phases(record["ssr_phases"], len(prompts), repeats)
  return report(rows, columns, timer, record, out, figures if plot else None)


def _demo(drafter_fn):
  def method(models, prompts, new_tokens):
    out = jaxdec.speculative_generate(models["ar"], prompts, drafter_fn(models), max_new_tokens=new_tokens)
    return out.tokens, out.lengths, out.stats["target_forwards"]

  return method


# Rows for `jaxdec demo` (fn(models, prompts, new_tokens), merged by jaxdec.demo.run).
DEMO_METHODS = {
    "speculative: prompt lookup (pycode-ar)": _demo(lambda m: spec.PromptLookup(3, 4)),
    "speculative: draft model k=4 (pycode-ar + pycode-draft)": _demo(lambda m: spec.DraftModel(m["draft"], 4)),
}
if "pycode-mtp" in zoo.available():
  DEMO_METHODS["speculative: Medusa heads (pycode-ar + pycode-mtp)"] = _demo(
      lambda m: jaxdec.load_drafter("zoo:pycode-mtp"))
if "pycode-eagle3" in zoo.available():
  DEMO_METHODS["speculative: EAGLE-3, dynamic tree (pycode-ar + pycode-eagle3)"] = _demo(
      lambda m: jaxdec.load_drafter("zoo:pycode-eagle3"))


# ---- `jaxdec bench spec` ------------------------------------------------------------------------

HELP = "speculative decoding vs AR and transformers' assisted / lookup"


def add_arguments(parser) -> None:
  """`jaxdec bench spec`'s flags (the CLI adds the multi-process ones)."""

  parser.add_argument("--model", help="target: zoo:NAME or a checkpoint dir (left out: "
                                      "zoo:pycode-ar, with --task gsm-synth zoo:gsm-ar)")
  parser.add_argument("--draft", help="draft model with the target's tokenizer (left out: "
                                      "zoo:pycode-draft, with --task gsm-synth zoo:gsm-draft)")
  parser.add_argument("--prompts", type=int, default=8,
                      help="held-out code prompts (or task problems)")
  parser.add_argument("--task", choices=("gsm-synth",),
                      help="prompts from this task's test problems, with an accuracy column")
  parser.add_argument("--new-tokens", type=int,
                      help="tokens generated per prompt (left out: 64, with --task gsm-synth 448)")
  parser.add_argument("--num-tokens", type=int, nargs="+", default=[3, 4, 6], help="draft lengths")
  parser.add_argument("--heads", help="trained Medusa heads for the target (left out: the zoo's, "
                                      "zoo:pycode-mtp / zoo:gsm-mtp, for a zoo target; 'none': "
                                      "no heads rows)")
  parser.add_argument("--repeats", type=int, default=3, help="timed runs (interleaved; medians)")
  parser.add_argument("--no-peers", action="store_true", help="skip transformers")
  add_output_flags(parser, "spec",
                   "OUT_speedup.png (speedup over jaxdec greedy AR per method) and "
                   "OUT_acceptance.png (tokens per verification step, per drafter)")


def main(args) -> int:
  """`jaxdec bench spec`: `run` with the parsed flags."""
  run(args.model, args.draft, num_prompts=args.prompts, new_tokens=args.new_tokens,
      num_tokens=tuple(args.num_tokens), repeats=args.repeats, peers=not args.no_peers,
      out=args.out, plot=args.plot, task=args.task, heads_path=args.heads)
  return 0
