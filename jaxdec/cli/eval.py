"""`jaxdec eval`: bits per byte on code, or with --task the exact-match accuracy on a task's
problems, decoded by any method (its flags as in `jaxdec generate`)."""

from __future__ import annotations

import collections
import os

from jaxdec.cli import decoding
from jaxdec.cli.common import flag, positive_int

# --task options (None when left out) and what leaving them out means.
_TASK_EVAL = {"split": "test", "n": 200, "task_seed": 0, "batch_size": 32, "max_operand": 99}
_BPB_EVAL = {"data": None, "stdlib": False, "max_files": None, "seq_len": None, "plot": None}


def run(args) -> int:
  """Bits per byte on code, or with --task the exact-match accuracy on a task's problems."""
  given = lambda defaults: [d for d, v in defaults.items() if getattr(args, d) != v]
  method_flags = (*decoding.speculative_flags(), *decoding.diffusion_flags(), "method",
                  "temperature", "seed", "max_new_tokens")
  task_only = given({**dict.fromkeys(_TASK_EVAL), **dict.fromkeys(method_flags), "top_k": 0,
                     "top_p": 1.0})
  if args.task is None and task_only:
    raise ValueError(f"{flag(task_only[0])} acts with --task gsm-synth")
  if args.task is not None and given(_BPB_EVAL):
    raise ValueError(f"{flag(given(_BPB_EVAL)[0])} acts on the bits-per-byte evaluation, not "
                     f"with --task {args.task}")
  return _eval_task(args) if args.task is not None else _eval_bits_per_byte(args)


def _eval_task(args) -> int:
  """`jaxdec eval --task gsm-synth`: accuracy overall and by number of steps, length, NFE."""
  import jaxdec
  from jaxdec.bench.common import format_table
  from jaxdec.tasks import evaluate, gsm_synth

  for dest, default in _TASK_EVAL.items():
    setattr(args, dest, default if getattr(args, dest) is None else getattr(args, dest))
  if args.max_new_tokens is None:
    args.max_new_tokens = gsm_synth.GEN_LENGTH
  difficulty = gsm_synth.Difficulty(max_operand=args.max_operand)
  problems = gsm_synth.problems(args.split, args.n, args.task_seed, difficulty)
  model = jaxdec.load(args.model)
  tokenizer = jaxdec.load_tokenizer(args.model)
  method = decoding.method(args, model)
  decode = decoding.decoder(args, model, method, tokenizer, stop_early=True)
  # Batches of similar solution length stop together (stop_early).
  result = evaluate.solve(decode, tokenizer, problems, batch_size=args.batch_size,
                          group_by=lambda p: len(p.solution))
  print(f"{args.model} on gsm-synth {args.split} ({len(problems)} problems, seed "
        f"{args.task_seed}, numbers up to {difficulty.max_operand}), {method}, up to "
        f"{args.max_new_tokens} new tokens, batch {args.batch_size}")
  summary = result.summary()
  print(format_table([summary], list(summary)))
  steps = [{"steps": k, "problems": n, "accuracy": acc}
           for k, (acc, n) in result.by(lambda p: len(p.steps)).items()]
  print(format_table(steps, ["steps", "problems", "accuracy"]))
  errors = collections.Counter(
      (gsm_synth.first_error(text, p) or ("none (answer misread)", 0))[0]
      for text, p, ok in zip(result.completions, problems, result.correct) if not ok)
  if errors:
    print("first line a wrong answer gets wrong, by kind:")
    print(format_table([{"line": k, "wrong answers": n} for k, n in errors.most_common()],
                       ["line", "wrong answers"]))
  return 0


