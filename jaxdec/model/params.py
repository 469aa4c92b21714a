"""The params pytree: names, shapes and logical axes, in one table.

Params are registered frozen dataclasses (`Params`, its `LayerParams`), so code reads them by
attribute (`params.layers.wq`) and a misspelt name fails at once, while `jax.tree.map`, `jit`,
optax and orbax see an ordinary pytree. An optional weight a config does without (q/k/v biases,
q/k norms, Gemma's post norms, an untied LM head) is None: an empty subtree, with no leaf.
Per-layer weights are stacked on a leading `layers` axis so the decoder runs them with
`lax.scan`. Projections are stored for `x @ W` with explicit head axes (`wq: [L, D, H, hd]`),
which keeps attention einsums readable and lets tensor parallelism shard the `heads` / `mlp`
axes directly. Conversion, initialisation and sharding all read the same table, `param_specs`.

Files name params flat, "embed", "layers/wq", "lm_head" (`flatten` / `unflatten`): the names of
the HF key table, of sharding warnings and of orbax's layout, which nests the same way.

`config` is a `ModelConfig`, read by field name: this module imports nothing of jaxdec, so that
`ModelConfig.num_params` can count its parameters from this table without an import cycle.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import traverse_util


class ParamSpec(NamedTuple):
  shape: tuple[int, ...]
  axes: tuple[str, ...]  # Logical axis names, mapped to mesh axes by `jaxdec.sharding`.


def _replace(self, **changes):
  """A copy with `changes` (field=value), as `dataclasses.replace`."""
  return dataclasses.replace(self, **changes)


def pytree_dataclass(cls):
  """A frozen dataclass registered as a pytree whose fields are all data (arrays or None), with
  `replace(**changes)`."""
  cls.replace = _replace
  return jax.tree_util.register_dataclass(dataclasses.dataclass(frozen=True)(cls))


@pytree_dataclass
class LayerParams:
  """One decoder block's weights, each stacked on a leading `layers` axis."""

  attn_norm: Any
  wq: Any
  wk: Any
  wv: Any
  wo: Any
  mlp_norm: Any
  w_gate: Any
  w_up: Any
  w_down: Any
  bq: Any = None  # `qkv_bias`.
  bk: Any = None
  bv: Any = None
  q_norm: Any = None  # `qk_norm`.
  k_norm: Any = None
  post_attn_norm: Any = None  # `post_norms`.
  post_mlp_norm: Any = None



@pytree_dataclass
class Params:
  """A decoder's weights; `lm_head` is None when the embedding is tied."""

  embed: Any
  layers: LayerParams
  final_norm: Any
  lm_head: Any = None



def param_specs(config) -> Params:
  """The params of `config` with a `ParamSpec` at every leaf (absent optional leaves None)."""
  c = config
  L, D, H, K, hd, F, V = (c.num_layers, c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim,
                          c.intermediate_size, c.vocab_size)
  optional = {}
  if c.layer.qkv_bias:
    optional.update(bq=ParamSpec((L, H, hd), ("layers", "heads", "head_dim")),
                    bk=ParamSpec((L, K, hd), ("layers", "kv_heads", "head_dim")),
                    bv=ParamSpec((L, K, hd), ("layers", "kv_heads", "head_dim")))
  if c.layer.qk_norm:
    optional.update(q_norm=ParamSpec((L, hd), ("layers", "head_dim")),
                    k_norm=ParamSpec((L, hd), ("layers", "head_dim")))
  if c.layer.post_norms:
    optional.update(post_attn_norm=ParamSpec((L, D), ("layers", "embed")),
                    post_mlp_norm=ParamSpec((L, D), ("layers", "embed")))
  layers = LayerParams(
      attn_norm=ParamSpec((L, D), ("layers", "embed")),
      wq=ParamSpec((L, D, H, hd), ("layers", "embed", "heads", "head_dim")),
      wk=ParamSpec((L, D, K, hd), ("layers", "embed", "kv_heads", "head_dim")),
      wv=ParamSpec((L, D, K, hd), ("layers", "embed", "kv_heads", "head_dim")),
      wo=ParamSpec((L, H, hd, D), ("layers", "heads", "head_dim", "embed")),
      mlp_norm=ParamSpec((L, D), ("layers", "embed")),
      w_gate=ParamSpec((L, D, F), ("layers", "embed", "mlp")),
      w_up=ParamSpec((L, D, F), ("layers", "embed", "mlp")),
      w_down=ParamSpec((L, F, D), ("layers", "mlp", "embed")),
      **optional)
  return Params(embed=ParamSpec((V, D), ("vocab", "embed")), layers=layers,
                final_norm=ParamSpec((D,), ("embed",)),
                lm_head=None if c.embeddings.tied else ParamSpec((D, V), ("embed", "vocab")))


