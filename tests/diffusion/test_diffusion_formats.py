"""LLaDA and Dream checkpoints (real tensor names, shapes and config fields, tiny sizes) load into
the bidirectional decoder with the logits of a transformers Llama / Qwen2 run with a full
(non-causal) attention mask on the same weights; and Dream's schedule equals torch.linspace."""

import json
import os

import jax
import numpy as np
import pytest

import jaxdec
from jaxdec.diffusion.dream import dream_count

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.hf

from hf_models import make_hf_model  # noqa: E402

# Tensor names of LLaDA-8B (model_type "llada", block_type "llama"), from HF Llama's.
_LLADA_LAYER = {"input_layernorm": "attn_norm", "self_attn.q_proj": "q_proj",
                "self_attn.k_proj": "k_proj", "self_attn.v_proj": "v_proj",
                "self_attn.o_proj": "attn_out", "post_attention_layernorm": "ff_norm",
                "mlp.gate_proj": "ff_proj", "mlp.up_proj": "up_proj", "mlp.down_proj": "ff_out"}


def _llada_name(name: str) -> str:
  if name == "model.embed_tokens.weight":
    return "model.transformer.wte.weight"
  if name == "model.norm.weight":
    return "model.transformer.ln_f.weight"
  if name == "lm_head.weight":
    return "model.transformer.ff_out.weight"
  _, _, layer, rest = name.split(".", 3)
  module, leaf = rest.rsplit(".", 1)
  return f"model.transformer.blocks.{layer}.{_LLADA_LAYER[module]}.{leaf}"


def _save(directory, config: dict, tensors: dict) -> str:
  from safetensors.numpy import save_file

  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, "config.json"), "w") as f:
    json.dump(config, f)
  save_file({k: v.detach().numpy().copy() for k, v in tensors.items()},
            os.path.join(directory, "model.safetensors"))
  return str(directory)


def _llada_config(hf) -> dict:
  """LLaDA-8B-Instruct's config.json, every field, at tiny sizes."""
  c = hf.config
  return {
      "activation_type": "silu", "alibi": False, "alibi_bias_max": 8.0,
      "architectures": ["LLaDAModelLM"], "attention_dropout": 0.0, "attention_layer_norm": False,
      "attention_layer_norm_with_affine": True,
      "auto_map": {"AutoConfig": "configuration_llada.LLaDAConfig",
                   "AutoModel": "modeling_llada.LLaDAModelLM",
                   "AutoModelForCausalLM": "modeling_llada.LLaDAModelLM"},
      "bias_for_layer_norm": False, "block_group_size": 1, "block_type": "llama",
      "clip_qkv": None, "d_model": c.hidden_size, "embedding_dropout": 0.0,
      "embedding_size": c.vocab_size, "eos_token_id": 2, "flash_attention": False,
      "include_bias": False, "include_qkv_bias": False, "init_cutoff_factor": None,
      "init_device": "meta", "init_fn": "mitchell", "init_std": 0.02, "input_emb_norm": False,
      "layer_norm_type": "rms", "layer_norm_with_affine": True, "mask_token_id": 250,
      "max_sequence_length": c.max_position_embeddings, "mlp_hidden_size": c.intermediate_size,
      "mlp_ratio": 4, "model_type": "llada", "multi_query_attention": None,
      "n_heads": c.num_attention_heads, "n_kv_heads": c.num_key_value_heads,
      "n_layers": c.num_hidden_layers, "pad_token_id": 2, "precision": "amp_bf16",
      "residual_dropout": 0.0, "rms_norm_eps": c.rms_norm_eps, "rope": True,
      "rope_full_precision": True, "rope_theta": 500000.0, "scale_logits": False,
      "transformers_version": "4.46.3", "use_cache": False, "vocab_size": c.vocab_size,
      "weight_tying": False,
  }


