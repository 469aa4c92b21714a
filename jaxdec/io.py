"""Loading and saving models and drafters: zoo names, Hugging Face directories, orbax directories.

The one place that turns a path into a model: above the decoding methods and `convert` in the
import order (docs/architecture.md), beside the jitted API. Drafters receive models, never paths.
"""

from __future__ import annotations

import dataclasses
import os

import jax
import jax.numpy as jnp

from jaxdec import sharding, zoo
from jaxdec.convert import export_hf as _export_hf
from jaxdec.convert import is_orbax_dir, load_hf, load_orbax, save_orbax
from jaxdec.convert.drafters import read_drafter
from jaxdec.convert.drafters.kforcing import read_push_forward
from jaxdec.model import Model
from jaxdec.tokenizer import Tokenizer, load_tokenizer_dir


def resolve(path: str) -> str:
  """'zoo:NAME' -> the zoo model's directory; any other path is returned as is."""
  if not isinstance(path, (str, os.PathLike)):
    raise TypeError(f"expected a path or 'zoo:NAME', got {type(path).__name__}")
  path = os.fspath(path)
  return zoo.resolve(path) if path.startswith("zoo:") else path


def load(path: str, dtype=None, attention: str = "xla") -> Model:
  """Load a model from 'zoo:NAME', a Hugging Face checkpoint dir (Llama, Qwen2/3, Mistral, Gemma 2,
  Gemma 3 text, LLaDA, Dream, Fast-dLLM v2, SDAR), or an orbax dir (`save`).

  `dtype` (e.g. jnp.float32) casts the weights; by default the checkpoint's dtype is kept, except
  for zoo models: stored in float16, they load in float32 (faster on CPU). `attention` is the
  backend every forward of the model uses: "xla" (dense masks) or "pallas" (jaxdec's masked
  flash-attention kernel; interpret mode off GPU/TPU).
  """
  directory = resolve(path)
  if dtype is None and os.fspath(path).startswith("zoo:"):
    dtype = jnp.dtype(zoo.inference_dtype(directory))
  if not os.path.isdir(directory):
    raise FileNotFoundError(f"model directory not found: {directory}")
  if is_orbax_dir(directory):
    model = load_orbax(directory)
    if dtype is not None:
      model = model.replace(params=jax.tree.map(lambda x: x.astype(dtype), model.params))
  elif os.path.exists(os.path.join(directory, "config.json")):
    model = load_hf(directory, dtype=dtype)
  else:
    raise ValueError(f"{directory} holds neither config.json (Hugging Face) nor "
                     f"jaxdec_config.json (orbax)")
  return with_attention(model, attention)


def with_attention(model: Model, backend: str) -> Model:
  """The same model running attention on `backend` ("xla" or "pallas")."""
  return model.replace(config=dataclasses.replace(model.config, attention_backend=backend))


def as_model(model, what: str = "model") -> Model:
  """A Model, or a path / 'zoo:NAME' loaded as one (callers of io may pass either); anything else
  is a TypeError naming `what`."""
  if isinstance(model, Model):
    return model
  if isinstance(model, (str, os.PathLike)):
    return load(model)
  raise TypeError(f"{what} must be a jaxdec Model (from jaxdec.load) or a path / 'zoo:NAME', got "
                  f"{type(model).__name__}")


def load_drafter(path: str, choices=None, tree_size: int | None = None,
                 entropy_switching: bool = False, target=None):
  """A trained drafter from 'zoo:NAME' or a directory, ready for `speculative_generate`, read by
  the format that recognises the directory (`jaxdec.convert.drafters`, one module each):

  Medusa heads (the published layout; a directory jaxdec saved also holds its best tree, else the
  heads draft a chain). `choices` picks another tree for the same heads (`Heads.with_choices`);
  `tree_size` builds the best tree of that many nodes from the per-rank accuracies jaxdec saved
  with the heads (`spec.heads.sparse_tree`). `entropy_switching` returns EntMTP
  (`spec.entmtp.EntropyTrees`) from the saved entropy profile: each running-entropy bucket's
  best tree of `tree_size` nodes (left out: the saved tree's size).

  An EAGLE-3 directory (the published layout, `convert.eagle3`) loads as `spec.eagle.Eagle3`
  over `target` (a Model or a path / 'zoo:NAME'; left out: the base model its config.json
  names), which gives the embedding and, when the directory has none, the LM head. It grows the
  dynamic tree saved with it (published ones: `Eagle3`'s default); pick another with
  `drafter.with_tree(top_k=, depth=, size=)` (top_k=1: a chain). The Medusa options do not
  apply to it.

  A K-Forcing student (`load_push_forward`) loads as `spec.KForcing`, drafting a chain."""
  target = None if target is None else as_model(target, "target")
  return read_drafter(resolve(path), load=load, target=target, choices=choices,
                      tree_size=tree_size, entropy_switching=entropy_switching)


def load_push_forward(path: str):
  """A K-Forcing student (`spec.kforcing.PushForward`) from 'zoo:NAME' or a directory
  `train.kforcing.PushForwardStudent.export` wrote: an HF model plus its noise embedding."""
  return read_push_forward(resolve(path), load)


def load_tokenizer(path: str) -> Tokenizer:
  """The tokenizer.json of 'zoo:NAME' or of a model directory."""
  return load_tokenizer_dir(resolve(path))


def save(model: Model, out_dir: str, tokenizer: Tokenizer | None = None) -> str:
  """Save as an orbax checkpoint directory that `load` reads back."""
  return save_orbax(model, out_dir, tokenizer)


def export_hf(model: Model, tokenizer: Tokenizer | None, out_dir: str) -> str:
  """Write a Hugging Face directory (config.json, model.safetensors, tokenizer files). Causal
  llama / qwen2 / qwen3 / mistral / gemma2 / gemma3_text load in
  `transformers.AutoModelForCausalLM`; llada / Dream / Fast-dLLM v2 / SDAR load with `jaxdec.load` (transformers would
  need the model's own remote code; see `jaxdec.convert.export_hf`)."""
  return _export_hf(model, tokenizer, out_dir)


def shard(model: Model, mesh: jax.sharding.Mesh) -> Model:
  """Place the params on `mesh` (axes 'data', 'model'); `forward` / `generate` then run there.
  With several processes (`jaxdec.sharding.initialize`), every process passes the same model."""
  return sharding.shard_model(model, mesh)
