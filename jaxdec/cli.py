"""The `jaxdec` console script: argument parsing only; the work is done by the library."""

from __future__ import annotations

import argparse
import collections
import os
import sys


def _enable_compile_cache() -> None:
  """Persist compiled programs across CLI runs (a second `jaxdec generate` skips most compiles)."""
  import jax

  directory = os.environ.get("JAXDEC_CACHE_DIR", os.path.expanduser("~/.cache/jaxdec/xla"))
  jax.config.update("jax_compilation_cache_dir", directory)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
  """Help with each option's default, except an uninformative one (None, a flag's False): such
  an option's help says what leaving it out does."""

  def _get_help_string(self, action):
    if action.default is None or action.default is False:
      return action.help
    return super()._get_help_string(action)


class _Parser(argparse.ArgumentParser):
  """An ArgumentParser with `_HelpFormatter`; `add_subparsers` builds sub-parsers of the parent's
  class, so every sub-command (the bench suites included) shows its defaults."""

  def __init__(self, *args, formatter_class=_HelpFormatter, **kwargs):
    super().__init__(*args, formatter_class=formatter_class, **kwargs)


def _add_distributed_flags(parser) -> None:
  """--distributed and its coordinates: the flags that `generate`, `train` and `bench` share."""
  group = parser.add_argument_group("multi-process (one process per host of a TPU pod slice)")
  group.add_argument("--distributed", action="store_true",
                     help="join a multi-process run first (jax.distributed.initialize); on a TPU "
                          "pod slice JAX reads the coordinates from the environment")
  group.add_argument("--coordinator", help="with --distributed off TPU: process 0's 'host:port'")
  group.add_argument("--num-processes", type=_positive_int,
                     help="with --distributed off TPU: the number of processes")
  group.add_argument("--process-id", type=int, help="with --distributed off TPU: this process's "
                                                     "index, 0 .. --num-processes - 1")


def _join_distributed(args) -> None:
  """`jaxdec.sharding.initialize` for --distributed, before anything touches a device."""
  coordinates = (args.coordinator, args.num_processes, args.process_id) \
      if hasattr(args, "distributed") else ()
  given = [c is not None for c in coordinates]
  if not getattr(args, "distributed", False):
    if any(given):
      raise ValueError("--coordinator / --num-processes / --process-id only act with --distributed")
    return
  if any(given) and not all(given):
    raise ValueError("--distributed: pass all of --coordinator, --num-processes and --process-id, "
                     "or none of them (on TPU JAX reads them from the environment)")
  from jaxdec import sharding

  sharding.initialize(*coordinates)


def _process_mesh():
  """Every device of every process: data parallel across processes, tensor parallel inside."""
  import jax

  from jaxdec import sharding

  return sharding.make_mesh(data=jax.process_count(), model=jax.local_device_count())


def _unescape(text: str) -> str:
  """Python string escapes in a flag's value read as such ('\\n' -> a line break)."""
  return text.encode("latin-1", "backslashreplace").decode("unicode_escape")


def _positive_int(text: str) -> int:
  try:
    value = int(text)
  except ValueError:
    value = 0
  if value < 1:
    raise argparse.ArgumentTypeError(f"must be a positive int, got {text!r}")
  return value


def _tokenizer_or_none(path: str):
  """The model's tokenizer, or None when its directory has no tokenizer.json."""
  import jaxdec

  try:
    return jaxdec.load_tokenizer(path)
  except FileNotFoundError:
    return None


METHODS = ("greedy", "sample", "speculative", "diffusion")
# Flags that only one method reads: giving one picks that method when --method is left out.
_SPECULATIVE_FLAGS = ("drafter", "num_tokens", "max_ngram", "branches", "verifier")
_DIFFUSION_FLAGS = ("scheduler", "threshold", "factor", "delta", "cache", "gen_length",
                    "block_length", "steps", "stop_early", "visible_suffix")
# --scheduler NAME -> the flag holding its value.
_SCHEDULER_VALUES = {"threshold": "threshold", "factor": "factor", "frechet": "delta"}


def _flag(dest: str) -> str:
  return "--" + dest.replace("_", "-")


def _given(args, dests) -> list[str]:
  return [d for d in dests if getattr(args, d) is not None]


def _requested_method(args) -> tuple[str | None, str]:
  """(--method, or the method the flags imply, or None to let the model decide; what chose it).

  Raises ValueError naming a flag that the chosen method would ignore."""
  speculative, diffusion = _given(args, _SPECULATIVE_FLAGS), _given(args, _DIFFUSION_FLAGS)
  method, why = args.method, f"--method {args.method}"
  if method is None and speculative and diffusion:
    raise ValueError(f"{_flag(speculative[0])} is a speculative-decoding flag and "
                     f"{_flag(diffusion[0])} a diffusion one: pass the flags of one method")
  if method is None and (speculative or diffusion):
    method = "speculative" if speculative else "diffusion"
    why = _flag((speculative or diffusion)[0])
  for flags, owner in ((speculative, "speculative"), (diffusion, "diffusion")):
    if flags and method != owner:
      raise ValueError(f"{_flag(flags[0])} only acts with --method {owner}, not with --method "
                       f"{method}")
  if method == "greedy" and args.temperature:
    raise ValueError(f"--temperature {args.temperature} samples, but --method greedy decodes "
                     "greedily: drop one of them")
  if method == "sample" and args.temperature == 0:
    raise ValueError("--method sample needs --temperature > 0 (left out: 1.0), got --temperature 0")
  return method, why


def _method(args, model) -> str:
  """The decoding method: as requested, else diffusion for a masked-diffusion model, sample when
  --temperature > 0, greedy otherwise; ValueError when the model cannot run it."""
  method, why = _requested_method(args)
  causal = model.config.is_causal
  if method is None:
    method = "diffusion" if not causal else "sample" if args.temperature else "greedy"
  elif method == "diffusion" and causal:
    raise ValueError(f"{why} needs a masked-diffusion model (LLaDA, Dream, zoo:pycode-dlm); "
                     f"--model {args.model} is autoregressive")
  elif method != "diffusion" and not causal:
    raise ValueError(f"{why} needs an autoregressive model; --model {args.model} is a "
                     "masked-diffusion model: leave --method out (diffusion) or pass "
                     "--method diffusion")
  if method == "diffusion":
    controls = [flag for flag, on in (("--stop", args.stop), ("--stream", args.stream),
                                      ("--logprobs", args.logprobs),
                                      ("--min-new-tokens", args.min_new_tokens),
                                      ("--repetition-penalty", args.repetition_penalty != 1.0))
                if on]
    if controls:
      raise ValueError(f"{controls[0]} acts on autoregressive and speculative decoding, not on "
                       "diffusion decoding")
  return method


