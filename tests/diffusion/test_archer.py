"""diffusion.Archer: the response recomputed every step over reused prompt K/V, refreshed when the
response drifted `bound` tokens. Exact where the prompt's entries cannot go stale (one layer; a
block-causal model), a full refresh every step at bound 1, approximate otherwise."""

import numpy as np
import pytest

import jaxdec
from jaxdec import api
from jaxdec.diffusion import Archer, Editing, FixedSteps, Threshold
from jaxdec.model import Bidirectional, BlockCausal
from tiny import tiny_model

MASK = 5
KW = dict(gen_length=16, block_length=8, steps=16)


def dlm(tokens=None, **overrides):
  kw = dict(attention=Bidirectional(), architecture="llada", std=0.5)
  kw.update(overrides)
  return tiny_model(tokens=dict(mask=MASK, **(tokens or {})), **kw)


def _prompts(seed, lengths=(3, 11, 1, 7)):
  rng = np.random.RandomState(seed)
  return [rng.randint(6, 128, n).tolist() for n in lengths]


def _same(model, scheduler, archer, prompts):
  exact = jaxdec.diffusion_generate(model, prompts, scheduler=scheduler, **KW)
  reused = jaxdec.diffusion_generate(model, prompts, scheduler=scheduler, cache=archer, **KW)
  np.testing.assert_array_equal(reused.tokens, exact.tokens)
  np.testing.assert_array_equal(reused.stats["nfe"], exact.stats["nfe"])


@pytest.mark.parametrize("shifted", [False, True])
@pytest.mark.parametrize("scheduler", [FixedSteps(), Threshold(0.5)])
def test_exact_on_a_one_layer_model_for_any_bound(shifted, scheduler):
  """One layer: K/V depend on the tokens only, so stale prompt entries are still right; the
  response query runs at the right positions and sees what the full forward sees."""
  model = dlm(num_layers=1, seed=1, embeddings=dict(shifted_logits=shifted))
  for bound in (2, 5, 1000):
    _same(model, scheduler, Archer(bound), _prompts(0))


@pytest.mark.parametrize("scheduler", [FixedSteps(), Editing(0.5, 0.3)])
def test_exact_on_a_block_causal_model_for_any_bound(scheduler):
  """Generation starts on a block boundary, so the prompt never sees the response: its entries
  never go stale, and on two layers the reused prompt gives the full forward's logits."""
  model = dlm(attention=BlockCausal(8), seed=3)
  for bound in (3, 1000):
    _same(model, scheduler, Archer(bound), _prompts(1))


def test_bound_one_is_a_full_refresh_every_step_and_larger_bounds_reuse():
  """Two bidirectional layers: every step changes a token, so bound 1 refreshes every step (the
  uncached sampler); with a large bound the prompt's entries go stale and the output moves."""
  model = dlm(seed=2)
  _same(model, Threshold(0.5), Archer(1), _prompts(2))
  exact = jaxdec.diffusion_generate(model, _prompts(2), scheduler=Threshold(0.5), **KW)
  stale = jaxdec.diffusion_generate(model, _prompts(2), scheduler=Threshold(0.5),
                                    cache=Archer(1000), **KW)
  assert not np.array_equal(stale.tokens, exact.tokens)


def test_ragged_batch_equals_one_by_one():
  """Rows refresh at their own steps; the others wait that forward out, so each row gets
  exactly its lone run (and rows progress at their own pace)."""
  model = dlm(seed=4)
  prompts = _prompts(5)
  kw = dict(KW, steps=8, scheduler=Threshold(0.5), cache=Archer(3))
  batch = jaxdec.diffusion_generate(model, prompts, **kw)
  for i, p in enumerate(prompts):
    alone = jaxdec.diffusion_generate(model, [p], **kw)
    np.testing.assert_array_equal(batch.tokens[i], alone.tokens[0], err_msg=f"row {i}")
    assert int(batch.stats["nfe"][i]) == int(alone.stats["nfe"][0])
  assert len(set(batch.stats["nfe"].tolist())) > 1


def test_one_compiled_program_for_every_bound():
  model = dlm(num_layers=1)
  jaxdec.diffusion_generate(model, _prompts(6), cache=Archer(2), **KW)
  before = api._jitted._cache_size()
  jaxdec.diffusion_generate(model, _prompts(6), cache=Archer(7), **KW)
  assert api._jitted._cache_size() == before


@pytest.mark.parametrize("bound, match", [
    (0, r"Archer.bound must be finite and in \[1.0, inf\], got 0.0"),
    (2.5, "Archer.bound must be a whole number of tokens, got 2.5"),
    ([2, 3], r"Archer.bound must be a scalar or have shape \(1,\)"),
    (float("nan"), "Archer.bound must be finite")])
def test_bad_bounds_are_named(bound, match):
  with pytest.raises(ValueError, match=match):
    jaxdec.diffusion_generate(dlm(num_layers=1), [[7, 8, 9]], cache=Archer(bound), **KW)


def test_guidance_is_refused():
  with pytest.raises(ValueError, match="classifier-free guidance"):
    jaxdec.diffusion_generate(dlm(num_layers=1), [[7, 8, 9]], cache=Archer(4), cfg_scale=1.0,
                              **KW)


def test_stale_elbo_term_is_the_dense_one_when_fresh_and_moves_when_stale():
  """The bench's quality measure: fresh prompt entries give the full forward's term; stale ones
  change nothing on one layer (K/V depend on the prompt's tokens only) and move it on two."""
  import jax.numpy as jnp

  from jaxdec.bench.archer import _stale_nll
  from jaxdec.bench.prefilling import _dense_nll

  prompt = jnp.asarray(_prompts(7, (12,)), jnp.int32)
  continuation = jnp.asarray([[40, 41, 42, 43, 44, 45]], jnp.int32)
  mask = jnp.asarray([[True, False, True, False, False, True]])
  stale = jnp.asarray([[False, True, False, True, False, False]])
  for layers in (1, 2):
    model = dlm(num_layers=layers, seed=5)
    fresh = _stale_nll(model, prompt, continuation, mask, jnp.zeros_like(mask))
    np.testing.assert_allclose(float(fresh), float(_dense_nll(model, prompt, continuation, mask)),
                               rtol=1e-5)
    moved = abs(float(_stale_nll(model, prompt, continuation, mask, stale)) - float(fresh))
    assert (moved < 1e-4) if layers == 1 else (moved > 1e-3)


@pytest.mark.slow  # Archer's exactness tests run in CI
def test_bench_command_compares_each_bound_with_a_full_refresh(tmp_path):
  import json

  from jaxdec import cli

  out = tmp_path / "archer.json"
  assert cli.main(["bench", "archer", "--lengths", "96", "--prompts", "1", "--gen-length", "32",
                   "--bounds", "1", "8", "--elbo-samples", "1", "--out", str(out)]) == 0
  rows = {r["cache"]: r for r in json.loads(out.read_text())["rows"]}
  assert list(rows) == ["full refresh", "Archer, bound 1", "Archer, bound 8",
                        "dual cache (Fast-dLLM)"]
  assert rows["full refresh"]["speedup"] == 1.0 and rows["full refresh"]["agreement"] == 1.0
  # Bound 1 refreshes at every step: the full refresh's tokens and bits per byte.
  assert rows["Archer, bound 1"]["agreement"] == 1.0
  assert rows["Archer, bound 1"]["bits/byte change %"] == 0.0
  assert rows["Archer, bound 8"]["bits/byte"] > 0
  assert "bits/byte" not in rows["dual cache (Fast-dLLM)"]
