"""Hugging Face checkpoint tensors <-> the jaxdec params pytree.

The key table is generated from the config and its family's tensor names (`families`), one
entry per expected HF tensor, so conversion is an exact dictionary match: any tensor left over,
missing, or of the wrong shape raises a ValueError that names it. HF stores linear weights as
[out, in]; jaxdec as [in, *out] with head axes split out. RoPE uses the same rotate-half layout
on both sides, so q/k are not permuted.

A checkpoint file that cannot be parsed (truncated download, garbage bytes) raises a ValueError
naming the file; a shard its index lists but the directory lacks raises FileNotFoundError.
"""

from __future__ import annotations

import glob
import json
import os
import pickle
from typing import Iterator, NamedTuple

import ml_dtypes  # noqa: F401  (registers bfloat16 with numpy, needed by safetensors' numpy loader)
import numpy as np

from jaxdec.convert import families
from jaxdec.convert.families.base import LLAMA_TENSORS, TensorNames
from jaxdec.model.config import ModelConfig
from jaxdec.model.params import Params, flat_specs, flatten, unflatten


class Entry(NamedTuple):
  target: str  # Flat jaxdec param name, e.g. "layers/wq".
  layer: int | None  # Index on the stacked layer axis, or None for unstacked params.
  hf_shape: tuple[int, ...]
  transposed: bool  # A torch Linear weight ([out, in]).


def tensor_names(config: ModelConfig) -> TensorNames:
  """The tensor names of `config`'s family; Llama's for an architecture no family declares."""
  family = families.find(config.architecture)
  return LLAMA_TENSORS if family is None else family.tensors


def key_table(config: ModelConfig) -> dict[str, Entry]:
  """{HF tensor name: Entry} for every tensor the checkpoint of `config` must hold."""
  c = config
  D, F, hd = c.hidden_size, c.intermediate_size, c.head_dim
  q_out, kv_out = c.num_heads * hd, c.num_kv_heads * hd
  embed, norm, head, prefix, names, _ = tensor_names(c)
  table = {embed: Entry("embed", None, (c.vocab_size, D), False),
           norm: Entry("final_norm", None, (D,), False)}
  if not c.embeddings.tied:
    table[head] = Entry("lm_head", None, (c.vocab_size, D), True)
  hf_shapes = {  # (HF shape, stored as a torch Linear [out, in]).
      "attn_norm": ((D,), False), "mlp_norm": ((D,), False), "post_attn_norm": ((D,), False),
      "post_mlp_norm": ((D,), False),
      "wq": ((q_out, D), True), "wk": ((kv_out, D), True), "wv": ((kv_out, D), True),
      "wo": ((D, q_out), True), "w_gate": ((F, D), True), "w_up": ((F, D), True),
      "w_down": ((D, F), True), "bq": ((q_out,), False), "bk": ((kv_out,), False),
      "bv": ((kv_out,), False), "q_norm": ((hd,), False), "k_norm": ((hd,), False),
  }
  layer_params = [name.split("/", 1)[1] for name in flat_specs(c) if name.startswith("layers/")]
  for i in range(c.num_layers):
    for name in layer_params:
      if name not in names:
        raise ValueError(f"architecture {c.architecture!r} has no tensor for param {name!r}")
      shape, transposed = hf_shapes[name]
      table[f"{prefix}.{i}.{names[name]}"] = Entry(f"layers/{name}", i, shape, transposed)
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


def _corrupt(path: str, error: Exception) -> ValueError:
  return ValueError(f"checkpoint file {path} is corrupt or truncated (re-download or re-export "
                    f"it): {type(error).__name__}: {error}")


def _load_torch_file(path: str) -> dict[str, np.ndarray]:
  try:
    import torch
  except ImportError as e:
    raise ImportError(f"reading {path} needs torch: pip install 'jaxdec[hf]'") from e
  try:
    state = torch.load(path, map_location="cpu", weights_only=True)
  except (FileNotFoundError, PermissionError):
    raise
  except (RuntimeError, OSError, EOFError, pickle.UnpicklingError) as e:  # A truncated zip: OSError.
    raise _corrupt(path, e) from e
  return {name: _torch_to_numpy(t) for name, t in state.items()}


