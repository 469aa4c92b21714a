"""EAGLE-3 drafters in the published layout (SafeAILab/EAGLE `eagle/traineagle3`, SpecForge;
served by vLLM and SGLang as `LlamaForCausalLMEagle3`), read and written.

A directory holds `config.json`, a Llama config of the one draft layer (hidden_size,
intermediate_size, num_attention_heads, num_key_value_heads, optional head_dim, rms_norm_eps,
rope_theta / rope_scaling, max_position_embeddings; `vocab_size` is the target's,
`draft_vocab_size` the head's; optionally `eagle_config.eagle_aux_hidden_state_layer_ids`), and
`model.safetensors` (safetensors only) in torch's (out, in) layout:

  fc.weight [D, n D]                                  the n fused target hidden states -> D
  midlayer.input_layernorm.weight [D]                 normalises the token embedding
  midlayer.hidden_norm.weight [D]                     normalises the feature
  midlayer.self_attn.{q,k,v}_proj.weight [H|K hd, 2D]  input [embedding, feature]
  midlayer.self_attn.o_proj.weight [D, H hd]
  midlayer.post_attention_layernorm.weight [D]
  midlayer.mlp.{gate,up}_proj.weight [F, D], midlayer.mlp.down_proj.weight [D, F]
  norm.weight [D]
  lm_head.weight [Vd, D]        optional: else the target's LM head restricted to the draft ids
  d2t i64[Vd]                   target id = draft id + d2t[draft id]; optional when Vd == V
  t2d bool[V]                   True at the target ids in the draft vocabulary; optional
  embed_tokens.weight [V, D]    optional: else the target's input embedding

jaxdec adds `midlayer.self_attn.{q,k,v}_proj.bias` and `midlayer.self_attn.{q,k}_norm.weight`
for a draft layer made from a Qwen2 / Qwen3 target's layer (jaxdec initialises the draft layer
from the target's last one), and a `jaxdec` entry in config.json: `layers`, `reuse`, `kv_layer`
(KVShot, `spec.eagle`) and the tree it grows by default (`top_k`, `depth`, `size`). A published
directory, without that entry, loads with `reuse` "hidden" and `Eagle3`'s default tree; change the
tree with `Eagle3.with_tree`.

Fused layers: EAGLE captures the hidden states *entering* target layers 2, L // 2 and L - 3
(`modeling_llama_kv`: appended before running layer idx), and vLLM names
`eagle_aux_hidden_state_layer_ids` the same way (`hidden_states + residual` before layer idx) --
jaxdec's convention (`spec.eagle.default_layers`), so the ids carry over unchanged. Both
concatenate them in increasing layer order, so `fc`'s input blocks follow sorted ids; the writer
sorts jaxdec's layers (and fc's blocks with them).
"""

from __future__ import annotations

import dataclasses
import json
import os

import jax
import jax.numpy as jnp
import ml_dtypes  # noqa: F401  (registers bfloat16 with numpy, for safetensors' numpy loader)
import numpy as np
from safetensors.numpy import load_file, save_file

from jaxdec.convert.hf_config import _rope
from jaxdec.model import Model, ModelConfig
from jaxdec.model.config import Layer, Rope, RopeScaling
from jaxdec.spec.eagle import (Eagle3, Eagle3Params, EagleLayer, default_layers, draft_config,
                               target_head)

ARCHITECTURES = ("LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM")  # SGLang's, vLLM's names.
REQUIRED = ("hidden_size", "intermediate_size", "num_attention_heads", "vocab_size")
WEIGHTS = "model.safetensors"
_ACTIVATIONS = {"silu": "silu", "gelu_pytorch_tanh": "gelu_tanh"}
# jaxdec layer param -> the midlayer tensor name (a torch Linear's weight when it is a matrix).
_LAYER = {"input_norm": "input_layernorm.weight", "hidden_norm": "hidden_norm.weight",
          "wq": "self_attn.q_proj.weight", "wk": "self_attn.k_proj.weight",
          "wv": "self_attn.v_proj.weight", "wo": "self_attn.o_proj.weight",
          "mlp_norm": "post_attention_layernorm.weight", "w_gate": "mlp.gate_proj.weight",
          "w_up": "mlp.up_proj.weight", "w_down": "mlp.down_proj.weight",
          "bq": "self_attn.q_proj.bias", "bk": "self_attn.k_proj.bias",
          "bv": "self_attn.v_proj.bias", "q_norm": "self_attn.q_norm.weight",
          "k_norm": "self_attn.k_norm.weight"}


