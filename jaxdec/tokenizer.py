"""A thin wrapper over a Hugging Face `tokenizers` tokenizer.json with the special ids jaxdec uses.

One BOS rule everywhere: the zoo models were trained on documents "[BOS] text [EOS]", so
`Tokenizer.encode(text)` puts BOS first when the tokenizer has one (`add_bos=False` opts out),
and `Tokenizer.save` writes a tokenizer.json whose post-processor does the same, so that
`tokenizers`' `encode(text)` and transformers' AutoTokenizer give the same ids.
"""

from __future__ import annotations

import dataclasses
import json
import os

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import processors

TOKENIZER_FILE = "tokenizer.json"


@dataclasses.dataclass(frozen=True)
class Tokenizer:
  """Text <-> token ids over a tokenizer.json, with the special ids jaxdec uses.

  `backend` is the `tokenizers.Tokenizer`; `bos_id`, `eos_id`, `pad_id`, `mask_id` are ids in its
  vocabulary, or None when the tokenizer has no such token. `encode` puts BOS first (the zoo's
  training rule); `decode` drops special tokens. Build with `from_file` or
  `jaxdec.load_tokenizer`.
  """

  backend: HFTokenizer
  bos_id: int | None = None
  eos_id: int | None = None
  pad_id: int | None = None
  mask_id: int | None = None

  @classmethod
  def from_file(cls, path: str, bos: str | None = None, eos: str | None = None,
                pad: str | None = None, mask: str | None = None) -> "Tokenizer":
    """Load tokenizer.json; special-token names default to those in tokenizer_config.json."""
    directory = os.path.dirname(path)
    names = {}
    config_path = os.path.join(directory, "tokenizer_config.json")
    if os.path.exists(config_path):
      with open(config_path) as f:
        raw = json.load(f)
      names = {k: raw.get(f"{k}_token") for k in ("bos", "eos", "pad", "mask")}
    backend = HFTokenizer.from_file(path)
    ids = {}
    for kind, given in (("bos", bos), ("eos", eos), ("pad", pad), ("mask", mask)):
      name = given or names.get(kind)
      if isinstance(name, dict):  # AddedToken serialisation.
        name = name.get("content")
      ids[f"{kind}_id"] = backend.token_to_id(name) if name else None
      if name and ids[f"{kind}_id"] is None:
        raise ValueError(f"{kind} token {name!r} is not in the vocabulary of {path}")
    return cls(backend=backend, **ids)

  @property
  def vocab_size(self) -> int:
    """Tokens in the tokenizer, special ones included (a model may pad its vocab_size above it)."""
    return self.backend.get_vocab_size()

  def check_fits(self, vocab_size: int) -> None:
    """Raise ValueError unless this can be the tokenizer of a model with `vocab_size` ids: not
    more tokens than the model has ids, and not fewer than half of them. Models pad their
    vocabulary above their tokenizer's (zoo:gsm-ar 953 -> 1024, Qwen2.5 151665 -> 151936), never
    to twice its size; another model's tokenizer usually misses one bound or the other."""
    if self.vocab_size > vocab_size:
      raise ValueError(f"the tokenizer has {self.vocab_size} tokens, more than the model's "
                       f"vocabulary of {vocab_size}: not this model's tokenizer")
    if 2 * self.vocab_size < vocab_size:
      raise ValueError(f"the tokenizer has {self.vocab_size} tokens for a model of {vocab_size} "
                       f"ids (fewer than half of them have a token): not this model's tokenizer; "
                       f"load the one saved with the model (jaxdec.load_tokenizer(same path))")

  def encode(self, text: str, add_bos: bool = True) -> list[int]:
    """`text` (a str) -> its token ids (a list of ints), ready as one prompt of `generate`.

    BOS comes first when the tokenizer has one and `add_bos` (the rule the zoo models were
    trained with: documents are "[BOS] text [EOS]"); pass `add_bos=False` for a continuation
    from the middle of a document. No EOS is added, and the tokenizer.json's own post-processor
    is not applied, so the BOS rule is the only special token rule.
    """
    ids = self.backend.encode(text, add_special_tokens=False).ids
    return ([self.bos_id] if add_bos and self.bos_id is not None else []) + ids

  def decode(self, ids, skip_special_tokens: bool = True) -> str:
    """Token ids (any iterable of ints: a list, or an i32[T] array such as
    `out.tokens[b, : out.lengths[b]]`) -> text.

    Special tokens (BOS, EOS, PAD, MASK and any other the tokenizer.json marks special) are
    dropped unless `skip_special_tokens=False`, so a row's final EOS prints as nothing; ids are
    not checked against the model's vocabulary (an id the tokenizer lacks decodes to "").
    """
    return self.backend.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

  def hf_backend(self) -> HFTokenizer:
    """A copy of the backend whose `encode(text)` follows the BOS rule: a TemplateProcessing
    post-processor "[BOS] $A" when there is a BOS (the backend itself is left as it is)."""
    backend = HFTokenizer.from_str(self.backend.to_str())
    if self.bos_id is not None:
      bos = self.backend.id_to_token(self.bos_id)
      backend.post_processor = processors.TemplateProcessing(
          single=f"{bos} $A", pair=f"{bos} $A $B:1", special_tokens=[(bos, self.bos_id)])
    return backend

  def save(self, directory: str) -> None:
    """Write tokenizer.json (with the BOS post-processor, see `hf_backend`) and a
    tokenizer_config.json that transformers' AutoTokenizer reads."""
    os.makedirs(directory, exist_ok=True)
    self.hf_backend().save(os.path.join(directory, TOKENIZER_FILE))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": self.bos_id is not None}
    for kind in ("bos", "eos", "pad", "mask"):
      token_id = getattr(self, f"{kind}_id")
      if token_id is not None:
        config[f"{kind}_token"] = self.backend.id_to_token(token_id)
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
      json.dump(config, f, indent=2)


def load_tokenizer_dir(directory: str) -> Tokenizer:
  """The Tokenizer of a model directory's tokenizer.json; FileNotFoundError when it has none."""
  path = os.path.join(directory, TOKENIZER_FILE)
  if not os.path.exists(path):
    raise FileNotFoundError(f"no {TOKENIZER_FILE} in {directory}")
  return Tokenizer.from_file(path)
