"""pycode-dlm, stage 3: long context. Stage 2 (pycode_dlm_refine.py) saw 512-token windows; long
prompts (Prefilling-dLLM's 2K-8K setting) need a model that has attended over thousands of
tokens. Continue the same masked-diffusion training (clean prefix on half the rows, the shape a
long prompt gives) on 4096-token windows, positions allowed up to 8192. Tokenizer and shapes are
unchanged; only the weights move:

  jaxdec train --config zoo:pycode-dlm-long --workdir runs/pycode-dlm-long \\
      --export jaxdec/zoo/pycode-dlm

~40 min here: 180 steps x 1 x 4096 tokens = 0.74M tokens (dense attention at 4K dominates a
step, ~12 s). The exported figure is scored on 512-token windows, as stage 2's: comparable, and
scoring every validation file in 4096-token windows would take longer than the training. Positions 4096..8191 are never trained: an 8K prompt decoded densely relies on
RoPE extrapolating, which chunk selection with re-numbered positions avoids.
"""

import dataclasses

from jaxdec.configs import load_config
from jaxdec.train.objectives import MaskedDiffusion


def get_config():
  stage2 = load_config("zoo:pycode-dlm-refine")
  model = dataclasses.replace(stage2.model, max_position_embeddings=8192)
  return dataclasses.replace(stage2, model=model,
                             objective=MaskedDiffusion(prefix_fraction=0.5), steps=180,
                             batch_size=1, seq_len=4096, learning_rate=3e-4, warmup_steps=20,
                             seed=2, init_from="zoo:pycode-dlm", eval_every=90, eval_windows=4,
                             checkpoint_every=30, eval_seq_len=512)
