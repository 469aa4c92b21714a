"""pycode-dlm: a LLaDA-style masked-diffusion LM (bidirectional, unshifted: output i predicts
position i), initialised from pycode-ar's weights and adapted with the masked-diffusion
objective, the way Dream-7B was made from an AR model. Trained on 512-token windows so that a
prompt plus a 256-token generation fits. ~45 min: 1800 steps x 8 x 512 tokens = 7.4M tokens."""

import dataclasses
import os

from jaxdec.cli import load_config_file
from jaxdec.train.objectives import MaskedDiffusion
from jaxdec.train.trainer import TrainConfig

_HERE = os.path.dirname(os.path.abspath(__file__))


def get_config() -> TrainConfig:
  ar_model = load_config_file(os.path.join(_HERE, "pycode_ar.py")).model
  model = dataclasses.replace(ar_model, causal=False, mask_token_id=3, architecture="llada",
                              max_position_embeddings=512)
  return TrainConfig(name="pycode-dlm", model=model, objective=MaskedDiffusion(), steps=1800,
                     batch_size=8, seq_len=512, learning_rate=1.5e-3, warmup_steps=60, seed=0,
                     init_from="zoo:pycode-ar", eval_every=200, checkpoint_every=100)
