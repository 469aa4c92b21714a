"""pycode-ar: the AR target of the tiny zoo (Llama architecture, tied embeddings, ~4M params).

~53 min on the 2-core CPU (1.21 s/step alone): 2600 steps x 16 x 256 tokens = 10.6M tokens
(~1.2 epochs of the stdlib train split). Special ids come from the zoo tokenizer: pad 0, bos 1, eos 2, mask 3.
"""

from jaxdec.model import Embeddings, Layer, ModelConfig, SpecialTokens
from jaxdec.train.objectives import NextToken
from jaxdec.train.trainer import TrainConfig

MODEL = ModelConfig(vocab_size=4096, hidden_size=256, intermediate_size=704, num_layers=4,
                    num_heads=4, num_kv_heads=2, head_dim=64, max_position_embeddings=256,
                    layer=Layer(norm_eps=1e-6), embeddings=Embeddings(tied=True),
                    tokens=SpecialTokens(bos=1, eos=(2,), pad=0), architecture="llama")


def get_config() -> TrainConfig:
  return TrainConfig(name="pycode-ar", model=MODEL, objective=NextToken(), steps=2600,
                     batch_size=16, seq_len=256, learning_rate=2e-3, warmup_steps=80, seed=0,
                     eval_every=200, checkpoint_every=100)
