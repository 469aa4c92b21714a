"""jaxdec.diffusion against the plain-numpy references (dllm_reference.py), token for token, on a
hand-built model whose logits are a table lookup: per position, plus a term from the previous
token, plus a term from how many masks the canvas still holds (so every commit changes the next
step's confidences). Duplicated table rows make exact confidence ties."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

import dllm_reference as ref
from jaxdec.diffusion import (Dream, EosFlags, Factor, FixedSteps, Frechet, Margin, NegEntropy,
                              Probability, RandomConfidence, Threshold, denoise, transfer_count)
from jaxdec.diffusion.compat import dream_timesteps
from jaxdec.diffusion.confidence import uniform_noise
from jaxdec.diffusion.dream import dream_count
from jaxdec.diffusion.proposals import gumbel_noise, position_keys
from jaxdec.diffusion.sampler import gather_rows

CONFIDENCE = {"low_confidence": Probability(), "random": RandomConfidence(),
              "maskgit_plus": Probability(), "topk_margin": Margin(), "entropy": NegEntropy()}

VOCAB, MASK, EOS, EOT, WIDTH = 32, 31, 2, 3, 128


@struct.dataclass
class TableModel:
  """logits[b, p] = base[p] + prev[token at p - 1] + load[masks left in row b % 7]."""

  base: jax.Array
  prev: jax.Array
  load: jax.Array
  mask_token_id: int = struct.field(pytree_node=False, default=MASK)
  shifted_logits: bool = struct.field(pytree_node=False, default=False)
  block_size: None = struct.field(pytree_node=False, default=None)  # Not block-causal.

  def hidden(self, tokens, positions, cache, valid_lengths):
    assert cache is None, "the table model has no cache"
    real = jnp.arange(tokens.shape[1])[None, :] < valid_lengths[:, None]
    count = jnp.sum((tokens == MASK) & real, axis=1)
    before = jnp.concatenate([tokens[:, :1], tokens[:, :-1]], axis=1)
    return self.base[positions] + self.prev[before] + self.load[count % 7][:, None, :], None

  def logits(self, hidden, index):
    return gather_rows(hidden, index)

  def numpy_logits(self, x: np.ndarray) -> np.ndarray:
    """The same function for one unpadded canvas, in numpy (float32, same order of additions)."""
    base, prev, load = (np.asarray(a) for a in (self.base, self.prev, self.load))
    before = np.concatenate([x[:1], x[:-1]])
    return base[np.arange(len(x))] + prev[before] + load[int((x == MASK).sum()) % 7][None, :]


def table_model(seed, shifted=False, peak=6.0):
  rng = np.random.RandomState(seed)
  base = rng.normal(0, 2.0, (WIDTH, VOCAB))
  base[np.arange(WIDTH), rng.randint(4, MASK, WIDTH)] += rng.uniform(0, peak, WIDTH)  # Confident spots.
  base[1::4] = base[0::4]  # Equal rows: exact ties between neighbours with equal previous tokens.
  prev = rng.normal(0, 1.0, (VOCAB, VOCAB))
  load = rng.normal(0, 1.0, (7, VOCAB))
  base[:, MASK] = -30.0  # The model never proposes [MASK] (upstream would leave it masked).
  prev[:, MASK] = load[:, MASK] = 0.0
  f32 = lambda a: jnp.asarray(a, jnp.float32)
  return TableModel(f32(base), f32(prev), f32(load), shifted_logits=shifted)


@functools.partial(jax.jit, static_argnames=("gen_length", "block_length", "eos", "cfg"))
def _run(model, prompt, lengths, key, steps, scheduler, temperature, cfg_scale, *, gen_length,
         block_length, eos, cfg):
  return denoise(model, prompt, lengths, key, gen_length=gen_length, block_length=block_length,
                 steps=steps, scheduler=scheduler, temperature=temperature,
                 cfg_scale=cfg_scale if cfg else None, eos=eos)


def run(model, prompts, *, gen_length, block_length, steps=None, scheduler, key=None,
        temperature=0.0, cfg_scale=0.0, eos=EosFlags()):
  width = 16
  prompt = np.zeros((len(prompts), width), np.int32)
  for i, p in enumerate(prompts):
    prompt[i, : len(p)] = p
  lengths = np.array([len(p) for p in prompts], np.int32)
  out = _run(model, prompt, lengths, key, np.int32(steps or gen_length), scheduler,
             np.float32(temperature), np.float32(cfg_scale), gen_length=gen_length,
             block_length=block_length, eos=eos, cfg=cfg_scale > 0)
  return np.asarray(out.tokens), np.asarray(out.stats["nfe"])


def prompts(seed, lengths=(5, 9, 1, 13)):
  rng = np.random.RandomState(seed)
  return [rng.randint(4, MASK, n) for n in lengths]


def noise_for(key, row):
  """The sampler's draws for (row, positions, nfe), for the reference."""
  def noise(positions, nfe):
    keys = position_keys(key, jnp.array([row], jnp.int32), jnp.asarray(positions, jnp.int32)[None],
                         jnp.array([nfe], jnp.int32))
    return np.asarray(gumbel_noise(keys, VOCAB)[0]), np.asarray(uniform_noise(keys)[0])
  return noise


