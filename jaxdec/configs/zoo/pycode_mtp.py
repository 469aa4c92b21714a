"""pycode-mtp: three Medusa heads for pycode-ar (Medusa-1: pycode-ar frozen), on random
256-token windows of the stdlib train split, as pycode-ar was trained.

Each head is one residual block and its own unembedding (started from pycode-ar's; 4096 ids, so
~1.1M parameters a head: three heads keep the zoo small). The export measures every head's
per-rank accuracy on validation windows and ships the best 16-node candidate tree with them:

  jaxdec train --config zoo:pycode-mtp --export jaxdec/zoo/pycode-mtp
"""

from jaxdec.train.mtp import MedusaHeads, MultiToken
from jaxdec.train.trainer import TrainConfig


def get_config() -> TrainConfig:
  heads = MedusaHeads(num_heads=3, num_layers=1, sequential=True, tree_size=16)
  return TrainConfig(name="pycode-mtp", part=heads,
                     target="zoo:pycode-ar", objective=MultiToken(decay=0.8), steps=600,
                     batch_size=16, seq_len=256, learning_rate=2e-3, warmup_steps=30, seed=0,
                     eval_every=200, eval_windows=16, checkpoint_every=100)
