"""Medusa head checkpoints in the published layout (FasterDecoding/Medusa), read and written.

A directory holds `config.json` (`medusa_num_heads`, `medusa_num_layers`, and the base model's
`hidden_size` / `vocab_size` when known) and the weights in `model.safetensors` or
`medusa_lm_head.safetensors`, PyTorch's (out, in) layout:

  medusa_head.{i}.{j}.linear.weight [D, D], medusa_head.{i}.{j}.linear.bias [D]  (j < layers)
  medusa_head.{i}.{layers}.weight [V, D]                                          (the unembedding)

jaxdec's sequential heads add `hydra_embed.weight` [V, D] and `hydra_mix.{i}.weight` [D, D].

jaxdec writes the same layout plus a `jaxdec` entry in config.json: the candidate tree
(`choices`) measured best for the heads, and the per-rank accuracies it was built from, so a
directory jaxdec saved loads ready to use and a published one loads as a chain.
"""

from __future__ import annotations

import json
import os

import numpy as np
from safetensors.numpy import load_file, save_file

from jaxdec.spec.heads import HeadsParams

WEIGHT_FILES = ("model.safetensors", "medusa_lm_head.safetensors")


def is_medusa_dir(directory: str) -> bool:
  path = os.path.join(directory, "config.json")
  if not os.path.isfile(path):
    return False
  with open(path) as f:
    return "medusa_num_heads" in json.load(f)


def read_medusa(directory: str) -> tuple[HeadsParams, dict]:
  """(the heads' params, float32 numpy; config.json as a dict).
  Every tensor must be consumed and every shape must fit, or ValueError names it."""
  with open(os.path.join(directory, "config.json")) as f:
    config = json.load(f)
  heads, layers = int(config["medusa_num_heads"]), int(config.get("medusa_num_layers", 1))
  found = [f for f in WEIGHT_FILES if os.path.isfile(os.path.join(directory, f))]
  if not found:
    raise FileNotFoundError(f"{directory} holds no Medusa weights (one of {WEIGHT_FILES})")
  tensors = {k: v.astype(np.float32) for k, v in load_file(os.path.join(directory, found[0])).items()}
  take = lambda name: _pop(tensors, name, directory)
  unembed = [take(f"medusa_head.{i}.{layers}.weight").T for i in range(heads)]
  hidden, vocab = unembed[0].shape
  w = np.zeros((heads, layers, hidden, hidden), np.float32)
  b = np.zeros((heads, layers, hidden), np.float32)
  for i in range(heads):
    for j in range(layers):
      w[i, j] = _shaped(take(f"medusa_head.{i}.{j}.linear.weight"), (hidden, hidden), directory).T
      b[i, j] = _shaped(take(f"medusa_head.{i}.{j}.linear.bias"), (hidden,), directory)
  unembed = np.stack([_shaped(u, (hidden, vocab), directory) for u in unembed])
  params = HeadsParams(w=w, b=b, unembed=unembed)
  if "hydra_embed.weight" in tensors:  # jaxdec's sequential heads.
    params = params.replace(
        embed=_shaped(take("hydra_embed.weight"), (vocab, hidden), directory),
        mix=np.stack([_shaped(take(f"hydra_mix.{i}.weight"), (hidden, hidden), directory).T
                      for i in range(heads)]))
  if tensors:
    raise ValueError(f"{directory}: tensors not used by {heads} Medusa heads of {layers} layers: "
                     f"{sorted(tensors)}")
  return params, config


def write_medusa(params: HeadsParams, directory: str, *, choices=None, accuracy=None, entropy=None,
                 extra=None, dtype: str = "float16") -> str:
  """Write heads' params as a Medusa directory; `choices` / `accuracy`
  (the best tree and the table it came from) and `entropy` (EntMTP's profile: thresholds,
  per-bucket accuracy, decay) go into config.json's `jaxdec` entry, `extra` into config.json
  itself."""
  os.makedirs(directory, exist_ok=True)
  w, b, unembed = (np.asarray(x, np.float32) for x in (params.w, params.b, params.unembed))
  heads, layers, hidden = w.shape[:3]
  tensors = {}
  for i in range(heads):
    for j in range(layers):
      tensors[f"medusa_head.{i}.{j}.linear.weight"] = w[i, j].T
      tensors[f"medusa_head.{i}.{j}.linear.bias"] = b[i, j]
    tensors[f"medusa_head.{i}.{layers}.weight"] = unembed[i].T
  if params.sequential:  # Sequential heads: jaxdec's own tensors beside Medusa's.
    tensors["hydra_embed.weight"] = np.asarray(params.embed, np.float32)
    for i in range(heads):
      tensors[f"hydra_mix.{i}.weight"] = np.asarray(params.mix[i], np.float32).T
  save_file({k: np.ascontiguousarray(v.astype(dtype)) for k, v in tensors.items()},
            os.path.join(directory, "model.safetensors"), metadata={"format": "pt"})
  config = {"medusa_num_heads": heads, "medusa_num_layers": layers, "hidden_size": hidden,
            "vocab_size": unembed.shape[-1], **(extra or {})}
  if choices is not None:
    config["jaxdec"] = {"choices": [list(p) for p in choices],
                        "accuracy": None if accuracy is None else np.asarray(accuracy).tolist(),
                        "entropy": None if entropy is None else {
                            k: np.asarray(v).tolist() for k, v in entropy.items()}}
  with open(os.path.join(directory, "config.json"), "w") as f:
    json.dump(config, f, indent=2)
  return directory


def _pop(tensors: dict, name: str, directory: str) -> np.ndarray:
  if name not in tensors:
    raise ValueError(f"{directory}: missing Medusa tensor {name!r}")
  return tensors.pop(name)


def _shaped(x: np.ndarray, shape: tuple, directory: str) -> np.ndarray:
  if x.shape != shape:
    raise ValueError(f"{directory}: a Medusa tensor has shape {x.shape}, expected {shape}")
  return x
