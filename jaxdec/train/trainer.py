"""Training loop for any `Trainable` part (a whole decoder, a drafter head over a frozen target,
a student): its params as a Flax NNX module, optax AdamW with warm-up + cosine, windows streamed
from the tokenized corpus, orbax CheckpointManager checkpoints, exact resume.

Every source of randomness is a pure function of (seed, step): the batch (`sample_windows`) and
the objective's corruption key. Restoring (params, optimizer state, step) therefore continues a
run exactly where it stopped; Ctrl-C saves a checkpoint first (`TrainingInterrupted`).

On a mesh (`Trainer(..., mesh=)`, and always with several processes) training is data parallel
over the mesh's `data` axis with a whole decoder's params sharded as for decoding
(`jaxdec.sharding.param_shardings`). Every process reads the same token stream and builds the
same global batch from (seed, step); each puts only its own devices' rows on them. Checkpoints
are orbax's, written by all processes together into a workdir they all see (a shared
filesystem); process 0 alone writes metrics.jsonl.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
import threading
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from flax import nnx
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from jaxdec import sharding
from jaxdec.model import Model, ModelConfig
from jaxdec.model.params import path_name
from jaxdec.model.config import regroup
from jaxdec.corpus import Rows, sample_batch
from jaxdec.train.objectives import NextToken
from jaxdec.train.trainable import FullModel, Trainable, WholeModel


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """One training recipe. Configs under jaxdec/configs/zoo/ return these from `get_config()`.

  What trains is `part` (a `Trainable`) or, when it is None, the whole decoder `model` from
  `init_std` / `init_from` (`FullModel`). `target` names a frozen model ('zoo:...' or a dir) the
  objective reads: the teacher of `Distill`, the model under a drafter head. Values are checked
  here, before any data is loaded.
  """

  name: str
  model: ModelConfig | None = None
  objective: Any = NextToken()  # NextToken() | MaskedDiffusion() | Distill() | your own.
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
  # The window of the exported model's validation figure (None: seq_len). A long-context stage
  # keeps its predecessors' window, so the figures compare (and scoring stays cheap).
  eval_seq_len: int | None = None
  checkpoint_every: int = 100
  export_dtype: str = "float16"  # Shipping dtype (fp16 keeps 3 more mantissa bits than bf16).
  part: Any = None  # A Trainable; None: FullModel(model, init_std, init_from).
  target: str | None = None  # The frozen target model's path, or None.

  def __post_init__(self):
    if (self.model is None) == (self.part is None):
      raise ValueError(f"TrainConfig {self.name!r}: give exactly one of model (a whole decoder) "
                       f"and part (a Trainable), got model={self.model!r}, part={self.part!r}")
    if self.part is not None and not isinstance(self.part, Trainable):
      raise TypeError(f"TrainConfig.part must implement Trainable (init, describe, check), got "
                      f"{type(self.part).__name__}")
    positive = {"steps": 1, "batch_size": 1, "seq_len": 2, "eval_every": 1, "eval_windows": 1,
                "checkpoint_every": 1}
    for field, least in positive.items():
      value = getattr(self, field)
      if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise ValueError(f"TrainConfig.{field} must be an int >= {least}, got {value!r}")
    if self.eval_seq_len is not None and (isinstance(self.eval_seq_len, bool) or
                                          not isinstance(self.eval_seq_len, int) or
                                          self.eval_seq_len < 2):
      raise ValueError(f"TrainConfig.eval_seq_len must be None or an int >= 2, got "
                       f"{self.eval_seq_len!r}")
    if not 0 <= self.warmup_steps < self.steps:
      raise ValueError(f"TrainConfig.warmup_steps must be in [0, steps), got warmup_steps="
                       f"{self.warmup_steps} with steps={self.steps}")
    for field in ("learning_rate", "grad_clip"):
      if not getattr(self, field) > 0:
        raise ValueError(f"TrainConfig.{field} must be positive, got {getattr(self, field)!r}")
    if not 0 <= self.final_lr_fraction <= 1:
      raise ValueError(f"TrainConfig.final_lr_fraction must be in [0, 1], got {self.final_lr_fraction!r}")
    if not self.weight_decay >= 0:
      raise ValueError(f"TrainConfig.weight_decay must be >= 0, got {self.weight_decay!r}")
    rows = getattr(self.data, "seq_len", self.seq_len)
    if rows != self.seq_len:
      raise ValueError(f"TrainConfig.data rows have {rows} tokens but seq_len is {self.seq_len}")
    if self.model is not None and self.seq_len > self.model.max_position_embeddings:
      raise ValueError(f"TrainConfig.seq_len={self.seq_len} exceeds the model's "
                       f"max_position_embeddings={self.model.max_position_embeddings}")

  @property
  def trainable(self) -> Trainable:
    """The part this recipe trains."""
    return self.part if self.part is not None else FullModel(self.model, self.init_std, self.init_from)


class TrainedParams(nnx.Module):
  """The trainable part's params pytree as nnx.Params (the only state the optimizer sees); the
  part itself is static."""

  def __init__(self, part: Trainable, params):
    self.part = part
    self.weights = nnx.data(jax.tree.map(nnx.Param, params))

  def params(self):
    return jax.tree.map(lambda v: v[...], self.weights, is_leaf=lambda v: isinstance(v, nnx.Variable))


def learning_rate_schedule(cfg: TrainConfig) -> optax.Schedule:
  return optax.warmup_cosine_decay_schedule(
      init_value=0.0, peak_value=cfg.learning_rate, warmup_steps=cfg.warmup_steps,
      decay_steps=cfg.steps, end_value=cfg.learning_rate * cfg.final_lr_fraction)


def _decays(path, _) -> bool:
  """Weight decay on matrices and embeddings, not on norm weights or biases. The optimizer sees
  each param inside its `nnx.Param`, whose own field `value` ends the path: the param's name is
  the key before it."""
  names = path_name(path).split("/")
  name = names[-2] if len(names) > 1 and names[-1] == "value" else names[-1]
  return not (name.endswith("norm") or name in ("bq", "bk", "bv"))


def make_optimizer(cfg: TrainConfig) -> optax.GradientTransformation:
  return optax.chain(
      optax.clip_by_global_norm(cfg.grad_clip),
      optax.adamw(learning_rate_schedule(cfg), b1=cfg.b1, b2=cfg.b2, weight_decay=cfg.weight_decay,
                  mask=lambda params: jax.tree_util.tree_map_with_path(_decays, params)))


def _loss_fn(module: TrainedParams, tokens, scored, key, objective, target, step=None):
  return objective.loss(module.params(), tokens, key, part=module.part, target=target,
                        scored=scored, step=step)


def _frozen(target: Model | None) -> Model | None:
  """The target as a constant: no gradient can flow into it."""
  return None if target is None else jax.lax.stop_gradient(target)


@nnx.jit
def train_step(module: TrainedParams, optimizer: nnx.Optimizer, tokens, scored, key, objective,
               target, step=None):
  (loss, metrics), grads = nnx.value_and_grad(_loss_fn, has_aux=True)(
      module, tokens, scored, key, objective, _frozen(target), step)
  optimizer.update(module, grads)
  return loss, metrics


@nnx.jit
def eval_step(module: TrainedParams, tokens, scored, key, objective, target):
  return _loss_fn(module, tokens, scored, key, objective, _frozen(target))[0]


def step_key(seed: int, step: int) -> jax.Array:
  return jax.random.fold_in(jax.random.key(seed), step)


def _truncate_log(path: str, step: int) -> None:
  """Drop the rows of metrics.jsonl past `step` (logged after the checkpoint a run resumes from,
  they are logged again) and any row a killed run cut short, so each step has one row."""
  if not os.path.exists(path):
    return
  def step_of(line: str) -> int | None:
    try:
      return json.loads(line)["step"]
    except (ValueError, KeyError, TypeError):  # A row cut short by a killed run.
      return None

  with open(path) as f:
    lines = f.readlines()
  kept = [line for line in lines if (row := step_of(line)) is not None and row <= step]
  if len(kept) != len(lines):
    with open(path + ".tmp", "w") as f:
      f.writelines(kept)
    os.replace(path + ".tmp", path)


def _shapes(tree) -> dict[str, tuple]:
  """'a/b/0' -> shape for every leaf (stored checkpoints spell integer keys as strings; a params
  dataclass's fields are named as the dict keys orbax stores them under)."""
  leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
  return {path_name(path): tuple(leaf.shape) for path, leaf in leaves}


def _differences(saved, current, path: str = "") -> list[str]:
  """'path: saved -> current' wherever both fingerprints record a value and it differs (a field
  only one side has, from another jaxdec version, is no difference: the shapes check remains)."""
  if isinstance(saved, dict) and isinstance(current, dict):
    return [d for k in sorted(saved.keys() & current.keys())
            for d in _differences(saved[k], current[k], f"{path}.{k}" if path else k)]
  short = lambda v: (r if len(r := repr(v)) <= 60 else r[:57] + "...")
  return [] if saved == current else [f"{path}: {short(saved)} -> {short(current)}"]


def _regrouped(fingerprint: dict) -> dict:
  """A saved fingerprint with its model configs (the target's, a FullModel part's) in today's
  grouped form: earlier jaxdec versions saved them flat, which would otherwise share no keys
  with the current config and so compare as equal whatever they held."""
  out = dict(fingerprint)
  if isinstance(out.get("target"), dict):
    out["target"] = regroup(out["target"])
  part = out.get("part")
  if isinstance(part, dict) and isinstance(part.get("config"), dict):
    out["part"] = dict(part, config=regroup(part["config"]))
  return out


class TrainingInterrupted(KeyboardInterrupt):
  """Ctrl-C stopped `Trainer.run` after it saved a checkpoint of `step` under `directory`; the
  same run resumes from it. A KeyboardInterrupt, so callers that do not catch it stop as on
  Ctrl-C."""

  def __init__(self, step: int, directory: str):
    super().__init__(f"interrupted at step {step}; checkpoint saved in {directory}")
    self.step, self.directory = step, directory


class _StopOnSigint:
  """Within `with`, the first Ctrl-C (SIGINT) only sets `requested`, so that training stops
  between two steps, with params, optimizer state and step consistent for the checkpoint; a
  second Ctrl-C raises KeyboardInterrupt at once. Outside the main thread (where Python cannot
  handle signals) it changes nothing."""

  def __enter__(self):
    self.requested = False
    self._previous = None
    if threading.current_thread() is threading.main_thread():
      self._previous = signal.signal(signal.SIGINT, self._handle)
    return self

  def _handle(self, signum, frame):
    if self.requested:
      raise KeyboardInterrupt
    self.requested = True

  def __exit__(self, *exc):
    if self._previous is not None:
      signal.signal(signal.SIGINT, self._previous)


def _any_process(flag: bool) -> bool:
  """`flag` of any process (one small collective when there are several), so that every process
  leaves the loop at the same step."""
  if jax.process_count() == 1:
    return flag
  return bool(np.any(multihost_utils.process_allgather(np.asarray(flag))))


def default_mesh(batch_size: int) -> Mesh | None:
  """None on one process; with several, every device of every process: data parallel over as
  many devices as divide the batch, the rest tensor parallel."""
  if jax.process_count() == 1:
    return None
  data = math.gcd(batch_size, jax.device_count())
  return sharding.make_mesh(data=data, model=jax.device_count() // data)


class Trainer:
  """Owns the trainable params, optimizer and checkpoints of one run in `workdir`.

  `target` (a Model) is the frozen target; by default `cfg.target` is loaded (float32). It is
  passed to the objective under stop_gradient and is never optimised or checkpointed.
  `mesh` (axes 'data', 'model'; see `jaxdec.sharding.make_mesh`) makes training data parallel
  over `data`, a whole decoder's params sharded over `model`, other parts' params replicated;
  `cfg.batch_size` must divide by the data axis. It defaults to `default_mesh` (None on one
  process).
  """

  def __init__(self, cfg: TrainConfig, workdir: str, target: Model | None = None,
               mesh: Mesh | None = None):
    self.cfg = cfg
    self.workdir = os.path.abspath(workdir)
    self.mesh = default_mesh(cfg.batch_size) if mesh is None else mesh
    if self.mesh is not None and cfg.batch_size % sharding.data_size(self.mesh):
      raise ValueError(f"TrainConfig.batch_size={cfg.batch_size} is not divisible by the mesh's "
                       f"data axis of size {sharding.data_size(self.mesh)}")
    if target is None and cfg.target is not None:
      from jaxdec import io

      target = io.load(cfg.target, dtype=jnp.float32)
    if target is not None and not isinstance(target, Model):
      raise TypeError(f"target must be a jaxdec Model, got {type(target).__name__}")
    self.part = cfg.trainable
    self.part.check(target)
    if target is not None and self.mesh is not None:
      target = sharding.shard_model(target, self.mesh)
    self.target = target
    params = self.part.init(jax.random.key(cfg.seed), target)
    if self.mesh is not None:
      params = jax.tree.map(sharding.to_global, params, self._param_shardings(params))
    self.module = TrainedParams(self.part, params)
    self.objective = cfg.objective
    self.optimizer = nnx.Optimizer(self.module, make_optimizer(cfg), wrt=nnx.Param)
    if self.mesh is not None:  # Adam's moments follow the params; its step count is replicated.
      replicated = NamedSharding(self.mesh, P())
      state = nnx.state(self.optimizer)
      nnx.update(self.optimizer, jax.tree.map(
          lambda x: x if isinstance(getattr(x, "sharding", None), NamedSharding)
          else sharding.to_global(x, replicated), state))
    self.step = 0
    self.manager = ocp.CheckpointManager(
        self.checkpoint_dir,
        options=ocp.CheckpointManagerOptions(max_to_keep=2, create=True),
        item_handlers={"state": ocp.StandardCheckpointHandler(), "meta": ocp.JsonCheckpointHandler()})
    try:
      self._restore()
    except ValueError:
      self.manager.close()
      raise

  def _param_shardings(self, params):
    """A whole decoder's params shard as for decoding; any other part's are replicated."""
    if isinstance(self.part, FullModel):
      return sharding.param_shardings(self.part.config, self.mesh)
    return jax.tree.map(lambda _: NamedSharding(self.mesh, P()), params)

  def _batch(self, rows: np.ndarray) -> jax.Array:
    """i32[B, T] host rows (the same on every process) on the mesh, split over `data` (a
    remainder that does not divide it, in `evaluate`, is replicated)."""
    if self.mesh is None:
      return jnp.asarray(rows)
    split = len(rows) % sharding.data_size(self.mesh) == 0
    return sharding.to_global(rows, sharding.batch_sharding(self.mesh) if split
                              else NamedSharding(self.mesh, P()))

  @property
  def checkpoint_dir(self) -> str:
    return os.path.join(self.workdir, "checkpoints")

  def fingerprint(self) -> dict:
    """What a checkpoint's params mean: the part's description and the target's config."""
    target = None if self.target is None else self.target.config.to_dict()
    return json.loads(json.dumps({"part": self.part.describe(), "target": target}, default=str))

  def _state(self) -> dict:
    return {"model": nnx.to_pure_dict(nnx.state(self.module)),
            "optimizer": nnx.to_pure_dict(nnx.state(self.optimizer))}

  def _another_run(self, what: str) -> ValueError:
    return ValueError(f"workdir {self.workdir} holds another model's run ({what}); use a new "
                      f"--workdir (or delete that one)")

  def _restore(self) -> None:
    latest = self.manager.latest_step()
    if latest is None:
      return
    meta = self.manager.restore(latest, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]
    changed = _differences(_regrouped(meta.get("fingerprint", {})), self.fingerprint())
    if changed:
      raise self._another_run("checkpoint -> this run: " + "; ".join(changed[:4]))
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, self._state())
    # Checkpoints from before fingerprints: compare the stored tree and shapes before orbax does.
    if _shapes(self.manager.item_metadata(latest)["state"]) != _shapes(abstract):
      raise self._another_run(f"its checkpoints hold a model named {meta.get('name')!r} with "
                              f"other parameter shapes")
    restored = self.manager.restore(latest, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract), meta=ocp.args.JsonRestore()))
    for obj, key in ((self.module, "model"), (self.optimizer, "optimizer")):
      state = nnx.state(obj)
      nnx.replace_by_pure_dict(state, restored["state"][key])
      nnx.update(obj, state)
    self.step = int(restored["meta"]["step"])

  def save(self) -> None:
    meta = {"step": self.step, "name": self.cfg.name, "fingerprint": self.fingerprint()}
    self.manager.save(self.step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(self._state()), meta=ocp.args.JsonSave(meta)), force=True)
    self.manager.wait_until_finished()

  def to_model(self) -> Model:
    """The trained decoder as a Model (for parts that are whole decoders); with several
    processes its params are gathered, in full on every process, for evaluating and export."""
    if not isinstance(self.part, WholeModel):
      raise TypeError(f"{type(self.part).__name__} is not a whole model (it has no to_model)")
    params = self.module.params()
    if jax.process_count() > 1:
      params = jax.tree.map(jnp.asarray, multihost_utils.process_allgather(params, tiled=True))
    return self.part.to_model(params)

  def evaluate(self, windows: np.ndarray | Rows) -> float:
    """Mean objective on fixed windows, or on `Rows` scored as their `scored` says (fixed
    corruption key, so values are comparable)."""
    tokens, scored = (windows.tokens, windows.scored) if isinstance(windows, Rows) else (windows, None)
    size = self.cfg.batch_size
    losses = [float(eval_step(self.module, self._batch(tokens[i:i + size]),
                              None if scored is None else self._batch(scored[i:i + size]),
                              step_key(self.cfg.seed + 1, i), self.objective, self.target))
              for i in range(0, len(tokens), size)]
    return float(np.mean(losses))

  def run(self, stream: np.ndarray | Rows, val_windows: np.ndarray | Rows | None = None,
          stop_at: int | None = None,
          progress: bool = True) -> list[dict]:
    """Train from `self.step` up to `cfg.steps` (or `stop_at`); returns the logged records.

    Ctrl-C stops after the current step, saves a checkpoint and raises `TrainingInterrupted`
    (a second Ctrl-C stops at once, without saving); so does a KeyboardInterrupt raised inside
    the loop. With several processes, Ctrl-C on any of them stops all after the same step.
    metrics.jsonl keeps one row per step: rows past the step this run starts from (logged after
    the last checkpoint of an earlier run) are dropped first.
    """
    from tqdm.auto import tqdm

    cfg = self.cfg
    end = min(cfg.steps, stop_at) if stop_at is not None else cfg.steps
    log_path = os.path.join(self.workdir, "metrics.jsonl")
    lead = jax.process_index() == 0
    if lead:
      _truncate_log(log_path, self.step)
    records = []
    bar = tqdm(total=end, initial=self.step, disable=not (progress and lead), desc=cfg.name,
               unit="step")
    stopped = False
    with _StopOnSigint() as sigint:
      try:
        while self.step < end and not (stopped := _any_process(sigint.requested)):
          record = self._one_step(stream, val_windows, bar)
          records.append(record)
          if lead:
            with open(log_path, "a") as f:
              f.write(json.dumps(record) + "\n")
          if self.step % cfg.checkpoint_every == 0 or self.step == end:
            self.save()
      except KeyboardInterrupt:
        if sigint.requested:  # A second Ctrl-C: the state may be mid-update, do not save it.
          raise
        stopped = True
      finally:
        bar.close()
    if stopped:
      if self.manager.latest_step() != self.step:
        self.save()
      raise TrainingInterrupted(self.step, self.checkpoint_dir)
    return records

  def _one_step(self, stream: np.ndarray | Rows, val_windows: np.ndarray | Rows | None,
                bar) -> dict:
    """One optimizer step (and the evaluation when due); its metrics record."""
    cfg = self.cfg
    t0 = time.perf_counter()
    tokens, scored = sample_batch(stream, cfg.batch_size, cfg.seq_len, cfg.seed, self.step)
    loss, metrics = train_step(self.module, self.optimizer, self._batch(tokens),
                         None if scored is None else self._batch(scored),
                         step_key(cfg.seed, self.step), self.objective, self.target,
                         jnp.asarray(self.step, jnp.int32))
    loss = float(loss)
    if not math.isfinite(loss):
      raise FloatingPointError(f"loss became {loss} at step {self.step}")
    self.step += 1
    tokens_per_step = cfg.batch_size * cfg.seq_len
    rate = tokens_per_step / (time.perf_counter() - t0)
    bar.update(1)
    bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{rate:,.0f}")
    record = {"step": self.step, "loss": loss, "tokens_per_s": rate,
              "tokens_seen": self.step * tokens_per_step,
              **{name: float(value) for name, value in metrics.items()}}  # The objective's own.
    if val_windows is not None and (self.step % cfg.eval_every == 0 or self.step == cfg.steps):
      record["val_loss"] = self.evaluate(val_windows)
      bar.write(f"{cfg.name} step {self.step}: train {loss:.3f}  val {record['val_loss']:.3f}")
    return record

  def close(self) -> None:
    self.manager.close()