def is_eagle3_dir(directory: str) -> bool:
  """config.json naming an EAGLE-3 class, or with a draft vocabulary and no Medusa heads."""
  path = os.path.join(directory, "config.json")
  if not os.path.isfile(path):
    return False
  with open(path) as f:
    config = json.load(f)
  if not isinstance(config, dict):
    return False
  if any(a in ARCHITECTURES for a in config.get("architectures") or ()):
    return True
  return "draft_vocab_size" in config and "medusa_num_heads" not in config


def _layer_shapes(c: ModelConfig) -> dict[str, tuple[tuple[int, ...], tuple[int, ...]]]:
  """{param: (jaxdec shape, file shape)} of the draft layer `c` describes."""
  D, F, H, K, hd = c.hidden_size, c.intermediate_size, c.num_heads, c.num_kv_heads, c.head_dim
  shapes = {"input_norm": ((D,), (D,)), "hidden_norm": ((D,), (D,)), "mlp_norm": ((D,), (D,)),
            "wq": ((2 * D, H, hd), (H * hd, 2 * D)), "wk": ((2 * D, K, hd), (K * hd, 2 * D)),
            "wv": ((2 * D, K, hd), (K * hd, 2 * D)), "wo": ((H, hd, D), (D, H * hd)),
            "w_gate": ((D, F), (F, D)), "w_up": ((D, F), (F, D)), "w_down": ((F, D), (D, F))}
  if c.layer.qkv_bias:
    shapes.update(bq=((H, hd), (H * hd,)), bk=((K, hd), (K * hd,)), bv=((K, hd), (K * hd,)))
  if c.layer.qk_norm:
    shapes.update(q_norm=((hd,), (hd,)), k_norm=((hd,), (hd,)))
  return shapes


