"""Load a Hugging Face checkpoint directory as a jaxdec Model, and export one back."""

from __future__ import annotations

import json
import os

import jax.numpy as jnp
import numpy as np
from safetensors.numpy import save_file

from jaxdec.convert.hf_config import config_to_hf, read_hf_config
from jaxdec.convert.hf_weights import iter_checkpoint_tensors, params_from_hf_tensors, params_to_hf_tensors
from jaxdec.model import Model


def load_hf(path: str, dtype=None) -> Model:
  """Read config.json and the weights of an HF directory (safetensors, sharded, or .bin)."""
  if not os.path.isdir(path):
    raise FileNotFoundError(f"not a directory: {path}")
  config = read_hf_config(path)
  params = params_from_hf_tensors(iter_checkpoint_tensors(path), config, dtype=dtype)
  return Model(config=config, params=_to_device(params))


def _to_device(params):
  import jax

  return jax.tree.map(jnp.asarray, params)


def export_hf(model: Model, tokenizer, out_dir: str) -> str:
  """Write `model` (and `tokenizer`, if given) as an HF directory that
  `transformers.AutoModelForCausalLM.from_pretrained(out_dir)` loads."""
  os.makedirs(out_dir, exist_ok=True)
  dtype_name = np.dtype(model.dtype).name
  with open(os.path.join(out_dir, "config.json"), "w") as f:
    json.dump(config_to_hf(model.config, dtype_name), f, indent=2)
  generation = {"bos_token_id": model.config.bos_token_id,
                "eos_token_id": list(model.config.eos_token_ids) or None,
                "pad_token_id": model.config.pad_token_id}
  with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
    json.dump(generation, f, indent=2)
  tensors = params_to_hf_tensors(model.params, model.config)
  save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
  if tokenizer is not None:
    tokenizer.save(out_dir)
  return out_dir
