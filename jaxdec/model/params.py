"""The params pytree: names, shapes and logical axes, in one table.

Params are a nested dict of arrays. Per-layer weights are stacked on a leading `layers` axis so
the decoder runs them with `lax.scan`. Projections are stored for `x @ W` with explicit head
axes (`wq: [L, D, H, hd]`), which keeps attention einsums readable and lets tensor parallelism
shard the `heads` / `mlp` axes directly. Conversion, initialisation and sharding all read the
same table, `param_specs`.

`config` is a `ModelConfig`, read by field name: this module imports nothing of jaxdec, so that
`ModelConfig.num_params` can count its parameters from this table without an import cycle.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import traverse_util


class ParamSpec(NamedTuple):
  shape: tuple[int, ...]
  axes: tuple[str, ...]  # Logical axis names, mapped to mesh axes by `jaxdec.sharding`.


def param_specs(config) -> dict:
  """Nested dict mirroring the params pytree, with a `ParamSpec` at every leaf."""
  c = config
  L, D, H, K, hd, F, V = (c.num_layers, c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim,
                          c.intermediate_size, c.vocab_size)
  layers = {
      "attn_norm": ParamSpec((L, D), ("layers", "embed")),
      "wq": ParamSpec((L, D, H, hd), ("layers", "embed", "heads", "head_dim")),
      "wk": ParamSpec((L, D, K, hd), ("layers", "embed", "kv_heads", "head_dim")),
      "wv": ParamSpec((L, D, K, hd), ("layers", "embed", "kv_heads", "head_dim")),
      "wo": ParamSpec((L, H, hd, D), ("layers", "heads", "head_dim", "embed")),
      "mlp_norm": ParamSpec((L, D), ("layers", "embed")),
      "w_gate": ParamSpec((L, D, F), ("layers", "embed", "mlp")),
      "w_up": ParamSpec((L, D, F), ("layers", "embed", "mlp")),
      "w_down": ParamSpec((L, F, D), ("layers", "mlp", "embed")),
  }
  if c.layer.qkv_bias:
    layers["bq"] = ParamSpec((L, H, hd), ("layers", "heads", "head_dim"))
    layers["bk"] = ParamSpec((L, K, hd), ("layers", "kv_heads", "head_dim"))
    layers["bv"] = ParamSpec((L, K, hd), ("layers", "kv_heads", "head_dim"))
  if c.layer.qk_norm:
    layers["q_norm"] = ParamSpec((L, hd), ("layers", "head_dim"))
    layers["k_norm"] = ParamSpec((L, hd), ("layers", "head_dim"))
  if c.layer.post_norms:
    layers["post_attn_norm"] = ParamSpec((L, D), ("layers", "embed"))
    layers["post_mlp_norm"] = ParamSpec((L, D), ("layers", "embed"))
  specs = {
      "embed": ParamSpec((V, D), ("vocab", "embed")),
      "layers": layers,
      "final_norm": ParamSpec((D,), ("embed",)),
  }
  if not c.embeddings.tied:
    specs["lm_head"] = ParamSpec((D, V), ("embed", "vocab"))
  return specs


def flat_specs(config) -> dict[str, ParamSpec]:
  """`param_specs` flattened to {"layers/wq": ParamSpec, ...}."""
  return traverse_util.flatten_dict(param_specs(config), sep="/",
                                    is_leaf=lambda _, x: isinstance(x, ParamSpec))


def param_shapes(config) -> dict[str, tuple[int, ...]]:
  return {name: spec.shape for name, spec in flat_specs(config).items()}


def unflatten(flat: dict[str, jax.Array]) -> dict:
  return traverse_util.unflatten_dict(flat, sep="/")


def flatten(params: dict) -> dict[str, jax.Array]:
  return traverse_util.flatten_dict(params, sep="/")


def init_params(config, key: jax.Array, dtype=jnp.float32, std: float = 0.02) -> dict:
  """Random initialisation: N(0, std) matrices (output projections scaled by 1/sqrt(2L), as in
  GPT-2), norms that scale by 1 (zero weights where the norm adds 1, as Gemma's), zero biases."""
  flat = {}
  specs = flat_specs(config)
  norm_init = jnp.zeros if config.layer.norm_unit_offset else jnp.ones
  for i, (name, spec) in enumerate(sorted(specs.items())):
    leaf = name.rsplit("/", 1)[-1]
    if leaf.endswith("norm"):
      flat[name] = norm_init(spec.shape, dtype)
    elif leaf in ("bq", "bk", "bv"):
      flat[name] = jnp.zeros(spec.shape, dtype)
    else:
      scale = std / math.sqrt(2 * config.num_layers) if leaf in ("wo", "w_down") else std
      flat[name] = (scale * jax.random.normal(jax.random.fold_in(key, i), spec.shape)).astype(dtype)
  return unflatten(flat)


def check_params(params: dict, config) -> None:
  """Raise ValueError naming any missing, unexpected or mis-shaped leaf."""
  expected = param_shapes(config)
  got = {name: tuple(x.shape) for name, x in flatten(params).items()}
  missing = sorted(set(expected) - set(got))
  unexpected = sorted(set(got) - set(expected))
  if missing or unexpected:
    raise ValueError(f"params do not match the config: missing {missing}, unexpected {unexpected}")
  for name, shape in expected.items():
    if got[name] != shape:
      raise ValueError(f"param {name!r} has shape {got[name]}, the config expects {shape}")
