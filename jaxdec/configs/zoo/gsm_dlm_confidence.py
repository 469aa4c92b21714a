"""gsm-dlm, stage 3: half the blocks trained as confidence-ordered decoding sees them.

After stage 2 (gsm_dlm_refine.py) a LLaDA-order decode still fails by committing a scratchpad digit
far ahead of the frontier with high confidence ("75-21=" followed by '4', confidence 0.998, while
the line that gives the tens digit was still masked): the decoder fills a block's template words
first, then guesses the digits they frame by copying nearby ones. Random masks rarely leave a
block in that state. `BlockDiffusion(confidence_fraction=0.5)` gives half the blocks exactly that
state (the tokens the model is surest of given, the rest masked), a quarter the left-to-right
shape, a quarter random masks:

  jaxdec train --config zoo:gsm-dlm-confidence --workdir runs/gsm-dlm-confidence \
      --export jaxdec/zoo/gsm-dlm

450 steps x 4 x 576 tokens plus one no-gradient forward per step for the confidences: ~36 min
alone. Measured after it (16 test problems): LLaDA order 12/16 (stage 2: 3/8), threshold 0.9 +
dual cache 7/16 at 2.42 tokens per forward (stage 2: 0/8 at 2.08).
"""

import dataclasses

from jaxdec.configs import load_config
from jaxdec.train.objectives import BlockDiffusion


def get_config():
  stage2 = load_config("zoo:gsm-dlm-refine")
  objective = BlockDiffusion(ar_weight=1.0, suffix_fraction=0.25, confidence_fraction=0.5)
  return dataclasses.replace(stage2, name="gsm-dlm-confidence", objective=objective, seed=3,
                             init_from="zoo:gsm-dlm")