def _eval_bits_per_byte(args) -> int:
  import jaxdec
  from jaxdec import corpus
  from jaxdec.bench.common import format_table
  from jaxdec.train.evaluate import bits_per_byte, eval_window

  if args.plot:
    from jaxdec import plots

    plots.require()
  sets = {}
  if args.stdlib or not args.data:  # Without --data: the split the zoo's figures are quoted on.
    sets["stdlib validation"] = corpus.stdlib_split("validation")
  for directory in args.data or []:
    if not os.path.isdir(directory):
      raise FileNotFoundError(f"--data directory not found: {directory}")
    files = corpus.list_python_files(directory)[: args.max_files]
    if not files:
      raise ValueError(f"--data directory {directory} has no .py files to evaluate on")
    sets[directory] = files
  model = jaxdec.load(args.model)
  tokenizer = jaxdec.load_tokenizer(args.model)
  seq_len = eval_window(args.model, model.config) if args.seq_len is None else args.seq_len
  if not 2 <= seq_len <= model.config.max_position_embeddings:
    raise ValueError(f"--seq-len must be in [2, {model.config.max_position_embeddings}] (the "
                     f"model's positions), got {seq_len}")
  rows = []
  for name, files in sets.items():
    texts, skipped = corpus.read_texts(files)
    if not texts:
      raise ValueError(f"{name}: none of its {len(files)} .py files is readable UTF-8 text")
    result = bits_per_byte(model, tokenizer, texts, seq_len=seq_len, progress=True, desc=name)
    rows.append({"data": name, "files": len(texts), "tokens": result["tokens"],
                 "nats/token": result["nats_per_token"], "bits/byte": result["bits_per_byte"]})
  kind = "exact next-token NLL" if model.config.is_causal else "masked-diffusion ELBO bound"
  print(f"{args.model}: {kind}, windows of {seq_len} tokens")
  print(format_table(rows, ["data", "files", "tokens", "nats/token", "bits/byte"]))
  if args.plot:
    fig = plots.bits_per_byte_bars([r["data"] for r in rows], [r["bits/byte"] for r in rows],
                                   title=f"{args.model}: {kind}, windows of {seq_len} tokens")
    print(f"wrote {plots.save(fig, args.plot)}")
  return 0


def add_parser(sub) -> None:
  """`jaxdec eval`."""
  from jaxdec.plots import INSTALL

  ev = sub.add_parser(
      "eval", help="validation bits per byte of a model, or its accuracy on a task (--task)",
      description="Without --task: bits per byte on code (--data, --stdlib). With --task "
                  "gsm-synth: exact-match accuracy on generated problems, decoded by any method "
                  "(greedy by default; the method and its flags as in jaxdec generate).")
  ev.add_argument("--model", required=True, help="zoo:NAME, an HF checkpoint dir or an orbax dir")
  ev.add_argument("--data", nargs="*",
                  help="directories of .py files to evaluate on (only these, unless --stdlib); "
                       "left out: the stdlib validation split")
  ev.add_argument("--stdlib", action="store_true",
                  help="with --data: also evaluate on the stdlib validation split")
  ev.add_argument("--max-files", type=int, default=None,
                  help="evaluate on at most this many files of each --data directory (left out: "
                       "all)")
  ev.add_argument("--seq-len", type=int, default=None,
                  help="window in tokens; left out: the window the model was trained and "
                       "evaluated with (its zoo.json recipe's seq_len), so figures match the "
                       "recorded ones, else the model's context length (max_position_embeddings)")
  ev.add_argument("--plot", metavar="OUT.png",
                  help="also draw bits per byte per data set as a PNG at this path (needs "
                       "matplotlib: " + INSTALL + ")")
  task = ev.add_argument_group("task accuracy (--task)")
  task.add_argument("--task", choices=("gsm-synth",),
                    help="score exact-match answers on this task instead of bits per byte")
  task.add_argument("--split", choices=("test", "test-unseen-templates", "validation", "train"),
                    help="which problems (left out: test)")
  task.add_argument("--n", type=positive_int, help="problems to solve (left out: 200)")
  task.add_argument("--task-seed", type=int,
                    help="seed of the problem draw: the same seed gives the same problems (left "
                         "out: 0)")
  task.add_argument("--max-operand", type=positive_int,
                    help="largest number in a question (left out: 99, the zoo's level)")
  task.add_argument("--batch-size", type=positive_int,
                    help="problems decoded together (left out: 32)")
  task.add_argument("--max-new-tokens", type=positive_int,
                    help="tokens per problem (diffusion: the default --gen-length); left out: "
                         "448, the longest solution rounded up to blocks of 32")
  task.add_argument("--method", choices=decoding.METHODS,
                    help="decoding method; left out: diffusion for a masked-diffusion model, "
                         "else greedy (or sample with --temperature > 0)")
  decoding.add_sampling_flags(ev)
  decoding.add_speculative_flags(ev)
  decoding.add_diffusion_flags(ev)
  # Controls of jaxdec generate that a task evaluation does not offer.
  ev.set_defaults(fn=run, stop=None, min_new_tokens=0, repetition_penalty=1.0,
                  logprobs=False, stream=False)