def _iter_safetensors_file(path: str) -> Iterator[tuple[str, np.ndarray]]:
  from safetensors import SafetensorError, safe_open

  try:
    with safe_open(path, framework="numpy") as f:
      for key in f.keys():
        tensor = f.get_tensor(key)
        yield key, tensor
  except SafetensorError as e:
    raise _corrupt(path, e) from e


def _shards_from_index(path: str, index_name: str) -> list[str]:
  """The shard files an index json maps tensors to; every one must exist."""
  index = os.path.join(path, index_name)
  with open(index) as f:
    try:
      weight_map = json.load(f)["weight_map"]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
      raise ValueError(f"checkpoint index {index} is corrupt: no readable 'weight_map' ({e})") from e
  files = sorted(set(weight_map.values()))
  missing = [name for name in files if not os.path.exists(os.path.join(path, name))]
  if missing:
    raise FileNotFoundError(f"{index} lists shards missing from {path}: {missing}")
  return files


def iter_checkpoint_tensors(path: str) -> Iterator[tuple[str, np.ndarray]]:
  """Yield (name, array) from model.safetensors, sharded safetensors (with their index json), or
  pytorch_model.bin (sharded or not), in that order of preference."""
  if os.path.exists(os.path.join(path, "model.safetensors")):
    files, kind = ["model.safetensors"], "safetensors"
  elif os.path.exists(os.path.join(path, "model.safetensors.index.json")):
    files, kind = _shards_from_index(path, "model.safetensors.index.json"), "safetensors"
  elif os.path.exists(os.path.join(path, "pytorch_model.bin")):
    files, kind = ["pytorch_model.bin"], "torch"
  elif os.path.exists(os.path.join(path, "pytorch_model.bin.index.json")):
    files, kind = _shards_from_index(path, "pytorch_model.bin.index.json"), "torch"
  else:
    found = sorted(os.path.basename(p) for p in glob.glob(os.path.join(path, "*")))
    raise FileNotFoundError(f"no model.safetensors[.index.json] or pytorch_model.bin[.index.json] "
                            f"in {path} (found {found})")
  for name in files:
    file = os.path.join(path, name)
    if kind == "safetensors":
      yield from _iter_safetensors_file(file)
    else:
      yield from _load_torch_file(file).items()


def params_from_hf_tensors(tensors, config: ModelConfig, dtype=None) -> Params:
  """Map an iterable of (HF name, array) to the jaxdec params pytree (numpy leaves).

  `dtype` (e.g. jnp.bfloat16) casts every tensor; by default the checkpoint's dtype is kept.
  """
  table = key_table(config)
  names = tensor_names(config)
  shapes = {name: spec.shape for name, spec in flat_specs(config).items()}
  stacked: dict[str, list] = {name: [None] * config.num_layers for name in shapes
                              if name.startswith("layers/")}
  flat: dict[str, np.ndarray] = {}
  unexpected, seen = [], set()
  tied_head = None
  for name, array in tensors:
    entry = table.get(name)
    if entry is None:
      if name == names.head and config.embeddings.tied and names.tied_head_ok:
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
    raise ValueError(f"tied embeddings (embeddings.tied=True) but {names.head} differs from "
                     f"{names.embed}")
  for name, layers in stacked.items():
    flat[name] = np.stack(layers)
  return unflatten(flat)


def params_to_hf_tensors(params: Params, config: ModelConfig) -> dict[str, np.ndarray]:
  """The inverse of `params_from_hf_tensors`: {HF name: array in HF layout}."""
  flat = {name: np.asarray(x) for name, x in flatten(params).items()}
  out = {}
  for name, entry in key_table(config).items():
    value = flat[entry.target] if entry.layer is None else flat[entry.target][entry.layer]
    out[name] = _to_hf(value, entry)
  return out
