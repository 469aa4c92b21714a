"""gsm-kforcing: a K-Forcing student of gsm-ar (k = 4 tokens per forward), distilled by
progressive self-forcing (`jaxdec.train.kforcing`): window 2 for the first 150 steps, then 3,
then 4, on gsm-ar's own training rows (anchors inside the solutions).

  jaxdec train --config zoo:gsm-kforcing --export DIR

The export is an HF model (the student's decoder) plus its noise embedding;
`jaxdec.load_drafter(DIR)` returns the `KForcing` drafter, `jaxdec.load_push_forward(DIR)` the
student for `jaxdec.push_forward_generate`.
"""

from jaxdec.configs.zoo import gsm_ar
from jaxdec.train.kforcing import PushForwardStudent, SelfForcing
from jaxdec.train.trainer import TrainConfig


def get_config() -> TrainConfig:
  return TrainConfig(name="gsm-kforcing", part=PushForwardStudent(num_tokens=4),
                     target="zoo:gsm-ar", objective=SelfForcing(anchors=48, stage_steps=150),
                     data=gsm_ar.DATA, steps=600, batch_size=4, seq_len=gsm_ar.SEQ_LEN,
                     learning_rate=5e-4, warmup_steps=30, seed=0, eval_every=200,
                     eval_windows=8, checkpoint_every=100)
