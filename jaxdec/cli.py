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


def _cmd_generate(args) -> int:
  import jax

  import jaxdec

  model = jaxdec.load(args.model)
  tokenizer = None
  try:
    tokenizer = jaxdec.load_tokenizer(args.model)
  except FileNotFoundError:
    pass
  if args.prompt_ids is not None:
    prompt = [int(t) for t in args.prompt_ids.split()]
  elif tokenizer is None:
    raise SystemExit(f"{args.model} has no tokenizer.json: pass --prompt-ids '1 2 3' instead of --prompt")
  else:
    prompt = tokenizer.encode(args.prompt, add_bos=True)
  sampling = None
  if args.temperature > 0:
    sampling = jaxdec.Sampling.create(args.temperature, args.top_k, args.top_p)
  out = jaxdec.generate(model, [prompt], max_new_tokens=args.max_new_tokens, sampling=sampling,
                        key=jax.random.key(args.seed))
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
  tokenizer = None
  if os.path.exists(os.path.join(args.from_hf, "tokenizer.json")):
    tokenizer = jaxdec.load_tokenizer(args.from_hf)
  path = jaxdec.save(model, args.out, tokenizer=tokenizer)
  print(f"wrote orbax checkpoint {path} ({model.config.architecture}, "
        f"{model.config.num_params / 1e6:.2f}M params, {jnp.dtype(model.dtype).name})")
  return 0


def _cmd_bench(args) -> int:
  if args.suite == "ar":
    from jaxdec.bench import ar

    ar.run(args.model, batch_sizes=tuple(args.batch_sizes), prompt_len=args.prompt_len,
           new_tokens=args.new_tokens, repeats=args.repeats, out=args.out, peers=not args.no_peers)
  return 0


def build_parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(prog="jaxdec", description="Fast LM decoding in JAX.")
  sub = parser.add_subparsers(dest="command", required=True)

  gen = sub.add_parser("generate", help="generate a completion with a model")
  gen.add_argument("--model", required=True, help="zoo:NAME, an HF checkpoint dir or an orbax dir")
  gen.add_argument("--prompt", default="", help="prompt text (needs the model's tokenizer.json)")
  gen.add_argument("--prompt-ids", help="prompt as space-separated token ids")
  gen.add_argument("--max-new-tokens", type=int, default=64)
  gen.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
  gen.add_argument("--top-k", type=int, default=0)
  gen.add_argument("--top-p", type=float, default=1.0)
  gen.add_argument("--seed", type=int, default=0)
  gen.set_defaults(fn=_cmd_generate)

  conv = sub.add_parser("convert", help="convert a Hugging Face checkpoint to an orbax checkpoint")
  conv.add_argument("--from-hf", required=True, help="HF checkpoint directory")
  conv.add_argument("--out", required=True, help="output directory")
  conv.add_argument("--dtype", default="keep", choices=["keep", "float32", "bfloat16", "float16"])
  conv.set_defaults(fn=_cmd_convert)

  bench = sub.add_parser("bench", help="benchmarks that print side-by-side ratios")
  bench.add_argument("suite", choices=["ar"])
  bench.add_argument("--model", default="random",
                     help="'random' (seeded 6.8M Llama), zoo:NAME or a checkpoint dir")
  bench.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
  bench.add_argument("--prompt-len", type=int, default=128)
  bench.add_argument("--new-tokens", type=int, default=128)
  bench.add_argument("--repeats", type=int, default=5)
  bench.add_argument("--no-peers", action="store_true", help="skip transformers")
  bench.add_argument("--out", default="bench_results/ar.json", help="JSON output path")
  bench.set_defaults(fn=_cmd_bench)
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
