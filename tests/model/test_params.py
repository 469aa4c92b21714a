"""The params pytree: registered dataclasses whose flat names ("layers/wq") are the files' and
the sharding rules' naming."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdec.model import LayerParams, Params, check_params, init_params, param_specs
from jaxdec.model.params import flatten, from_dict, param_shapes, to_dict, unflatten
from tiny import tiny_config


@pytest.fixture(scope="module")
def config():
  return tiny_config(layer=dict(qkv_bias=True), embeddings=dict(tied=True))


@pytest.fixture(scope="module")
def params(config):
  return init_params(config, jax.random.key(0))


def test_flatten_round_trips_the_names(config, params):
  flat = flatten(params)
  assert set(flat) == set(param_shapes(config))
  assert {"embed", "final_norm", "layers/wq", "layers/bq"} <= set(flat)
  back = unflatten(flat)
  assert isinstance(back, Params) and isinstance(back.layers, LayerParams)
  assert jax.tree.structure(back) == jax.tree.structure(params)
  assert all(a is b for a, b in zip(jax.tree.leaves(back), jax.tree.leaves(params)))
  assert jax.tree.structure(from_dict(to_dict(params))) == jax.tree.structure(params)
  with pytest.raises(ValueError, match=r"no such params: \['layers/wz'\]"):
    unflatten(dict(flat, **{"layers/wz": flat["layers/wq"]}))


def test_an_absent_optional_leaf_is_none_and_not_flattened(config, params):
  assert params.layers.q_norm is None and params.lm_head is None  # tiny: tied, no q/k norms.
  assert not any(name.endswith(("q_norm", "lm_head")) for name in flatten(params))
  specs = param_specs(config)
  assert specs.layers.q_norm is None and specs.layers.bq.axes == ("layers", "heads", "head_dim")
  assert len(jax.tree.leaves(params)) == len(param_shapes(config))


def test_params_cross_jit_and_tree_map(config, params):
  doubled = jax.jit(lambda p: jax.tree.map(lambda x: 2 * x, p))(params)
  assert isinstance(doubled, Params) and doubled.lm_head is None
  np.testing.assert_array_equal(doubled.layers.wq, 2 * params.layers.wq)
  with pytest.raises(dataclasses.FrozenInstanceError):
    params.embed = None


def test_check_params_names_mis_shaped_missing_and_foreign(config, params):
  check_params(params, config)
  bad = params.replace(layers=params.layers.replace(wk=jnp.zeros((1, 2, 3))))
  with pytest.raises(ValueError, match=r"'layers/wk' has shape \(1, 2, 3\)"):
    check_params(bad, config)
  with pytest.raises(ValueError, match=r"missing \['layers/bq'\]"):
    check_params(params.replace(layers=params.layers.replace(bq=None)), config)
  with pytest.raises(ValueError, match=r"unexpected \['lm_head'\]"):
    check_params(params.replace(lm_head=params.embed.T), config)
  with pytest.raises(TypeError, match="got dict; convert .* with jaxdec.model.params.from_dict"):
    check_params(to_dict(params), config)
