"""Placing a model on a device mesh: tensor parallel over heads / MLP / vocab, data parallel over
the batch, on one process or on several (one per host of a TPU pod slice).

Logical axis names come from `model.params.param_specs`; an axis whose size does not divide by
its mesh axis (2 KV heads on 4 devices, say) is replicated, as inference engines do for KV
heads, with a warning naming the param: replication costs memory and bandwidth on every device,
so it should be a choice, not a surprise.

Several processes: call `initialize` first; `jax.devices()` is then the global device set and
`make_mesh` spans every process. Every process holds the same full host values (the params it
loaded, the whole batch of prompts) and puts on its own devices only the shards they hold
(`to_global`); outputs are gathered so that every process gets the full result. This module is
the only place that puts arrays on a mesh.
"""

from __future__ import annotations

import warnings
import zlib

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from jaxdec.model import Model, ModelConfig
from jaxdec.model.params import Params, ParamSpec, param_specs, path_name

DATA_AXIS = "data"
MODEL_AXIS = "model"
# Logical param axis -> mesh axis. Everything not listed is replicated.
RULES = {"heads": MODEL_AXIS, "kv_heads": MODEL_AXIS, "mlp": MODEL_AXIS, "vocab": MODEL_AXIS}


def initialize(coordinator: str | None = None, num_processes: int | None = None,
               process_id: int | None = None) -> None:
  """Join a multi-process run (`jax.distributed.initialize`); call it before any JAX computation.

  On a TPU pod slice (and under Slurm / Open MPI) every argument may be None: JAX reads them from
  the cluster's environment. Elsewhere (CPU or GPU hosts) pass all three, the same coordinator
  'host:port' (process 0's address and a free port) on every process. On CPU, JAX's default
  cross-process collectives (gloo over TCP) carry the mesh's collectives.
  """
  if coordinator is not None and (not isinstance(coordinator, str) or ":" not in coordinator):
    raise ValueError(f"coordinator must be 'host:port' (process 0's address), got {coordinator!r}")
  for name, value, least in (("num_processes", num_processes, 1), ("process_id", process_id, 0)):
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
      raise ValueError(f"{name} must be an int >= {least}, got {value!r}")
  if num_processes is not None and process_id is not None and process_id >= num_processes:
    raise ValueError(f"process_id={process_id} must be below num_processes={num_processes}")
  jax.distributed.initialize(coordinator_address=coordinator, num_processes=num_processes,
                             process_id=process_id)


def make_mesh(data: int, model: int, devices=None) -> Mesh:
  """A (data, model) mesh with classic (auto) sharding semantics.

  `devices` defaults to every device of every process, ordered by (process, id): each process's
  devices are then contiguous along `data` (a process holds whole rows of the mesh when `model`
  divides its device count), so tensor-parallel collectives stay inside a host and data-parallel
  rows map onto processes. Pass `devices` (e.g. from `jax.experimental.mesh_utils`) for another
  order; it is used as given.
  """
  for name, value in (("data", data), ("model", model)):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
      raise ValueError(f"mesh axis {name} must be a positive int, got {value!r}")
  if devices is None:
    devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
  devices = np.asarray(devices).reshape(-1)
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


def param_shardings(config: ModelConfig, mesh: Mesh) -> Params:
  """A `Params` of NamedSharding, one per param leaf; warns for each param axis replicated
  because the mesh does not divide it (naming the param as files do, "layers/wq")."""
  return jax.tree_util.tree_map_with_path(
      lambda path, spec: NamedSharding(mesh, _spec(path_name(path), spec, mesh)),
      param_specs(config), is_leaf=lambda x: isinstance(x, ParamSpec))


def to_global(x, sharding: NamedSharding) -> jax.Array:
  """`x` (a host value every process holds in full, or an array already on the mesh) as an
  array with `sharding`. With several processes each one transfers only the shards its own
  devices hold (`jax.make_array_from_callback`), so nothing crosses hosts."""
  if sharding.is_fully_addressable or (isinstance(x, jax.Array) and not x.is_fully_addressable):
    return jax.device_put(x, sharding)
  host = np.asarray(x)
  return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def shard_model(model: Model, mesh: Mesh) -> Model:
  """Return `model` with each param placed on `mesh` per `param_shardings` (with several
  processes, every process passes the same params: each keeps its own devices' shards)."""
  shardings = param_shardings(model.config, mesh)
  return model.replace(params=jax.tree.map(to_global, model.params, shardings))


