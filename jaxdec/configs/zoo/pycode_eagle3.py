"""pycode-eagle3: an EAGLE-3 drafter for pycode-ar (pycode-ar frozen), trained by the
training-time test on pycode-ar's own continuations of stdlib windows (EAGLE-3 trains on the
target's generations): 4096 rows of 128 corpus tokens + 128 sampled at temperature 0.5.

One draft layer over the fused inputs of pycode-ar's layers 1, 2 and 3 (`spec.eagle.default_layers`
for a 4-layer target), 5 unrolled steps weighted 0.8^j. The export holds the layer, fc and norm in
EAGLE-3's layout without an LM head or embedding (both are pycode-ar's, read from the base model),
with the dynamic tree it grows by default: top-3 expansion, 4 deep, 8 nodes:

  jaxdec train --config zoo:pycode-eagle3 --export DIR
"""

from jaxdec.train.distill import TeacherSamples
from jaxdec.train.eagle import Eagle3Drafter, TrainingTimeTest
from jaxdec.train.trainer import TrainConfig

DATA = TeacherSamples(teacher="zoo:pycode-ar", count=4096, prompt_len=128, gen_len=128,
                      temperature=0.5, seed=0)


def get_config() -> TrainConfig:
  return TrainConfig(name="pycode-eagle3", part=Eagle3Drafter(top_k=3, depth=4, size=8),
                     target="zoo:pycode-ar", objective=TrainingTimeTest(steps=5), data=DATA,
                     steps=500, batch_size=8, seq_len=256, learning_rate=2e-3, warmup_steps=30,
                     seed=0, eval_every=250, eval_windows=16, checkpoint_every=100)
