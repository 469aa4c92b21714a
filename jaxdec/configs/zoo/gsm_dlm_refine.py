"""gsm-dlm, stage 2: half the blocks are trained in decoding's left-to-right shape.

Stage 1 (gsm_dlm.py) masks each block at a random ratio, tokens i.i.d.; a semi-AR decoder that
commits near the front of the block sees a clean prefix and masks behind it.
`BlockDiffusion(suffix_fraction=0.5)` gives half the blocks exactly that shape (a random-length
clean prefix, the rest masked). Starts from the stage-1 export (the maintainers' zoo retraining
exports into the source tree explicitly):

  jaxdec train --config zoo:gsm-dlm --export jaxdec/zoo/gsm-dlm
  jaxdec train --config zoo:gsm-dlm-refine --workdir runs/gsm-dlm-refine --export jaxdec/zoo/gsm-dlm

450 steps x 4 x 576 tokens, ~30 min alone. Measured after it (the figures are in gsm_dlm.py's
docstring): left to right misses 10 of 1544 tokens, LLaDA order 3/8, threshold 0.9 0/8.
"""

import dataclasses

from jaxdec.configs import load_config
from jaxdec.train.objectives import BlockDiffusion


def get_config():
  stage1 = load_config("zoo:gsm-dlm")
  return dataclasses.replace(stage1, name="gsm-dlm-refine",
                             objective=BlockDiffusion(ar_weight=1.0, suffix_fraction=0.5),
                             steps=450, learning_rate=3e-4, warmup_steps=20, seed=1,
                             init_from="zoo:gsm-dlm", eval_every=450)
