"""Training and shipping the tiny zoo: tokenizer, corpus streams, one run, HF-format export."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time

import jax
import jax.numpy as jnp

from jaxdec.convert import export_hf
from jaxdec.model import Model
from jaxdec.tokenizer import Tokenizer
from jaxdec import corpus
from jaxdec.train.evaluate import bits_per_byte
from jaxdec.train.tokenizer import train_bpe
from jaxdec.train.trainer import TrainConfig, Trainer
from jaxdec.zoo import METADATA_FILE

TOKENIZER_VOCAB = 4096


def zoo_tokenizer(vocab_size: int = TOKENIZER_VOCAB) -> Tokenizer:
  """The shared byte-level BPE, trained on the stdlib train split (deterministic, ~5 s), cached."""
  version = f"{sys.version_info.major}.{sys.version_info.minor}.{sys.version_info.micro}"
  path = os.path.join(corpus.cache_dir(), f"tokenizer-{version}-{vocab_size}.json")
  if not os.path.exists(path):
    texts, _ = corpus.read_texts(corpus.stdlib_split("train"))
    train_bpe(texts, vocab_size).backend.save(path)
  from jaxdec.train.tokenizer import SPECIAL_TOKENS

  return Tokenizer.from_file(path, **SPECIAL_TOKENS)


def _recipe(cfg: TrainConfig) -> dict:
  """The recipe as JSON: every setting, the model config as `ModelConfig.to_dict` spells it."""
  recipe = {k: v for k, v in dataclasses.asdict(cfg).items()
            if not (k in ("part", "target") and v is None)}
  if cfg.model is not None:
    recipe["model"] = cfg.model.to_dict()
  if cfg.part is not None:
    recipe["part"] = cfg.part.describe()
  recipe["objective"] = {"name": type(cfg.objective).__name__, **dataclasses.asdict(cfg.objective)}
  if cfg.data is not None:
    recipe["data"] = {"name": type(cfg.data).__name__, **dataclasses.asdict(cfg.data)}
  return recipe


def train_and_export(cfg: TrainConfig, workdir: str, export_dir: str | None,
                     third_party_dir: str | None = None, progress: bool = True) -> dict:
  """Train `cfg` in `workdir` (resuming if it holds checkpoints), evaluate, and, when
  `export_dir` is given, export it there as an HF directory with tokenizer.json and zoo.json
  metadata. Nothing is written anywhere else (never into the installed package unless
  `export_dir` says so). Returns the metadata."""
  if not hasattr(cfg.trainable, "to_model"):
    raise ValueError(f"train_and_export trains and exports whole models; {cfg.name!r} trains a "
                     f"{type(cfg.trainable).__name__} (use Trainer directly)")
  trainer = Trainer(cfg, workdir)  # First: a workdir of another model fails before data loads.
  tokenizer = zoo_tokenizer()
  stream = corpus.token_stream("train", tokenizer)
  if cfg.data is not None:
    stream = cfg.data.build(stream, progress=progress)
  val_stream = corpus.token_stream("validation", tokenizer)
  val_windows = corpus.fixed_windows(val_stream, cfg.eval_windows, cfg.seq_len)
  start_step, t0 = trainer.step, time.perf_counter()
  trainer.run(stream, val_windows, progress=progress)
  wall = time.perf_counter() - t0
  trainer.close()
  # Evaluate the weights that ship: rounded to the export dtype, computed in fp32.
  model = _rounded(trainer.to_model(), cfg.export_dtype)

  val_texts, _ = corpus.read_texts(corpus.stdlib_split("validation"))
  evals = {"stdlib_validation": bits_per_byte(model, tokenizer, val_texts, seq_len=cfg.seq_len)}
  if third_party_dir:
    texts, _ = corpus.read_texts(corpus.list_python_files(third_party_dir))
    evals["third_party"] = dict(bits_per_byte(model, tokenizer, texts, seq_len=cfg.seq_len),
                                directory=third_party_dir)
  steps_log = _read_metrics(workdir)
  meta = {
      "name": cfg.name, "recipe": _recipe(cfg), "seed": cfg.seed, "steps": trainer.step,
      "tokens_seen": trainer.step * cfg.batch_size * cfg.seq_len,
      "params": sum(x.size for x in jax.tree.leaves(model.params)),
      "train_seconds": sum(cfg.batch_size * cfg.seq_len / r["tokens_per_s"] for r in steps_log),
      "this_run_wall_seconds": wall, "resumed_from_step": start_step,
      "final_val_loss": next((r["val_loss"] for r in reversed(steps_log) if "val_loss" in r), None),
      "eval": evals, "python": sys.version.split()[0], "jax": jax.__version__,
  }
  meta.update(lineage(cfg.init_from, meta))
  if export_dir:
    export_zoo_model(model, tokenizer, export_dir, meta, cfg.export_dtype)
  return meta


def lineage(init_from: str | None, meta: dict) -> dict:
  """When a run starts from a zoo model, record that model's metadata and the totals over both, so
  a staged recipe (AR -> dLLM -> refined dLLM) states its full cost."""
  if init_from is None:
    return {}
  from jaxdec import zoo

  parent = zoo.metadata(zoo.resolve(init_from) if init_from.startswith("zoo:") else init_from)
  if not parent:
    return {"init_from": init_from}
  totals = {k: parent.get(f"total_{k}", parent[k]) + meta[k] for k in ("tokens_seen", "train_seconds")}
  return {"init_from": {"path": init_from, "metadata": parent},
          **{f"total_{k}": v for k, v in totals.items()}}


def _read_metrics(workdir: str) -> list[dict]:
  """The last record per step (a resumed run may have logged a step twice)."""
  path = os.path.join(workdir, "metrics.jsonl")
  by_step = {}
  with open(path) as f:
    for line in f:
      record = json.loads(line)
      by_step[record["step"]] = record
  return [by_step[s] for s in sorted(by_step)]


def _rounded(model: Model, dtype: str) -> Model:
  """The model as it will load after storage in `dtype`: rounded, then back to float32."""
  cast = lambda x: x.astype(jnp.dtype(dtype)).astype(jnp.float32)
  return model.replace(params=jax.tree.map(cast, model.params))


def export_zoo_model(model: Model, tokenizer: Tokenizer, out_dir: str, meta: dict,
                     dtype: str = "float16") -> None:
  stored = model.replace(params=jax.tree.map(lambda x: x.astype(jnp.dtype(dtype)), model.params))
  export_hf(stored, tokenizer, out_dir)
  with open(os.path.join(out_dir, METADATA_FILE), "w") as f:
    json.dump(meta, f, indent=2, default=str)
