"""gsm-dlm-draft: the draft-sized block-diffusion model of gsm-synth, SimSD's drafter for gsm-dlm.

gsm-dlm's layout (block-causal over 32-token blocks, `causal_given`, shifted logits, the same
tokenizer and mask id) at gsm-draft's size (2 layers of width 128, ~0.5M params), initialised
from gsm-draft's weights and trained with `BlockDiffusion` in one stage. A SimSD drafter commits
a block's masks in parallel, mostly left to right behind the tokens already accepted, so three
quarters of the blocks are trained in that shape (`suffix_fraction`: a clean prefix, masks after
the cut) and `ar_weight=1` keeps the clean stream gsm-draft's AR model, which proposes the first
token of every draft. With `causal_given` a mask reads only given tokens and itself, so the mask
d positions past the accepted prefix is a head that predicts d + 1 tokens ahead.

  jaxdec train --config zoo:gsm-dlm-draft --export jaxdec/zoo/gsm-dlm-draft
"""

import dataclasses

from jaxdec.configs.zoo import gsm_dlm, gsm_draft
from jaxdec.train.objectives import BlockDiffusion
from jaxdec.train.trainer import TrainConfig

MODEL = dataclasses.replace(gsm_draft.MODEL, attention=gsm_dlm.MODEL.attention,
                            architecture=gsm_dlm.MODEL.architecture,
                            embeddings=gsm_dlm.MODEL.embeddings, tokens=gsm_dlm.MODEL.tokens)


def get_config() -> TrainConfig:
  return dataclasses.replace(gsm_dlm.get_config(), name="gsm-dlm-draft", model=MODEL,
                             objective=BlockDiffusion(ar_weight=1.0, suffix_fraction=0.75),
                             steps=1000, batch_size=8, learning_rate=2e-3, warmup_steps=50,
                             eval_every=1000, checkpoint_every=100, init_from="zoo:gsm-draft")