def _to_jaxdec(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
  """A file tensor as jaxdec stores it: a torch Linear weight [out, in] -> [in, *out split]."""
  return (x.T if x.ndim == 2 else x).reshape(shape)


def _to_file(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
  if len(shape) == 2:  # A Linear weight: jaxdec's [in, ...] flattened to [in, out], transposed.
    return np.ascontiguousarray(x.reshape(shape[1], shape[0]).T)
  return x.reshape(shape)


def _draft_layer_config(raw: dict, target: Model | None, tensors: dict) -> ModelConfig:
  """The draft layer's ModelConfig: the target's with one layer (`spec.eagle.draft_config`,
  which keeps what a Llama config cannot say, e.g. Gemma's norms) with config.json's sizes, norm
  eps and RoPE; without a target, config.json alone. Biases / q-k norms when the file has them."""
  heads = int(raw["num_attention_heads"])
  act = raw.get("hidden_act", "silu")
  if act not in _ACTIVATIONS:
    raise ValueError(f"unsupported hidden_act {act!r} for the EAGLE-3 draft layer "
                     f"(jaxdec supports {sorted(_ACTIVATIONS)})")
  theta, scaling = _rope(raw)
  fields = dict(
      intermediate_size=int(raw["intermediate_size"]), num_heads=heads,
      num_kv_heads=int(raw.get("num_key_value_heads") or heads),
      head_dim=int(raw.get("head_dim") or raw["hidden_size"] // heads),
      max_position_embeddings=int(raw.get("max_position_embeddings", 2048)), num_layers=1,
      rope=Rope(theta=theta, scaling=scaling))
  layer = dict(norm_eps=float(raw.get("rms_norm_eps", 1e-6)), activation=_ACTIVATIONS[act],
               qkv_bias=f"midlayer.{_LAYER['bq']}" in tensors,
               qk_norm=f"midlayer.{_LAYER['q_norm']}" in tensors)
  if target is None:
    return ModelConfig(vocab_size=int(raw["vocab_size"]), hidden_size=int(raw["hidden_size"]),
                       layer=Layer(**layer), **fields)
  base = target.config
  for name, ours in (("hidden_size", base.hidden_size), ("vocab_size", base.vocab_size)):
    if name in raw and int(raw[name]) != ours:
      raise ValueError(f"the EAGLE-3 config's {name} is {raw[name]}; the target's is {ours}")
  draft = draft_config(base)
  return dataclasses.replace(draft, layer=dataclasses.replace(draft.layer, **layer), **fields)


def _target_from(raw: dict, directory: str, load) -> Model:
  """The base model config.json names, loaded by `load` when it is a 'zoo:NAME' or a directory
  (conversion reads files; loading models is `jaxdec.io`'s, which passes its `load`)."""
  name = raw.get("base_model_name_or_path")
  loadable = isinstance(name, str) and (name.startswith("zoo:") or os.path.isdir(name))
  if load is not None and loadable:
    return load(name)
  why = ("is not a 'zoo:NAME' or directory jaxdec loads" if not loadable else
         "is not loaded here without load= (jaxdec.load_drafter passes jaxdec.load)")
  raise ValueError(f"{directory}: the EAGLE-3 drafter needs its target model (for the embedding, "
                   f"the LM head or the fused layers) and its base_model_name_or_path {name!r} "
                   f"{why}: pass target=")


def read_eagle3(directory: str, target: Model | None = None, dtype=None, *, load=None):
  """An `Eagle3` drafter from a directory in EAGLE-3's layout. `target` (a jaxdec Model) gives
  the embedding and, when the file has none, the LM head and the default fused layers; without
  it config.json's `base_model_name_or_path` is loaded with `load` (path -> Model:
  `jaxdec.load_drafter` passes `jaxdec.load`). `dtype`: the drafter's weights (default: the
  target's embedding dtype, float32 without a target). Every tensor must be consumed and every
  shape fit, or ValueError names it."""
  raw, tensors = _read_files(directory)
  ours = raw.get("jaxdec") or {}
  reuse = ours.get("reuse", "hidden")
  layers = ours.get("layers")
  if layers is None and reuse != "kv":
    public = (raw.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    layers = sorted(public) if public else None  # Fused in layer order, however listed.
  needs_target = ("embed_tokens.weight" not in tensors or "lm_head.weight" not in tensors
                  or layers is None)
  if target is None and needs_target:
    target = _target_from(raw, directory, load)
  if target is not None and not isinstance(target, Model):
    raise TypeError(f"target must be a jaxdec Model, got {type(target).__name__}")
  if layers is None:
    layers = () if reuse == "kv" else default_layers(target.config.num_layers)
  layers = tuple(int(i) for i in layers)
  config = _draft_layer_config(raw, target, tensors)
  if dtype is None:
    dtype = target.params.embed.dtype if target is not None else jnp.float32
  take = _taker(tensors, directory)
  as_param = lambda x: _param(x, dtype)
  D, V = config.hidden_size, config.vocab_size
  layer = EagleLayer(**{k: as_param(_to_jaxdec(take(f"midlayer.{_LAYER[k]}", file), ours_shape))
                        for k, (ours_shape, file) in _layer_shapes(config).items()})
  params = Eagle3Params(layer=layer, norm=as_param(take("norm.weight", (D,))))
  if reuse != "kv":
    params = params.replace(fc=as_param(take("fc.weight", (D, len(layers) * D)).T))
  draft_ids = _draft_ids(tensors, int(raw.get("draft_vocab_size", V)), V, directory, take)
  embed, head = _embed_and_head(tensors, take, dtype, target, config, draft_ids, directory)
  if tensors:
    raise ValueError(f"{directory}: tensors an EAGLE-3 drafter does not use: {sorted(tensors)}")
  tree = {k: int(ours[k]) for k in ("top_k", "depth", "size") if ours.get(k) is not None}
  return Eagle3(params, embed=embed, head=head,
                draft_ids=None if draft_ids is None else jnp.asarray(draft_ids, jnp.int32),
                config=config, layers=layers, reuse=reuse, kv_layer=ours.get("kv_layer"), **tree)


def _read_files(directory: str) -> tuple[dict, dict]:
  """(config.json, the tensors of the one safetensors file), checked for what jaxdec needs."""
  with open(os.path.join(directory, "config.json")) as f:
    raw = json.load(f)
  missing = [k for k in REQUIRED if k not in raw]
  if missing:
    raise ValueError(f"{directory}: the EAGLE-3 config.json lacks {missing}")
  path = os.path.join(directory, WEIGHTS)
  if not os.path.isfile(path):
    other = [n for n in ("pytorch_model.bin", "model.safetensors.index.json")
             if os.path.exists(os.path.join(directory, n))]
    raise FileNotFoundError(f"{directory} holds no {WEIGHTS}" + (
        f" (it has {other[0]}; jaxdec reads EAGLE-3 weights from a single safetensors file: "
        f"convert it, e.g. with safetensors.torch.save_file)" if other else ""))
  if raw.get("target_hidden_size") not in (None, raw.get("hidden_size")):
    raise ValueError(f"{directory}: target_hidden_size {raw['target_hidden_size']} differs from "
                     f"the draft layer's hidden_size {raw['hidden_size']}; jaxdec's EAGLE-3 needs "
                     f"them equal")
  return raw, load_file(path)


def _taker(tensors: dict, directory: str):
  """take(name, shape): pops a tensor, or ValueError naming the missing name or wrong shape."""

  def take(name, shape):
    if name not in tensors:
      raise ValueError(f"{directory}: missing EAGLE-3 tensor {name!r}")
    x = tensors.pop(name)
    if tuple(x.shape) != tuple(shape):
      raise ValueError(f"{directory}: EAGLE-3 tensor {name!r} has shape {tuple(x.shape)}, "
                       f"expected {tuple(shape)}")
    return x

  return take


def _param(x: np.ndarray, dtype) -> jax.Array:
  return jnp.asarray(x.astype(np.float32), dtype)


def _embed_and_head(tensors, take, dtype, target, config, draft_ids, directory):
  """The file's embedding and LM head, each falling back to the target's (the head restricted
  to the draft vocabulary)."""
  D, V = config.hidden_size, config.vocab_size
  vocab = V if draft_ids is None else len(draft_ids)
  if "embed_tokens.weight" in tensors:
    embed = _param(take("embed_tokens.weight", (V, D)), dtype)
  else:
    embed = target.params.embed.astype(dtype)
  if "lm_head.weight" in tensors:
    return embed, _param(take("lm_head.weight", (vocab, D)).T, dtype)
  head = target_head(target)
  if tuple(head.shape) != (D, V):
    raise ValueError(f"{directory}: the target's LM head is {tuple(head.shape)}, expected {(D, V)}")
  head = head if draft_ids is None else head[:, draft_ids]
  return embed, head.astype(dtype)


def _draft_ids(tensors: dict, vocab: int, target_vocab: int, directory: str, take):
  """The target id of each draft id from d2t (None: the identity over the full vocabulary),
  checked against t2d when the file has it."""
  if "d2t" not in tensors:
    if vocab != target_vocab:
      raise ValueError(f"{directory}: missing EAGLE-3 tensor 'd2t', which maps the "
                       f"{vocab} draft ids into the target's {target_vocab}")
    d2t = np.zeros((vocab,), np.int64)
  else:  # One offset per draft id (draft_vocab_size of them).
    d2t = take("d2t", (vocab,)).astype(np.int64)
  ids = np.arange(vocab, dtype=np.int64) + d2t
  if ids.min() < 0 or ids.max() >= target_vocab or len(np.unique(ids)) != vocab:
    raise ValueError(f"{directory}: d2t maps draft ids to target ids in [{ids.min()}, {ids.max()}], "
                     f"not {vocab} distinct ids of the target's {target_vocab}")
  if "t2d" in tensors:
    t2d = take("t2d", (target_vocab,)).astype(bool)
    marked = np.zeros((target_vocab,), bool)
    marked[ids] = True
    if not np.array_equal(t2d, marked):
      raise ValueError(f"{directory}: t2d marks {int(t2d.sum())} target ids, "
                       f"{int(np.sum(t2d != marked))} of them differing from the {vocab} that d2t "
                       f"maps the draft ids to")
  if vocab == target_vocab and np.array_equal(ids, np.arange(vocab)):
    return None
  return ids.astype(np.int32)


def write_eagle3(drafter, out_dir: str, *, dtype: str = "float16", extra: dict | None = None,
                 lm_head: bool = True) -> str:
  """Write an `Eagle3` drafter in EAGLE-3's layout. `lm_head=False` leaves the head out (a
  drafter whose head is its target's, restricted to the draft ids: it is read back from the
  target); the embedding, always the target's, is never written. `extra` goes into config.json
  itself (as `write_medusa`'s does), e.g. `base_model_name_or_path`."""
  c = drafter.config
  D, V = c.hidden_size, drafter.embed.shape[0]
  vocab = drafter.head.shape[1]
  p = jax.tree.map(lambda x: np.asarray(x, np.float32), drafter.params)
  tensors = {f"midlayer.{_LAYER[k]}": _to_file(getattr(p.layer, k), file)
             for k, (_, file) in _layer_shapes(c).items()}
  tensors["norm.weight"] = p.norm
  layers = tuple(drafter.layers)
  if drafter.reuse != "kv":
    order = np.argsort(np.asarray(layers), kind="stable")  # Public readers fuse in layer order.
    fc = p.fc.reshape(len(layers), D, D)[order].reshape(len(layers) * D, D)
    tensors["fc.weight"] = np.ascontiguousarray(fc.T)
    layers = tuple(layers[i] for i in order)
  if lm_head:
    tensors["lm_head.weight"] = np.ascontiguousarray(np.asarray(drafter.head, np.float32).T)
  ids = (np.arange(vocab) if drafter.draft_ids is None
         else np.asarray(jax.device_get(drafter.draft_ids)).astype(np.int64))
  tensors = {k: np.ascontiguousarray(v.astype(jnp.dtype(dtype))) for k, v in tensors.items()}
  tensors["d2t"] = (ids - np.arange(vocab)).astype(np.int64)
  t2d = np.zeros((V,), bool)
  t2d[ids] = True
  tensors["t2d"] = t2d
  os.makedirs(out_dir, exist_ok=True)
  save_file(tensors, os.path.join(out_dir, WEIGHTS), metadata={"format": "pt"})
  config = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
            "hidden_size": D, "intermediate_size": c.intermediate_size,
            "num_attention_heads": c.num_heads, "num_key_value_heads": c.num_kv_heads,
            "head_dim": c.head_dim, "num_hidden_layers": 1, "hidden_act":
            {v: k for k, v in _ACTIVATIONS.items()}[c.layer.activation],
            "rms_norm_eps": c.layer.norm_eps, "rope_theta": c.rope.theta,
            "max_position_embeddings": c.max_position_embeddings,
            "tie_word_embeddings": False, "vocab_size": V, "draft_vocab_size": vocab,
            "torch_dtype": str(dtype)}
  if c.rope.scaling is not None:
    config["rope_scaling"] = _scaling_to_hf(c.rope.scaling)
  if layers:
    config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": list(layers)}
  config["jaxdec"] = {"layers": list(layers), "reuse": drafter.reuse, "kv_layer": drafter.kv_layer,
                      "top_k": drafter.top_k, "depth": drafter.depth, "size": drafter.size}
  config.update(extra or {})
  with open(os.path.join(out_dir, "config.json"), "w") as f:
    json.dump(config, f, indent=2)
  return out_dir


def _scaling_to_hf(scaling: RopeScaling) -> dict:
  """A v4 `rope_scaling` entry (what EAGLE-3 configs and their servers read)."""
  out = {"rope_type": scaling.kind, "factor": scaling.factor}
  if scaling.kind == "llama3":
    out.update(low_freq_factor=scaling.low_freq_factor, high_freq_factor=scaling.high_freq_factor,
               original_max_position_embeddings=scaling.original_max_position_embeddings)
  return out
