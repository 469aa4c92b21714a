"""pycode-dlm: a LLaDA-style masked-diffusion LM (bidirectional, unshifted: output i predicts
position i), initialised from pycode-ar's weights and adapted with the masked-diffusion
objective, the way Dream-7B was made from an AR model. Stage 1 trains on 256-token windows (20%
faster per token than 512 here); stage 2 (pycode_dlm_refine.py) moves to 512-token windows so that
a prompt plus a 256-token generation fits. ~32 min: 1600 steps x 16 x 256 tokens = 6.6M tokens."""

import dataclasses

from jaxdec.configs import load_config
from jaxdec.model import Bidirectional
from jaxdec.train.objectives import MaskedDiffusion
from jaxdec.train.trainer import TrainConfig


def get_config() -> TrainConfig:
  ar_model = load_config("zoo:pycode-ar").model
  model = dataclasses.replace(ar_model, attention=Bidirectional(), architecture="llada",
                              max_position_embeddings=512,
                              tokens=dataclasses.replace(ar_model.tokens, mask=3))
  return TrainConfig(name="pycode-dlm", model=model, objective=MaskedDiffusion(), steps=1600,
                     batch_size=16, seq_len=256, learning_rate=1.5e-3, warmup_steps=60, seed=0,
                     init_from="zoo:pycode-ar", eval_every=200, checkpoint_every=100)
