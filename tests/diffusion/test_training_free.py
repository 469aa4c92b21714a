"""The training-free decoders built from papers (CAI-DLLM, CORA-Diff, SAID, RPS,
AsyncLane): token for token
against plain-numpy references of our reading and of SAID's released code (reading_reference.py) on the hand-built
table model, their limits equal to their base rules, fewer forwards than the base rule, and
errors on bad hyper-parameters."""

import jax
import numpy as np
import pytest

import jaxdec
import reading_reference as ref
from jaxdec.diffusion import (AsyncLane, FirstStepConfidence, FixedSteps, Persistence, RipplePivot, Scaffold,
                              Threshold)
from jaxdec.diffusion.said import stage_of_offsets, stage_steps
from test_diffusion_api import dlm
from test_diffusion_reference import MASK, prompts, run, table_model

# (gen_length, block_length, steps): one block, semi-AR blocks, fewer steps than masks.
SLOW = pytest.mark.slow  # The fast set keeps one case of each method's grid.
CASES = [(16, 8, 16), pytest.param(16, 16, 16, marks=SLOW), pytest.param(12, 4, 6, marks=SLOW)]


def _assert_matches(scheduler, reference, gen_length, block_length, steps, **settings):
  """Every row's tokens and forwards equal the numpy reference's on the peaked table model."""
  model = table_model(8, peak=9.0)
  ps = prompts(9)
  tokens, nfe = run(model, ps, gen_length=gen_length, block_length=block_length, steps=steps,
                    scheduler=scheduler)
  for i, p in enumerate(ps):
    want, want_nfe = reference(model.numpy_logits, p, gen_length, block_length, steps,
                               mask_id=MASK, **settings)
    np.testing.assert_array_equal(tokens[i], want, err_msg=f"row {i}")
    assert nfe[i] == want_nfe, f"row {i}"


@pytest.mark.parametrize("gen_length, block_length, steps", CASES)
@pytest.mark.parametrize("easy, budget", [(0.7, 0.5), pytest.param(0.5, 1.0, marks=SLOW),
                                          pytest.param(0.9, 2.0, marks=SLOW),
                                          pytest.param(0.0, 1.0, marks=SLOW)])
def test_first_step_confidence_matches_reference(easy, budget, gen_length, block_length, steps):
  _assert_matches(FirstStepConfidence(easy, budget), ref.cai_generate, gen_length, block_length,
                  steps, easy=easy, budget=budget)


@pytest.mark.parametrize("gen_length, block_length, steps", CASES)
@pytest.mark.parametrize("tau, persistence", [(0.5, 2), pytest.param(0.8, 3, marks=SLOW),
                                               pytest.param(0.3, 1, marks=SLOW)])
def test_persistence_matches_reference(tau, persistence, gen_length, block_length, steps):
  _assert_matches(Persistence(tau, persistence), ref.cora_generate, gen_length, block_length,
                  steps, tau=tau, persistence=persistence)


@pytest.mark.parametrize("scheduler", [FirstStepConfidence(easy=1.0, budget=1.0),
                                       Persistence(tau=1.0, persistence=1)])
def test_with_nothing_easy_both_are_llada(scheduler):
  """No confidence reaches 1 on the table model: CAI's first step commits only the top token and
  its budget is one forward per remaining mask; CORA's gate never opens. Both are then LLaDA's
  low-confidence sampler at steps = gen_length, forwards included."""
  model = table_model(3)
  kw = dict(gen_length=16, block_length=8, steps=16)
  want, want_nfe = run(model, prompts(4), scheduler=FixedSteps(), **kw)
  got, nfe = run(model, prompts(4), scheduler=scheduler, **kw)
  np.testing.assert_array_equal(got, want)
  np.testing.assert_array_equal(nfe, want_nfe)


@pytest.mark.parametrize("scheduler", [FirstStepConfidence(0.7), Persistence(0.7, 2)])
def test_both_save_forwards_over_llada_on_a_confident_model(scheduler):
  model = table_model(8, peak=9.0)
  _, nfe = run(model, prompts(9), gen_length=16, block_length=8, steps=16, scheduler=scheduler)
  assert (nfe < 16).all(), nfe


@pytest.mark.parametrize("scheduler, message", [
    (FirstStepConfidence(easy=1.5), r"FirstStepConfidence.easy must be finite and in \[0.0, 1.0\]"),
    (FirstStepConfidence(budget=0.0), r"FirstStepConfidence.budget must be finite and in \(0.0"),
    (Persistence(tau=-0.1), r"Persistence.tau must be finite and in \[0.0, 1.0\]"),
    (Persistence(persistence=0), r"Persistence.persistence must be finite and in \[1.0"),
    (Persistence(tau=[0.5, 0.9, 0.1]), r"Persistence.tau must be a scalar or have shape \(1,\)"),
])
def test_bad_hyper_parameters_raise(scheduler, message):
  with pytest.raises(ValueError, match=message):
    jaxdec.diffusion_generate(dlm(), [[7, 8, 9]], gen_length=8, block_length=4, steps=8,
                              scheduler=scheduler)


