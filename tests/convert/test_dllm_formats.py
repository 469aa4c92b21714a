"""LLaDA, Dream and Fast-dLLM v2 checkpoint formats: written by export_hf, read back by load,
names checked."""

import json
import os

import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file

import jaxdec
from jaxdec.model import Bidirectional, BlockCausal, forward
from jaxdec.model.params import flatten
from jaxdec.train.trainable import FullModel
from tiny import tiny_model


@pytest.mark.parametrize("arch, overrides, some_tensor", [
    ("llada", dict(embeddings=dict(tied=False)), "model.transformer.blocks.1.attn_out.weight"),
    ("Dream", dict(layer=dict(qkv_bias=True), embeddings=dict(shifted_logits=True)),
     "model.layers.0.self_attn.q_proj.bias"),
    ("Fast_dLLM_Qwen", dict(layer=dict(qkv_bias=True), embeddings=dict(shifted_logits=True),
                            attention=BlockCausal(8)),
     "model.layers.0.self_attn.q_proj.bias"),
    ("Fast_dLLM_Qwen", dict(layer=dict(qkv_bias=True), embeddings=dict(shifted_logits=True),
                            attention=BlockCausal(8, causal_given=True)),
     "model.layers.0.self_attn.q_proj.bias"),
])
def test_export_and_load_roundtrip(tmp_path, arch, overrides, some_tensor):
  model = tiny_model(architecture=arch, tokens=dict(mask=5),
                     **{"attention": Bidirectional(), **overrides})
  out = jaxdec.export_hf(model, None, str(tmp_path / arch))
  names = set(load_file(os.path.join(out, "model.safetensors")))
  assert some_tensor in names
  with open(os.path.join(out, "config.json")) as f:
    assert json.load(f)["model_type"] == arch
  again = jaxdec.load(out)
  assert again.config == model.config
  for name, value in flatten(model.params).items():
    np.testing.assert_array_equal(flatten(again.params)[name], value)


def test_qwen2_layouts_export_a_model_without_biases_with_zero_ones(tmp_path):
  """Dream and Fast-dLLM v2 files always hold q/k/v biases (Qwen2's); a Llama-style model (the
  zoo's, adapted from gsm-ar) is written with zeros, and reads back as the same function."""
  model = tiny_model(architecture="Fast_dLLM_Qwen", attention=BlockCausal(8), tokens=dict(mask=5),
                     embeddings=dict(shifted_logits=True))
  again = jaxdec.load(jaxdec.export_hf(model, None, str(tmp_path / "m")))
  assert again.config.layer.qkv_bias and again.config.attention == BlockCausal(8)
  tokens = jnp.arange(2, 18)[None, :]
  where = jnp.arange(16)[None, :]
  np.testing.assert_allclose(forward(again.params, tokens, where, config=again.config)[0],
                             forward(model.params, tokens, where, config=model.config)[0], atol=1e-5)
  # A second training stage of the bias-free config starts from that export: zeros dropped.
  params = FullModel(model.config, init_from=str(tmp_path / "m")).init(None, None)
  for name, value in flatten(model.params).items():
    np.testing.assert_array_equal(flatten(params)[name], value)


def test_fast_dllm_config_needs_its_block_size():
  from jaxdec.convert import config_from_hf

  raw = {"model_type": "Fast_dLLM_Qwen", "vocab_size": 128, "hidden_size": 64, "intermediate_size": 128,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "max_position_embeddings": 64, "mask_token_id": 5}
  with pytest.raises(ValueError, match="needs bd_size"):
    config_from_hf(raw)
  assert config_from_hf(dict(raw, bd_size=32)).attention == BlockCausal(32)


def test_llada_config_allowlist():
  from jaxdec.convert import config_from_hf

  raw = {"model_type": "llada", "d_model": 64, "n_heads": 4, "n_kv_heads": 4, "n_layers": 2,
         "mlp_hidden_size": 128, "vocab_size": 128, "embedding_size": 128, "max_sequence_length": 64,
         "mask_token_id": 120, "block_type": "llama", "activation_type": "silu", "rope_theta": 5e5,
         "init_fn": "mitchell", "precision": "amp_bf16", "weight_tying": False}
  config = config_from_hf(raw)
  assert not config.is_causal and config.tokens.mask == 120 and config.head_dim == 16
  with pytest.raises(ValueError, match="unsupported config value block_type='sequential'"):
    config_from_hf(dict(raw, block_type="sequential"))
  with pytest.raises(ValueError, match=r"unhandled config fields for llada: \['new_field'\]"):
    config_from_hf(dict(raw, new_field=1))
