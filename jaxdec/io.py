"""Loading and saving models: zoo names, Hugging Face directories, orbax directories.

Below the decoding loops in the import order, so drafters and training can load by name without
importing the jitted API.
"""

from __future__ import annotations

import dataclasses
import json
import os

import jax
import jax.numpy as jnp

from jaxdec import sharding, zoo
from jaxdec.convert import export_hf as _export_hf
from jaxdec.convert import is_orbax_dir, load_hf, load_orbax, save_orbax
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
  """A Model, or a path / 'zoo:NAME' loaded as one; anything else is a TypeError naming `what`."""
  if isinstance(model, Model):
    return model
  if isinstance(model, (str, os.PathLike)):
    return load(model)
  raise TypeError(f"{what} must be a jaxdec Model (from jaxdec.load) or a path / 'zoo:NAME', got "
                  f"{type(model).__name__}")


def load_drafter(path: str, choices=None, tree_size: int | None = None,
                 entropy_switching: bool = False, target=None):
  """A trained drafter from 'zoo:NAME' or a directory, ready for `speculative_generate`: Medusa
  heads (the published layout; a directory jaxdec saved also holds its best tree, else the
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
  apply to it."""
  from jaxdec.convert.eagle3 import is_eagle3_dir, read_eagle3
  from jaxdec.convert.medusa import is_medusa_dir, read_medusa
  from jaxdec.spec.entmtp import EntropyTrees
  from jaxdec.spec.heads import Heads, sparse_tree
  from jaxdec.spec.kforcing import CONFIG_FILE, KForcing

  directory = resolve(path)
  if not os.path.isdir(directory):
    raise FileNotFoundError(f"drafter directory not found: {directory}")
  if os.path.exists(os.path.join(directory, CONFIG_FILE)):
    if choices is not None or tree_size is not None or entropy_switching:
      raise ValueError(f"{directory} holds a K-Forcing student, which drafts a chain: choices, "
                       f"tree_size and entropy_switching are for Medusa heads")
    return KForcing(load_push_forward(directory))
  if is_eagle3_dir(directory):
    if choices is not None or tree_size is not None or entropy_switching:
      raise ValueError(f"{directory} holds an EAGLE-3 drafter, which grows its own dynamic tree: "
                       f"choices, tree_size and entropy_switching are for Medusa heads; use "
                       f"drafter.with_tree(top_k=, depth=, size=)")
    return read_eagle3(directory, None if target is None else as_model(target, "target"))
  if not is_medusa_dir(directory):
    raise ValueError(f"{directory} is not a drafter directory jaxdec reads (config.json with "
                     f"medusa_num_heads, an EAGLE-3 config.json (architectures "
                     f"LlamaForCausalLMEagle3, or draft_vocab_size), or {CONFIG_FILE})")
  params, config = read_medusa(directory)
  heads = Heads(jax.tree.map(jnp.asarray, params))
  saved = (config.get("jaxdec") or {}).get("choices")
  if entropy_switching:
    profile = (config.get("jaxdec") or {}).get("entropy")
    if profile is None or choices is not None:
      raise ValueError(f"entropy switching builds its trees from the entropy profile jaxdec "
                       f"exports with heads; {directory} has none" if profile is None else
                       "give choices or entropy_switching, not both")
    size = tree_size or len(saved)
    return EntropyTrees(heads.params, tuple(sparse_tree(a, size) for a in profile["accuracy"]),
                        tuple(profile["thresholds"]), decay=profile["decay"])
  if tree_size is not None:
    if choices is not None:
      raise ValueError("give choices or tree_size, not both")
    accuracy = (config.get("jaxdec") or {}).get("accuracy")
    if accuracy is None:
      raise ValueError(f"{directory} holds no per-rank head accuracies to build a tree from "
                       f"(only directories jaxdec exported do); pass choices instead")
    choices = sparse_tree(accuracy, tree_size)
  if choices is None and saved is not None:
    choices = tuple(tuple(p) for p in saved)
  return heads if choices is None else heads.with_choices(choices)


def load_push_forward(path: str):
  """A K-Forcing student (`spec.kforcing.PushForward`) from 'zoo:NAME' or a directory
  `train.kforcing.PushForwardStudent.export` wrote: an HF model plus its noise embedding."""
  from safetensors.numpy import load_file

  from jaxdec.spec.kforcing import CONFIG_FILE, NOISE_FILE, PushForward

  directory = resolve(path)
  if not os.path.exists(os.path.join(directory, CONFIG_FILE)):
    raise FileNotFoundError(f"{directory} holds no K-Forcing student ({CONFIG_FILE} is missing)")
  with open(os.path.join(directory, CONFIG_FILE)) as f:
    config = json.load(f)
  noise = {k: jnp.asarray(v) for k, v in load_file(os.path.join(directory, NOISE_FILE)).items()}
  return PushForward(load(directory, dtype=jnp.float32), noise, num_tokens=config["num_tokens"],
                     temperature=config["temperature"])


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
