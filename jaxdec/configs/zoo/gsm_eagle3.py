"""gsm-eagle3: an EAGLE-3 drafter for gsm-ar (gsm-ar frozen), trained by the training-time test
on gsm-ar's own training rows (whole problems packed into 512-token rows, the loss on the
solutions): gsm-ar reproduces those solutions' format, and the loss's labels are gsm-ar's own
distributions, so the rows stand in for its generations without a generation pass.

One draft layer over the fused inputs of gsm-ar's layers 1, 3 and 5 (`spec.eagle.default_layers`
for a 6-layer target), 6 unrolled steps weighted 0.8^j. The export holds the layer, fc and norm in
EAGLE-3's layout, without an LM head or embedding (both gsm-ar's, read from the base model),
with the dynamic tree it grows by default: top-2 expansion, 8 deep, 10 nodes (its drafts are
right ~95% of the time at every depth, so deep and narrow beats wide on a CPU, where each
verified token costs compute):

  jaxdec train --config zoo:gsm-eagle3 --export DIR
"""

from jaxdec.configs.zoo import gsm_ar
from jaxdec.train.eagle import Eagle3Drafter, TrainingTimeTest
from jaxdec.train.trainer import TrainConfig


def get_config() -> TrainConfig:
  return TrainConfig(name="gsm-eagle3", part=Eagle3Drafter(top_k=2, depth=8, size=10),
                     target="zoo:gsm-ar", objective=TrainingTimeTest(steps=6), data=gsm_ar.DATA,
                     steps=600, batch_size=4, seq_len=gsm_ar.SEQ_LEN, learning_rate=2e-3,
                     warmup_steps=30, seed=0, eval_every=200, eval_windows=8,
                     checkpoint_every=100)