def _dream_config(hf) -> dict:
  """Dream-v0-Base-7B's config.json at tiny sizes (a Qwen2 config plus mask_token_id)."""
  c = hf.config
  return {
      "architectures": ["DreamModel"], "attention_dropout": 0.0,
      "auto_map": {"AutoConfig": "configuration_dream.DreamConfig",
                   "AutoModel": "modeling_dream.DreamModel"},
      "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": c.hidden_size,
      "initializer_range": 0.02, "intermediate_size": c.intermediate_size, "mask_token_id": 250,
      "max_position_embeddings": c.max_position_embeddings, "max_window_layers": 2,
      "model_type": "Dream", "num_attention_heads": c.num_attention_heads,
      "num_hidden_layers": c.num_hidden_layers, "num_key_value_heads": c.num_key_value_heads,
      "pad_token_id": 2, "rms_norm_eps": c.rms_norm_eps, "rope_scaling": None,
      "rope_theta": 1000000.0, "sliding_window": None, "tie_word_embeddings": False,
      "torch_dtype": "float32", "transformers_version": "4.46.2", "use_cache": True,
      "use_sliding_window": False, "vocab_size": c.vocab_size,
  }


def _bidirectional_logits(hf, tokens: np.ndarray) -> np.ndarray:
  ids = torch.tensor(tokens, dtype=torch.long)
  full = torch.ones((ids.shape[0], 1, ids.shape[1], ids.shape[1]), dtype=torch.bool)
  with torch.no_grad():
    return hf(ids, attention_mask=full).logits.numpy()


def _tokens(seed=0, shape=(2, 19)):
  return np.random.RandomState(seed).randint(3, 250, shape).astype(np.int32)


def test_llada_checkpoint_matches_bidirectional_llama(tmp_path):
  hf = make_hf_model("llama", rms_norm_eps=1e-5,
                     rope_parameters={"rope_type": "default", "rope_theta": 500000.0})
  tensors = {_llada_name(k): v for k, v in hf.state_dict().items()}
  assert "model.transformer.blocks.1.attn_out.weight" in tensors
  model = jaxdec.load(_save(tmp_path / "llada", _llada_config(hf), tensors))
  assert not model.config.is_causal and not model.config.embeddings.shifted_logits
  assert model.config.tokens.mask == 250
  tokens = _tokens()
  want = _bidirectional_logits(hf, tokens)
  np.testing.assert_allclose(jaxdec.forward(model, tokens), want, atol=1e-4, rtol=1e-4)
  with torch.no_grad():  # Guards the comparison: the causal run differs.
    assert np.abs(hf(torch.tensor(tokens, dtype=torch.long)).logits.numpy() - want).max() > 1e-2
  out = jaxdec.diffusion_generate(model, tokens[:, :5].tolist(), gen_length=8, block_length=4,
                                  steps=8)
  assert out.tokens.shape == (2, 8)


def test_dream_checkpoint_matches_bidirectional_qwen2(tmp_path):
  hf = make_hf_model("qwen2", rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
  tensors = dict(hf.state_dict())
  assert "model.layers.0.self_attn.q_proj.bias" in tensors
  model = jaxdec.load(_save(tmp_path / "dream", _dream_config(hf), tensors))
  assert not model.config.is_causal and model.config.embeddings.shifted_logits
  assert model.config.layer.qkv_bias
  assert model.config.tokens.mask == 250
  tokens = _tokens(1)
  # Raw (unshifted) outputs; the sampler applies the shift.
  np.testing.assert_allclose(jaxdec.forward(model, tokens), _bidirectional_logits(hf, tokens),
                             atol=1e-4, rtol=1e-4)


def test_dream_counts_match_torch():
  """Dream's k = int(n * (1 - s / t)) with s, t from torch's float32 linspace, computed by torch."""
  for steps in (1, 2, 5, 16, 63, 64, 128, 256, 512):
    ts = torch.linspace(1, 1e-3, steps + 1)
    for masked in (1, 7, 32, 64, 256, 512):
      n = torch.tensor(masked) / 1  # float32, as mask_index.sum() / batch
      want = [int(n * (1 - ts[i + 1] / ts[i])) if i < steps - 1 else masked for i in range(steps)]
      got = dream_count(jax.numpy.full((steps,), masked, jax.numpy.int32), jax.numpy.int32(steps),
                        jax.numpy.arange(steps), 1e-3)
      np.testing.assert_array_equal(got, want, err_msg=f"steps={steps} masked={masked}")
