"""gsm-dlm: a LLaDA-style masked-diffusion LM on gsm-synth (bidirectional, unshifted: output i
predicts position i), initialised from gsm-ar's weights and adapted with the masked-diffusion
objective on the same 512-token windows, so a prompt plus any solution fits (the diffusion runs
round the generation length up to a multiple of the block). Half the rows keep a random-length
prefix clean (`prefix_fraction=0.5`, as pycode-dlm-refine): the shape semi-autoregressive
decoding sees, a visible prompt and answer so far before a masked rest. 600 steps x 16 x 512
tokens = 4.9M tokens (a step costs what a gsm-ar step does)."""

import dataclasses

from jaxdec.configs.zoo import gsm_ar
from jaxdec.model import Bidirectional
from jaxdec.train.objectives import MaskedDiffusion
from jaxdec.train.trainer import TrainConfig

MODEL = dataclasses.replace(gsm_ar.MODEL, attention=Bidirectional(), mask_token_id=3,
                            architecture="llada")


def get_config() -> TrainConfig:
  return dataclasses.replace(gsm_ar.get_config(), name="gsm-dlm", model=MODEL,
                             objective=MaskedDiffusion(prefix_fraction=0.5), steps=600,
                             learning_rate=1.5e-3, warmup_steps=60, init_from="zoo:gsm-ar")
