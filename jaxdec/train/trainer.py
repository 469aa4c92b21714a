"""Training loop: a Flax NNX module around the one pure decoder, optax AdamW with warm-up + cosine,
windows streamed from the tokenized corpus, orbax CheckpointManager checkpoints, exact resume.

Every source of randomness is a pure function of (seed, step): the batch (`sample_windows`) and
the objective's corruption key. Restoring (params, optimizer state, step) therefore continues a
run exactly where it stopped.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from flax import nnx

from jaxdec.model import Model, ModelConfig, check_params, forward, init_params
from jaxdec.train.corpus import sample_windows
from jaxdec.train.objectives import NextToken


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """One training recipe. Configs under configs/zoo/ return these from `get_config()`."""

  name: str
  model: ModelConfig
  objective: Any = NextToken()  # NextToken() | MaskedDiffusion() | Distill(teacher)
  data: Any = None  # None: stdlib train windows; TeacherSamples(...): a teacher's continuations.
  steps: int = 1000
  batch_size: int = 16
  seq_len: int = 256
  learning_rate: float = 2e-3
  warmup_steps: int = 30
  final_lr_fraction: float = 0.1  # Cosine decays to this fraction of the peak.
  weight_decay: float = 0.1
  b1: float = 0.9
  b2: float = 0.95
  grad_clip: float = 1.0
  seed: int = 0
  init_std: float = 0.02
  init_from: str | None = None  # A model path ('zoo:...' or dir) whose weights start the run.
  eval_every: int = 200
  eval_windows: int = 32
  checkpoint_every: int = 100
  export_dtype: str = "float16"  # Shipping dtype (fp16 keeps 3 more mantissa bits than bf16).


class DecoderLM(nnx.Module):
  """The params pytree as nnx.Params around `jaxdec.model.forward`: one decoder implementation
  serves training and inference."""

  def __init__(self, config: ModelConfig, params: dict):
    self.config = config
    self.weights = nnx.data(jax.tree.map(nnx.Param, params))

  def params(self) -> dict:
    return jax.tree.map(lambda v: v[...], self.weights, is_leaf=lambda v: isinstance(v, nnx.Variable))

  def __call__(self, tokens: jax.Array) -> jax.Array:
    positions = jnp.broadcast_to(jnp.arange(tokens.shape[1], dtype=jnp.int32), tokens.shape)
    return forward(self.params(), tokens, positions, config=self.config)[0]

  def to_model(self) -> Model:
    return Model(config=self.config, params=self.params())


def learning_rate_schedule(cfg: TrainConfig) -> optax.Schedule:
  return optax.warmup_cosine_decay_schedule(
      init_value=0.0, peak_value=cfg.learning_rate, warmup_steps=cfg.warmup_steps,
      decay_steps=cfg.steps, end_value=cfg.learning_rate * cfg.final_lr_fraction)


def _decays(path, _) -> bool:
  """Weight decay on matrices and embeddings, not on norm weights or biases."""
  name = str(getattr(path[-1], "key", path[-1]))
  return not (name.endswith("norm") or name in ("bq", "bk", "bv"))


def make_optimizer(cfg: TrainConfig) -> optax.GradientTransformation:
  return optax.chain(
      optax.clip_by_global_norm(cfg.grad_clip),
      optax.adamw(learning_rate_schedule(cfg), b1=cfg.b1, b2=cfg.b2, weight_decay=cfg.weight_decay,
                  mask=lambda params: jax.tree_util.tree_map_with_path(_decays, params)))


def _initial_params(cfg: TrainConfig) -> dict:
  if cfg.init_from is None:
    return init_params(cfg.model, jax.random.key(cfg.seed), std=cfg.init_std)
  from jaxdec import io

  params = io.load(cfg.init_from, dtype=jnp.float32).params
  check_params(params, cfg.model)  # Same shapes; causal / mask-token settings may differ.
  return params


def _loss_fn(module: DecoderLM, tokens, key, objective):
  return objective.loss(module.params(), tokens, key, module.config)


@nnx.jit
def train_step(module: DecoderLM, optimizer: nnx.Optimizer, tokens, key, objective):
  (loss, metrics), grads = nnx.value_and_grad(_loss_fn, has_aux=True)(module, tokens, key, objective)
  optimizer.update(module, grads)
  return loss, metrics


@nnx.jit
def eval_step(module: DecoderLM, tokens, key, objective):
  return objective.loss(module.params(), tokens, key, module.config)[0]


def step_key(seed: int, step: int) -> jax.Array:
  return jax.random.fold_in(jax.random.key(seed), step)


class Trainer:
  """Owns the module, optimizer and checkpoints of one run in `workdir`."""

  def __init__(self, cfg: TrainConfig, workdir: str):
    self.cfg = cfg
    self.workdir = os.path.abspath(workdir)
    self.module = DecoderLM(cfg.model, _initial_params(cfg))
    self.objective = cfg.objective.prepare()
    self.optimizer = nnx.Optimizer(self.module, make_optimizer(cfg), wrt=nnx.Param)
    self.step = 0
    self.manager = ocp.CheckpointManager(
        os.path.join(self.workdir, "checkpoints"),
        options=ocp.CheckpointManagerOptions(max_to_keep=2, create=True))
    self._restore()

  def _state(self) -> dict:
    return {"model": nnx.to_pure_dict(nnx.state(self.module)),
            "optimizer": nnx.to_pure_dict(nnx.state(self.optimizer))}

  def _restore(self) -> None:
    latest = self.manager.latest_step()
    if latest is None:
      return
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, self._state())
    restored = self.manager.restore(latest, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract), meta=ocp.args.JsonRestore()))
    for obj, key in ((self.module, "model"), (self.optimizer, "optimizer")):
      state = nnx.state(obj)
      nnx.replace_by_pure_dict(state, restored["state"][key])
      nnx.update(obj, state)
    self.step = int(restored["meta"]["step"])

  def save(self) -> None:
    self.manager.save(self.step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(self._state()),
        meta=ocp.args.JsonSave({"step": self.step, "name": self.cfg.name})), force=True)
    self.manager.wait_until_finished()

  def evaluate(self, windows: np.ndarray) -> float:
    """Mean objective on fixed windows (fixed corruption key, so values are comparable)."""
    losses = [float(eval_step(self.module, jnp.asarray(windows[i:i + self.cfg.batch_size]),
                              step_key(self.cfg.seed + 1, i), self.objective))
              for i in range(0, len(windows), self.cfg.batch_size)]
    return float(np.mean(losses))

  def run(self, stream: np.ndarray, val_windows: np.ndarray | None = None, stop_at: int | None = None,
          progress: bool = True) -> list[dict]:
    """Train from `self.step` up to `cfg.steps` (or `stop_at`); returns the logged records."""
    from tqdm.auto import tqdm

    cfg = self.cfg
    end = min(cfg.steps, stop_at) if stop_at is not None else cfg.steps
    log_path = os.path.join(self.workdir, "metrics.jsonl")
    records = []
    bar = tqdm(total=end, initial=self.step, disable=not progress, desc=cfg.name, unit="step")
    tokens_per_step = cfg.batch_size * cfg.seq_len
    while self.step < end:
      t0 = time.perf_counter()
      batch = sample_windows(stream, cfg.batch_size, cfg.seq_len, cfg.seed, self.step)
      loss, _ = train_step(self.module, self.optimizer, jnp.asarray(batch),
                           step_key(cfg.seed, self.step), self.objective)
      loss = float(loss)
      if not math.isfinite(loss):
        raise FloatingPointError(f"loss became {loss} at step {self.step}")
      self.step += 1
      rate = tokens_per_step / (time.perf_counter() - t0)
      bar.update(1)
      bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{rate:,.0f}")
      record = {"step": self.step, "loss": loss, "tokens_per_s": rate,
                "tokens_seen": self.step * tokens_per_step}
      if val_windows is not None and (self.step % cfg.eval_every == 0 or self.step == cfg.steps):
        record["val_loss"] = self.evaluate(val_windows)
        bar.write(f"{cfg.name} step {self.step}: train {loss:.3f}  val {record['val_loss']:.3f}")
      records.append(record)
      with open(log_path, "a") as f:
        f.write(json.dumps(record) + "\n")
      if self.step % cfg.checkpoint_every == 0 or self.step == end:
        self.save()
    bar.close()
    return records

  def close(self) -> None:
    self.manager.close()
