"""gsm-draft: the small AR draft of gsm-ar for speculative decoding (~0.5M params, ~9x fewer,
2 layers of width 128; same tokenizer, packed problems and solution-only loss)."""

import dataclasses

from jaxdec.configs.zoo import gsm_ar
from jaxdec.train.trainer import TrainConfig

# gsm-ar's settings (tokenizer ids, norms, tied embeddings, 512 positions) at a draft's size.
MODEL = dataclasses.replace(gsm_ar.MODEL, hidden_size=128, intermediate_size=384, num_layers=2,
                            num_heads=4, num_kv_heads=2, head_dim=32)


def get_config() -> TrainConfig:
  return dataclasses.replace(gsm_ar.get_config(), name="gsm-draft", model=MODEL, steps=3000,
                             learning_rate=3e-3, warmup_steps=100, eval_every=500,
                             checkpoint_every=300)
