"""Hugging Face checkpoint tensors <-> the jaxdec params pytree.

The key table is generated from the config, one entry per expected HF tensor, so conversion is
an exact dictionary match: any tensor left over, missing, or of the wrong shape raises a
ValueError that names it. HF stores linear weights as [out, in]; jaxdec as [in, *out] with head
axes split out. RoPE uses the same rotate-half layout on both sides, so q/k are not permuted.
"""

from __future__ import annotations

import glob
import json
import os
from typing import Iterator, NamedTuple

import ml_dtypes  # noqa: F401  (registers bfloat16 with numpy, needed by safetensors' numpy loader)
import numpy as np

from jaxdec.model.config import ModelConfig
from jaxdec.model.params import flat_specs, unflatten


class Entry(NamedTuple):
  target: str  # Flat jaxdec param name, e.g. "layers/wq".
  layer: int | None  # Index on the stacked layer axis, or None for unstacked params.
  hf_shape: tuple[int, ...]
  transposed: bool  # A torch Linear weight ([out, in]).


def key_table(config: ModelConfig) -> dict[str, Entry]:
  """{HF tensor name: Entry} for the Llama-family naming (Llama, Mistral, Qwen2, Qwen3)."""
  c = config
  D, F, hd = c.hidden_size, c.intermediate_size, c.head_dim
  q_out, kv_out = c.num_heads * hd, c.num_kv_heads * hd
  table = {
      "model.embed_tokens.weight": Entry("embed", None, (c.vocab_size, D), False),
      "model.norm.weight": Entry("final_norm", None, (D,), False),
  }
  if not c.tie_word_embeddings:
    table["lm_head.weight"] = Entry("lm_head", None, (c.vocab_size, D), True)
  per_layer = {
      "input_layernorm.weight": ("attn_norm", (D,), False),
      "post_attention_layernorm.weight": ("mlp_norm", (D,), False),
      "self_attn.q_proj.weight": ("wq", (q_out, D), True),
      "self_attn.k_proj.weight": ("wk", (kv_out, D), True),
      "self_attn.v_proj.weight": ("wv", (kv_out, D), True),
      "self_attn.o_proj.weight": ("wo", (D, q_out), True),
      "mlp.gate_proj.weight": ("w_gate", (F, D), True),
      "mlp.up_proj.weight": ("w_up", (F, D), True),
      "mlp.down_proj.weight": ("w_down", (D, F), True),
  }
  if c.qkv_bias:
    per_layer.update({
        "self_attn.q_proj.bias": ("bq", (q_out,), False),
        "self_attn.k_proj.bias": ("bk", (kv_out,), False),
        "self_attn.v_proj.bias": ("bv", (kv_out,), False),
    })
  if c.qk_norm:
    per_layer.update({
        "self_attn.q_norm.weight": ("q_norm", (hd,), False),
        "self_attn.k_norm.weight": ("k_norm", (hd,), False),
    })
  for i in range(c.num_layers):
    for suffix, (name, shape, transposed) in per_layer.items():
      table[f"model.layers.{i}.{suffix}"] = Entry(f"layers/{name}", i, shape, transposed)
  return table


def _to_jaxdec(x: np.ndarray, entry: Entry, shape: tuple[int, ...]) -> np.ndarray:
  return (x.T if entry.transposed else x).reshape(shape)


def _to_hf(x: np.ndarray, entry: Entry) -> np.ndarray:
  if entry.transposed:
    out_dim, in_dim = entry.hf_shape
    return np.ascontiguousarray(x.reshape(in_dim, out_dim).T)
  return x.reshape(entry.hf_shape)


# ---- reading checkpoint files -------------------------------------------------------------------

def _torch_to_numpy(tensor) -> np.ndarray:
  import torch

  if tensor.dtype == torch.bfloat16:
    return tensor.contiguous().view(torch.uint16).numpy().view(ml_dtypes.bfloat16)
  return tensor.numpy()


def _load_torch_file(path: str) -> dict[str, np.ndarray]:
  try:
    import torch
  except ImportError as e:
    raise ImportError(f"reading {path} needs torch: pip install 'jaxdec[hf]'") from e
  state = torch.load(path, map_location="cpu", weights_only=True)
  return {name: _torch_to_numpy(t) for name, t in state.items()}


