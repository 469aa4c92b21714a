"""Training the zoo's byte-level BPE tokenizer with HF `tokenizers`."""

from __future__ import annotations

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from jaxdec.tokenizer import Tokenizer

# Special tokens take the first ids, in this order.
SPECIAL_TOKENS = {"pad": "<|pad|>", "bos": "<|bos|>", "eos": "<|endoftext|>", "mask": "<|mask|>"}


def train_bpe(texts, vocab_size: int = 4096, individual_digits: bool = False) -> Tokenizer:
  """Byte-level BPE (lossless: decode(encode(text)) == text for any UTF-8 text without the
  special-token strings) with PAD, BOS, EOS and MASK. `individual_digits` makes every digit its
  own token (arithmetic tasks: a number's digits are then what a model computes, one at a time)."""
  backend = HFTokenizer(models.BPE())
  backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  if individual_digits:
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), backend.pre_tokenizer])
  backend.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS.values()),
                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                show_progress=False)
  backend.train_from_iterator(texts, trainer)
  ids = {f"{kind}_id": backend.token_to_id(token) for kind, token in SPECIAL_TOKENS.items()}
  return Tokenizer(backend=backend, **ids)
