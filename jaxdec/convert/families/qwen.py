"""Qwen2 (q/k/v biases, which its files always hold) and Qwen3 (q/k RMSNorm): Llama blocks."""

from jaxdec.convert.families.llama import LlamaStyle

QWEN2 = LlamaStyle(model_type="qwen2", class_name="Qwen2ForCausalLM", qkv_bias=True,
                   always_qkv_bias=True, writes_attention_bias=False)
QWEN3 = LlamaStyle(model_type="qwen3", class_name="Qwen3ForCausalLM", qk_norm=True)
FAMILIES = (QWEN2, QWEN3)