def _temperature(args, method: str) -> float:
  """--temperature, or its default: 1.0 for --method sample, else 0 (greedy)."""
  if args.temperature is not None:
    return args.temperature
  return 1.0 if method == "sample" else 0.0


def _sampling(args, method: str):
  """(Sampling or None for greedy, PRNG key or None); ValueError for a setting that the method
  would ignore. Diffusion decoding returns its temperature in place of a Sampling."""
  import jax

  import jaxdec

  temperature = _temperature(args, method)
  if temperature < 0:
    raise ValueError(f"--temperature must be >= 0 (0 = greedy), got {temperature}")
  if args.top_k < 0:
    raise ValueError(f"--top-k must be >= 0 (0 = off), got {args.top_k}")
  if not 0 < args.top_p <= 1:
    raise ValueError(f"--top-p must be in (0, 1] (1 = off), got {args.top_p}")
  if method == "diffusion" and (args.top_k or args.top_p < 1):
    raise ValueError(f"--top-k {args.top_k} / --top-p {args.top_p} act on autoregressive "
                     "sampling; diffusion decoding samples with --temperature alone")
  if temperature == 0:
    if args.top_k or args.top_p < 1 or args.seed is not None:
      raise ValueError(f"--top-k {args.top_k} / --top-p {args.top_p} / --seed {args.seed} only "
                       "act on sampling, but --temperature 0 decodes greedily; pass "
                       "--temperature > 0 (e.g. 1.0) to sample")
    return (0.0 if method == "diffusion" else None), None
  key = jax.random.key(0 if args.seed is None else args.seed)
  if method == "diffusion":
    return temperature, key
  return jaxdec.Sampling.create(temperature, args.top_k, args.top_p), key


def _drafter(args):
  """The --drafter plug-in with its knobs; ValueError naming a knob it does not have."""
  import jaxdec
  from jaxdec import spec

  name = args.drafter or "lookup"
  knobs = {"lookup": ("num_tokens", "max_ngram"), "adapld": ("num_tokens", "max_ngram", "branches"),
           "draft": ("num_tokens",), "simsd": ("num_tokens",), "heads": (), "kforcing": (),
           "eagle": ()}
  kind = (name.split(":", 1)[0] if name.startswith(("draft:", "simsd:", "heads:", "kforcing:",
                                                    "eagle:"))
          else name)
  if kind not in knobs:
    raise ValueError(f"--drafter must be lookup, adapld, draft:MODEL (e.g. draft:zoo:pycode-draft), "
                     f"simsd:MODEL (a block-diffusion draft, e.g. simsd:zoo:gsm-dlm-draft), "
                     f"heads:DRAFTER (e.g. heads:zoo:pycode-mtp), kforcing:STUDENT (e.g. "
                     f"kforcing:zoo:gsm-kforcing) or eagle:DRAFTER (e.g. eagle:zoo:pycode-eagle3), "
                     f"got {name!r}")
  for dest in _given(args, ("num_tokens", "max_ngram", "branches")):
    if dest not in knobs[kind]:
      raise ValueError(f"{_flag(dest)} does not act on --drafter {name}")
  if kind == "lookup":
    given = {d: getattr(args, d) for d in _given(args, knobs["lookup"])}
    return spec.PromptLookup(**given)
  if kind == "adapld":
    given = {{"num_tokens": "depth"}.get(d, d): getattr(args, d) for d in _given(args, knobs["adapld"])}
    return spec.AdaPLD(**given)
  path = name[len(kind) + 1:]
  if not path:
    example = {"draft": "the draft model, e.g. draft:zoo:pycode-draft",
               "simsd": "the block-diffusion draft, e.g. simsd:zoo:gsm-dlm-draft",
               "heads": "the heads' directory, e.g. heads:zoo:pycode-mtp",
               "kforcing": "the student's directory, e.g. kforcing:zoo:gsm-kforcing",
               "eagle": "the drafter's directory, e.g. eagle:zoo:pycode-eagle3"}[kind]
    raise ValueError(f"--drafter {kind}:... needs {example}")
  if kind in ("heads", "kforcing", "eagle"):
    drafter = jaxdec.load_drafter(path)
    wanted, what = {"heads": (spec.Heads, "Medusa heads"), "kforcing": (spec.KForcing, "a K-Forcing student"),
                    "eagle": (spec.Eagle3, "an EAGLE-3 drafter")}[kind]
    if not isinstance(drafter, wanted):
      raise ValueError(f"--drafter {name}: {path} holds a {type(drafter).__name__} drafter, "
                       f"not {what}")
    return drafter
  num_tokens = {} if args.num_tokens is None else {"num_tokens": args.num_tokens}
  return (spec.SimSD if kind == "simsd" else spec.DraftModel)(jaxdec.load(path), **num_tokens)


def _verifier(args):
  """The --verifier plug-in, or None: the API's default (greedy without sampling, else exact)."""
  from jaxdec import spec

  parts = {"greedy": spec.Greedy, "exact": spec.Exact, "truncation": spec.Truncation,
           "collaborative": spec.Collaborative}
  return None if args.verifier is None else parts[args.verifier]()


def _scheduler(args):
  """The --scheduler plug-in with its value (--threshold / --factor / --delta, whose presence
  alone picks the scheduler), or None: the API's default for the model."""
  from jaxdec import diffusion

  values = [s for s, dest in _SCHEDULER_VALUES.items() if getattr(args, dest) is not None]
  if len(values) > 1:
    raise ValueError(f"{_flag(_SCHEDULER_VALUES[values[0]])} and "
                     f"{_flag(_SCHEDULER_VALUES[values[1]])} are values of two schedulers: "
                     "pass one")
  name = args.scheduler or (values[0] if values else None)
  if values and values[0] != name:
    raise ValueError(f"{_flag(_SCHEDULER_VALUES[values[0]])} is the value of --scheduler "
                     f"{values[0]}, not of --scheduler {name}")
  if name is None:
    return None
  value = getattr(args, _SCHEDULER_VALUES.get(name, ""), None)
  given = () if value is None else (value,)
  parts = {"fixed": diffusion.FixedSteps, "dream": diffusion.Dream,
           "threshold": diffusion.Threshold, "factor": diffusion.Factor,
           "frechet": diffusion.Frechet, "cai": diffusion.FirstStepConfidence,
           "cora": diffusion.Persistence, "said": diffusion.Scaffold,
           "rps": diffusion.RipplePivot, "asynclane": diffusion.AsyncLane}
  return parts[name](*given)


