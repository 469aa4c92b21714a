"""K-Forcing students (`train.kforcing.PushForwardStudent.export`): a Hugging Face model directory
plus the noise embedding and its settings; read as a `spec.KForcing` drafter."""

from __future__ import annotations

import json
import os

import jax.numpy as jnp
from safetensors.numpy import load_file

from jaxdec.spec.kforcing import CONFIG_FILE, NOISE_FILE, KForcing, NoiseParams, PushForward

NAME = "K-Forcing student"
LOOKS_LIKE = f"a model directory with {CONFIG_FILE}"


def recognise(directory: str) -> bool:
  return os.path.exists(os.path.join(directory, CONFIG_FILE))


def read(directory: str, *, load, target=None, choices=None, tree_size=None,
         entropy_switching=False) -> KForcing:
  del target  # The student drafts from the committed tokens alone.
  if choices is not None or tree_size is not None or entropy_switching:
    raise ValueError(f"{directory} holds a K-Forcing student, which drafts a chain: choices, "
                     f"tree_size and entropy_switching are for Medusa heads")
  return KForcing(read_push_forward(directory, load))


def read_push_forward(directory: str, load) -> PushForward:
  """The student as a `spec.kforcing.PushForward`; its model loaded by `load` in float32."""
  if not recognise(directory):
    raise FileNotFoundError(f"{directory} holds no K-Forcing student ({CONFIG_FILE} is missing)")
  with open(os.path.join(directory, CONFIG_FILE)) as f:
    config = json.load(f)
  tensors = load_file(os.path.join(directory, NOISE_FILE))
  if set(tensors) != {"w", "base"}:
    raise ValueError(f"{directory}/{NOISE_FILE} must hold the tensors 'w' and 'base', got "
                     f"{sorted(tensors)}")
  noise = NoiseParams(w=jnp.asarray(tensors["w"]), base=jnp.asarray(tensors["base"]))
  return PushForward(load(directory, dtype=jnp.float32), noise, num_tokens=config["num_tokens"],
                     temperature=config["temperature"])
