"""gsm-ar: the AR target on gsm-synth (Llama architecture, tied embeddings, ~4.7M params).

Trains on whole problems of 50k generated train problems (default difficulty: numbers up to 99,
1-4 steps, all four operations), packed into 512-token rows (`Packed`: no problem is cut, so no
solution is ever trained without its question), the loss on the solutions only, with the task's
own tokenizer (1024 ids, digits split one by one). At that difficulty a solution is ~211 tokens
on average and at most 425 with its EOS, a prompt at most 77 with its BOS, so a problem fits a
training row and `gsm_synth.GEN_LENGTH` = 448 (14 blocks of 32) after any prompt fits the 576
positions the model is run at (positions past 512 are only ever reached by a diffusion canvas's
last masks; RoPE is relative). Special ids come from the zoo tokenizer: pad 0, bos 1, eos 2,
mask 3.

1500 steps x 8 x 512 tokens = 6.1M tokens (~0.45 epoch; batch 8 runs ~13% more tokens a second
than 16 on the 2-core CPU, and gives twice the updates): 51 min on the 2-core CPU, run alone.
Greedy, 200 problems per split: 86% on test (93 / 95 / 84 / 68% at 1 / 2 / 3 / 4 steps), 70% on
test-unseen-templates. The same recipe before the `+before` plan entry and the split multiply /
divide lines: 81% and 66%; with random 512-token windows, the loss on every token and no `rest:`
lines: 39% and 37%. What still goes wrong (`jaxdec eval --task` prints it): on test, single digit
facts (a quotient, a missed borrow); on unseen templates, the plan line (the model writes a
training template's operations instead of the question's).
"""

from jaxdec.corpus import Packed
from jaxdec.model import Embeddings, Layer, ModelConfig, SpecialTokens
from jaxdec.tasks import gsm_synth
from jaxdec.train.objectives import NextToken
from jaxdec.train.trainer import TrainConfig

SEQ_LEN = 512
DATA = Packed(gsm_synth.Corpus(difficulty=gsm_synth.Difficulty(), train_problems=50_000), SEQ_LEN)

MODEL = ModelConfig(vocab_size=1024, hidden_size=256, intermediate_size=704, num_layers=6,
                    num_heads=4, num_kv_heads=2, head_dim=64, max_position_embeddings=576,
                    layer=Layer(norm_eps=1e-6), embeddings=Embeddings(tied=True),
                    tokens=SpecialTokens(bos=1, eos=(2,), pad=0), architecture="llama")


def get_config() -> TrainConfig:
  return TrainConfig(name="gsm-ar", model=MODEL, objective=NextToken(), data=DATA, steps=1500,
                     batch_size=8, seq_len=SEQ_LEN, learning_rate=2e-3, warmup_steps=100, seed=0,
                     eval_every=250, checkpoint_every=100)
