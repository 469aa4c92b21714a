"""Mistral: a Llama block whose attention sees at most `sliding_window` keys."""

from jaxdec.convert.families.llama import LlamaStyle

MISTRAL = LlamaStyle(model_type="mistral", class_name="MistralForCausalLM", windowed=True,
                     writes_attention_bias=False)
FAMILIES = (MISTRAL,)
