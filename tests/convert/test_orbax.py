import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdec
from jaxdec import sharding
from jaxdec.convert.orbax import CONFIG_FILE
from jaxdec.model import Bidirectional
from jaxdec.model.params import flatten
from tiny import flat_dict, tiny_model


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_orbax_roundtrip(tmp_path, dtype):
  model = tiny_model(architecture="qwen3", layer=dict(qk_norm=True))
  model = model.replace(params=jax.tree.map(lambda x: x.astype(dtype), model.params))
  path = jaxdec.save(model, str(tmp_path / "ckpt"))
  restored = jaxdec.load(path)
  assert restored.config == model.config
  for name, value in flatten(model.params).items():
    got = flatten(restored.params)[name]
    assert got.dtype == dtype
    np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(value, np.float32))
  jaxdec.save(model, path)  # Saving over an existing checkpoint replaces it.


def test_orbax_checkpoints_of_earlier_versions_load(tmp_path):
  """jaxdec_config.json as jaxdec wrote it before ModelConfig's groups: flat fields."""
  model = tiny_model(attention=Bidirectional(), tokens=dict(mask=5), layer=dict(qk_norm=True),
                     sliding=dict(window=8), architecture="llada")
  path = jaxdec.save(model, str(tmp_path / "ckpt"))
  with open(os.path.join(path, CONFIG_FILE)) as f:
    meta = json.load(f)
  flat = flat_dict(meta["config"])
  assert "rms_norm_eps" in flat and "layer" not in flat and flat["sliding_window"] == 8
  with open(os.path.join(path, CONFIG_FILE), "w") as f:
    json.dump(dict(meta, config=flat), f)
  restored = jaxdec.load(path)
  assert restored.config == model.config
  np.testing.assert_array_equal(restored.params.embed, model.params.embed)


def test_orbax_restore_onto_a_mesh(tmp_path):
  if jax.device_count() < 8:
    pytest.skip("needs 8 devices")
  model = tiny_model()
  path = jaxdec.save(model, str(tmp_path / "ckpt"))
  mesh = sharding.make_mesh(4, 2)  # Divides every sharded axis: no replication warning.
  restored = jaxdec.convert.load_orbax(path, shardings=sharding.param_shardings(model.config, mesh))
  assert restored.params.layers.w_up.sharding.spec == jax.sharding.PartitionSpec(None, None, "model")
  np.testing.assert_array_equal(restored.params.layers.w_up, model.params.layers.w_up)


def test_load_errors(tmp_path):
  with pytest.raises(FileNotFoundError, match="model directory not found"):
    jaxdec.load(str(tmp_path / "nope"))
  with pytest.raises(ValueError, match="holds neither config.json"):
    jaxdec.load(str(tmp_path))
  with pytest.raises(ValueError, match="unknown zoo model 'zoo:nonexistent'"):
    jaxdec.load("zoo:nonexistent")