def test_transfer_count_matches_get_num_transfer_tokens():
  for masks in range(0, 12):
    for steps in range(1, 9):
      got = transfer_count(jnp.full((1,), masks), jnp.int32(steps), jnp.arange(steps))
      np.testing.assert_array_equal(got, ref.num_transfer_tokens(masks, steps))


# (gen_length, block_length, steps): pure diffusion, semi-AR blocks, one step per block, fewer
# steps than masks, uneven quotas, and steps > masks (zero-quota steps that still cost a forward).
LLADA_CASES = [(16, 16, 16), (16, 8, 16), (16, 4, 8), (16, 8, 4), (12, 4, 3), (8, 8, 5),
               (8, 4, 14), (6, 2, 9)]


@pytest.mark.parametrize("gen_length, block_length, steps", LLADA_CASES)
def test_llada_low_confidence_matches_reference(gen_length, block_length, steps):
  model = table_model(0)
  ps = prompts(1)
  tokens, nfe = run(model, ps, gen_length=gen_length, block_length=block_length, steps=steps,
                    scheduler=FixedSteps())
  for i, p in enumerate(ps):
    want, want_nfe = ref.llada_generate(model.numpy_logits, p, gen_length, block_length, steps,
                                        mask_id=MASK)
    np.testing.assert_array_equal(tokens[i], want, err_msg=f"row {i}")
    assert nfe[i] == want_nfe == steps


def test_the_table_model_makes_ties():
  """Guards the tie-breaking tests: equal confidences occur between masked neighbours."""
  model = table_model(0)
  logits = model.numpy_logits(np.concatenate([prompts(1)[0], np.full(16, MASK)]))
  conf = ref.softmax64(logits).max(-1)[5:]
  assert len(np.unique(conf)) < len(conf)


@pytest.mark.parametrize("remasking, temperature", [("random", 0.0), ("low_confidence", 0.8),
                                                    ("random", 1.5)])
def test_llada_sampled_matches_reference_with_shared_noise(remasking, temperature):
  model, key = table_model(2), jax.random.key(7)
  ps = prompts(3)
  tokens, _ = run(model, ps, gen_length=12, block_length=4, steps=9,
                  scheduler=FixedSteps(CONFIDENCE[remasking]), key=key, temperature=temperature)
  for i, p in enumerate(ps):
    want, _ = ref.llada_generate(model.numpy_logits, p, 12, 4, 9, mask_id=MASK,
                                 remasking=remasking, temperature=temperature,
                                 noise=noise_for(key, i))
    np.testing.assert_array_equal(tokens[i], want, err_msg=f"row {i}")