def _diffusion_shape(args) -> tuple[int, int, int]:
  """(gen_length, block_length, steps) with their defaults: --max-new-tokens, 32 (or the whole
  canvas when shorter), one step per token; ValueError naming the flag that does not divide."""
  gen = args.max_new_tokens if args.gen_length is None else args.gen_length
  gen_flag = "--max-new-tokens" if args.gen_length is None else "--gen-length"
  block = min(32, gen) if args.block_length is None else args.block_length
  steps = gen if args.steps is None else args.steps
  if gen < 1 or block < 1 or steps < 1:
    raise ValueError(f"--gen-length {gen} / --block-length {block} / --steps {steps} must be "
                     "positive")
  if gen % block:
    raise ValueError(f"{gen_flag} {gen} (the canvas length) is not a multiple of --block-length "
                     f"{block}")
  if steps % (gen // block):
    raise ValueError(f"--steps {steps} is not a multiple of the number of blocks, "
                     f"{gen} // {block} = {gen // block}")
  return gen, block, steps


def _decoder(args, model, method: str, tokenizer=None, stream=None, stop_early: bool = False):
  """fn(prompts: list of token-id lists) -> DecodeOutput; plug-ins and draft models built once.
  `stream`: the AR / speculative loops' per-step callback (jaxdec.generate's `stream`);
  `stop_early`: diffusion rows end at the block holding their first stop token."""
  import jaxdec
  from jaxdec import diffusion

  sampling, key = _sampling(args, method)
  if method == "diffusion":
    gen, block, steps = _diffusion_shape(args)
    scheduler = _scheduler(args)
    cache = {None: None, "none": None, "prefix": diffusion.PrefixCache(),
             "dual": diffusion.DualCache(), "prefilling": diffusion.PrefillingCache(),
             "archer": diffusion.Archer()}[args.cache]
    return lambda prompts: jaxdec.diffusion_generate(
        model, prompts, gen_length=gen, block_length=block, steps=steps, scheduler=scheduler,
        cache=cache, temperature=sampling, key=key, stop_early=stop_early or bool(args.stop_early),
        visible_suffix=args.visible_suffix)
  budget = {"max_new_tokens": args.max_new_tokens, "sampling": sampling, "key": key,
            "min_new_tokens": args.min_new_tokens, "repetition_penalty": args.repetition_penalty,
            "logprobs": args.logprobs, "stream": stream}
  if args.stop:
    budget.update(stop_strings=args.stop, tokenizer=tokenizer)
  if method == "speculative":
    drafter, verifier = _drafter(args), _verifier(args)
    return lambda prompts: jaxdec.speculative_generate(model, prompts, drafter, verifier, **budget)
  return lambda prompts: jaxdec.generate(model, prompts, **budget)


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
      raise ValueError(f"--prompt-ids must be space-separated ints, got {args.prompt_ids!r}") from None
  return [("" if args.prompt is None else args.prompt, None)]


def _one_line(text: str) -> str:
  """Backslashes and line breaks escaped (\\\\, \\n, \\r): one output line per prompt."""
  return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


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


class _StreamPrinter:
  """--stream: the prompt, then each step's new text (or ids) as the loop produces it."""

  def __init__(self, tokenizer, prompt: str | None):
    from jaxdec.text import TextStream

    self.ids, self.text = [], None
    if tokenizer is not None:
      self.text = TextStream(tokenizer, 1, lambda _, piece: print(piece, end="", flush=True))
    if prompt is not None:
      print(prompt, end="", flush=True)

  def __call__(self, step_tokens) -> None:
    if self.text is not None:
      self.text(step_tokens)
      return
    new = [int(t) for t in step_tokens[0]]
    if new:
      print((" " if self.ids else "") + " ".join(map(str, new)), end="", flush=True)
      self.ids += new

  def close(self, completion: list[int]) -> None:
    """What the stream has not shown yet (a trailing partial character), then the newline."""
    if self.text is not None:
      print(self.text.remainder(0, completion), end="")
    print(flush=True)


class _Stats:
  """Totals over the prompts for --stats (padding rows of a last short batch excluded)."""

  def __init__(self, method: str):
    self.method, self.prompts, self.tokens, self.forwards = method, 0, 0, 0
    self.draft_forwards, self.canvas = 0, 0

  def add(self, out, rows: int) -> None:
    import numpy as np

    self.prompts += rows
    self.tokens += int(np.asarray(out.lengths[:rows]).sum())
    self.forwards += int(np.asarray(out.stats["nfe"][:rows]).sum())
    if "draft_forwards" in out.stats:
      self.draft_forwards += int(np.asarray(out.stats["draft_forwards"][:rows]).sum())
    self.canvas += rows * int(out.tokens.shape[1])

  def line(self) -> str:
    per = lambda n: n / max(self.forwards, 1)
    head = (f"{self.method}: {self.prompts} prompt{'s' * (self.prompts != 1)}, {self.tokens:,} "
            "tokens")
    if self.method == "diffusion":
      return (f"{head} (to the first stop token) from {self.forwards:,} forwards (model passes "
              f"over the canvas): {per(self.canvas):.2f} tokens/forward ({self.canvas:,} canvas "
              "tokens / forwards)")
    line = (f"{head} from {self.forwards:,} forwards (target forward passes, prefill included): "
            f"{per(self.tokens):.2f} tokens/forward")
    if self.method == "speculative":
      line += (f", acceptance length {per(self.tokens):.2f}, {self.draft_forwards:,} draft "
               "forwards")
    return line


def _cmd_generate(args) -> int:
  import json

  import numpy as np

  import jaxdec
  from jaxdec.text import cut_at_stop

  _requested_method(args)  # Contradictory flags and bad prompt files fail before loading.
  prompts = _prompts(args)
  model = jaxdec.load(args.model)
  if args.distributed:
    model = jaxdec.shard(model, _process_mesh())
  method = _method(args, model)
  tokenizer = _tokenizer_or_none(args.model)
  if tokenizer is None and any(text is not None for text, _ in prompts):
    raise ValueError(f"{args.model} has no tokenizer.json: pass token ids (--prompt-ids '1 2 3', "
                     'or a .jsonl --prompts-file of {"prompt_ids": [...]}) instead of text')
  _check_controls(args, tokenizer)
  ids = [tokenizer.encode(text) if text is not None else given  # BOS first, as trained.
         for text, given in prompts]
  if args.stream:
    text = prompts[0][0]
    printer = _StreamPrinter(tokenizer if text is not None else None, text)
    out = _decoder(args, model, method, tokenizer, stream=printer)(ids)
    printer.close(out.tokens[0, : int(out.lengths[0])].tolist())
    if args.stats:
      stats = _Stats(method)
      stats.add(out, 1)
      print(f"jaxdec generate: {stats.line()}", file=sys.stderr)
    return 0
  decode = _decoder(args, model, method, tokenizer)
  many, stats = args.prompts_file is not None, _Stats(method)
  for start in range(0, len(ids), args.batch_size):
    chunk = ids[start: start + args.batch_size]
    rows = len(chunk)
    if len(ids) > args.batch_size:  # A short last batch reuses the full batch's program.
      chunk = chunk + [chunk[-1]] * (args.batch_size - rows)
    out = decode(chunk)
    stats.add(out, rows)
    tokens, lengths = np.asarray(out.tokens), np.asarray(out.lengths)
    for index, ((text, given), row, length) in enumerate(zip(prompts[start: start + rows],
                                                             tokens, lengths)):
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
        print(_one_line(full) if many else full)
      else:
        print(" ".join(map(str, completion)))
    sys.stdout.flush()
  if args.stats:
    print(f"jaxdec generate: {stats.line()}", file=sys.stderr)
  return 0


def _cmd_convert(args) -> int:
  import jax.numpy as jnp

  import jaxdec

  dtype = None if args.dtype == "keep" else jnp.dtype(args.dtype)
  model = jaxdec.load(args.from_hf, dtype=dtype)
  path = jaxdec.save(model, args.out, tokenizer=_tokenizer_or_none(args.from_hf))
  print(f"wrote orbax checkpoint {path} ({model.config.architecture}, "
        f"{model.config.num_params / 1e6:.2f}M params, {jnp.dtype(model.dtype).name})")
  return 0


def _cmd_bench(args) -> int:
  if args.suite == "ar":
    from jaxdec.bench import ar

    ar.run(args.model, batch_sizes=tuple(args.batch_sizes), prompt_len=args.prompt_len,
           new_tokens=args.new_tokens, repeats=args.repeats, out=args.out, peers=not args.no_peers,
           plot=args.plot)
  elif args.suite == "spec":
    from jaxdec.bench import spec

    spec.run(args.model, args.draft, num_prompts=args.prompts, new_tokens=args.new_tokens,
             num_tokens=tuple(args.num_tokens), repeats=args.repeats, peers=not args.no_peers,
             out=args.out, plot=args.plot, task=args.task, heads_path=args.heads)
  elif args.suite == "kforcing":
    from jaxdec.bench import kforcing

    kforcing.run(args.model, args.student, batch_sizes=tuple(args.batch_sizes),
                 new_tokens=args.new_tokens, repeats=args.repeats, out=args.out,
                 task=None if args.task == "code" else args.task)
  elif args.suite == "prefilling":
    from jaxdec.bench import prefilling
    from jaxdec.diffusion import PrefillingCache

    caches = {f"{score} score": PrefillingCache(
        chunk_size=args.chunk_size, top_k=args.top_k, query_tokens=args.query_tokens,
        score=score, positions=args.positions, token_capacity=args.token_capacity)
        for score in args.score}
    prefilling.run(args.model, tuple(args.lengths), prompts=args.prompts,
                   gen_length=args.gen_length, continuation=args.continuation,
                   elbo_samples=args.elbo_samples, caches=caches, repeats=args.repeats,
                   out=args.out)
  elif args.suite == "archer":
    from jaxdec.bench import archer

    archer.run(args.model, tuple(args.lengths), prompts=args.prompts, gen_length=args.gen_length,
               block_length=args.block_length, bounds=tuple(args.bounds),
               threshold=args.threshold, elbo_samples=args.elbo_samples, repeats=args.repeats,
               out=args.out)
  elif args.suite == "kernels":
    from jaxdec.bench import kernels

    kernels.run(tuple(args.lengths), heads=args.heads, kv_heads=args.kv_heads,
                head_dim=args.head_dim, dtype=args.dtype, repeats=args.repeats,
                dense_limit=args.dense_limit, chunk=args.chunk, decode_batch_sizes=tuple(args.decode_batch_sizes),
                out=args.out)
  elif args.suite == "eagle":
    from jaxdec.bench import eagle

    eagle.run(args.task, steps=args.steps, seeds=args.seeds, depth=args.depth,
              num_prompts=args.prompts, workdir=args.workdir, only=args.only, out=args.out,
              plot=args.plot)
  elif args.suite == "hpd":
    from jaxdec.bench import hpd

    hpd.run(args.task, args.model, counts=args.queries, new_tokens=args.new_tokens,
            repeats=args.repeats, out=args.out)
  elif args.suite == "blocks":
    from jaxdec.bench import blocks

    blocks.run(args.model, args.draft, num_prompts=args.prompts, timed_prompts=args.timed_prompts,
               gen_length=args.gen_length, block_length=args.block_length,
               repeats=args.repeats, names=args.rows, out=args.out)
  else:
    from jaxdec.bench import diffusion

    diffusion.run(args.model, batch_sizes=tuple(args.batch_sizes), num_prompts=args.prompts,
                  gen_length=args.gen_length, block_length=args.block_length,
                  repeats=args.repeats, names=args.configs, out=args.out, plot=args.plot,
                  task=args.task, judge=None if args.judge == "none" else args.judge,
                  timed_prompts=args.timed_prompts, baseline=args.baseline)
  return 0


def _cmd_train(args) -> int:
  import dataclasses
  import json

  from jaxdec.configs import load_config
  from jaxdec.train.trainer import TrainingInterrupted
  from jaxdec.train.zoo import train_and_export

  cfg = load_config(args.config)
  if args.steps is not None:
    cfg = dataclasses.replace(cfg, steps=args.steps, warmup_steps=min(cfg.warmup_steps, args.steps // 10))
  workdir = args.workdir or os.path.join("runs", cfg.name)
  export = None if args.no_export else (args.export or os.path.join(workdir, "export"))
  try:
    meta = train_and_export(cfg, workdir, export, third_party_dir=args.third_party, plot=args.plot)
  except TrainingInterrupted as e:
    print(f"jaxdec train: interrupted at step {e.step}; checkpoint saved in {e.directory} (the "
          f"same command resumes from it)", file=sys.stderr)
    return 130
  print(json.dumps({k: meta[k] for k in ("name", "steps", "tokens_seen", "train_seconds", "eval")},
                   indent=2, default=str))
  if export:
    print(f"exported {export}")
  return 0


# --task options (None when left out) and what leaving them out means.
_TASK_EVAL = {"split": "test", "n": 200, "task_seed": 0, "batch_size": 32, "max_operand": 99}
_BPB_EVAL = {"data": None, "stdlib": False, "max_files": None, "seq_len": None, "plot": None}


def _cmd_eval(args) -> int:
  """Bits per byte on code, or with --task the exact-match accuracy on a task's problems."""
  given = lambda defaults: [d for d, v in defaults.items() if getattr(args, d) != v]
  decoding = given({**{d: None for d in (*_SPECULATIVE_FLAGS, *_DIFFUSION_FLAGS, "method",
                                         "temperature", "seed", "max_new_tokens")},
                    "top_k": 0, "top_p": 1.0})
  if args.task is None and (given(dict.fromkeys(_TASK_EVAL)) + decoding):
    raise ValueError(f"{_flag((given(dict.fromkeys(_TASK_EVAL)) + decoding)[0])} acts with "
                     "--task gsm-synth")
  if args.task is not None and given(_BPB_EVAL):
    raise ValueError(f"{_flag(given(_BPB_EVAL)[0])} acts on the bits-per-byte evaluation, not "
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
  method = _method(args, model)
  decode = _decoder(args, model, method, tokenizer, stop_early=True)
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
  from jaxdec.bench.common import format_table
  from jaxdec import corpus
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


def _cmd_demo(args) -> int:
  from jaxdec import demo

  demo.run(num_prompts=args.prompts, new_tokens=args.new_tokens, gsm=args.gsm)
  return 0


_PLOT_EXTRA = "pip install 'jaxdec[plot]'"


def _add_kforcing_bench(suites):
  """`jaxdec bench kforcing`'s parser."""
  kf = suites.add_parser("kforcing", help="K-Forcing's standalone k-tokens-per-forward decoding "
                                          "vs its teacher's AR, speed and quality")
  kf.add_argument("--model", help="the teacher (left out: zoo:gsm-ar)")
  kf.add_argument("--student", help="the K-Forcing student directory (left out: zoo:gsm-kforcing)")
  kf.add_argument("--task", choices=("gsm-synth", "code"), default="gsm-synth",
                  help="gsm-synth test problems (with accuracy) or held-out code prompts")
  kf.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 64],
                  help="one row per method per batch size")
  kf.add_argument("--new-tokens", type=int, help="tokens per row (left out: the task's)")
  kf.add_argument("--repeats", type=int, default=3, help="timed runs (interleaved; medians)")
  kf.add_argument("--out", default="bench_results/kforcing.json", help="JSON output path")
  return kf


def _add_eagle_bench(suites):
  """`jaxdec bench eagle`'s parser."""
  ea = suites.add_parser("eagle", help="EAGLE-3 studies: VAT vs the plain loss over seeds, and "
                                       "KVShot's hidden / KV / hybrid drafters' acceptance by depth "
                                       "(trains every drafter, resumably)")
  ea.add_argument("--task", choices=("gsm-synth", "code"), default="gsm-synth",
                  help="the zoo target and recipe: gsm-ar with zoo:gsm-eagle3, or pycode-ar with "
                       "zoo:pycode-eagle3")
  ea.add_argument("--steps", type=int, help="training steps per drafter (left out: the recipe's)")
  ea.add_argument("--seeds", type=int, default=3, help="seeds of VAT and of the plain loss")
  ea.add_argument("--depth", type=int, default=8, help="the chain measured, depths 1..DEPTH")
  ea.add_argument("--prompts", type=int, default=8, help="test prompts decoded")
  ea.add_argument("--workdir", default="runs/eagle-study", help="the drafters' training runs")
  ea.add_argument("--only", help="only the drafters whose name contains this, e.g. VAT or KV")
  ea.add_argument("--out", default="bench_results/eagle.json", help="JSON output path")
  ea.add_argument("--plot", action="store_true",
                  help="also write OUT_depth.png: acceptance rate per depth of each drafter "
                       "(needs matplotlib: " + _PLOT_EXTRA + ")")
  return ea


def _add_kernels_bench(suites):
  """`jaxdec bench kernels`' parser."""
  kn = suites.add_parser("kernels", help="the Pallas kernels vs XLA attention by context length, "
                                         "and 8B-shaped decode tokens/s vs the bandwidth bound "
                                         "(for a GPU or TPU: on a CPU the kernels are interpreted)")
  kn.add_argument("--lengths", type=int, nargs="+", default=[2048, 8192, 32768],
                  help="context lengths, one row per case each")
  kn.add_argument("--heads", type=int, default=32, help="query heads")
  kn.add_argument("--kv-heads", type=int, default=8, help="KV heads")
  kn.add_argument("--head-dim", type=int, default=128, help="head dimension")
  kn.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"),
                  help="q, k and v dtype")
  kn.add_argument("--repeats", type=int, default=5, help="timed runs (interleaved; medians)")
  kn.add_argument("--dense-limit", type=int, default=8192,
                  help="longest causal prefill timed (XLA builds an L x L mask)")
  kn.add_argument("--chunk", type=int, default=1024,
                  help="prefix chunk length of the chunk-sparse case (top 4 chunks kept)")
  kn.add_argument("--decode-batch-sizes", type=int, nargs="*", default=[],
                  help="also decode with a Llama-3-8B-shaped model (random bf16 weights, 16 GB) "
                       "at these batch sizes, e.g. 1 64")
  kn.add_argument("--out", default="bench_results/kernels.json", help="JSON output path")
  return kn


def _add_prefilling_bench(suites):
  """`jaxdec bench prefilling`'s parser."""
  pf = suites.add_parser("prefilling", help="Prefilling-dLLM's chunk-sparse long-prompt decoding "
                                            "vs dense (threshold + dual cache): tokens/s and the "
                                            "continuation's bits per byte by context length")
  pf.add_argument("--model", default="zoo:pycode-dlm", help="a masked-diffusion model")
  pf.add_argument("--lengths", type=int, nargs="+", default=[2048, 4096, 8160],
                  help="prompt lengths in tokens (prompt + gen_length within the model's "
                       "positions), one row each")
  pf.add_argument("--prompts", type=int, default=3, help="long code prompts per length")
  pf.add_argument("--gen-length", type=int, default=32, help="tokens generated (one block)")
  pf.add_argument("--continuation", type=int, default=64,
                  help="tokens of the true continuation scored (ELBO)")
  pf.add_argument("--elbo-samples", type=int, default=8, help="masks per ELBO estimate")
  pf.add_argument("--chunk-size", type=int, default=256, help="context tokens per chunk")
  pf.add_argument("--top-k", type=int, default=4, help="chunks kept")
  pf.add_argument("--query-tokens", type=int, default=64,
                  help="the prompt's last tokens, always kept (the query)")
  pf.add_argument("--score", nargs="+", default=["draft"], choices=("draft", "keys"),
                  help="chunk scores, one sparse row each")
  pf.add_argument("--positions", default="continuous", choices=("continuous", "reuse"),
                  help="where the kept chunks and the query sit")
  pf.add_argument("--token-capacity", type=int, default=None,
                  help="tokens kept per chunk (default: all)")
  pf.add_argument("--repeats", type=int, default=1, help="timed runs per prompt (interleaved)")
  pf.add_argument("--out", default="bench_results/prefilling.json", help="JSON output path")
  return pf


def _add_archer_bench(suites):
  """`jaxdec bench archer`'s parser."""
  ar = suites.add_parser("archer", help="Archer's prompt-K/V reuse vs a full refresh every step "
                                        "on long code prompts: tokens/s, agreement, and the "
                                        "continuation's bits per byte at each drift bound")
  ar.add_argument("--model", default="zoo:pycode-dlm", help="a bidirectional masked-diffusion "
                                                            "model")
  ar.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048],
                  help="prompt lengths in tokens, one group of rows each")
  ar.add_argument("--prompts", type=int, default=4, help="long code prompts per length")
  ar.add_argument("--gen-length", type=int, default=64, help="tokens generated")
  ar.add_argument("--block-length", type=int, default=32, help="tokens a block")
  ar.add_argument("--bounds", type=int, nargs="+", default=[4, 16, 64],
                  help="Archer's drift bounds (response tokens changed before a refresh)")
  ar.add_argument("--threshold", type=float, default=None,
                  help="threshold commits (left out: LLaDA's one token per forward)")
  ar.add_argument("--elbo-samples", type=int, default=8, help="masks per ELBO estimate")
  ar.add_argument("--repeats", type=int, default=1, help="timed runs (interleaved; medians)")
  ar.add_argument("--out", default="bench_results/archer.json", help="JSON output path")
  return ar


