"""`jaxdec bench kforcing`: K-Forcing's standalone decoding (k tokens per forward, no
verification) against its teacher's greedy AR, at several batch sizes, with what it costs.

Speed: both decode the same gsm-synth test problems greedily (rows stop at EOS), timed
interleaved; tokens/s counts the tokens each row kept. Quality, on the largest batch's problems
(untimed): answer accuracy of the greedy outputs, and the teacher's bits per byte of each
method's samples at the student's temperature (the teacher's own samples are the reference: a
student whose joint law drifts from the teacher's writes text the teacher finds less likely).
"""

from __future__ import annotations

import time

import jax
import numpy as np

import jaxdec
from jaxdec.bench.common import Timer, add_output_flags, report
from jaxdec.corpus import held_out_prompts
from jaxdec.tasks import gsm_synth

AR = "AR greedy (teacher)"
_DEFAULTS = {"gsm-synth": ("zoo:gsm-ar", "zoo:gsm-kforcing", gsm_synth.GEN_LENGTH),
             None: ("zoo:pycode-ar", None, 64)}


def teacher_bits_per_byte(teacher, tokenizer, prompts, outputs) -> float:
  """The teacher's bits per byte of generated continuations (tokens i32[B, T] with lengths
  i32[B]) given their prompts: one padded forward for the batch (causal, so padding after a
  row changes none of its logits)."""
  tokens, lengths = np.asarray(outputs.tokens), np.asarray(outputs.lengths)
  rows = [list(p) + tokens[i, :lengths[i]].tolist() for i, p in enumerate(prompts)]
  width = max(map(len, rows))
  batch = np.zeros((len(rows), width), np.int32)
  for i, r in enumerate(rows):
    batch[i, :len(r)] = r
  logp = np.asarray(jax.nn.log_softmax(jaxdec.forward(teacher, batch), axis=-1))
  nats = sum(-logp[i, len(p) - 1 + j, batch[i, len(p) + j]]
             for i, p in enumerate(prompts) for j in range(lengths[i]))
  text_bytes = sum(len(tokenizer.decode(tokens[i, :lengths[i]].tolist()).encode())
                   for i in range(len(prompts)))
  return float(nats / np.log(2) / max(text_bytes, 1))


def _speed_rows(methods: dict, prompts, batch: int, min_prompts: int, repeats: int,
                timer: Timer) -> list[dict]:
  """One row per method at `batch`: max(batch, min_prompts) prompts in batches of that size,
  timed interleaved (the first call, compiling, timed apart)."""
  chunks = [prompts[i:i + batch] for i in range(0, max(batch, min_prompts), batch)]

  def decode(name):
    outs = [methods[name](c) for c in chunks]
    jax.block_until_ready([o.tokens for o in outs])
    return outs

  fns = {name: (lambda name=name: decode(name)) for name in methods}
  first = {}
  for name, fn in fns.items():
    t0 = time.perf_counter()
    outs = fn()
    first[name] = (time.perf_counter() - t0, sum(int(np.sum(o.lengths)) for o in outs),
                   sum(int(np.sum(o.stats["nfe"])) for o in outs))
  medians = timer.interleaved(fns, repeats)
  base = medians[AR]
  return [{"batch": batch, "method": name, "tokens": tokens,
           "tokens/forward": tokens / max(forwards, 1), "tokens/s": tokens / medians[name],
           "speedup vs AR": base / medians[name], "first call s": compile_s}
          for name, (compile_s, tokens, forwards) in first.items()]


def _quality(methods: dict, students: dict, teacher, tokenizer, prompts, problems, new_tokens: int,
             temperature: float, key) -> dict:
  """Per method (untimed, all prompts at once): the teacher's bits per byte of its greedy text
  and of its samples at the student's temperature, and the greedy answers' accuracy."""
  sampling = jaxdec.Sampling.create(temperature=temperature)
  samplers = {AR: lambda: jaxdec.generate(teacher, prompts, new_tokens, sampling=sampling, key=key)}
  samplers.update({name: (lambda s=s: jaxdec.push_forward_generate(s, prompts, new_tokens, key=key))
                   for name, s in students.items()})
  quality = {}
  for name, method in methods.items():
    greedy = method(prompts)
    quality[name] = {
        "teacher bits/byte of greedy": teacher_bits_per_byte(teacher, tokenizer, prompts, greedy),
        f"teacher bits/byte of samples (T={temperature:g})":
            teacher_bits_per_byte(teacher, tokenizer, prompts, samplers[name]())}
    if problems is not None:
      texts = [tokenizer.decode(np.asarray(greedy.tokens[i, :int(greedy.lengths[i])]).tolist())
               for i in range(len(problems))]
      quality[name]["greedy accuracy"] = gsm_synth.score(texts, problems)
  return quality


