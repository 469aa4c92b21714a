"""The `jaxdec` console script: argument parsing only; the work is done by the library."""

from __future__ import annotations

import argparse
import os
import sys


def _enable_compile_cache() -> None:
  """Persist compiled programs across CLI runs (a second `jaxdec generate` skips most compiles)."""
  import jax

  directory = os.environ.get("JAXDEC_CACHE_DIR", os.path.expanduser("~/.cache/jaxdec/xla"))
  jax.config.update("jax_compilation_cache_dir", directory)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)


def _tokenizer_or_none(path: str):
  """The model's tokenizer, or None when its directory has no tokenizer.json."""
  import jaxdec

  try:
    return jaxdec.load_tokenizer(path)
  except FileNotFoundError:
    return None


def _sampling(args):
  """None (greedy) for temperature 0; ValueError for settings that greedy decoding would ignore."""
  import jaxdec

  if args.temperature < 0:
    raise ValueError(f"--temperature must be >= 0 (0 = greedy), got {args.temperature}")
  if args.top_k < 0:
    raise ValueError(f"--top-k must be >= 0 (0 = off), got {args.top_k}")
  if not 0 < args.top_p <= 1:
    raise ValueError(f"--top-p must be in (0, 1] (1 = off), got {args.top_p}")
  if args.temperature == 0:
    if args.top_k or args.top_p < 1 or args.seed is not None:
      raise ValueError(f"--top-k {args.top_k} / --top-p {args.top_p} / --seed {args.seed} only "
                       "act on sampling, but --temperature 0 decodes greedily; pass "
                       "--temperature > 0 (e.g. 1.0) to sample")
    return None
  return jaxdec.Sampling.create(args.temperature, args.top_k, args.top_p)


def _cmd_generate(args) -> int:
  import jax

  import jaxdec

  sampling = _sampling(args)
  model = jaxdec.load(args.model)
  tokenizer = _tokenizer_or_none(args.model)
  if args.prompt_ids is not None:
    prompt = [int(t) for t in args.prompt_ids.split()]
  elif tokenizer is None:
    raise SystemExit(f"{args.model} has no tokenizer.json: pass --prompt-ids '1 2 3' instead of --prompt")
  else:
    prompt = tokenizer.encode(args.prompt)  # BOS first when the tokenizer has one.
  key = None if sampling is None else jax.random.key(args.seed or 0)
  out = jaxdec.generate(model, [prompt], max_new_tokens=args.max_new_tokens, sampling=sampling,
                        key=key)
  ids = out.tokens[0, : int(out.lengths[0])].tolist()
  if tokenizer is not None and args.prompt_ids is None:
    print(args.prompt + tokenizer.decode(ids))
  else:
    print(" ".join(map(str, ids)))
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
           new_tokens=args.new_tokens, repeats=args.repeats, out=args.out, peers=not args.no_peers)
  elif args.suite == "spec":
    from jaxdec.bench import spec

    spec.run(args.model, args.draft, num_prompts=args.prompts, new_tokens=args.new_tokens,
             num_tokens=tuple(args.num_tokens), repeats=args.repeats, peers=not args.no_peers,
             out=args.out)
  else:
    from jaxdec.bench import diffusion

    diffusion.run(args.model, batch_sizes=tuple(args.batch_sizes), num_prompts=args.prompts,
                  gen_length=args.gen_length, block_length=args.block_length,
                  repeats=args.repeats, names=args.configs, out=args.out)
  return 0


