"""`jaxdec bench ar`: jaxdec greedy decoding vs transformers' `generate` on the same weights.

Both generate exactly `new_tokens` tokens (EOS disabled) from the same prompts; runs are
interleaved and medians reported, with compile time measured separately.
"""

from __future__ import annotations

import os
import tempfile
import time

import jax
import numpy as np

import jaxdec
from jaxdec.bench.common import Timer, add_output_flags, check_plot, report
from jaxdec.model import Layer, Model, ModelConfig, init_params

# 6.8M params: a Llama-shaped model big enough that decoding is compute-bound on a CPU.
RANDOM_CONFIG = ModelConfig(vocab_size=4096, hidden_size=256, intermediate_size=768, num_layers=6,
                            num_heads=4, num_kv_heads=2, head_dim=64, max_position_embeddings=2048,
                            layer=Layer(norm_eps=1e-6), architecture="llama")


def load_bench_model(path: str) -> Model:
  """'random' = a seeded random-init 6.8M Llama; anything else goes to `jaxdec.load`."""
  if path == "random":
    return Model(RANDOM_CONFIG, init_params(RANDOM_CONFIG, jax.random.key(0)))
  return jaxdec.load(path, dtype=np.float32)


def _hf_model(model: Model, directory: str):
  import torch
  import transformers

  jaxdec.export_hf(model, None, directory)
  hf = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
  hf.generation_config.eos_token_id = None
  return hf


def figures(record: dict) -> dict:
  """{'speedup': bars of jaxdec's speedup over transformers' generate, one per batch size}."""
  from jaxdec import plots

  rows = record["rows"]
  return {"speedup": plots.speedup_bars(
      [f"jaxdec, batch {r['batch']}" for r in rows], [r["speedup"] for r in rows],
      baseline="transformers generate",
      title=f"bench ar: {record['model']}, greedy, prompt {record['prompt_len']}, "
            f"{record['new_tokens']} new tokens")}


def run(model_path: str = "random", batch_sizes=(1, 8), prompt_len: int = 128,
        new_tokens: int = 128, repeats: int = 5, out: str | None = None, peers: bool = True,
        plot: bool = False) -> dict:
  """Greedy tokens/s per batch size and the speedup over transformers (`peers`); `plot` also
  writes `figures(record)` as PNGs next to `out`."""
  check_plot(plot, out)
  if plot and not peers:
    raise ValueError("the ar plot is jaxdec's speedup over transformers: it needs peers=True "
                     "(drop --no-peers)")
  model = load_bench_model(model_path)
  timer = Timer()
  rng = np.random.RandomState(0)
  hf = None
  tmp = tempfile.TemporaryDirectory()
  if peers:
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    hf = _hf_model(model, tmp.name)
  rows = []
  for batch in batch_sizes:
    prompts = rng.randint(3, model.config.vocab_size, (batch, prompt_len)).astype(np.int32)

    def run_jaxdec():
      out = jaxdec.generate(model, prompts, max_new_tokens=new_tokens, stop_tokens=())
      return np.asarray(jax.block_until_ready(out.tokens))

    t0 = time.perf_counter()
    ours = run_jaxdec()
    first_call = time.perf_counter() - t0
    fns = {"jaxdec": run_jaxdec}
    if hf is not None:
      import torch

      ids = torch.tensor(prompts, dtype=torch.long)

      def run_hf():
        with torch.no_grad():
          return hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                             do_sample=False, pad_token_id=0)[:, prompt_len:].numpy()

      theirs = run_hf()
      fns["transformers"] = run_hf
    medians = timer.interleaved(fns, repeats)
    tokens = batch * new_tokens
    row = {"batch": batch, "jaxdec tok/s": tokens / medians["jaxdec"],
           "jaxdec compile s": max(first_call - medians["jaxdec"], 0.0)}
    if hf is not None:
      row["transformers tok/s"] = tokens / medians["transformers"]
      row["speedup"] = medians["transformers"] / medians["jaxdec"]
      row["same tokens"] = bool(np.array_equal(ours, theirs))
    rows.append(row)
  tmp.cleanup()
  columns = ["batch", "jaxdec tok/s", "transformers tok/s", "speedup", "jaxdec compile s", "same tokens"]
  columns = [c for c in columns if any(c in r for r in rows)]
  print(f"bench ar: {model_path} ({model.config.num_params / 1e6:.2f}M params), prompt {prompt_len}, "
        f"{new_tokens} new tokens, greedy, median of {repeats} interleaved runs")
  return report(rows, columns, timer, {"suite": "ar", "model": model_path,
                                       "params": model.config.num_params, "prompt_len": prompt_len,
                                       "new_tokens": new_tokens, "repeats": repeats}, out,
                figures if plot else None)


# ---- `jaxdec bench ar` --------------------------------------------------------------------------

HELP = "jaxdec greedy vs transformers generate"


def add_arguments(parser) -> None:
  """`jaxdec bench ar`'s flags (the CLI adds the multi-process ones)."""

  parser.add_argument("--model", default="random",
                      help="'random' (seeded 6.8M Llama), zoo:NAME or a checkpoint dir")
  parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8],
                      help="one table row per batch size")
  parser.add_argument("--prompt-len", type=int, default=128, help="prompt tokens per row")
  parser.add_argument("--new-tokens", type=int, default=128, help="tokens generated per row")
  parser.add_argument("--repeats", type=int, default=5, help="timed runs (interleaved; medians)")
  parser.add_argument("--no-peers", action="store_true", help="skip transformers")
  add_output_flags(parser, "ar",
                   "OUT_speedup.png: jaxdec's speedup over transformers per batch size")


def main(args) -> int:
  """`jaxdec bench ar`: `run` with the parsed flags."""
  run(args.model, batch_sizes=tuple(args.batch_sizes), prompt_len=args.prompt_len,
      new_tokens=args.new_tokens, repeats=args.repeats, out=args.out, peers=not args.no_peers,
      plot=args.plot)
  return 0
