"""`jaxdec bench kernels`: the Pallas kernels against XLA attention, timed side by side at each
context length, and (with `decode_batch_sizes`) the greedy decode tokens/s of a model of
Llama-3-8B's shapes (random bfloat16 weights) on both backends against the memory-bandwidth bound.

Attention cases at context length L (batch 1; `heads` query heads, `kv_heads` KV heads):
  prefill      causal, T = S = L (the XLA path builds an [L, L] mask: skipped past `dense_limit`)
  verify tree  a 16-node draft tree against a cache of L
  diffusion    a 32-token bidirectional block against a cache of L (dual-cache decoding)
  chunk-sparse the same block against the top 4 of L / `chunk` prefix chunks (Prefilling-dLLM),
               kernel vs XLA's dense attention over the whole prefix

Off GPU/TPU the kernels run in interpret mode, so the CPU figures say nothing about kernel
speed: run it on the accelerator (scripts/device_check.sh does).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxdec.bench.common import Timer, add_output_flags, report
from jaxdec.model import Bidirectional, Causal, MaskSpec
from jaxdec.model.attention import attention

# Peak HBM bandwidth (bytes/s) by device kind, for the decode bound.
BANDWIDTH = {"H200": 4.8e12, "H100": 3.35e12, "A100": 2.0e12, "L4": 0.3e12, "TPU v4": 1.2e12,
             "TPU v5 lite": 0.82e12, "TPU v5e": 0.82e12, "TPU v5p": 2.76e12, "TPU v6 lite": 1.64e12,
             "TPU v6e": 1.64e12}
TOP_CHUNKS = 4


def llama3_8b_shapes():
  from jaxdec.model import Layer, ModelConfig, Rope

  return ModelConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_layers=32,
                     num_heads=32, num_kv_heads=8, head_dim=128, max_position_embeddings=8192,
                     rope=Rope(theta=500000.0), layer=Layer(norm_eps=1e-5))


def _cache_mask(steps: int, cached: int, pattern, tree=None) -> MaskSpec:
  q_pos = cached + jnp.arange(steps, dtype=jnp.int32)[None]
  kv_pos = jnp.arange(cached + steps, dtype=jnp.int32)[None]
  return MaskSpec(q_positions=q_pos, kv_positions=kv_pos,
                  kv_length=jnp.asarray([cached + steps], jnp.int32),
                  start=jnp.asarray([cached], jnp.int32), pattern=pattern, tree=tree)


def _chain_tree(nodes: int) -> jax.Array:
  """A binary draft tree's ancestor matrix over `nodes` nodes (node i's parent is (i - 1) // 2)."""
  ancestors = np.eye(nodes, dtype=bool)
  for i in range(1, nodes):
    ancestors[i] |= ancestors[(i - 1) // 2]
  return jnp.asarray(ancestors)[None]


def _attention_cases(length: int, dense_limit: int):
  """name -> (query steps, mask) for context length `length`."""
  cases = {"verify tree (16 nodes)": (16, _cache_mask(16, length, Causal(), _chain_tree(16))),
           "diffusion block 32": (32, _cache_mask(32, length, Bidirectional()))}
  if length <= dense_limit:
    positions = jnp.arange(length, dtype=jnp.int32)[None]
    cases["prefill (causal)"] = (length, MaskSpec(
        q_positions=positions, kv_positions=positions, kv_length=jnp.asarray([length], jnp.int32),
        start=jnp.zeros((1,), jnp.int32)))
  return cases


def _time_pair(timer, fns: dict, repeats: int) -> dict:
  for fn in fns.values():
    jax.block_until_ready(fn())  # Compile outside the timing.
  return timer.interleaved({k: (lambda f=f: jax.block_until_ready(f())) for k, f in fns.items()},
                           repeats)


def attention_rows(lengths, heads: int, kv_heads: int, head_dim: int, dtype, repeats: int,
                   dense_limit: int, chunk: int, timer: Timer) -> list[dict]:
  from pallas_kernels.chunk_attention import chunk_attention

  rows = []
  key = jax.random.key(0)
  for length in lengths:
    for name, (steps, mask) in _attention_cases(length, dense_limit).items():
      slots = mask.kv_positions.shape[1]
      kq, kk, kv = jax.random.split(jax.random.fold_in(key, length), 3)
      q = jax.random.normal(kq, (1, steps, heads, head_dim), dtype)
      k = jax.random.normal(kk, (1, slots, kv_heads, head_dim), dtype)
      v = jax.random.normal(kv, (1, slots, kv_heads, head_dim), dtype)
      fns = {b: jax.jit(lambda q, k, v, b=b, mask=mask: attention(q, k, v, mask=mask, backend=b))
             for b in ("xla", "pallas")}
      times = _time_pair(timer, {b: (lambda f=f: f(q, k, v)) for b, f in fns.items()}, repeats)
      rows.append({"case": name, "context": length, "xla ms": times["xla"] * 1e3,
                   "kernel ms": times["pallas"] * 1e3, "kernel speedup": times["xla"] / times["pallas"]})
    if length >= chunk * TOP_CHUNKS:
      rows.append(_chunk_row(length, chunk, heads, kv_heads, head_dim, dtype, repeats, timer, key,
                             chunk_attention))
  return rows


def _chunk_row(length, chunk, heads, kv_heads, head_dim, dtype, repeats, timer, key,
               chunk_attention):
  chunks = length // chunk
  kq, kk, kv = jax.random.split(jax.random.fold_in(key, length + 1), 3)
  q = jax.random.normal(kq, (1, 32, heads, head_dim), dtype)
  k_chunks = jax.random.normal(kk, (1, chunks, chunk, kv_heads, head_dim), dtype)
  v_chunks = jax.random.normal(kv, (1, chunks, chunk, kv_heads, head_dim), dtype)
  selected = jnp.arange(TOP_CHUNKS, dtype=jnp.int32)[None] * (chunks // TOP_CHUNKS)
  keep = jnp.ones((1, chunks, chunk), bool)
  dense_mask = _cache_mask(32, length - 32, Bidirectional())
  k_all = (1, length, kv_heads, head_dim)  # The prefix as one contiguous cache.
  sparse = jax.jit(lambda q, k, v: chunk_attention(q, k, v, selected, keep)[0])
  dense = jax.jit(lambda q, k, v: attention(q, k.reshape(k_all), v.reshape(k_all), mask=dense_mask))
  times = _time_pair(timer, {"xla": lambda: dense(q, k_chunks, v_chunks),
                             "pallas": lambda: sparse(q, k_chunks, v_chunks)}, repeats)
  return {"case": f"chunk-sparse top {TOP_CHUNKS} of {chunks} x {chunk} vs dense", "context": length,
          "xla ms": times["xla"] * 1e3, "kernel ms": times["pallas"] * 1e3,
          "kernel speedup": times["xla"] / times["pallas"]}


def decode_rows(batch_sizes, prompt_len: int, new_tokens: int, repeats: int, timer: Timer,
                config=None) -> list[dict]:
  """Greedy decode tokens/s of a model of `config`'s shapes (default Llama-3-8B's; random bf16
  weights), both backends."""
  import jaxdec
  from jaxdec.model import Model, init_params

  config = llama3_8b_shapes() if config is None else config
  model = Model(config=config, params=init_params(config, jax.random.key(0), dtype=jnp.bfloat16))
  weight_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(model.params))
  kind = jax.devices()[0].device_kind
  bandwidth = next((bw for name, bw in BANDWIDTH.items() if name.lower() in kind.lower()), None)
  rows = []
  for batch in batch_sizes:
    prompts = np.random.default_rng(batch).integers(0, config.vocab_size, (batch, prompt_len))
    runs = {}
    for backend in ("xla", "pallas"):
      variant = model.replace(config=dataclasses.replace(config, attention_backend=backend))
      runs[backend] = lambda v=variant: jaxdec.generate(v, prompts, max_new_tokens=new_tokens).tokens
    times = _time_pair(timer, runs, repeats)
    context = prompt_len + new_tokens / 2  # Mean cache length read per step.
    kv_bytes = batch * context * config.num_layers * 2 * config.num_kv_heads * config.head_dim * 2
    bound = batch * bandwidth / (weight_bytes + kv_bytes) if bandwidth else None
    for backend, seconds in times.items():
      rate = batch * new_tokens / seconds
      rows.append({"case": f"decode, batch {batch}, {backend}", "context": prompt_len + new_tokens,
                   "tokens/s": rate, "bandwidth bound tokens/s": bound,
                   "share of bound": rate / bound if bound else None})
  return rows


def run(lengths=(2048, 8192, 32768), heads: int = 32, kv_heads: int = 8, head_dim: int = 128,
        dtype: str = "bfloat16", repeats: int = 5, dense_limit: int = 8192, chunk: int = 1024,
        decode_batch_sizes=(), prompt_len: int = 512, new_tokens: int = 64, decode_config=None,
        out: str | None = None) -> dict:
  """Time every attention case at every length, then (with `decode_batch_sizes`) decoding with a
  model of `decode_config`'s shapes (default `llama3_8b_shapes()`)."""
  timer = Timer()
  device = jax.devices()[0]
  print(f"bench kernels on {device.platform} ({device.device_kind}); "
        f"{'interpret mode: not a speed measurement' if device.platform == 'cpu' else 'compiled'}")
  rows = attention_rows(lengths, heads, kv_heads, head_dim, jnp.dtype(dtype), repeats, dense_limit,
                        chunk, timer)
  columns = ["case", "context", "xla ms", "kernel ms", "kernel speedup"]
  if decode_batch_sizes:
    rows += decode_rows(decode_batch_sizes, prompt_len, new_tokens, repeats, timer, decode_config)
    columns += ["tokens/s", "bandwidth bound tokens/s", "share of bound"]
  return report(rows, columns, timer, {
      "suite": "kernels", "device": str(device), "heads": heads, "kv_heads": kv_heads,
      "head_dim": head_dim, "dtype": dtype, "lengths": list(lengths)}, out)


# ---- `jaxdec bench kernels` ---------------------------------------------------------------------

HELP = ("the Pallas kernels vs XLA attention by context length, and 8B-shaped decode tokens/s vs "
        "the bandwidth bound (for a GPU or TPU: on a CPU the kernels are interpreted)")


def add_arguments(parser) -> None:
  """`jaxdec bench kernels`' flags (the CLI adds the multi-process ones)."""
  parser.add_argument("--lengths", type=int, nargs="+", default=[2048, 8192, 32768],
                      help="context lengths, one row per case each")
  parser.add_argument("--heads", type=int, default=32, help="query heads")
  parser.add_argument("--kv-heads", type=int, default=8, help="KV heads")
  parser.add_argument("--head-dim", type=int, default=128, help="head dimension")
  parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"),
                      help="q, k and v dtype")
  parser.add_argument("--repeats", type=int, default=5, help="timed runs (interleaved; medians)")
  parser.add_argument("--dense-limit", type=int, default=8192,
                      help="longest causal prefill timed (XLA builds an L x L mask)")
  parser.add_argument("--chunk", type=int, default=1024,
                      help="prefix chunk length of the chunk-sparse case (top 4 chunks kept)")
  parser.add_argument("--decode-batch-sizes", type=int, nargs="*", default=[],
                      help="also decode with a Llama-3-8B-shaped model (random bf16 weights, "
                           "16 GB) at these batch sizes, e.g. 1 64")
  add_output_flags(parser, "kernels")


def main(args) -> int:
  """`jaxdec bench kernels`: `run` with the parsed flags."""
  run(tuple(args.lengths), heads=args.heads, kv_heads=args.kv_heads, head_dim=args.head_dim,
      dtype=args.dtype, repeats=args.repeats, dense_limit=args.dense_limit, chunk=args.chunk,
      decode_batch_sizes=tuple(args.decode_batch_sizes), out=args.out)
  return 0