def _add_blocks_bench(suites):
  """`jaxdec bench blocks`' parser."""
  bl = suites.add_parser("blocks", help="block-diffusion decoding on gsm-synth: serial block "
                                        "decoding vs T2T editing, FlowBlock and SimSD")
  bl.add_argument("--model", default="zoo:gsm-dlm",
                  help="block-causal target whose given tokens form a causal LM")
  bl.add_argument("--draft", default="zoo:gsm-dlm-draft",
                  help="SimSD's draft block-diffusion model (the target's tokenizer)")
  bl.add_argument("--prompts", type=int, default=200, help="test problems (accuracy from all)")
  bl.add_argument("--timed-prompts", type=int, default=20,
                  help="problems timed (interleaved repeats)")
  bl.add_argument("--gen-length", type=int, help="new tokens at most (left out: the task's, 448)")
  bl.add_argument("--block-length", type=int, default=32, help="tokens a block")
  bl.add_argument("--repeats", type=int, default=3, help="timed runs (interleaved; medians)")
  bl.add_argument("--rows", nargs="*", help="run only these rows (names as printed; the "
                                            "baseline always runs)")
  bl.add_argument("--out", default="bench_results/blocks.json", help="JSON output path")
  return bl


def _add_hpd_bench(suites):
  """`jaxdec bench hpd`'s parser."""
  hp = suites.add_parser("hpd", help="Hyper-Parallel Decoding (many queries over one context in "
                                     "one row) vs batched rows vs one query at a time")
  hp.add_argument("--task", choices=("code", "gsm-synth"), default="code",
                  help="code: a module header + its function signatures (zoo:pycode-ar); "
                       "gsm-synth: stories with several questions (zoo:gsm-ar), scored")
  hp.add_argument("--model", help="left out: the task's zoo model")
  hp.add_argument("--queries", type=int, nargs="+",
                  help="query counts, one table row each (left out: code 4 16 64, gsm-synth 4 16)")
  hp.add_argument("--new-tokens", type=int,
                  help="tokens per query at most (left out: code 32, gsm-synth 448)")
  hp.add_argument("--repeats", type=int, default=3, help="timed runs (interleaved; medians)")
  hp.add_argument("--out", default="bench_results/hpd.json", help="JSON output path")
  return hp


