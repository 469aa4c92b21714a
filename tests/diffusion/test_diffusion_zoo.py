"""The sampler on the shipped masked-diffusion model equals the numpy references token for token
(greedy), with `jaxdec.forward` on the unpadded canvas as the reference's logits function."""

import numpy as np
import pytest

import dllm_reference as ref
import jaxdec
from jaxdec import zoo
from jaxdec.diffusion import FixedSteps, Frechet, Threshold


def test_the_dlm_is_shipped():
  assert "pycode-dlm" in zoo.available()


@pytest.fixture(scope="module")
def dlm():
  model = jaxdec.load("zoo:pycode-dlm")
  tokenizer = jaxdec.load_tokenizer("zoo:pycode-dlm")
  from jaxdec.corpus import held_out_prompts

  prompts = held_out_prompts(tokenizer, 3, prompt_tokens=48)
  logits = lambda x: np.asarray(jaxdec.forward(model, x[None].astype(np.int32))[0])
  return model, prompts, logits


@pytest.mark.parametrize("gen_length, block_length, steps", [(32, 32, 32), (32, 8, 16), (16, 8, 24)])
def test_llada_sampler_matches_reference(dlm, gen_length, block_length, steps):
  model, prompts, logits = dlm
  out = jaxdec.diffusion_generate(model, prompts, gen_length=gen_length, block_length=block_length,
                                  steps=steps, scheduler=FixedSteps())
  for i, p in enumerate(prompts):
    want, _ = ref.llada_generate(logits, p, gen_length, block_length, steps,
                                 mask_id=model.config.tokens.mask)
    np.testing.assert_array_equal(out.tokens[i], want, err_msg=f"row {i}")


@pytest.mark.parametrize("rule, scheduler", [("threshold", Threshold(0.9)), ("frechet", Frechet(0.25))])
def test_parallel_rules_match_reference(dlm, rule, scheduler):
  model, prompts, logits = dlm
  out = jaxdec.diffusion_generate(model, prompts, gen_length=32, block_length=16, scheduler=scheduler)
  value = scheduler.tau if rule == "threshold" else scheduler.delta
  for i, p in enumerate(prompts):
    want, nfe = ref.fast_dllm_generate(logits, p, 32, 16, mask_id=model.config.tokens.mask,
                                       rule=rule, value=value)
    np.testing.assert_array_equal(out.tokens[i], want, err_msg=f"row {i}")
    assert int(out.stats["nfe"][i]) == nfe