def path_name(path) -> str:
  """A pytree key path as a flat name, "layers/wq" (dataclass fields, dict keys, list indices)."""
  return jax.tree_util.keystr(path, simple=True, separator="/")


def _is_spec(x) -> bool:
  return isinstance(x, ParamSpec)


def flatten(params) -> dict[str, Any]:
  """{"embed": ..., "layers/wq": ...} for every leaf of a `Params` (or any pytree: a
  `param_specs` table gives its `ParamSpec`s); None leaves have no entry."""
  leaves = jax.tree_util.tree_flatten_with_path(params, is_leaf=_is_spec)[0]
  return {path_name(path): leaf for path, leaf in leaves}


def flat_specs(config) -> dict[str, ParamSpec]:
  """`param_specs` flattened to {"layers/wq": ParamSpec, ...}."""
  return flatten(param_specs(config))


def param_shapes(config) -> dict[str, tuple[int, ...]]:
  return {name: spec.shape for name, spec in flat_specs(config).items()}


def _required(cls) -> set[str]:
  """The fields of a params dataclass that every model has (those without a None default)."""
  return {f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING}


_TOP = {f.name for f in dataclasses.fields(Params)} - {"layers"}
_LAYER = {f.name for f in dataclasses.fields(LayerParams)}


def unflatten(flat: dict[str, Any]) -> Params:
  """The `Params` of flat names ("layers/wq"); names absent are None, unknown ones raise."""
  unknown = sorted(n for n in flat if not (n in _TOP or (n.startswith("layers/")
                                                         and n[len("layers/"):] in _LAYER)))
  if unknown:
    raise ValueError(f"no such params: {unknown}")
  layers = {n[len("layers/"):]: x for n, x in flat.items() if n.startswith("layers/")}
  missing = sorted(f"layers/{n}" for n in _required(LayerParams) if n not in layers)
  missing += sorted(n for n in _required(Params) - {"layers"} if n not in flat)
  if missing:
    raise ValueError(f"params need {missing}")
  return Params(embed=flat["embed"], layers=LayerParams(**layers), final_norm=flat["final_norm"],
                lm_head=flat.get("lm_head"))


def to_dict(params: Params) -> dict:
  """The nested dict of the flat names, {"embed": ..., "layers": {"wq": ...}} without None
  leaves: the layout orbax checkpoints have always held."""
  return traverse_util.unflatten_dict(flatten(params), sep="/")


def from_dict(nested: dict) -> Params:
  """`to_dict`'s inverse (a params dict of the old layout, too)."""
  return unflatten(traverse_util.flatten_dict(nested, sep="/"))


def init_params(config, key: jax.Array, dtype=jnp.float32, std: float = 0.02) -> Params:
  """Random initialisation: N(0, std) matrices (output projections scaled by 1/sqrt(2L), as in
  GPT-2), norms that scale by 1 (zero weights where the norm adds 1, as Gemma's), zero biases."""
  flat = {}
  specs = flat_specs(config)
  norm_init = jnp.zeros if config.layer.norm_unit_offset else jnp.ones
  for i, (name, spec) in enumerate(sorted(specs.items())):  # Sorted: keys stay put as params come.
    leaf = name.rsplit("/", 1)[-1]
    if leaf.endswith("norm"):
      flat[name] = norm_init(spec.shape, dtype)
    elif leaf in ("bq", "bk", "bv"):
      flat[name] = jnp.zeros(spec.shape, dtype)
    else:
      scale = std / math.sqrt(2 * config.num_layers) if leaf in ("wo", "w_down") else std
      flat[name] = (scale * jax.random.normal(jax.random.fold_in(key, i), spec.shape)).astype(dtype)
  return unflatten(flat)


def check_params(params: Params, config) -> None:
  """Raise ValueError naming any missing, unexpected or mis-shaped leaf; TypeError for anything
  but a `Params`. A nested dict of the old layout is refused rather than converted here, so that
  the conversion (`from_dict`) is explicit where a dict comes in."""
  if not isinstance(params, Params):
    raise TypeError(f"params must be a jaxdec.model.params.Params, got {type(params).__name__}; "
                    f"convert a {{'embed': ..., 'layers': {{'wq': ...}}}} dict with "
                    f"jaxdec.model.params.from_dict")
  expected = param_shapes(config)
  got = {name: tuple(x.shape) for name, x in flatten(params).items()}
  missing = sorted(set(expected) - set(got))
  unexpected = sorted(set(got) - set(expected))
  if missing or unexpected:
    raise ValueError(f"params do not match the config: missing {missing}, unexpected {unexpected}")
  for name, shape in expected.items():
    if got[name] != shape:
      raise ValueError(f"param {name!r} has shape {got[name]}, the config expects {shape}")
