"""gsm-draft: the small AR draft of gsm-ar for speculative decoding (~0.2M params, ~20x fewer,
same tokenizer and corpus). DRAFT: 1500 steps x 16 x 512 tokens = 12.3M tokens (~1.1 epochs),
~17 min estimated from pycode-draft's speed (same width and depth), not yet measured alone."""

import dataclasses

from jaxdec.configs.zoo import gsm_ar
from jaxdec.train.trainer import TrainConfig

# gsm-ar's settings (tokenizer ids, norms, tied embeddings, 512 positions) at pycode-draft's size.
MODEL = dataclasses.replace(gsm_ar.MODEL, hidden_size=64, intermediate_size=192, num_layers=3,
                            num_heads=2, num_kv_heads=1, head_dim=32)


def get_config() -> TrainConfig:
  return dataclasses.replace(gsm_ar.get_config(), name="gsm-draft", model=MODEL, steps=1500,
                             learning_rate=3e-3, warmup_steps=60, eval_every=300,
                             checkpoint_every=150)