def model_mesh(model: Model) -> Mesh | None:
  """The mesh the model's params live on, or None for single-device params."""
  sharding = getattr(model.params.embed, "sharding", None)
  return sharding.mesh if isinstance(sharding, NamedSharding) else None


def data_size(mesh: Mesh) -> int:
  """Devices along the data axis (1 for a mesh without one)."""
  return mesh.shape.get(DATA_AXIS, 1)


def batch_sharding(mesh: Mesh) -> NamedSharding:
  """Batch-leading arrays split over `data` (replicated on a mesh without a data axis)."""
  return NamedSharding(mesh, P(DATA_AXIS if DATA_AXIS in mesh.shape else None))


def padded_rows(mesh: Mesh, rows: int) -> int:
  """`rows` rounded up to a multiple of the data axis: the batch `place_rows` runs."""
  size = data_size(mesh)
  return -(-rows // size) * size


def _per_row(x, rows: int) -> bool:
  return isinstance(x, (np.ndarray, jax.Array)) and x.ndim >= 1 and x.shape[0] == rows


def place_rows(mesh: Mesh | None, *inputs) -> tuple:
  """Per-row host inputs of one call on `mesh`, split over its data axis.

  `inputs` are pytrees (None allowed) whose leaves with the batch as leading axis (that of
  `inputs[0]`: prompts i32[B, L], lengths i32[B], per-row settings f32[B]) are per-row; other
  leaves (scalars) are returned as they are. A batch that does not divide the data axis is padded
  at the end by repeating its last row, so rows keep their index (and sampled rows their RNG
  streams); `gather_rows` drops the padding again. With several processes, every process must
  pass the same full batch: that is checked (one small collective), since mixing two batches
  would silently decode neither. Without a mesh, `inputs` are returned as they are.
  """
  if mesh is None:
    return inputs
  rows = np.shape(inputs[0])[0]
  extra = padded_rows(mesh, rows) - rows
  leaves, treedef = jax.tree.flatten(inputs)
  per_row = [i for i, x in enumerate(leaves) if _per_row(x, rows)]
  for i in per_row:
    x = np.asarray(leaves[i])
    leaves[i] = np.concatenate([x, np.repeat(x[-1:], extra, 0)]) if extra else x
  if jax.process_count() > 1:
    _check_same_on_every_process([leaves[i] for i in per_row])
  for i in per_row:
    leaves[i] = to_global(leaves[i], batch_sharding(mesh))
  return jax.tree.unflatten(treedef, leaves)


def _check_same_on_every_process(arrays: list[np.ndarray]) -> None:
  crc = 0
  for a in arrays:
    crc = zlib.crc32(np.ascontiguousarray(a).tobytes(), zlib.crc32(str(a.shape).encode(), crc))
  crcs = multihost_utils.process_allgather(np.uint32(crc))
  if len(set(crcs.tolist())) > 1:
    raise ValueError(f"the processes passed different batches (crc32 of each process's per-row "
                     f"inputs: {crcs.tolist()}); with several processes every process must pass "
                     f"the same full batch of prompts and settings")


def gather_rows(mesh: Mesh | None, tree, rows: int):
  """A call's outputs for its `rows` real rows: every leaf whose leading axis is the padded
  batch loses the rows `place_rows` added (per-row outputs lead with the batch; batch-level
  counters are scalars), and arrays spanning several processes are gathered, so every process
  gets the full result as numpy arrays. On one process, results stay arrays on the mesh."""
  if mesh is None:
    return tree
  leaves, treedef = jax.tree.flatten(tree)
  remote = [i for i, x in enumerate(leaves) if isinstance(x, jax.Array) and not x.is_fully_addressable]
  if remote:
    gathered = multihost_utils.process_allgather([leaves[i] for i in remote], tiled=True)
    for i, x in zip(remote, gathered):
      leaves[i] = x
  padded = padded_rows(mesh, rows)
  if padded != rows:
    leaves = [x[:rows] if _per_row(x, padded) else x for x in leaves]
  return jax.tree.unflatten(treedef, leaves)
