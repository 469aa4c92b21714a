"""`jaxdec generate`: complete a prompt, or a file of them, by any method."""

from __future__ import annotations

import os
import sys

from jaxdec.cli import decoding
from jaxdec.cli.common import (add_distributed_flags, positive_int, process_mesh,
                               tokenizer_or_none, unescape)
from jaxdec.cli.output import StreamPrinter, Stats, one_line


def _read_prompts_file(path: str) -> list[tuple[str | None, list[int] | None]]:
  """(text, None) or (None, ids) per prompt: a .jsonl file holds one JSON object a line with
  "prompt" (text) or "prompt_ids" (token ids); any other file one text prompt a line."""
  import json

  if not os.path.isfile(path):
    raise FileNotFoundError(f"--prompts-file not found: {path}")
  with open(path, encoding="utf-8") as f:
    lines = f.read().split("\n")
  if lines and lines[-1] == "":
    lines.pop()  # The file's final newline ends the last prompt; it starts none.
  lines = [line[:-1] if line.endswith("\r") else line for line in lines]
  if not path.endswith(".jsonl"):
    if not lines:
      raise ValueError(f"--prompts-file {path} holds no prompt")
    return [(line, None) for line in lines]
  prompts = []
  for number, line in enumerate(lines, 1):
    if not line.strip():
      continue
    where = f"--prompts-file {path} line {number}"
    try:
      record = json.loads(line)
    except json.JSONDecodeError as e:
      raise ValueError(f"{where} is not JSON: {e}") from None
    if not isinstance(record, dict) or ("prompt" in record) == ("prompt_ids" in record):
      raise ValueError(f'{where}: need an object with "prompt" (text) or "prompt_ids" (token '
                       f"ids), got {line[:80]!r}")
    if "prompt" in record:
      if not isinstance(record["prompt"], str):
        raise ValueError(f'{where}: "prompt" must be a string, got {record["prompt"]!r}')
      prompts.append((record["prompt"], None))
    else:
      ids = record["prompt_ids"]
      if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool)
                                              for t in ids):
        raise ValueError(f'{where}: "prompt_ids" must be a list of ints, got {ids!r}')
      prompts.append((None, ids))
  if not prompts:
    raise ValueError(f"--prompts-file {path} holds no prompt")
  return prompts


def _prompts(args) -> list[tuple[str | None, list[int] | None]]:
  if args.prompts_file is not None:
    return _read_prompts_file(args.prompts_file)
  if args.prompt_ids is not None:
    try:
      return [(None, [int(t) for t in args.prompt_ids.split()])]
    except ValueError:
      raise ValueError(f"--prompt-ids must be space-separated ints, got "
                       f"{args.prompt_ids!r}") from None
  return [("" if args.prompt is None else args.prompt, None)]


def _check_controls(args, tokenizer) -> None:
  """ValueError for a --stop / --stream / --logprobs that this run cannot honour."""
  if args.stop and tokenizer is None:
    raise ValueError(f"--stop matches text: it needs the model's tokenizer.json, and {args.model} "
                     "has none")
  if args.stream and (args.prompts_file is not None or args.jsonl):
    raise ValueError("--stream prints one prompt's completion as it grows; it does not combine "
                     f"with {'--prompts-file' if args.prompts_file is not None else '--jsonl'}")
  if args.logprobs and not args.jsonl:
    raise ValueError('--logprobs adds a "logprobs" list to each --jsonl record: pass --jsonl')


def _print_batch(args, prompts, out, tokenizer, many: bool) -> None:
  """One line (or JSON record) per prompt of a decoded batch."""
  import json

  import numpy as np

  from jaxdec.text import cut_at_stop

  tokens, lengths = np.asarray(out.tokens), np.asarray(out.lengths)
  for index, ((text, given), row, length) in enumerate(zip(prompts, tokens, lengths)):
    completion = row[: int(length)].tolist()
    if args.jsonl:
      record = {"prompt": text} if text is not None else {"prompt_ids": given}
      if tokenizer is not None:
        record["completion"] = cut_at_stop(tokenizer.decode(completion), args.stop)
      record["completion_ids"] = completion
      if args.logprobs:
        record["logprobs"] = np.asarray(out.logprobs[index, : len(completion)]).tolist()
      print(json.dumps(record, ensure_ascii=False))
    elif text is not None:
      full = text + cut_at_stop(tokenizer.decode(completion), args.stop)
      print(one_line(full) if many else full)
    else:
      print(" ".join(map(str, completion)))
  sys.stdout.flush()


