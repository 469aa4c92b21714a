"""Load a Hugging Face checkpoint directory as a jaxdec Model, and export one back."""

from __future__ import annotations

import dataclasses
import json
import os

import jax.numpy as jnp
import numpy as np
from safetensors.numpy import save_file

from jaxdec.convert import families
from jaxdec.convert.hf_config import config_to_hf, read_hf_config
from jaxdec.convert.hf_weights import iter_checkpoint_tensors, params_from_hf_tensors, params_to_hf_tensors
from jaxdec.model import Model


def load_hf(path: str, dtype=None) -> Model:
  """Read config.json and the weights of an HF directory (safetensors, sharded, or .bin).

  A missing directory or shard raises FileNotFoundError; a corrupt or truncated weight file, a
  config jaxdec cannot run exactly, or tensors that do not match it raise ValueError.
  """
  if not os.path.isdir(path):
    raise FileNotFoundError(f"not a directory: {path}")
  config = read_hf_config(path)
  params = params_from_hf_tensors(iter_checkpoint_tensors(path), config, dtype=dtype)
  return Model(config=config, params=_to_device(params))


def _to_device(params):
  import jax

  return jax.tree.map(jnp.asarray, params)


def _needs_zero_biases(config) -> bool:
  family = families.find(config.architecture)
  return not config.layer.qkv_bias and family is not None and family.always_qkv_bias


def exportable_config(config):
  """The config `export_hf` writes: layouts that always hold q/k/v biases (Qwen2's: qwen2, Dream,
  Fast-dLLM v2) get a model without them exported with zero ones (the same function)."""
  if not _needs_zero_biases(config):
    return config
  return dataclasses.replace(config, layer=dataclasses.replace(config.layer, qkv_bias=True))


def _exportable(model: Model) -> Model:
  if not _needs_zero_biases(model.config):
    return model
  c, dtype = model.config, model.params.embed.dtype
  zeros = lambda heads: jnp.zeros((c.num_layers, heads, c.head_dim), dtype)
  layers = model.params.layers.replace(bq=zeros(c.num_heads), bk=zeros(c.num_kv_heads),
                                       bv=zeros(c.num_kv_heads))
  return Model(config=exportable_config(c), params=model.params.replace(layers=layers))


def export_hf(model: Model, tokenizer, out_dir: str) -> str:
  """Write `model` (and `tokenizer`, if given) as an HF directory (config.json,
  generation_config.json, model.safetensors); returns `out_dir`. What loads it:

  - causal llama / qwen2 / qwen3 / mistral / gemma2 / gemma3_text:
    `transformers.AutoModelForCausalLM.from_pretrained` (same logits) and `jaxdec.load`.
  - masked-diffusion llada / Dream / Fast-dLLM v2 / SDAR (the last two block diffusion):
    `jaxdec.load`. transformers has no class for them (it raises on the unknown model_type):
    the directory follows the original checkpoints' config fields and tensor names but carries
    none of their remote code. Copying the model's own `configuration_*.py` / `modeling_*.py`
    and the config's `auto_map` in from the original checkpoint is what
    `transformers.AutoModel.from_pretrained(out_dir, trust_remote_code=True)` would need
    (untested here: jaxdec ships no remote code).
  """
  model = _exportable(model)
  os.makedirs(out_dir, exist_ok=True)
  dtype_name = np.dtype(model.dtype).name
  with open(os.path.join(out_dir, "config.json"), "w") as f:
    json.dump(config_to_hf(model.config, dtype_name), f, indent=2)
  tokens = model.config.tokens
  generation = {"bos_token_id": tokens.bos, "eos_token_id": list(tokens.eos) or None,
                "pad_token_id": tokens.pad}
  with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
    json.dump(generation, f, indent=2)
  tensors = params_to_hf_tensors(model.params, model.config)
  save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
  if tokenizer is not None:
    tokenizer.save(out_dir)
  return out_dir
