"""forward / generate on a simulated 8-device mesh (data x model) equal single-device results; a
batch that does not divide the data axis is padded and gives the unpadded rows' results."""

import re
import warnings

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding

import jaxdec
from jaxdec import sharding, spec
from jaxdec.diffusion import Threshold
from jaxdec.model import Bidirectional
from tiny import tiny_model


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
  wq = sharded.params.layers.wq
  assert isinstance(wq.sharding, NamedSharding)
  assert wq.sharding.spec == jax.sharding.PartitionSpec(None, None, "model", None)
  # 2 KV heads do not divide over 4 devices: replicated rather than split unevenly.
  assert sharded.params.layers.wk.sharding.spec == jax.sharding.PartitionSpec(None, None, None, None)
  assert sharded.params.layers.w_up.sharding.spec == jax.sharding.PartitionSpec(None, None, "model")
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


def test_place_rows_pads_per_row_inputs_and_gather_rows_drops_the_padding(mesh):
  """Every batch-leading leaf (prompts, lengths, per-row settings) is padded by repeating its
  last row and split over `data`; scalars and other leaves pass as they are."""
  prompt = np.arange(12, dtype=np.int32).reshape(3, 4)
  lengths = np.array([4, 2, 3], np.int32)
  sampling = jaxdec.Sampling.create(temperature=[0.5, 1.0, 2.0], top_k=3)
  placed = sharding.place_rows(mesh, prompt, lengths, sampling, None, np.float32(0.5))
  p, n, s, none, scalar = placed
  np.testing.assert_array_equal(p, np.concatenate([prompt, prompt[2:]]))
  np.testing.assert_array_equal(n, [4, 2, 3, 3])
  np.testing.assert_array_equal(s.temperature, [0.5, 1.0, 2.0, 2.0])
  np.testing.assert_array_equal(s.top_k, [3, 3, 3, 3])
  assert none is None and scalar == np.float32(0.5) and not isinstance(scalar, jax.Array)
  assert p.sharding.spec == jax.sharding.PartitionSpec("data")
  assert sharding.place_rows(None, prompt, lengths) == (prompt, lengths)
  out = {"tokens": p, "nfe": n, "steps": np.int32(7), "accepted": np.zeros((4, 5))}
  back = sharding.gather_rows(mesh, out, 3)
  np.testing.assert_array_equal(back["tokens"], prompt)
  assert back["nfe"].shape == (3,) and back["accepted"].shape == (3, 5) and back["steps"] == 7


def _rows(out) -> dict:
  return {"tokens": out.tokens, "lengths": out.lengths, **out.stats}


def _assert_same_rows(got, want):
  got, want = _rows(got), _rows(want)
  assert got.keys() == want.keys()
  for name in want:
    assert np.shape(got[name]) == np.shape(want[name]), name
    np.testing.assert_allclose(np.asarray(got[name]), np.asarray(want[name]), rtol=1e-6,
                               err_msg=name)


_PROMPTS = [[5, 9, 11], [7, 3, 9, 5, 9, 3, 9], [12]]
_SAMPLED = dict(sampling=jaxdec.Sampling.create(temperature=[1.0, 0.0, 0.8]), key=jax.random.key(3))
_CASES = {  # name -> (data, model) mesh, decode(model); sampled rows 0 and 2, row 1 greedy.
    "generate greedy": ((2, 4), lambda m: jaxdec.generate(m, _PROMPTS, max_new_tokens=10)),
    "generate sampled": ((4, 2), lambda m: jaxdec.generate(m, _PROMPTS, max_new_tokens=10,
                                                           **_SAMPLED)),
    "speculative sampled": ((2, 4), lambda m: jaxdec.speculative_generate(
        m, _PROMPTS, spec.PromptLookup(3, 4), max_new_tokens=10, **_SAMPLED)),
    "diffusion sampled": ((4, 2), lambda m: jaxdec.diffusion_generate(
        m, _PROMPTS, gen_length=16, block_length=8, scheduler=Threshold(np.array([0.5, 0.9, 0.7])),
        temperature=[0.5, 0.0, 1.0], key=jax.random.key(3))),
}


@pytest.mark.parametrize("case", list(_CASES))
def test_a_batch_that_does_not_divide_the_data_axis_is_padded(model, case):
  """3 rows on a data axis of 2 or 4: padded rows at the end, run, sliced back. Tokens, lengths
  and every per-row stat equal the unsharded run's, greedy and sampled (rows keep their index,
  so their RNG streams)."""
  if jax.device_count() < 8:
    pytest.skip("needs 8 devices")
  (data, model_axis), decode = _CASES[case]
  if case.startswith("diffusion"):
    model = tiny_model(2, attention=Bidirectional(), architecture="llada", std=0.5,
                       tokens=dict(mask=4))
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # KV heads that do not divide 4 are replicated.
    sharded = jaxdec.shard(model, sharding.make_mesh(data=data, model=model_axis))
  out = decode(sharded)
  assert out.tokens.shape[0] == 3 and out.tokens.sharding.mesh.shape["data"] == data
  _assert_same_rows(out, decode(model))
