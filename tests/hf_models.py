"""Tiny random-init transformers models (PyTorch) for conversion parity tests."""

from __future__ import annotations

import torch

ARCHS = ("llama", "llama3", "qwen2", "qwen3", "mistral", "llama_tied", "gemma2", "gemma3")

# Gemma settings chosen so each feature moves the logits: soft-caps small enough to bend (tanh
# of scores and logits of order 1), a query_pre_attn_scalar other than head_dim, a window shorter
# than the test sequences, and (Gemma 3) distinct local / global RoPE bases with linear scaling.
_GEMMA2 = dict(sliding_window=8, query_pre_attn_scalar=24, attn_logit_softcapping=2.0,
               final_logit_softcapping=3.0, bos_token_id=2, eos_token_id=1, pad_token_id=0,
               layer_types=["sliding_attention", "full_attention", "sliding_attention"],
               num_hidden_layers=3)
_GEMMA3 = dict(sliding_window=8, query_pre_attn_scalar=24, final_logit_softcapping=3.0,
               layer_types=["sliding_attention", "full_attention", "sliding_attention"],
               num_hidden_layers=3,
               rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
                                "full_attention": {"rope_type": "linear", "factor": 4.0,
                                                   "rope_theta": 10000.0}})

_BASE = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, head_dim=16,
             max_position_embeddings=256, initializer_range=0.1)


def make_hf_model(arch: str, seed: int = 0, **overrides):
  """A random-init `*ForCausalLM` with every weight (norms and biases too) randomised, so a
  conversion that drops or mis-maps any tensor changes the logits."""
  import transformers as T

  kw = dict(_BASE)
  if arch == "llama":
    cls, kw = T.LlamaForCausalLM, kw | dict(bos_token_id=1, eos_token_id=2)
    config = T.LlamaConfig
  elif arch == "llama3":
    cls, config = T.LlamaForCausalLM, T.LlamaConfig
    kw["rope_parameters"] = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                             "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 64}
  elif arch == "llama_tied":
    cls, config = T.LlamaForCausalLM, T.LlamaConfig
    kw["tie_word_embeddings"] = True
  elif arch == "qwen2":
    cls, config = T.Qwen2ForCausalLM, T.Qwen2Config
    kw.pop("head_dim")
  elif arch == "qwen3":
    cls, config = T.Qwen3ForCausalLM, T.Qwen3Config
  elif arch == "mistral":
    cls, config = T.MistralForCausalLM, T.MistralConfig
    kw["sliding_window"] = 8
  elif arch == "gemma2":
    cls, config, kw = T.Gemma2ForCausalLM, T.Gemma2Config, kw | _GEMMA2
  elif arch == "gemma3":
    cls, config, kw = T.Gemma3ForCausalLM, T.Gemma3TextConfig, kw | _GEMMA3
  else:
    raise ValueError(arch)
  kw.update(overrides)
  torch.manual_seed(seed)
  model = cls(config(**kw)).eval()
  with torch.no_grad():
    for name, p in model.named_parameters():
      if name.endswith("norm.weight"):
        p.copy_(1.0 + 0.2 * torch.randn_like(p))
      elif name.endswith(".bias"):
        p.copy_(0.1 * torch.randn_like(p))
  return model
