"""One process of the multi-process test (tests/test_multihost.py).

`python tests/multihost_worker.py PROCESS_ID NUM_PROCESSES PORT OUT_DIR quick|full` joins a run
of NUM_PROCESSES processes on this machine (coordinator localhost:PORT, 4 CPU devices each, JAX's
gloo collectives), runs `decode_cases` (quick: only "generate") and, for full, `train_case` on a
(data 4, model 2) mesh over every process's devices, and writes the results to
OUT_DIR/process-ID.npz. The test runs the same functions in one process without a mesh and
compares.
"""

import json
import os
import sys
import time

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jaxdec  # noqa: E402
from jaxdec import sharding, spec  # noqa: E402
from jaxdec.diffusion import Threshold  # noqa: E402
from jaxdec.model import Bidirectional  # noqa: E402
from tiny import tiny_model  # noqa: E402

PROMPTS = [[5, 9, 11], [7, 3, 9, 5, 9, 3, 9], [12]]  # 3 rows: padded on a data axis of 4.
CASES = ("generate", "lookup", "draft", "diffusion")


def decode_cases(mesh, names=CASES) -> dict[str, np.ndarray]:
  """'case/field' -> array: tokens, lengths and every stat of the decoding cases `names`, on
  `mesh` (None: one device, unsharded)."""
  place = (lambda m: m) if mesh is None else (lambda m: jaxdec.shard(m, mesh))
  target, draft = tiny_model(0), tiny_model(1, hidden_size=32, intermediate_size=64, num_heads=2)
  dlm = tiny_model(2, attention=Bidirectional(), architecture="llada", std=0.5, tokens=dict(mask=4))
  target, draft, dlm = place(target), place(draft), place(dlm)
  key = jax.random.key(7)
  sampled = jaxdec.Sampling.create(temperature=[1.0, 0.0, 0.8])  # Row 1 greedy.
  cases = {
      "generate": lambda: jaxdec.generate(target, PROMPTS, max_new_tokens=12, sampling=sampled,
                                          key=key),
      "lookup": lambda: jaxdec.speculative_generate(target, PROMPTS, spec.PromptLookup(3, 4),
                                                    max_new_tokens=12),
      "draft": lambda: jaxdec.speculative_generate(target, PROMPTS, spec.DraftModel(draft, 3),
                                                   max_new_tokens=12, sampling=sampled, key=key),
      "diffusion": lambda: jaxdec.diffusion_generate(dlm, PROMPTS, gen_length=16, block_length=8,
                                                     scheduler=Threshold(0.5), temperature=0.7,
                                                     key=key),
  }
  results = {}
  for name in names:
    out = cases[name]()
    results[f"{name}/tokens"] = np.asarray(out.tokens)
    results[f"{name}/lengths"] = np.asarray(out.lengths)
    for stat, value in out.stats.items():
      results[f"{name}/stats/{stat}"] = np.asarray(value)
  return results


def different_batches_refused(mesh) -> bool:
  """Whether a call whose processes pass different prompts fails (before anything runs) with a
  ValueError that says so, on every process."""
  model = jaxdec.shard(tiny_model(0), mesh)
  try:
    jaxdec.generate(model, [[5 + jax.process_index()]], max_new_tokens=4)
  except ValueError as e:
    return "processes passed different batches" in str(e)
  return False


def train_case(workdir: str, mesh) -> dict[str, np.ndarray]:
  """Losses of 4 steps of a tiny decoder on random tokens, stopped after 2 and resumed from the
  orbax checkpoint; the metrics file's steps; the final params' norm."""
  from jaxdec.model import ModelConfig
  from jaxdec.train.trainer import TrainConfig, Trainer

  model = ModelConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_layers=2,
                      num_heads=4, num_kv_heads=2, head_dim=8, max_position_embeddings=64)
  cfg = TrainConfig(name="multihost", model=model, steps=4, batch_size=8, seq_len=16,
                    warmup_steps=1, checkpoint_every=2, eval_every=100)
  stream = np.random.RandomState(0).randint(0, 128, 4096).astype(np.int32)
  with jax.numpy_dtype_promotion("standard"):  # optax mixes Python floats and int32 counts.
    first = Trainer(cfg, workdir, mesh=mesh)
    losses = [r["loss"] for r in first.run(stream, stop_at=2, progress=False)]
    first.close()
    resumed = Trainer(cfg, workdir, mesh=mesh)
    resumed_from = resumed.step
    losses += [r["loss"] for r in resumed.run(stream, progress=False)]
    params = resumed.to_model().params
    resumed.close()
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    logged = [json.loads(line)["step"] for line in f]
  norm = sum(float(np.sum(np.square(np.asarray(x), dtype=np.float64)))
             for x in jax.tree.leaves(params))
  return {"train/losses": np.asarray(losses), "train/resumed_from": np.asarray(resumed_from),
          "train/logged_steps": np.asarray(logged), "train/params_norm": np.asarray(norm)}


def main(argv) -> None:
  process_id, num_processes, port, out, which = int(argv[0]), int(argv[1]), argv[2], argv[3], argv[4]
  jax.config.update("jax_numpy_rank_promotion", "raise")
  jax.config.update("jax_numpy_dtype_promotion", "strict")
  jax.config.update("jax_cpu_collectives_implementation", "gloo")  # This JAX's default, made explicit.
  sharding.initialize(f"localhost:{port}", num_processes, process_id)
  mesh = sharding.make_mesh(data=4, model=2)
  start = time.perf_counter()
  results = decode_cases(mesh, ("generate",) if which == "quick" else CASES)
  decoded = time.perf_counter()
  if which == "full":
    results.update(train_case(os.path.join(out, "train"), mesh))
  print(f"process {process_id}: decoding {decoded - start:.1f} s, training "
        f"{time.perf_counter() - decoded:.1f} s", flush=True)
  results["different_batches_refused"] = np.asarray(different_batches_refused(mesh))
  results["mesh/process"] = np.vectorize(lambda d: d.process_index)(mesh.devices)
  results["devices"] = np.asarray([jax.device_count(), jax.local_device_count()])
  np.savez(os.path.join(out, f"process-{process_id}.npz"), **results)


if __name__ == "__main__":
  main(sys.argv[1:])
