"""pycode-dlm, stage 2: continue the masked-diffusion adaptation with prompt-shaped corruption.

Stage 1 (pycode_dlm.py) masks tokens i.i.d. everywhere; at inference the canvas is a clean prompt
followed by masks. Here half the sequences keep a clean prefix of random length
(`MaskedDiffusion(prefix_fraction=0.5)`), which is the shape the samplers see. Starts from the
stage-1 export and replaces it:

  jaxdec train --config configs/zoo/pycode_dlm.py
  jaxdec train --config configs/zoo/pycode_dlm_refine.py --workdir runs/pycode-dlm-refine

~26 min: 1050 steps x 8 x 512 tokens = 4.3M tokens.
"""

import dataclasses
import os

from jaxdec.cli import load_config_file
from jaxdec.train.objectives import MaskedDiffusion

_HERE = os.path.dirname(os.path.abspath(__file__))


def get_config():
  stage1 = load_config_file(os.path.join(_HERE, "pycode_dlm.py"))
  return dataclasses.replace(stage1, objective=MaskedDiffusion(prefix_fraction=0.5),
                             steps=1050, batch_size=8, seq_len=512, learning_rate=1e-3,
                             warmup_steps=30, seed=1, init_from="zoo:pycode-dlm", eval_every=350)
