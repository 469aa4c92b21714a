"""LLaDA and Dream checkpoint formats: written by export_hf, read back by load, names checked."""

import json
import os

import numpy as np
import pytest
from safetensors.numpy import load_file

import jaxdec
from jaxdec.model import Bidirectional
from jaxdec.model.params import flatten
from tiny import tiny_model


@pytest.mark.parametrize("arch, overrides, some_tensor", [
    ("llada", dict(tie_word_embeddings=False), "model.transformer.blocks.1.attn_out.weight"),
    ("Dream", dict(qkv_bias=True, shifted_logits=True), "model.layers.0.self_attn.q_proj.bias"),
])
def test_export_and_load_roundtrip(tmp_path, arch, overrides, some_tensor):
  model = tiny_model(architecture=arch, attention=Bidirectional(), mask_token_id=5, **overrides)
  out = jaxdec.export_hf(model, None, str(tmp_path / arch))
  names = set(load_file(os.path.join(out, "model.safetensors")))
  assert some_tensor in names
  with open(os.path.join(out, "config.json")) as f:
    assert json.load(f)["model_type"] == arch
  again = jaxdec.load(out)
  assert again.config == model.config
  for name, value in flatten(model.params).items():
    np.testing.assert_array_equal(flatten(again.params)[name], value)


def test_llada_config_allowlist():
  from jaxdec.convert import config_from_hf

  raw = {"model_type": "llada", "d_model": 64, "n_heads": 4, "n_kv_heads": 4, "n_layers": 2,
         "mlp_hidden_size": 128, "vocab_size": 128, "embedding_size": 128, "max_sequence_length": 64,
         "mask_token_id": 120, "block_type": "llama", "activation_type": "silu", "rope_theta": 5e5,
         "init_fn": "mitchell", "precision": "amp_bf16", "weight_tying": False}
  config = config_from_hf(raw)
  assert not config.is_causal and config.mask_token_id == 120 and config.head_dim == 16
  with pytest.raises(ValueError, match="unsupported config value block_type='sequential'"):
    config_from_hf(dict(raw, block_type="sequential"))
  with pytest.raises(ValueError, match=r"unhandled config fields for llada: \['new_field'\]"):
    config_from_hf(dict(raw, new_field=1))
