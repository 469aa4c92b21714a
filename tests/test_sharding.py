"""forward / generate on a simulated 8-device mesh (data x model) equal single-device results."""

import re
import warnings

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding

import jaxdec
from jaxdec import sharding


@pytest.fixture(scope="module")
def mesh():
  if jax.device_count() < 8:
    pytest.skip("needs 8 devices (XLA_FLAGS=--xla_force_host_platform_device_count=8)")
  return sharding.make_mesh(data=2, model=4)


def _shard(model, mesh):
  """jaxdec.shard on the (2, 4) mesh, where the tiny model's 2 KV heads do not divide."""
  with pytest.warns(UserWarning, match="replicating it on every device"):
    return jaxdec.shard(model, mesh)


def test_params_are_tensor_parallel(model, mesh):
  sharded = _shard(model, mesh)
  wq = sharded.params["layers"]["wq"]
  assert isinstance(wq.sharding, NamedSharding)
  assert wq.sharding.spec == jax.sharding.PartitionSpec(None, None, "model", None)
  # 2 KV heads do not divide over 4 devices: replicated rather than split unevenly.
  assert sharded.params["layers"]["wk"].sharding.spec == jax.sharding.PartitionSpec(None, None, None, None)
  assert sharded.params["layers"]["w_up"].sharding.spec == jax.sharding.PartitionSpec(None, None, "model")
  assert len(wq.addressable_shards) == 8 and wq.addressable_shards[0].data.shape[2] == 1


def test_replicating_an_undivided_axis_warns_naming_it(model, mesh):
  with pytest.warns(UserWarning) as record:
    sharding.param_shardings(model.config, mesh)
  messages = sorted(str(w.message) for w in record)
  assert [re.match(r"param '([^']+)'", m).group(1) for m in messages] == ["layers/wk", "layers/wv"]
  assert messages[0] == ("param 'layers/wk' of shape (2, 64, 2, 16): axis 'kv_heads' (size 2) does "
                         "not divide by mesh axis 'model' of size 4; replicating it on every device")
  with warnings.catch_warnings():  # A mesh that divides every sharded axis is silent.
    warnings.simplefilter("error")
    sharding.param_shardings(model.config, sharding.make_mesh(data=4, model=2))


def test_forward_and_generate_match_single_device(model, mesh):
  sharded = _shard(model, mesh)
  rng = np.random.RandomState(0)
  tokens = rng.randint(0, model.config.vocab_size, (4, 12))
  np.testing.assert_allclose(jaxdec.forward(sharded, tokens), jaxdec.forward(model, tokens), atol=1e-5)
  prompts = [rng.randint(2, 128, n).tolist() for n in (3, 9, 5, 1)]
  a = jaxdec.generate(sharded, prompts, max_new_tokens=16)
  b = jaxdec.generate(model, prompts, max_new_tokens=16)
  np.testing.assert_array_equal(a.tokens, b.tokens)
  np.testing.assert_array_equal(a.lengths, b.lengths)
  assert a.tokens.sharding.mesh.shape == mesh.shape  # It really ran on the mesh.


def test_batch_must_divide_the_data_axis(model, mesh):
  with pytest.raises(ValueError, match="batch size 3 is not divisible by mesh axis 'data' of size 2"):
    jaxdec.generate(_shard(model, mesh), [[5], [6], [7]], max_new_tokens=4)