def run(args) -> int:
  import jaxdec

  decoding.requested_method(args)  # Contradictory flags and bad prompt files fail before loading.
  prompts = _prompts(args)
  model = jaxdec.load(args.model)
  if args.distributed:
    model = jaxdec.shard(model, process_mesh())
  method = decoding.method(args, model)
  tokenizer = tokenizer_or_none(args.model)
  if tokenizer is None and any(text is not None for text, _ in prompts):
    raise ValueError(f"{args.model} has no tokenizer.json: pass token ids (--prompt-ids '1 2 3', "
                     'or a .jsonl --prompts-file of {"prompt_ids": [...]}) instead of text')
  _check_controls(args, tokenizer)
  ids = [tokenizer.encode(text) if text is not None else given  # BOS first, as trained.
         for text, given in prompts]
  stats = Stats(method)
  if args.stream:
    text = prompts[0][0]
    printer = StreamPrinter(tokenizer if text is not None else None, text)
    out = decoding.decoder(args, model, method, tokenizer, stream=printer)(ids)
    printer.close(out.tokens[0, : int(out.lengths[0])].tolist())
    stats.add(out, 1)
  else:
    decode = decoding.decoder(args, model, method, tokenizer)
    for start in range(0, len(ids), args.batch_size):
      chunk = ids[start: start + args.batch_size]
      rows = len(chunk)
      if len(ids) > args.batch_size:  # A short last batch reuses the full batch's program.
        chunk = chunk + [chunk[-1]] * (args.batch_size - rows)
      out = decode(chunk)
      stats.add(out, rows)
      _print_batch(args, prompts[start: start + rows], out, tokenizer,
                   many=args.prompts_file is not None)
  if args.stats:
    print(f"jaxdec generate: {stats.line()}", file=sys.stderr)
  return 0


def _add_controls(parser) -> None:
  """The controls: stop texts, rules, log-probabilities, streaming."""
  controls = parser.add_argument_group("controls (autoregressive and speculative decoding)")
  controls.add_argument("--stop", action="append", metavar="TEXT", type=unescape,
                        help="end a completion where this text completes, cut right after it "
                             "(repeatable; \\n, \\t are read as escapes; needs tokenizer.json)")
  controls.add_argument("--min-new-tokens", type=int, default=0,
                        help="no stop token or --stop text before this many tokens")
  controls.add_argument("--repetition-penalty", type=float, default=1.0,
                        help="penalise the tokens already in the row, prompt included (CTRL's "
                             "rule, as transformers; 1 = off)")
  controls.add_argument("--logprobs", action="store_true",
                        help='add each completion token\'s log-probability ("logprobs") to the '
                             "--jsonl records")
  controls.add_argument("--stream", action="store_true",
                        help="print the completion as it is decoded (one prompt; streamed "
                             "text is not cut after a --stop text)")


def add_parser(sub) -> None:
  """`jaxdec generate`: prompts, method and output, then each method's flags."""
  gen = sub.add_parser(
      "generate", help="complete prompts with a model: greedy, sampled, speculative or diffusion",
      description="Complete one prompt (--prompt, --prompt-ids) or a file of them "
                  "(--prompts-file) with greedy, sampled, speculative or diffusion decoding. "
                  "--method defaults to diffusion for a masked-diffusion model; for an "
                  "autoregressive one, to speculative when a speculative flag is given, to sample "
                  "when --temperature > 0, else greedy.")
  gen.add_argument("--model", required=True, help="zoo:NAME, an HF checkpoint dir or an orbax dir")
  source = gen.add_mutually_exclusive_group()
  source.add_argument("--prompt", metavar="TEXT",
                      help="prompt text (needs the model's tokenizer.json; encoded with BOS "
                           "first, as the model was trained); left out: the empty prompt")
  source.add_argument("--prompt-ids", metavar="IDS",
                      help="prompt as space-separated token ids (used as given)")
  source.add_argument("--prompts-file", metavar="PATH",
                      help="many prompts: a text file of one prompt a line, or a .jsonl file of "
                           'one {"prompt": TEXT} or {"prompt_ids": [IDS]} object a line (for '
                           "prompts with line breaks); printed one a line in input order (text "
                           "as prompt + completion with \\n, \\r, \\\\ escaped)")
  gen.add_argument("--batch-size", type=positive_int, default=8,
                   help="prompts of --prompts-file decoded together; greedy output does not "
                        "depend on it, sampled output does (a row's random stream is keyed by "
                        "its row in the batch)")
  gen.add_argument("--jsonl", action="store_true",
                   help='print one JSON object a prompt: "prompt" (or "prompt_ids"), '
                        '"completion" (with a tokenizer) and "completion_ids", text unescaped')
  gen.add_argument("--stats", action="store_true",
                   help="print forwards, tokens per forward and (speculative) the acceptance "
                        "length to stderr")
  gen.add_argument("--max-new-tokens", type=int, default=64,
                   help="tokens to generate per prompt (diffusion: the default --gen-length)")
  gen.add_argument("--method", choices=decoding.METHODS,
                   help="decoding method; left out: from the model and the flags (see above)")
  _add_controls(gen)
  decoding.add_sampling_flags(gen)
  decoding.add_speculative_flags(gen)
  decoding.add_diffusion_flags(gen)
  add_distributed_flags(gen)
  gen.set_defaults(fn=run)
