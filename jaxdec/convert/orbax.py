"""orbax-checkpoint save / restore of a Model (params as an orbax tree + the config as JSON).

The params are stored as `params.to_dict`'s nested dict, the layout these checkpoints have
always had, so directories written before params were dataclasses still load."""

from __future__ import annotations

import json
import os

import jax
import numpy as np
import orbax.checkpoint as ocp

from jaxdec.model import Model, ModelConfig, check_params
from jaxdec.model.params import ParamSpec, from_dict, param_specs, to_dict

CONFIG_FILE = "jaxdec_config.json"


def is_orbax_dir(path: str) -> bool:
  return os.path.exists(os.path.join(path, CONFIG_FILE))


def save_orbax(model: Model, out_dir: str, tokenizer=None) -> str:
  """Write `out_dir/jaxdec_config.json` and `out_dir/params` (orbax); overwrites params."""
  out_dir = os.path.abspath(out_dir)
  os.makedirs(out_dir, exist_ok=True)
  with open(os.path.join(out_dir, CONFIG_FILE), "w") as f:
    json.dump({"config": model.config.to_dict(), "param_dtype": np.dtype(model.dtype).name}, f,
              indent=2)
  checkpointer = ocp.StandardCheckpointer()
  checkpointer.save(os.path.join(out_dir, "params"), to_dict(model.params), force=True)
  checkpointer.wait_until_finished()
  if tokenizer is not None:
    tokenizer.save(out_dir)
  return out_dir


def load_orbax(path: str, shardings=None) -> Model:
  """Restore a Model saved by `save_orbax`. `shardings` (a `Params` of jax.sharding.Sharding,
  e.g. `sharding.param_shardings`) restores each array directly onto its devices."""
  path = os.path.abspath(path)
  with open(os.path.join(path, CONFIG_FILE)) as f:
    meta = json.load(f)
  config = ModelConfig.from_dict(meta["config"])
  dtype = jax.numpy.dtype(meta["param_dtype"])
  specs = param_specs(config)
  is_spec = lambda x: isinstance(x, ParamSpec)
  if shardings is None:  # Whole, on this process's first device (with several processes, on each).
    local = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    abstract = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, dtype, sharding=local), specs,
                            is_leaf=is_spec)
  else:
    abstract = jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, dtype, sharding=sh), specs,
                            shardings, is_leaf=is_spec)
  params = from_dict(ocp.StandardCheckpointer().restore(os.path.join(path, "params"),
                                                        to_dict(abstract)))
  check_params(params, config)
  return Model(config=config, params=params)
