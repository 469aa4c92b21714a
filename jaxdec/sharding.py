"""Placing a model on a device mesh: tensor parallel over heads / MLP / vocab, data parallel over
the batch. Logical axis names come from `model.params.param_specs`; an axis whose size does not
divide by its mesh axis (2 KV heads on 4 devices, say) is replicated, as inference engines do for
KV heads, with a warning naming the param: replication costs memory and bandwidth on every
device, so it should be a choice, not a surprise.
"""

from __future__ import annotations

import warnings

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from jaxdec.model import Model, ModelConfig
from jaxdec.model.params import ParamSpec, flat_specs, unflatten

DATA_AXIS = "data"
MODEL_AXIS = "model"
# Logical param axis -> mesh axis. Everything not listed is replicated.
RULES = {"heads": MODEL_AXIS, "kv_heads": MODEL_AXIS, "mlp": MODEL_AXIS, "vocab": MODEL_AXIS}


def make_mesh(data: int, model: int, devices=None) -> Mesh:
  """A (data, model) mesh with classic (auto) sharding semantics."""
  devices = np.asarray(devices if devices is not None else jax.devices())
  if devices.size < data * model:
    raise ValueError(f"mesh ({data}, {model}) needs {data * model} devices, have {devices.size}")
  return Mesh(devices[: data * model].reshape(data, model), (DATA_AXIS, MODEL_AXIS))


def _spec(name: str, spec: ParamSpec, mesh: Mesh) -> P:
  axes = []
  for size, logical in zip(spec.shape, spec.axes):
    mesh_axis = RULES.get(logical)
    if mesh_axis not in mesh.shape or mesh_axis in axes:
      axes.append(None)
    elif size % mesh.shape[mesh_axis]:
      warnings.warn(f"param {name!r} of shape {spec.shape}: axis {logical!r} (size {size}) does "
                    f"not divide by mesh axis {mesh_axis!r} of size {mesh.shape[mesh_axis]}; "
                    f"replicating it on every device", stacklevel=2)
      axes.append(None)
    else:
      axes.append(mesh_axis)
  return P(*axes)


def param_shardings(config: ModelConfig, mesh: Mesh) -> dict:
  """A NamedSharding for every param leaf (same tree structure as the params); warns for each
  param axis replicated because the mesh does not divide it."""
  return unflatten({name: NamedSharding(mesh, _spec(name, spec, mesh))
                    for name, spec in flat_specs(config).items()})


def shard_model(model: Model, mesh: Mesh) -> Model:
  """Return `model` with each param placed on `mesh` per `param_shardings`."""
  return model.replace(params=jax.device_put(model.params, param_shardings(model.config, mesh)))


def model_mesh(model: Model) -> Mesh | None:
  """The mesh the model's params live on, or None for single-device params."""
  sharding = getattr(model.params["embed"], "sharding", None)
  return sharding.mesh if isinstance(sharding, NamedSharding) else None


def batch_sharding(mesh: Mesh, batch: int) -> NamedSharding:
  """Shard the leading (batch) axis over `data`; raise if it does not divide."""
  size = mesh.shape.get(DATA_AXIS, 1)
  if batch % size:
    raise ValueError(f"batch size {batch} is not divisible by mesh axis {DATA_AXIS!r} of size {size}")
  return NamedSharding(mesh, P(DATA_AXIS if DATA_AXIS in mesh.shape else None))
