"""`attention="pallas"` (the masked-attention kernel, interpret mode on CPU) decodes the same
tokens as the default XLA attention: autoregressive, speculative with a dynamic draft tree, and
diffusion with the dual cache, on the shipped zoo."""

import dataclasses

import numpy as np
import pytest

import jaxdec
from jaxdec.corpus import held_out_prompts
from jaxdec.diffusion import DualCache, Threshold
from jaxdec.model import ModelConfig
from jaxdec.tasks import gsm_synth


@pytest.fixture(scope="module")
def code():
  tokenizer = jaxdec.load_tokenizer("zoo:pycode-ar")
  prompts = [p[:n] for p, n in zip(held_out_prompts(tokenizer, 3), (40, 17, 29))]
  return (jaxdec.load("zoo:pycode-ar"), jaxdec.load("zoo:pycode-ar", attention="pallas"), prompts)


def test_autoregressive_greedy_is_token_identical(code):
  xla, pallas, prompts = code
  assert pallas.config.attention_backend == "pallas"
  np.testing.assert_array_equal(jaxdec.generate(pallas, prompts, max_new_tokens=24).tokens,
                                jaxdec.generate(xla, prompts, max_new_tokens=24).tokens)


def test_speculative_with_a_dynamic_tree_is_token_identical(code):
  xla, pallas, prompts = code
  out = {}
  for name, model in (("xla", xla), ("pallas", pallas)):
    drafter = jaxdec.load_drafter("zoo:pycode-eagle3", target=model)
    out[name] = jaxdec.speculative_generate(model, prompts, drafter, max_new_tokens=24)
  np.testing.assert_array_equal(out["pallas"].tokens, out["xla"].tokens)
  np.testing.assert_array_equal(out["pallas"].stats["accepted"], out["xla"].stats["accepted"])


def test_diffusion_with_the_dual_cache_is_token_identical():
  tokenizer = jaxdec.load_tokenizer("zoo:gsm-dlm")
  prompts = [tokenizer.encode(p.prompt) for p in gsm_synth.problems("test", 3, 0)]
  kw = dict(gen_length=64, block_length=32, steps=64, scheduler=Threshold(0.9), cache=DualCache())
  xla = jaxdec.diffusion_generate(jaxdec.load("zoo:gsm-dlm"), prompts, **kw)
  pallas = jaxdec.diffusion_generate(jaxdec.load("zoo:gsm-dlm", attention="pallas"), prompts, **kw)
  np.testing.assert_array_equal(pallas.tokens, xla.tokens)
  np.testing.assert_array_equal(pallas.stats["nfe"], xla.stats["nfe"])


def test_the_backend_is_checked_and_not_saved(code):
  xla, pallas, _ = code
  with pytest.raises(ValueError, match="attention_backend must be one of .* got 'cuda'"):
    dataclasses.replace(xla.config, attention_backend="cuda")
  with pytest.raises(ValueError, match="attention_backend must be one of"):
    jaxdec.load("zoo:pycode-ar", attention="triton")
  saved = pallas.config.to_dict()
  assert "attention_backend" not in saved
  assert ModelConfig.from_dict(saved).attention_backend == "xla"


def test_a_training_loss_has_the_same_gradient_on_both_backends():
  """Through the whole decoder (GQA, 2 layers, block-causal attention): the kernel's custom VJP
  gives XLA's parameter gradients."""
  import jax
  import jax.numpy as jnp

  from jaxdec.model import BlockCausal, forward
  from pallas_kernels.common import assert_close
  from tiny import tiny_model

  model = tiny_model(attention=BlockCausal(4))
  tokens = jnp.asarray(np.random.default_rng(0).integers(0, model.config.vocab_size, (2, 12)),
                       jnp.int32)
  positions = jnp.broadcast_to(jnp.arange(12, dtype=jnp.int32), (2, 12))

  def loss(params, config):
    logits, _, _ = forward(params, tokens, positions, config=config)
    return -jnp.mean(jax.nn.log_softmax(logits)[:, :-1, :].max(-1))

  want = jax.grad(loss)(model.params, model.config)
  got = jax.grad(loss)(model.params, dataclasses.replace(model.config, attention_backend="pallas"))
  for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    assert_close(g, w, jnp.float32)
