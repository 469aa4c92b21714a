"""pycode-dlm, stage 3: long context. Continue stage 2's masked-diffusion training on 4096-token
windows of the stdlib (8x the 512 it saw), with a clean prefix on half the rows (the shape a long
prompt gives), and let positions reach 8192. The model and tokenizer are unchanged; only the
weights move. For Prefilling-dLLM's long-prompt decoding (2K-8K prompts):

  jaxdec train --config zoo:pycode-dlm-long --workdir runs/pycode-dlm-long \\
      --export jaxdec/zoo/pycode-dlm
"""

import dataclasses

from jaxdec.configs import load_config
from jaxdec.train.objectives import MaskedDiffusion


def get_config():
  stage2 = load_config("zoo:pycode-dlm-refine")
  model = dataclasses.replace(stage2.model, max_position_embeddings=8192)
  return dataclasses.replace(stage2, name="pycode-dlm-long", model=model,
                             objective=MaskedDiffusion(prefix_fraction=0.5), steps=300,
                             batch_size=1, seq_len=4096, learning_rate=3e-4, warmup_steps=20,
                             seed=2, init_from="zoo:pycode-dlm", eval_every=100, eval_windows=4,
                             checkpoint_every=50)