def _add_ar_bench(suites):
  """`jaxdec bench ar`'s parser."""
  ar = suites.add_parser("ar", help="jaxdec greedy vs transformers generate")
  ar.add_argument("--model", default="random",
                  help="'random' (seeded 6.8M Llama), zoo:NAME or a checkpoint dir")
  ar.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8],
                  help="one table row per batch size")
  ar.add_argument("--prompt-len", type=int, default=128, help="prompt tokens per row")
  ar.add_argument("--new-tokens", type=int, default=128, help="tokens generated per row")
  ar.add_argument("--repeats", type=int, default=5, help="timed runs (interleaved; medians)")
  ar.add_argument("--no-peers", action="store_true", help="skip transformers")
  ar.add_argument("--out", default="bench_results/ar.json", help="JSON output path")
  ar.add_argument("--plot", action="store_true",
                  help="also write OUT_speedup.png next to --out: jaxdec's speedup over "
                       "transformers per batch size (needs matplotlib: " + _PLOT_EXTRA + ")")
  return ar


def _add_bench_parser(sub) -> None:
  """`jaxdec bench ar | spec | diffusion | kforcing | eagle | kernels | prefilling | blocks |
  archer | hpd`."""
  bench = sub.add_parser("bench", help="benchmarks that print side-by-side ratios")
  suites = bench.add_subparsers(dest="suite", required=True)
  ar = _add_ar_bench(suites)
  sp = suites.add_parser("spec", help="speculative decoding vs AR and transformers' assisted / lookup")
  sp.add_argument("--model", help="target: zoo:NAME or a checkpoint dir (left out: zoo:pycode-ar, "
                                  "with --task gsm-synth zoo:gsm-ar)")
  sp.add_argument("--draft", help="draft model with the target's tokenizer (left out: "
                                  "zoo:pycode-draft, with --task gsm-synth zoo:gsm-draft)")
  sp.add_argument("--prompts", type=int, default=8, help="held-out code prompts (or task problems)")
  sp.add_argument("--task", choices=("gsm-synth",),
                  help="prompts from this task's test problems, with an accuracy column")
  sp.add_argument("--new-tokens", type=int,
                  help="tokens generated per prompt (left out: 64, with --task gsm-synth 448)")
  sp.add_argument("--num-tokens", type=int, nargs="+", default=[3, 4, 6], help="draft lengths")
  sp.add_argument("--heads", help="trained Medusa heads for the target (left out: the zoo's, "
                                  "zoo:pycode-mtp / zoo:gsm-mtp, for a zoo target; 'none': no "
                                  "heads rows)")
  sp.add_argument("--repeats", type=int, default=3, help="timed runs (interleaved; medians)")
  sp.add_argument("--no-peers", action="store_true", help="skip transformers")
  sp.add_argument("--out", default="bench_results/spec.json", help="JSON output path")
  sp.add_argument("--plot", action="store_true",
                  help="also write OUT_speedup.png (speedup over jaxdec greedy AR per method) "
                       "and OUT_acceptance.png (tokens per verification step, per drafter) next "
                       "to --out (needs matplotlib: " + _PLOT_EXTRA + ")")
  df = suites.add_parser("diffusion", help="diffusion schedulers x caches vs the LLaDA baseline")
  df.add_argument("--model",
                  help="'random' (seeded, pycode-dlm's size), zoo:NAME or a checkpoint dir (left "
                       "out: zoo:pycode-dlm, with --task gsm-synth zoo:gsm-dlm)")
  df.add_argument("--batch-sizes", type=int, nargs="+", default=[1], help="batch sizes to measure")
  df.add_argument("--prompts", type=int, default=4, help="held-out code prompts (or task problems)")
  df.add_argument("--task", choices=("gsm-synth",),
                  help="prompts from this task's test problems, with an accuracy column (rows "
                       "stop at their answer's EOS)")
  df.add_argument("--judge", default="zoo:pycode-ar",
                  help="on code prompts: an AR model sharing the tokenizer that scores every "
                       "configuration's continuations in bits per byte ('none': off)")
  df.add_argument("--gen-length", type=int,
                  help="canvas tokens per prompt (left out: 256, or the task's, gsm-synth 448)")
  df.add_argument("--block-length", type=int, default=32, help="tokens a block")
  df.add_argument("--repeats", type=int, default=3, help="timed runs (interleaved; medians)")
  df.add_argument("--configs", nargs="*", help="run only these configurations (names as printed)")
  df.add_argument("--baseline", default="LLaDA steps=G",
                  help="the configuration the others are compared with (on a block-causal model "
                       "such as zoo:gsm-dlm, 'LLaDA steps=G + dual' gives the same tokens)")
  df.add_argument("--timed-prompts", type=int,
                  help="time only the first N prompts (quality still from all --prompts; left "
                       "out: all)")
  df.add_argument("--out", default="bench_results/diffusion.json", help="JSON output path")
  df.add_argument("--plot", action="store_true",
                  help="also write OUT_speedup.png (speedup over the baseline per configuration) "
                       "and OUT_tokens_per_forward.png next to --out (needs matplotlib: "
                       + _PLOT_EXTRA + ")")
  kf = _add_kforcing_bench(suites)
  ea = _add_eagle_bench(suites)
  kn = _add_kernels_bench(suites)
  pf = _add_prefilling_bench(suites)
  bl = _add_blocks_bench(suites)
  ah = _add_archer_bench(suites)
  hp = _add_hpd_bench(suites)
  for suite in (ar, sp, df, kf, ea, kn, pf, bl, ah, hp):
    _add_distributed_flags(suite)
  bench.set_defaults(fn=_cmd_bench)