def iter_checkpoint_tensors(path: str) -> Iterator[tuple[str, np.ndarray]]:
  """Yield (name, array) from model.safetensors, sharded safetensors (with their index json), or
  pytorch_model.bin (sharded or not), in that order of preference."""
  from safetensors import safe_open

  def files_from_index(index_name: str) -> list[str]:
    with open(os.path.join(path, index_name)) as f:
      weight_map = json.load(f)["weight_map"]
    return sorted(set(weight_map.values()))

  if os.path.exists(os.path.join(path, "model.safetensors")):
    files, kind = ["model.safetensors"], "safetensors"
  elif os.path.exists(os.path.join(path, "model.safetensors.index.json")):
    files, kind = files_from_index("model.safetensors.index.json"), "safetensors"
  elif os.path.exists(os.path.join(path, "pytorch_model.bin")):
    files, kind = ["pytorch_model.bin"], "torch"
  elif os.path.exists(os.path.join(path, "pytorch_model.bin.index.json")):
    files, kind = files_from_index("pytorch_model.bin.index.json"), "torch"
  else:
    found = sorted(os.path.basename(p) for p in glob.glob(os.path.join(path, "*")))
    raise FileNotFoundError(f"no model.safetensors[.index.json] or pytorch_model.bin[.index.json] "
                            f"in {path} (found {found})")
  for name in files:
    file = os.path.join(path, name)
    if kind == "safetensors":
      with safe_open(file, framework="numpy") as f:
        for key in f.keys():
          yield key, f.get_tensor(key)
    else:
      yield from _load_torch_file(file).items()


def params_from_hf_tensors(tensors, config: ModelConfig, dtype=None) -> dict:
  """Map an iterable of (HF name, array) to the jaxdec params pytree (numpy leaves).

  `dtype` (e.g. jnp.bfloat16) casts every tensor; by default the checkpoint's dtype is kept.
  """
  table = key_table(config)
  shapes = {name: spec.shape for name, spec in flat_specs(config).items()}
  stacked: dict[str, list] = {name: [None] * config.num_layers for name in shapes
                              if name.startswith("layers/")}
  flat: dict[str, np.ndarray] = {}
  unexpected, seen = [], set()
  tied_head = None
  for name, array in tensors:
    entry = table.get(name)
    if entry is None:
      if name == "lm_head.weight" and config.tie_word_embeddings:
        tied_head = array  # Some tied checkpoints store the head too; checked against embed below.
        continue
      unexpected.append(name)
      continue
    if tuple(array.shape) != entry.hf_shape:
      raise ValueError(f"tensor {name!r} has shape {tuple(array.shape)}, expected {entry.hf_shape}")
    seen.add(name)
    target_shape = shapes[entry.target]
    value = _to_jaxdec(np.asarray(array), entry,
                       target_shape[1:] if entry.layer is not None else target_shape)
    if dtype is not None:
      value = value.astype(dtype)
    if entry.layer is None:
      flat[entry.target] = value
    else:
      stacked[entry.target][entry.layer] = value
  if unexpected:
    raise ValueError(f"unexpected tensors in checkpoint (not used by {config.architecture}): "
                     f"{sorted(unexpected)}")
  missing = sorted(set(table) - seen)
  if missing:
    raise ValueError(f"missing tensors in checkpoint: {missing}")
  if tied_head is not None and not np.array_equal(
      np.asarray(tied_head).astype(flat["embed"].dtype), flat["embed"]):
    raise ValueError("tie_word_embeddings=True but lm_head.weight differs from model.embed_tokens.weight")
  for name, layers in stacked.items():
    flat[name] = np.stack(layers)
  return unflatten(flat)


def params_to_hf_tensors(params: dict, config: ModelConfig) -> dict[str, np.ndarray]:
  """The inverse of `params_from_hf_tensors`: {HF name: array in HF layout}."""
  from jaxdec.model.params import flatten

  flat = {name: np.asarray(x) for name, x in flatten(params).items()}
  out = {}
  for name, entry in key_table(config).items():
    value = flat[entry.target] if entry.layer is None else flat[entry.target][entry.layer]
    out[name] = _to_hf(value, entry)
  return out