def test_llada_classifier_free_guidance_matches_reference():
  model = table_model(4)
  ps = prompts(5)
  tokens, _ = run(model, ps, gen_length=8, block_length=4, steps=8, scheduler=FixedSteps(),
                  cfg_scale=1.5)
  plain, _ = run(model, ps, gen_length=8, block_length=4, steps=8, scheduler=FixedSteps())
  assert not np.array_equal(tokens, plain)  # Guidance changes the output of this model.
  for i, p in enumerate(ps):
    want, _ = ref.llada_generate(model.numpy_logits, p, 8, 4, 8, mask_id=MASK, cfg_scale=1.5)
    np.testing.assert_array_equal(tokens[i], want, err_msg=f"row {i}")


def _eos_model(seed):
  """A table model that likes EOS / EoT, so the EOS flags matter."""
  model = table_model(seed)
  base = np.asarray(model.base).copy()
  base[:, EOS] += 4.0
  base[::3, EOT] += 6.0
  return model.replace(base=jnp.asarray(base, jnp.float32))


@pytest.mark.parametrize("flags, temperature", [((True, False), 0.0), ((False, True), 0.0),
                                                ((True, True), 0.0), ((False, True), 0.7)])
def test_llada_eos_flags_match_reference(flags, temperature):
  model, key = _eos_model(6), jax.random.key(3)
  eos = EosFlags(*flags, eos_id=EOS, eot_id=EOT)
  ps = prompts(7)
  tokens, _ = run(model, ps, gen_length=12, block_length=6, steps=12, scheduler=FixedSteps(),
                  eos=eos, key=key if temperature else None, temperature=temperature)
  plain, _ = run(model, ps, gen_length=12, block_length=6, steps=12, scheduler=FixedSteps(),
                 key=key if temperature else None, temperature=temperature)
  assert not np.array_equal(tokens, plain)
  for i, p in enumerate(ps):
    want, _ = ref.llada_generate(model.numpy_logits, p, 12, 6, 12, mask_id=MASK,
                                 temperature=temperature, logits_eos_inf=flags[0],
                                 confidence_eos_eot_inf=flags[1], eos_id=EOS, eot_id=EOT,
                                 noise=noise_for(key, i))
    np.testing.assert_array_equal(tokens[i], want, err_msg=f"row {i}")


RULES = [("threshold", Threshold, v) for v in (0.0, 0.5, 0.7, 0.9, 1.0)] + \
        [("factor", Factor, v) for v in (0.5, 1.0, 2.0)] + \
        [("frechet", Frechet, v) for v in (0.0, 0.1, 0.25, 0.5)]


@pytest.mark.parametrize("gen_length, block_length", [(16, 16), (16, 8), (12, 4)])
@pytest.mark.parametrize("rule, cls, value", RULES)
def test_parallel_rules_match_reference(rule, cls, value, gen_length, block_length):
  model = table_model(8, peak=9.0)
  ps = prompts(9)
  tokens, nfe = run(model, ps, gen_length=gen_length, block_length=block_length,
                    scheduler=cls(value))
  for i, p in enumerate(ps):
    want, want_nfe = ref.fast_dllm_generate(model.numpy_logits, p, gen_length, block_length,
                                            mask_id=MASK, rule=rule, value=value)
    np.testing.assert_array_equal(tokens[i], want, err_msg=f"row {i}")
    assert nfe[i] == want_nfe, f"row {i}"


def test_parallel_rules_commit_several_tokens_per_forward():
  """Guards the rule tests above: on the peaked table model they do run in parallel."""
  model = table_model(8, peak=9.0)
  _, nfe = run(model, prompts(9), gen_length=16, block_length=16, scheduler=Threshold(0.7))
  assert (nfe < 16).all()