@pytest.mark.parametrize("num_stages", [1, 2, 3, 4])
@pytest.mark.parametrize("per_block", [2, 5, 8, 12, 16, 33])
def test_said_stage_steps_match_upstream(num_stages, per_block):
  got = jax.jit(stage_steps, static_argnums=(0, 2))(num_stages, np.int32(per_block), 2)
  np.testing.assert_array_equal(got, ref.said_stage_steps(num_stages, per_block, 2))


def test_said_stages_are_the_checkerboard_hierarchy():
  for block_length in (1, 2, 5, 8, 32):
    for num_stages in (1, 2, 3, 4):
      offsets = stage_of_offsets(block_length, num_stages)
      for s, want in enumerate(ref.said_stages(block_length, num_stages)):
        assert np.flatnonzero(offsets == s).tolist() == want


@pytest.mark.parametrize("gen_length, block_length, steps", [
    (16, 8, 16), pytest.param(16, 16, 12, marks=SLOW), pytest.param(16, 8, 8, marks=SLOW),
    pytest.param(12, 4, 6, marks=SLOW), pytest.param(8, 2, 8, marks=SLOW)])
@pytest.mark.parametrize("num_stages, rec_steps, chlg_steps", [
    (3, 1, 2), pytest.param(3, 2, 0, marks=SLOW), pytest.param(2, 1, 0, marks=SLOW),
    pytest.param(4, 1, 0, marks=SLOW), pytest.param(2, 2, 3, marks=SLOW)])
def test_scaffold_matches_reference(num_stages, rec_steps, chlg_steps, gen_length, block_length,
                                    steps):
  model = table_model(8, peak=9.0)
  ps = prompts(9)
  scheduler = Scaffold(num_stages, rec_steps, chlg_steps, chlg_level=0.6)
  tokens, nfe = run(model, ps, gen_length=gen_length, block_length=block_length, steps=steps,
                    scheduler=scheduler)
  for i, p in enumerate(ps):
    want, want_nfe = ref.said_generate(model.numpy_logits, p, gen_length, block_length, steps,
                                       mask_id=MASK, num_stages=num_stages, rec_steps=rec_steps,
                                       chlg_steps=chlg_steps, chlg_level=0.6)
    np.testing.assert_array_equal(tokens[i], want, err_msg=f"row {i}")
    assert nfe[i] == want_nfe, f"row {i}"


def test_one_scaffold_stage_is_llada():
  model = table_model(3)
  kw = dict(gen_length=16, block_length=8, steps=8)
  want, want_nfe = run(model, prompts(4), scheduler=FixedSteps(), **kw)
  got, nfe = run(model, prompts(4), scheduler=Scaffold(num_stages=1), **kw)
  np.testing.assert_array_equal(got, want)
  np.testing.assert_array_equal(nfe, want_nfe)


@pytest.mark.parametrize("kwargs, message", [
    (dict(num_stages=0), "Scaffold.num_stages must be an int >= 1, got 0"),
    (dict(rec_steps=1.5), "Scaffold.rec_steps must be an int >= 1, got 1.5"),
    (dict(chlg_steps=-1), "Scaffold.chlg_steps must be an int >= 0, got -1"),
])
def test_bad_scaffold_settings_raise(kwargs, message):
  with pytest.raises(ValueError, match=message):
    Scaffold(**kwargs)


@pytest.mark.parametrize("gen_length, block_length", [
    (16, 8), pytest.param(16, 16, marks=SLOW), pytest.param(12, 4, marks=SLOW)])
@pytest.mark.parametrize("tau, low, high, pivots, assignments, ripple", [
    (0.9, 0.1, 2.0, 2, 2, True), pytest.param(0.7, 0.0, 3.0, 3, 1, False, marks=SLOW),
    pytest.param(0.95, 0.5, 1.5, 1, 3, True, marks=SLOW)])
def test_ripple_pivot_matches_reference(tau, low, high, pivots, assignments, ripple, gen_length,
                                        block_length):
  model = table_model(8, peak=9.0)
  ps = prompts(9)
  scheduler = RipplePivot(tau, low, high, pivots, assignments, ripple)
  tokens, nfe = run(model, ps, gen_length=gen_length, block_length=block_length,
                    scheduler=scheduler)
  for i, p in enumerate(ps):
    want, want_nfe = ref.rps_generate(model.numpy_logits, p, gen_length, block_length,
                                      mask_id=MASK, tau=tau, low=low, high=high, pivots=pivots,
                                      assignments=assignments, ripple=ripple)
    np.testing.assert_array_equal(tokens[i], want, err_msg=f"row {i}")
    assert nfe[i] == want_nfe, f"row {i}"


