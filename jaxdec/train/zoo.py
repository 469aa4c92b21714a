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
from jaxdec.convert.hf import exportable_config
from jaxdec.convert.hf_config import config_to_hf
from jaxdec.model import Model
from jaxdec.tokenizer import Tokenizer
from jaxdec import corpus, plots
from jaxdec.train.evaluate import bits_per_byte
from jaxdec.train.objectives import BlockDiffusion, MaskedDiffusion, NextToken
from jaxdec.train.tokenizer import train_bpe
from jaxdec.train.trainable import ExportablePart, WholeModel
from jaxdec.train.trainer import TrainConfig, Trainer
from jaxdec.zoo import METADATA_FILE

def zoo_tokenizer(vocab_size: int | None = None, source=corpus.STDLIB) -> Tokenizer:
  """The byte-level BPE of a text source (`jaxdec.corpus`; the stdlib's, ~5 s, by default),
  trained on its train split with its `vocab_size` (unless given) and digit rule; deterministic,
  cached."""
  vocab_size = source.vocab_size if vocab_size is None else vocab_size
  path = os.path.join(corpus.cache_dir(), f"tokenizer-{source.key()}-{vocab_size}.json")
  if not os.path.exists(path):
    trained = train_bpe(source.documents("train"), vocab_size,
                        individual_digits=source.individual_digits)
    corpus.write_cached(path, lambda f: f.write(trained.backend.to_str().encode()))
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
                     third_party_dir: str | None = None, progress: bool = True,
                     plot: bool | None = False) -> dict:
  """Train `cfg` in `workdir` (resuming if it holds checkpoints), evaluate, and, when
  `export_dir` is given, export it there as an HF directory with tokenizer.json and zoo.json
  metadata. `plot` draws the run's curves into WORKDIR/training.png (`plot_training`): True
  always (ImportError, before training, without matplotlib), None when matplotlib is installed,
  False never. Nothing is written anywhere else (never into the installed package unless
  `export_dir` says so). Returns the metadata."""
  if plot:
    plots.require()
  whole = isinstance(cfg.trainable, WholeModel)
  if not whole and not isinstance(cfg.trainable, ExportablePart):
    raise ValueError(f"train_and_export exports whole models and parts with an export method; "
                     f"{cfg.name!r} trains a {type(cfg.trainable).__name__} (use Trainer directly)")
  if export_dir and whole:
    try:
      config_to_hf(exportable_config(cfg.model), "float32")
    except ValueError as e:
      raise ValueError(f"{cfg.name!r} would train and then fail to export: {e}") from e
  trainer = Trainer(cfg, workdir)  # First: a workdir of another model fails before data loads.
  source = corpus.source_of(cfg.data)
  tokenizer = zoo_tokenizer(source=source)
  stream = corpus.token_stream("train", tokenizer, source)
  if cfg.data is not None:
    stream = cfg.data.build(stream, progress=progress, tokenizer=tokenizer)
  if isinstance(cfg.data, corpus.ScoredData):  # Rows scored in part validate the same way.
    val_windows = cfg.data.validation(tokenizer, cfg.eval_windows)
  else:
    val_stream = corpus.token_stream("validation", tokenizer, source)
    val_windows = corpus.fixed_windows(val_stream, cfg.eval_windows, cfg.seq_len)
  start_step, t0 = trainer.step, time.perf_counter()
  trainer.run(stream, val_windows, progress=progress)
  wall = time.perf_counter() - t0
  trainer.close()
  if not whole:
    return _export_part(cfg, trainer, val_windows, export_dir, wall, start_step, workdir, plot,
                        tokenizer)
  # Evaluate the weights that ship: rounded to the export dtype, computed in fp32.
  model = _rounded(trainer.to_model(), cfg.export_dtype)

  val_texts = source.documents("validation")
  window = cfg.eval_seq_len or cfg.seq_len
  evals = {f"{source.name}_validation": bits_per_byte(model, tokenizer, val_texts,
                                                      seq_len=window)}
  if third_party_dir:
    texts, _ = corpus.read_texts(corpus.list_python_files(third_party_dir))
    # The directory's name, not its path: the metadata ships, the machine it was made on doesn't.
    evals["third_party"] = dict(bits_per_byte(model, tokenizer, texts, seq_len=window),
                                directory=os.path.basename(os.path.normpath(third_party_dir)))
  meta = _metadata(cfg, trainer, model.params, evals, wall, start_step, workdir)
  meta.update(lineage(cfg.init_from, meta))
  if export_dir and jax.process_index() == 0:  # Several processes: one writes the export.
    export_zoo_model(model, tokenizer, export_dir, meta, cfg.export_dtype)
  _maybe_plot(cfg, workdir, meta, plot)
  return meta


