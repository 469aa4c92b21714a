"""What the Trainer trains: a `Trainable` part, optionally over a frozen target model.

A full decoder trained from scratch (or from a checkpoint) has no target; a drafter head, an
EAGLE-3 layer or a distilled student trains against a frozen target `Model` whose params never
receive a gradient and never enter the optimiser or the checkpoints.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, runtime_checkable

import jax
import jax.numpy as jnp

from jaxdec.model import Model, ModelConfig, Params, check_params, init_params


@runtime_checkable
class Trainable(Protocol):
  """A trainable part. To add one (a Medusa / MTP head, an EAGLE-3 drafter, a student), write a
  frozen, hashable dataclass (it is static under jit) with:

    init(key, target) -> params: the initial float32 params pytree for `key` (a PRNG key). The
      Trainer optimises exactly this pytree, checkpoints it with its optimizer state, and
      nothing else. `target` is the frozen target `Model` or None.
    describe() -> dict: a JSON-able description of the params' structure (a kind and the
      settings that fix their shapes and meaning). It is stored with every checkpoint, so a
      workdir holding another part's run is refused instead of half-restored.
    check(target) -> None: raise ValueError / TypeError when `target` (a Model or None) does not
      fit the part (a head needs a target with its hidden size, say). Called before training.

  The forward pass is the objective's business: an objective's
  `loss(params, tokens, key, *, part, target, scored, step) -> (scalar, metrics)` gets the part
  (static), its params (differentiated), the target (a Model under stop_gradient, or None), the
  scored-token mask and the step (`jaxdec.train.objectives`).
  """

  def init(self, key: jax.Array, target: Model | None) -> Any:
    ...

  def describe(self) -> dict:
    ...

  def check(self, target: Model | None) -> None:
    ...


@runtime_checkable
class WholeModel(Trainable, Protocol):
  """A trainable that is a whole decoder: the Trainer evaluates it and `train_and_export` writes
  it as an HF model directory."""

  def to_model(self, params: Any) -> Model:
    ...


@runtime_checkable
class ExportablePart(Trainable, Protocol):
  """A trainable part over a frozen target that writes its own format (a drafter's):
  `export(params, target, windows, out_dir, *, dtype, extra, tokenizer) -> dict` evaluates the
  weights that ship on the validation `windows` and, with `out_dir`, writes them there; the dict
  is the evaluation stored in zoo.json."""

  def export(self, params: Any, target: Model, windows: Any, out_dir: str | None, *,
             dtype: str = "float16", extra: dict | None = None, tokenizer: Any = None) -> dict:
    ...


@dataclasses.dataclass(frozen=True)
class FullModel:
  """A whole decoder with `config`: random init (normal, `init_std`) or the weights of
  `init_from` (a 'zoo:NAME' or a model directory with the same shapes)."""

  config: ModelConfig
  init_std: float = 0.02
  init_from: str | None = None

  def init(self, key: jax.Array, target: Model | None) -> Params:
    del target
    if self.init_from is None:
      return init_params(self.config, key, std=self.init_std)
    from jaxdec import io

    params = io.load(self.init_from, dtype=jnp.float32).params
    layers = params.layers
    biases = (layers.bq, layers.bk, layers.bv)
    if (not self.config.layer.qkv_bias and all(b is not None for b in biases)
        and not any(jnp.any(b) for b in biases)):
      # A Qwen2-layout export of a bias-free model (zero q/k/v biases): the same function.
      params = params.replace(layers=layers.replace(bq=None, bk=None, bv=None))
    check_params(params, self.config)  # Same shapes; attention / mask-token settings may differ.
    return params

  def describe(self) -> dict:
    return {"kind": "FullModel", "config": self.config.to_dict()}

  def check(self, target: Model | None) -> None:
    if target is not None and target.config.vocab_size != self.config.vocab_size:
      raise ValueError(f"target vocabulary {target.config.vocab_size} != the model's "
                       f"{self.config.vocab_size}")

  def to_model(self, params: Params) -> Model:
    return Model(config=self.config, params=params)
