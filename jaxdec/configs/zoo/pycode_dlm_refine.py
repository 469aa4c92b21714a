"""pycode-dlm, stage 2: continue the masked-diffusion adaptation with prompt-shaped corruption.

Stage 1 (pycode_dlm.py) masks tokens i.i.d. everywhere; at inference the canvas is a clean prompt
followed by masks. Here half the sequences keep a clean prefix of random length
(`MaskedDiffusion(prefix_fraction=0.5)`), which is the shape the samplers see. Starts from the
stage-1 export (the maintainers' zoo retraining exports into the source tree explicitly):

  jaxdec train --config zoo:pycode-dlm --export jaxdec/zoo/pycode-dlm
  jaxdec train --config zoo:pycode-dlm-refine --workdir runs/pycode-dlm-refine \
      --export jaxdec/zoo/pycode-dlm

~26 min: 1050 steps x 8 x 512 tokens = 4.3M tokens.
"""

import dataclasses

from jaxdec.configs import load_config
from jaxdec.train.objectives import MaskedDiffusion


def get_config():
  stage1 = load_config("zoo:pycode-dlm")
  return dataclasses.replace(stage1, objective=MaskedDiffusion(prefix_fraction=0.5),
                             steps=1050, batch_size=8, seq_len=512, learning_rate=1e-3,
                             warmup_steps=30, seed=1, init_from="zoo:pycode-dlm", eval_every=350)
