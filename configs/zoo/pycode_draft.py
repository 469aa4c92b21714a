"""pycode-draft: the small AR draft for speculative decoding (~0.4M params, ~10x fewer than
pycode-ar, same tokenizer). Distilled from pycode-ar (KL to its next-token distributions, as in
DistillSpec), which makes it agree with the target far more often than training on the data
alone: that agreement is what speculative decoding turns into speed. ~11 min: 1000 steps x 16 x
256 tokens, each step also running the teacher forward."""

from jaxdec.model import ModelConfig
from jaxdec.train.objectives import Distill
from jaxdec.train.trainer import TrainConfig

MODEL = ModelConfig(vocab_size=4096, hidden_size=64, intermediate_size=192, num_layers=3,
                    num_heads=2, num_kv_heads=1, head_dim=32, max_position_embeddings=256,
                    rms_norm_eps=1e-6, tie_word_embeddings=True, architecture="llama",
                    bos_token_id=1, eos_token_ids=(2,), pad_token_id=0)


def get_config() -> TrainConfig:
  return TrainConfig(name="pycode-draft", model=MODEL, objective=Distill(teacher="zoo:pycode-ar"),
                     steps=1000, batch_size=16, seq_len=256, learning_rate=3e-3, warmup_steps=40,
                     seed=0, eval_every=250, checkpoint_every=100)