@pytest.mark.parametrize("rule, cls, value", [("threshold", Threshold, 0.8), ("factor", Factor, 1.0),
                                              ("frechet", Frechet, 0.25)])
def test_parallel_rules_on_shifted_logits(rule, cls, value):
  model = table_model(10, shifted=True, peak=9.0)
  shifted = lambda x: (lambda l: np.concatenate([l[:1], l[:-1]]))(model.numpy_logits(x))
  ps = prompts(11)
  tokens, nfe = run(model, ps, gen_length=12, block_length=6, scheduler=cls(value))
  for i, p in enumerate(ps):
    want, want_nfe = ref.fast_dllm_generate(shifted, p, 12, 6, mask_id=MASK, rule=rule, value=value)
    np.testing.assert_array_equal(tokens[i], want, err_msg=f"row {i}")
    assert nfe[i] == want_nfe


def test_dream_schedule_is_torch_float32_linspace():
  schedule = jax.jit(lambda steps: dream_timesteps(jnp.arange(2049), steps, 1e-3))  # steps traced
  for steps in list(range(1, 300)) + [511, 512, 1000, 1024, 2048]:
    got = schedule(jnp.int32(steps))[: steps + 1]
    np.testing.assert_array_equal(got, ref.linspace32(1.0, 1e-3, steps + 1), err_msg=str(steps))


def test_dream_counts_match_reference():
  for steps in (1, 2, 3, 7, 16, 64, 100, 256):
    ts = ref.linspace32(1.0, 1e-3, steps + 1)
    for masked in (0, 1, 5, 16, 64, 255, 256):
      i = np.arange(steps)
      got = dream_count(jnp.full((steps,), masked, jnp.int32), jnp.int32(steps), jnp.asarray(i), 1e-3)
      want = [ref.dream_count(masked, ts, j, steps) for j in i]
      np.testing.assert_array_equal(got, want, err_msg=f"steps={steps} masked={masked}")


@pytest.mark.parametrize("alg", ["maskgit_plus", "topk_margin", "entropy"])
@pytest.mark.parametrize("gen_length, steps", [(16, 16), (16, 5), (12, 12), (12, 3)])
def test_dream_matches_reference(alg, gen_length, steps):
  model = table_model(12, shifted=True)
  ps = prompts(13)
  tokens, nfe = run(model, ps, gen_length=gen_length, block_length=gen_length, steps=steps,
                    scheduler=Dream(CONFIDENCE[alg]))
  for i, p in enumerate(ps):
    want, _ = ref.dream_generate(model.numpy_logits, p, gen_length, steps, mask_id=MASK, alg=alg)
    np.testing.assert_array_equal(tokens[i], want, err_msg=f"row {i}")
  assert (nfe == steps).all()


def test_dream_sampled_matches_reference_with_shared_noise():
  model, key = table_model(14, shifted=True), jax.random.key(5)
  ps = prompts(15)
  tokens, _ = run(model, ps, gen_length=12, block_length=12, steps=6, scheduler=Dream(NegEntropy()),
                  key=key, temperature=0.6)
  for i, p in enumerate(ps):
    want, _ = ref.dream_generate(model.numpy_logits, p, 12, 6, mask_id=MASK, alg="entropy",
                                 temperature=0.6, noise=noise_for(key, i))
    np.testing.assert_array_equal(tokens[i], want, err_msg=f"row {i}")


def test_mask_token_is_never_committed():
  """A model that prefers [MASK] everywhere: upstream would leave positions masked (and a
  threshold loop would never end); jaxdec commits the best other token."""
  model = table_model(16)
  base = np.asarray(model.base).copy()
  base[:, MASK] = 50.0
  model = model.replace(base=jnp.asarray(base, jnp.float32))
  for scheduler in (FixedSteps(), Threshold(0.9)):
    tokens, _ = run(model, prompts(17), gen_length=8, block_length=4, steps=8, scheduler=scheduler)
    assert not (tokens == MASK).any()
