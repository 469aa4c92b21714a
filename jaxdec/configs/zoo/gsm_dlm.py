"""gsm-dlm: a LLaDA-style masked-diffusion LM on gsm-synth (bidirectional, unshifted: output i
predicts position i), initialised from gsm-ar's weights and adapted with the masked-diffusion
objective on the same 512-token windows, so a prompt plus any solution fits (the diffusion runs
round the generation length up to a multiple of the block). DRAFT: 900 steps x 16 x 512 tokens =
7.4M tokens, ~50 min estimated (a step costs about what a gsm-ar step does), not yet measured."""

import dataclasses

from jaxdec.configs.zoo import gsm_ar
from jaxdec.model import Bidirectional
from jaxdec.train.objectives import MaskedDiffusion
from jaxdec.train.trainer import TrainConfig

MODEL = dataclasses.replace(gsm_ar.MODEL, attention=Bidirectional(), mask_token_id=3,
                            architecture="llada")


def get_config() -> TrainConfig:
  return dataclasses.replace(gsm_ar.get_config(), name="gsm-dlm", model=MODEL,
                             objective=MaskedDiffusion(), steps=900, learning_rate=1.5e-3,
                             warmup_steps=60, init_from="zoo:gsm-ar")
