"""One BOS rule for `Tokenizer.encode`, the saved tokenizer.json and transformers."""

import pytest
from tokenizers import Tokenizer as HFTokenizer

import jaxdec
from jaxdec import zoo
from jaxdec.tokenizer import Tokenizer
from jaxdec import corpus
from jaxdec.train.tokenizer import train_bpe

TEXTS = ["def f(x):\n    return x + 1\n", "", "x", "héllo wörld\n\t", "  leading spaces"]


@pytest.fixture(scope="module")
def tokenizer():
  texts, _ = corpus.read_texts(corpus.stdlib_split("validation")[:10])
  return train_bpe(texts, 400)


def test_encode_puts_bos_first_unless_told_not_to(tokenizer):
  for text in TEXTS:
    plain = tokenizer.backend.encode(text, add_special_tokens=False).ids
    assert tokenizer.encode(text) == [tokenizer.bos_id] + plain
    assert tokenizer.encode(text, add_bos=False) == plain
  no_bos = Tokenizer(backend=tokenizer.backend)
  assert no_bos.encode("x") == tokenizer.encode("x", add_bos=False)


def test_saved_tokenizer_json_follows_the_same_rule(tokenizer, tmp_path):
  """Before: only the CLI added BOS; `tokenizers` and transformers added none."""
  before = tokenizer.backend.to_str()
  tokenizer.save(str(tmp_path))
  assert tokenizer.backend.to_str() == before  # Corpus caches keyed by it stay valid.
  backend = HFTokenizer.from_file(str(tmp_path / "tokenizer.json"))
  loaded = jaxdec.load_tokenizer(str(tmp_path))
  for text in TEXTS:
    assert backend.encode(text).ids == tokenizer.encode(text) == loaded.encode(text)
    assert backend.encode(text, add_special_tokens=False).ids == tokenizer.encode(text, add_bos=False)


@pytest.mark.hf
def test_transformers_autotokenizer_adds_the_same_bos(tokenizer, tmp_path):
  transformers = pytest.importorskip("transformers")
  tokenizer.save(str(tmp_path))
  hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
  for text in TEXTS:
    assert hf(text)["input_ids"] == tokenizer.encode(text)


@pytest.mark.skipif(not zoo.available(), reason="the zoo is not shipped in this checkout")
def test_shipped_zoo_tokenizers_follow_the_rule():
  texts, _ = corpus.read_texts(corpus.stdlib_split("validation")[:20])
  from jaxdec.convert.eagle3 import is_eagle3_dir
  from jaxdec.convert.medusa import is_medusa_dir

  for name in zoo.available():
    if is_medusa_dir(zoo.resolve(name)) or is_eagle3_dir(zoo.resolve(name)):
      continue  # Heads and EAGLE-3 layers use their target's tokenizer.
    tok = jaxdec.load_tokenizer(f"zoo:{name}")
    backend = HFTokenizer.from_file(f"{zoo.resolve(name)}/tokenizer.json")
    for text in texts + TEXTS:
      assert backend.encode(text).ids == tok.encode(text)