def run(teacher_path: str | None = None, student_path: str | None = None, batch_sizes=(1, 8, 64),
        min_prompts: int = 8, new_tokens: int | None = None, repeats: int = 3,
        out: str | None = None, task: str | None = "gsm-synth", seed: int = 0,
        num_tokens=(2, 4)) -> dict:
  """One row per (batch size, method); each batch size decodes max(batch, `min_prompts`)
  problems in batches of that size. Left out, the models are the task's zoo pair. The student
  also runs with fewer tokens per forward (`num_tokens`): its first j slots are a j-token
  student."""
  if task not in _DEFAULTS:
    raise ValueError(f"task must be one of {list(_DEFAULTS)}, got {task!r}")
  default_teacher, default_student, default_tokens = _DEFAULTS[task]
  teacher_path, student_path = teacher_path or default_teacher, student_path or default_student
  if student_path is None:
    raise ValueError("no K-Forcing student ships for this task: pass student_path")
  new_tokens = new_tokens or default_tokens
  teacher, student = jaxdec.load(teacher_path), jaxdec.load_push_forward(student_path)
  tokenizer = jaxdec.load_tokenizer(teacher_path)
  most = max(max(batch_sizes), min_prompts)
  if task is None:
    problems, prompts = None, held_out_prompts(tokenizer, most, prompt_tokens=128)
  else:
    problems = gsm_synth.problems("test", most, 0)
    prompts = [tokenizer.encode(p.prompt) for p in problems]

  students = {f"K-Forcing greedy (k={k})": student.replace(num_tokens=k)
              for k in num_tokens if k <= student.num_tokens}
  methods = {AR: lambda p: jaxdec.generate(teacher, p, new_tokens)}
  methods.update({name: (lambda p, s=s: jaxdec.push_forward_generate(s, p, new_tokens))
                  for name, s in students.items()})
  timer = Timer()
  rows = [row for batch in batch_sizes
          for row in _speed_rows(methods, prompts, batch, min_prompts, repeats, timer)]
  quality = _quality(methods, students, teacher, tokenizer, prompts, problems, new_tokens,
                     student.temperature, jax.random.key(seed))
  for row in rows:
    row.update(quality[row["method"]])
  sampled_column = f"teacher bits/byte of samples (T={student.temperature:g})"
  columns = ["batch", "method", "tokens/forward", "tokens/s", "speedup vs AR",
             *(["greedy accuracy"] if problems is not None else []),
             "teacher bits/byte of greedy", sampled_column, "first call s"]
  print(f"bench kforcing: {student_path} vs {teacher_path}, {task or 'held-out code'}, "
        f"{new_tokens} new tokens, median of {repeats}; quality on {len(prompts)} prompts")
  return report(rows, columns, timer, {
      "suite": "kforcing", "task": task, "teacher": teacher_path, "student": student_path,
      "new_tokens": new_tokens, "repeats": repeats, "quality_prompts": len(prompts)}, out)


# ---- `jaxdec bench kforcing` --------------------------------------------------------------------

HELP = "K-Forcing's standalone k-tokens-per-forward decoding vs its teacher's AR, speed and quality"


def add_arguments(parser) -> None:
  """`jaxdec bench kforcing`'s flags (the CLI adds the multi-process ones)."""
  parser.add_argument("--model", help="the teacher (left out: zoo:gsm-ar)")
  parser.add_argument("--student",
                      help="the K-Forcing student directory (left out: zoo:gsm-kforcing)")
  parser.add_argument("--task", choices=("gsm-synth", "code"), default="gsm-synth",
                      help="gsm-synth test problems (with accuracy) or held-out code prompts")
  parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 64],
                      help="one row per method per batch size")
  parser.add_argument("--new-tokens", type=int, help="tokens per row (left out: the task's)")
  parser.add_argument("--repeats", type=int, default=3, help="timed runs (interleaved; medians)")
  add_output_flags(parser, "kforcing")


def main(args) -> int:
  """`jaxdec bench kforcing`: `run` with the parsed flags (--task code: held-out code)."""
  run(args.model, args.student, batch_sizes=tuple(args.batch_sizes), new_tokens=args.new_tokens,
      repeats=args.repeats, out=args.out, task=None if args.task == "code" else args.task)
  return 0