def _add_decoding_controls(gen) -> None:
  """`jaxdec generate`'s controls: stop texts, rules, log-probabilities, streaming."""
  controls = gen.add_argument_group("controls (autoregressive and speculative decoding)")
  controls.add_argument("--stop", action="append", metavar="TEXT", type=_unescape,
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


def _add_sampling_flags(gen) -> None:
  """`jaxdec generate`'s sampling settings."""
  sample = gen.add_argument_group("sampling (--method sample, speculative, diffusion)")
  sample.add_argument("--temperature", type=float,
                      help="0 = greedy; > 0 samples (needed by --top-k / --top-p / --seed); "
                           "left out: 1.0 with --method sample, else 0")
  sample.add_argument("--top-k", type=int, default=0, help="sample from the k likeliest (0 = off)")
  sample.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (1 = off)")
  sample.add_argument("--seed", type=int, help="sampling seed (left out: 0)")


def _add_speculative_flags(gen) -> None:
  """`jaxdec generate`'s drafter and verifier."""
  speculative = gen.add_argument_group(
      "speculative decoding (any of these implies --method speculative)")
  speculative.add_argument("--drafter",
                           metavar="{lookup,adapld,draft:MODEL,simsd:MODEL,heads:DRAFTER,kforcing:STUDENT,eagle:DRAFTER}",
                           help="lookup (prompt lookup), adapld (lookup with a semantic "
                                "fallback, tree drafts), draft:MODEL, a small AR model with "
                                "the target's tokenizer (e.g. draft:zoo:pycode-draft), "
                                "simsd:MODEL, a block-diffusion draft denoising each block "
                                "(SimSD; e.g. simsd:zoo:gsm-dlm-draft with zoo:gsm-dlm), "
                                "heads:DRAFTER, trained Medusa heads with their tree (e.g. "
                                "heads:zoo:pycode-mtp), kforcing:STUDENT, a K-Forcing "
                                "student drafting k tokens in one forward (e.g. "
                                "kforcing:zoo:gsm-kforcing), or eagle:DRAFTER, an EAGLE-3 "
                                "feature drafter growing dynamic trees (e.g. "
                                "eagle:zoo:pycode-eagle3); left out: lookup")
  speculative.add_argument("--num-tokens", type=_positive_int,
                           help="draft tokens a step (adapld: a branch's depth); left out: the "
                                "drafter's default (lookup 6, draft 4, adapld 4)")
  speculative.add_argument("--max-ngram", type=_positive_int,
                           help="longest n-gram lookup / adapld match (left out: 3)")
  speculative.add_argument("--branches", type=_positive_int,
                           help="adapld: continuations verified together as a tree (left out: 3)")
  speculative.add_argument("--verifier", choices=("greedy", "exact", "truncation", "collaborative"),
                           help="greedy and exact are lossless; truncation and collaborative "
                                "(lossy, their default settings) accept more drafts; left out: "
                                "greedy, or exact when sampling")


def _add_diffusion_flags(gen) -> None:
  """`jaxdec generate`'s scheduler, cache and canvas."""
  dllm = gen.add_argument_group("diffusion decoding (any of these implies --method diffusion)")
  dllm.add_argument("--scheduler", choices=("fixed", "threshold", "factor", "frechet", "dream",
                                           "cai", "cora", "said", "rps", "asynclane"),
                    help="which masks a step commits: fixed (LLaDA, --steps per canvas), "
                         "threshold / factor / frechet (Fast-dLLM, with --threshold / --factor / "
                         "--delta), dream; cai (CAI-DLLM), cora (CORA-Diff), said (SAID, "
                         "--steps per canvas), rps (Ripple-Pivot Search), asynclane (AsyncLane) "
                         "at their defaults (other settings: from Python, "
                         "jaxdec.diffusion); left out: dream for a shifted-logit (Dream) model, "
                         "else fixed")
  dllm.add_argument("--threshold", type=float,
                    help="--scheduler threshold: commit every mask this confident (left out: 0.9)")
  dllm.add_argument("--factor", type=float, help="--scheduler factor: its f (left out: 1.0)")
  dllm.add_argument("--delta", type=float, help="--scheduler frechet: its delta (left out: 0.25)")
  dllm.add_argument("--cache", choices=("none", "prefix", "dual", "prefilling", "archer"),
                    help="none (exact), Fast-dLLM's approximate prefix / dual KV cache, "
                         "prefilling (long prompts: the dual cache over the 4 most relevant "
                         "256-token chunks of the prompt and its last 64 tokens), or archer "
                         "(the prompt's K/V reused until 8 response tokens changed, the "
                         "response recomputed every step); left out: none")
  dllm.add_argument("--gen-length", type=_positive_int,
                    help="canvas tokens per prompt, a multiple of --block-length (left out: "
                         "--max-new-tokens)")
  dllm.add_argument("--block-length", type=_positive_int,
                    help="tokens a block; blocks are decoded left to right (left out: 32, or "
                         "the canvas when shorter)")
  dllm.add_argument("--steps", type=_positive_int,
                    help="forwards of the step-counting schedulers (fixed, dream) over the whole "
                         "canvas, a multiple of the number of blocks (left out: --gen-length)")
  dllm.add_argument("--stop-early", action="store_true", default=None,
                    help="end a row at the block holding its first EOS instead of decoding "
                         "every block (jaxdec eval --task always does)")
  dllm.add_argument("--visible-suffix", type=int,
                    help="canvas tokens after the current block the model sees (left out: all, "
                         "as LLaDA and Dream; 0: none, as block-diffusion models decode)")


def _add_generate_parser(sub) -> None:
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
  source.add_argument("--prompt-ids", metavar="IDS", help="prompt as space-separated token ids (used as given)")
  source.add_argument("--prompts-file", metavar="PATH",
                      help="many prompts: a text file of one prompt a line, or a .jsonl file of "
                           'one {"prompt": TEXT} or {"prompt_ids": [IDS]} object a line (for '
                           "prompts with line breaks); printed one a line in input order (text "
                           "as prompt + completion with \\n, \\r, \\\\ escaped)")
  gen.add_argument("--batch-size", type=_positive_int, default=8,
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
  gen.add_argument("--method", choices=METHODS,
                   help="decoding method; left out: from the model and the flags (see above)")
  _add_decoding_controls(gen)
  _add_sampling_flags(gen)
  _add_speculative_flags(gen)
  _add_diffusion_flags(gen)
  _add_distributed_flags(gen)
  gen.set_defaults(fn=_cmd_generate)


def _add_train_parser(sub) -> None:
  """`jaxdec train`."""
  train = sub.add_parser("train", help="train a model from a recipe (zoo:NAME or a config file)")
  train.add_argument("--config", required=True,
                     help="zoo:NAME (a shipped recipe, e.g. zoo:pycode-ar) or a Python file with "
                          "get_config() -> TrainConfig")
  train.add_argument("--workdir", help="checkpoints and metrics (default runs/NAME); resumes if present")
  train.add_argument("--export", help="HF-format output dir (default WORKDIR/export)")
  train.add_argument("--no-export", action="store_true", help="train only; write no HF-format dir")
  train.add_argument("--steps", type=int, help="override the number of steps")
  train.add_argument("--third-party", help="a directory of .py files the model never saw, evaluated at the end")
  train.add_argument("--plot", action=argparse.BooleanOptionalAction,
                     help="write WORKDIR/training.png (loss and validation bits per byte vs "
                          "step) at the end; left out: when matplotlib is installed")
  _add_distributed_flags(train)
  train.set_defaults(fn=_cmd_train)


def _add_eval_parser(sub) -> None:
  """`jaxdec eval`."""
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
                  help="evaluate on at most this many files of each --data directory (left out: all)")
  ev.add_argument("--seq-len", type=int, default=None,
                  help="window in tokens; left out: the window the model was trained and "
                       "evaluated with (its zoo.json recipe's seq_len), so figures match the "
                       "recorded ones, else the model's context length (max_position_embeddings)")
  ev.add_argument("--plot", metavar="OUT.png",
                  help="also draw bits per byte per data set as a PNG at this path (needs "
                       "matplotlib: " + _PLOT_EXTRA + ")")
  task = ev.add_argument_group("task accuracy (--task)")
  task.add_argument("--task", choices=("gsm-synth",),
                    help="score exact-match answers on this task instead of bits per byte")
  task.add_argument("--split", choices=("test", "test-unseen-templates", "validation", "train"),
                    help="which problems (left out: test)")
  task.add_argument("--n", type=_positive_int, help="problems to solve (left out: 200)")
  task.add_argument("--task-seed", type=int,
                    help="seed of the problem draw: the same seed gives the same problems (left "
                         "out: 0)")
  task.add_argument("--max-operand", type=_positive_int,
                    help="largest number in a question (left out: 99, the zoo's level)")
  task.add_argument("--batch-size", type=_positive_int,
                    help="problems decoded together (left out: 32)")
  task.add_argument("--max-new-tokens", type=_positive_int,
                    help="tokens per problem (diffusion: the default --gen-length); left out: "
                         "448, the longest solution rounded up to blocks of 32")
  task.add_argument("--method", choices=METHODS,
                    help="decoding method; left out: diffusion for a masked-diffusion model, "
                         "else greedy (or sample with --temperature > 0)")
  _add_sampling_flags(ev)
  _add_speculative_flags(ev)
  _add_diffusion_flags(ev)
  # Controls of jaxdec generate that a task evaluation does not offer.
  ev.set_defaults(fn=_cmd_eval, stop=None, min_new_tokens=0, repetition_penalty=1.0,
                  logprobs=False, stream=False)


def build_parser() -> argparse.ArgumentParser:
  parser = _Parser(prog="jaxdec", description="Fast LM decoding in JAX.")
  sub = parser.add_subparsers(dest="command", required=True)

  demo = sub.add_parser("demo", help="complete held-out code with the shipped zoo models")
  demo.add_argument("--prompts", type=_positive_int, default=3, help="held-out code prompts")
  demo.add_argument("--new-tokens", type=_positive_int, default=64, help="tokens per completion")
  demo.add_argument("--gsm", action=argparse.BooleanOptionalAction,
                    help="then solve a gsm-synth problem by greedy AR, speculative decoding and "
                         "parallel diffusion, with whichever gsm-synth zoo models are installed "
                         "(left out: when zoo:gsm-ar is)")
  demo.set_defaults(fn=_cmd_demo)

  _add_generate_parser(sub)

  conv = sub.add_parser("convert", help="convert a Hugging Face checkpoint to an orbax checkpoint")
  conv.add_argument("--from-hf", required=True, help="HF checkpoint directory or zoo:NAME")
  conv.add_argument("--out", required=True, help="output directory")
  conv.add_argument("--dtype", default="keep", choices=["keep", "float32", "bfloat16", "float16"],
                    help="weight dtype of the checkpoint (keep = as stored)")
  conv.set_defaults(fn=_cmd_convert)

  _add_train_parser(sub)
  _add_eval_parser(sub)
  _add_bench_parser(sub)
  return parser


def main(argv: list[str] | None = None) -> int:
  args = build_parser().parse_args(argv)
  _enable_compile_cache()
  try:
    _join_distributed(args)
    return args.fn(args)
  except (ValueError, FileNotFoundError, ImportError) as e:
    print(f"jaxdec {args.command}: error: {e}", file=sys.stderr)
    return 2


if __name__ == "__main__":
  sys.exit(main())