def test_ripple_pivot_without_pivots_or_ripple_is_threshold_at_twice_the_forwards():
  """An empty band and no ripple: the lookahead changes nothing and still counts as a forward."""
  model = table_model(8, peak=9.0)
  kw = dict(gen_length=16, block_length=8)
  want, want_nfe = run(model, prompts(9), scheduler=Threshold(0.8), **kw)
  got, nfe = run(model, prompts(9), scheduler=RipplePivot(0.8, 50.0, 50.0, ripple=False), **kw)
  np.testing.assert_array_equal(got, want)
  np.testing.assert_array_equal(nfe, 2 * want_nfe)


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(pivots=0), ValueError, "RipplePivot.pivots must be an int >= 1, got 0"),
    (dict(assignments=2.0), ValueError, "RipplePivot.assignments must be an int >= 1, got 2.0"),
])
def test_bad_ripple_pivot_settings_raise(kwargs, error, message):
  with pytest.raises(error, match=message):
    RipplePivot(**kwargs)


def test_ripple_pivot_band_must_be_ordered():
  with pytest.raises(ValueError, match="RipplePivot.low must be <= high"):
    jaxdec.diffusion_generate(dlm(), [[7, 8, 9]], gen_length=8, block_length=4, steps=8,
                              scheduler=RipplePivot(low=2.0, high=1.0))


def test_ripple_pivots_commit_extra_tokens_each_step():
  """Guards the reference test: on the table model the pivots do commit (fewer steps than the
  threshold rule alone needs forwards)."""
  model = table_model(8, peak=9.0)
  kw = dict(gen_length=16, block_length=8)
  _, alone = run(model, prompts(9), scheduler=Threshold(0.9), **kw)
  _, nfe = run(model, prompts(9), scheduler=RipplePivot(0.9, 0.1, 2.0, ripple=False), **kw)
  assert (nfe // 2 < alone).all(), (nfe, alone)


@pytest.mark.parametrize("gen_length, block_length", [
    (16, 4), pytest.param(24, 8, marks=SLOW), pytest.param(12, 4, marks=SLOW)])
@pytest.mark.parametrize("tau, stable, lanes, delimiters", [
    (0.8, 0.25, 3, (9,)), pytest.param(0.9, 0.5, 2, (), marks=SLOW),
    pytest.param(0.7, 2.0, 3, (5, 6, 7, 8, 9, 10, 11, 12), marks=SLOW)])
def test_async_lane_matches_reference(tau, stable, lanes, delimiters, gen_length, block_length):
  model = table_model(8, peak=9.0)
  ps = prompts(9)
  scheduler = AsyncLane(tau, stable, lanes, delimiters)
  tokens, nfe = run(model, ps, gen_length=gen_length, block_length=block_length,
                    scheduler=scheduler)
  for i, p in enumerate(ps):
    want, want_nfe = ref.async_lane_generate(model.numpy_logits, p, gen_length, block_length,
                                             mask_id=MASK, tau=tau, stable=stable, lanes=lanes,
                                             delimiters=delimiters)
    np.testing.assert_array_equal(tokens[i], want, err_msg=f"row {i}")
    assert nfe[i] == want_nfe, f"row {i}"


@pytest.mark.parametrize("scheduler", [AsyncLane(0.8, lanes=1), AsyncLane(0.8, stable=2.0)])
def test_async_lane_that_never_forks_is_threshold(scheduler):
  model = table_model(8, peak=9.0)
  kw = dict(gen_length=16, block_length=4)
  want, want_nfe = run(model, prompts(9), scheduler=Threshold(0.8), **kw)
  got, nfe = run(model, prompts(9), scheduler=scheduler, **kw)
  np.testing.assert_array_equal(got, want)
  np.testing.assert_array_equal(nfe, want_nfe)


def test_async_lanes_save_forwards_over_threshold():
  """Guards the reference test: lanes do fork (fewer forwards in all; the table model's logits
  follow the canvas, so one row's path may cost more)."""
  model = table_model(8, peak=9.0)
  kw = dict(gen_length=16, block_length=4)
  _, alone = run(model, prompts(9), scheduler=Threshold(0.8), **kw)
  _, nfe = run(model, prompts(9), scheduler=AsyncLane(0.8, stable=0.25, lanes=3), **kw)
  assert nfe.sum() < alone.sum(), (nfe, alone)


@pytest.mark.parametrize("kwargs, message", [
    (dict(lanes=0), "AsyncLane.lanes must be an int >= 1, got 0"),
    (dict(delimiters=("\n",)), "AsyncLane.delimiters must be token ids"),
])
def test_bad_async_lane_settings_raise(kwargs, message):
  with pytest.raises(ValueError, match=message):
    AsyncLane(**kwargs)


def test_lookahead_forwards_are_counted_per_row():
  """RPS runs one batched lookahead of pivots x assignments hypotheses per step: half of each
  row's forwards, and that many sequences per lookahead."""
  out = jaxdec.diffusion_generate(dlm(), [[7, 8, 9], [10, 11]], gen_length=8, block_length=4,
                                  steps=8, scheduler=RipplePivot(0.9, pivots=2, assignments=3))
  nfe, looks = np.asarray(out.stats["nfe"]), np.asarray(out.stats["lookaheads"])
  np.testing.assert_array_equal(2 * looks, nfe)
  np.testing.assert_array_equal(out.stats["lookahead_sequences"], 6 * looks)
  plain = jaxdec.diffusion_generate(dlm(), [[7, 8, 9]], gen_length=8, block_length=4, steps=8)
  assert int(plain.stats["lookaheads"][0]) == 0