def _metadata(cfg: TrainConfig, trainer: Trainer, params, evals: dict, wall: float,
              start_step: int, workdir: str) -> dict:
  """zoo.json's record of a run: the recipe, its cost and the shipped weights' evaluation."""
  steps_log = _read_metrics(workdir)
  return {
      "name": cfg.name, "recipe": _recipe(cfg), "seed": cfg.seed, "steps": trainer.step,
      "tokens_seen": trainer.step * cfg.batch_size * cfg.seq_len,
      "params": sum(x.size for x in jax.tree.leaves(params)),
      "train_seconds": sum(cfg.batch_size * cfg.seq_len / r["tokens_per_s"] for r in steps_log),
      "this_run_wall_seconds": wall, "resumed_from_step": start_step,
      "final_val_loss": next((r["val_loss"] for r in reversed(steps_log) if "val_loss" in r), None),
      "eval": evals, "python": sys.version.split()[0], "jax": jax.__version__,
  }


def _export_part(cfg: TrainConfig, trainer: Trainer, val_windows, export_dir: str | None,
                 wall: float, start_step: int, workdir: str, plot: bool | None,
                 tokenizer: Tokenizer | None = None) -> dict:
  """A trained part over a frozen target (drafter heads, a student): the part evaluates the
  weights that ship (rounded to the export dtype) on the validation windows and writes its own
  format (with the target's tokenizer where it is a model of its own)."""
  cast = lambda x: x.astype(jnp.dtype(cfg.export_dtype)).astype(jnp.float32)
  params = jax.tree.map(cast, trainer.module.params())
  lead = jax.process_index() == 0
  evals = cfg.trainable.export(params, trainer.target, val_windows,
                               export_dir if lead else None, dtype=cfg.export_dtype,
                               extra={"base_model_name_or_path": cfg.target}, tokenizer=tokenizer)
  meta = _metadata(cfg, trainer, params, evals, wall, start_step, workdir)
  if export_dir and lead:
    with open(os.path.join(export_dir, METADATA_FILE), "w") as f:
      json.dump(meta, f, indent=2, default=str)
  _maybe_plot(cfg, workdir, meta, plot)
  return meta


def _maybe_plot(cfg: TrainConfig, workdir: str, meta: dict, plot: bool | None) -> str | None:
  """`train_and_export`'s `plot` rule; returns the PNG's path, or None (saying why when the user
  did not choose)."""
  if plot or (plot is None and plots.available()):
    path = plot_training(cfg, workdir, meta)
    print(f"wrote {path}")
    return path
  if plot is None:
    print(f"no training plot: matplotlib is not installed ({plots.INSTALL})")
  return None


def _loss_is_nll(objective) -> bool:
  """Whether the objective's loss is a nats-per-token NLL (bound), convertible to bits per byte."""
  return (isinstance(objective, NextToken)
          or (isinstance(objective, MaskedDiffusion) and not objective.certainty_weight)
          or (isinstance(objective, BlockDiffusion) and not objective.suffix_fraction
              and not objective.ar_weight and not objective.confidence_fraction))


def plot_training(cfg: TrainConfig, workdir: str, meta: dict) -> str:
  """WORKDIR/training.png from WORKDIR/metrics.jsonl: loss vs step, and validation bits per
  byte vs step (the validation loss x the source's validation split's tokens per byte, for NLL
  objectives) with the exported weights' full evaluations (`meta['eval']`) at the last step."""
  evals = meta.get("eval", {})
  val = evals.get(f"{corpus.source_of(cfg.data).name}_validation")
  tokens_per_byte = val["tokens"] / val["bytes"] if val and _loss_is_nll(cfg.objective) else None
  final = {name.replace("_", " "): e["bits_per_byte"] for name, e in evals.items()
           if isinstance(e, dict) and "bits_per_byte" in e}
  fig = plots.training_curves(
      _read_metrics(workdir), tokens_per_byte=tokens_per_byte, final=final,
      title=f"{cfg.name}: {type(cfg.objective).__name__}, batch {cfg.batch_size} x "
            f"{cfg.seq_len} tokens, {meta['steps']} steps")
  return plots.save(fig, os.path.join(workdir, "training.png"))


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