def _cmd_train(args) -> int:
  import dataclasses
  import json

  from jaxdec.configs import load_config
  from jaxdec.train.zoo import train_and_export

  cfg = load_config(args.config)
  if args.steps is not None:
    cfg = dataclasses.replace(cfg, steps=args.steps, warmup_steps=min(cfg.warmup_steps, args.steps // 10))
  workdir = args.workdir or os.path.join("runs", cfg.name)
  export = None if args.no_export else (args.export or os.path.join(workdir, "export"))
  meta = train_and_export(cfg, workdir, export, third_party_dir=args.third_party)
  print(json.dumps({k: meta[k] for k in ("name", "steps", "tokens_seen", "train_seconds", "eval")},
                   indent=2, default=str))
  if export:
    print(f"exported {export}")
  return 0


def _cmd_eval(args) -> int:
  import jaxdec
  from jaxdec.bench.common import format_table
  from jaxdec import corpus
  from jaxdec.train.evaluate import bits_per_byte, eval_window

  sets = {}
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
  sets = {"stdlib validation": corpus.stdlib_split("validation"), **sets}
  rows = []
  for name, files in sets.items():
    texts, skipped = corpus.read_texts(files)
    if not texts:
      raise ValueError(f"{name}: none of its {len(files)} .py files is readable UTF-8 text")
    result = bits_per_byte(model, tokenizer, texts, seq_len=seq_len)
    rows.append({"data": name, "files": len(texts), "tokens": result["tokens"],
                 "nats/token": result["nats_per_token"], "bits/byte": result["bits_per_byte"]})
  kind = "exact next-token NLL" if model.config.is_causal else "masked-diffusion ELBO bound"
  print(f"{args.model}: {kind}, windows of {seq_len} tokens")
  print(format_table(rows, ["data", "files", "tokens", "nats/token", "bits/byte"]))
  return 0


def _cmd_demo(args) -> int:
  from jaxdec import demo

  demo.run(num_prompts=args.prompts, new_tokens=args.new_tokens)
  return 0


def _add_bench_parser(sub) -> None:
  """`jaxdec bench ar | spec | diffusion`."""
  bench = sub.add_parser("bench", help="benchmarks that print side-by-side ratios")
  suites = bench.add_subparsers(dest="suite", required=True)
  ar = suites.add_parser("ar", help="jaxdec greedy vs transformers generate")
  ar.add_argument("--model", default="random",
                  help="'random' (seeded 6.8M Llama), zoo:NAME or a checkpoint dir")
  ar.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
  ar.add_argument("--prompt-len", type=int, default=128)
  ar.add_argument("--new-tokens", type=int, default=128)
  ar.add_argument("--repeats", type=int, default=5)
  ar.add_argument("--no-peers", action="store_true", help="skip transformers")
  ar.add_argument("--out", default="bench_results/ar.json", help="JSON output path")
  sp = suites.add_parser("spec", help="speculative decoding vs AR and transformers' assisted / lookup")
  sp.add_argument("--model", default="zoo:pycode-ar")
  sp.add_argument("--draft", default="zoo:pycode-draft")
  sp.add_argument("--prompts", type=int, default=8)
  sp.add_argument("--new-tokens", type=int, default=64)
  sp.add_argument("--num-tokens", type=int, nargs="+", default=[3, 4, 6], help="draft lengths")
  sp.add_argument("--repeats", type=int, default=3)
  sp.add_argument("--no-peers", action="store_true", help="skip transformers")
  sp.add_argument("--out", default="bench_results/spec.json")
  df = suites.add_parser("diffusion", help="diffusion schedulers x caches vs the LLaDA baseline")
  df.add_argument("--model", default="zoo:pycode-dlm")
  df.add_argument("--batch-sizes", type=int, nargs="+", default=[1])
  df.add_argument("--prompts", type=int, default=4)
  df.add_argument("--gen-length", type=int, default=256)
  df.add_argument("--block-length", type=int, default=32)
  df.add_argument("--repeats", type=int, default=3)
  df.add_argument("--configs", nargs="*", help="run only these configurations (names as printed)")
  df.add_argument("--out", default="bench_results/diffusion.json")
  bench.set_defaults(fn=_cmd_bench)


def build_parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(prog="jaxdec", description="Fast LM decoding in JAX.")
  sub = parser.add_subparsers(dest="command", required=True)

  demo = sub.add_parser("demo", help="complete held-out code with the shipped zoo models")
  demo.add_argument("--prompts", type=int, default=3)
  demo.add_argument("--new-tokens", type=int, default=64)
  demo.set_defaults(fn=_cmd_demo)

  gen = sub.add_parser("generate", help="generate a completion with a model")
  gen.add_argument("--model", required=True, help="zoo:NAME, an HF checkpoint dir or an orbax dir")
  gen.add_argument("--prompt", default="",
                   help="prompt text (needs the model's tokenizer.json; encoded with BOS first, "
                        "as the model was trained)")
  gen.add_argument("--max-new-tokens", type=int, default=64)
  gen.add_argument("--prompt-ids", help="prompt as space-separated token ids (used as given)")
  gen.add_argument("--temperature", type=float, default=0.0,
                   help="0 = greedy; > 0 samples (needed by --top-k / --top-p)")
  gen.add_argument("--top-k", type=int, default=0, help="sample from the k likeliest (0 = off)")
  gen.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (1 = off)")
  gen.add_argument("--seed", type=int, default=None, help="sampling seed (default 0)")
  gen.set_defaults(fn=_cmd_generate)

  conv = sub.add_parser("convert", help="convert a Hugging Face checkpoint to an orbax checkpoint")
  conv.add_argument("--from-hf", required=True, help="HF checkpoint directory or zoo:NAME")
  conv.add_argument("--out", required=True, help="output directory")
  conv.add_argument("--dtype", default="keep", choices=["keep", "float32", "bfloat16", "float16"])
  conv.set_defaults(fn=_cmd_convert)

  train = sub.add_parser("train", help="train a model from a recipe (zoo:NAME or a config file)")
  train.add_argument("--config", required=True,
                     help="zoo:NAME (a shipped recipe, e.g. zoo:pycode-ar) or a Python file with "
                          "get_config() -> TrainConfig")
  train.add_argument("--workdir", help="checkpoints and metrics (default runs/NAME); resumes if present")
  train.add_argument("--export", help="HF-format output dir (default WORKDIR/export)")
  train.add_argument("--no-export", action="store_true")
  train.add_argument("--steps", type=int, help="override the number of steps")
  train.add_argument("--third-party", help="a directory of .py files the model never saw, evaluated at the end")
  train.set_defaults(fn=_cmd_train)

  ev = sub.add_parser("eval", help="validation bits per byte of a model")
  ev.add_argument("--model", required=True)
  ev.add_argument("--data", nargs="*", help="extra directories of .py files to evaluate on")
  ev.add_argument("--max-files", type=int, default=None)
  ev.add_argument("--seq-len", type=int, default=None,
                  help="window in tokens; default: the window the model was evaluated with when it "
                       "was trained (its zoo.json recipe's seq_len), else "
                       "min(max_position_embeddings, 512)")
  ev.set_defaults(fn=_cmd_eval)

  _add_bench_parser(sub)
  return parser


def main(argv: list[str] | None = None) -> int:
  args = build_parser().parse_args(argv)
  _enable_compile_cache()
  try:
    return args.fn(args)
  except (ValueError, FileNotFoundError) as e:
    print(f"jaxdec {args.command}: error: {e}", file=sys.stderr)
    return 2


if __name__ == "__main__":
  sys.exit(main())
