"""gsm-mtp: four Medusa heads for gsm-ar (Medusa-1: gsm-ar frozen), on gsm-ar's own training
rows (whole problems packed into 512-token rows, the loss on the solutions only).

Each head is one residual block and its own unembedding (started from gsm-ar's), ~1.1M
parameters for the four. The export measures every head's per-rank accuracy on validation
problems and ships the best 16-node candidate tree for that table with the heads:

  jaxdec train --config zoo:gsm-mtp --export jaxdec/zoo/gsm-mtp
"""

import dataclasses

from jaxdec.configs.zoo import gsm_ar
from jaxdec.train.mtp import MedusaHeads, MultiToken
from jaxdec.train.trainer import TrainConfig


def get_config() -> TrainConfig:
  heads = MedusaHeads(num_heads=4, num_layers=1, sequential=True, tree_size=16)
  return TrainConfig(name="gsm-mtp", part=heads,
                     target="zoo:gsm-ar", objective=MultiToken(decay=0.8), data=gsm_ar.DATA,
                     steps=600, batch_size=8, seq_len=gsm_ar.SEQ_LEN, learning_rate=2e-3,
                     warmup_steps=30, seed=0, eval_every=200, eval_windows=16,
                     checkpoint_every=100)
