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


def test_another_models_tokenizer_is_refused_where_a_model_meets_it():
  """gsm-ar's 953-token tokenizer on pycode-ar (4096 ids) decoded garbage without a word; a
  tokenizer larger than the model's vocabulary would index past it. Both are refused, by
  `complete` and by every entry point given `tokenizer=`, before anything compiles."""
  code = jaxdec.load("zoo:pycode-ar")
  gsm_tokenizer = jaxdec.load_tokenizer("zoo:gsm-ar")
  with pytest.raises(ValueError, match=r"953 tokens for a model of 4096 ids .*not this model's"):
    jaxdec.complete(code, gsm_tokenizer, ["def f():"])
  with pytest.raises(ValueError, match="953 tokens for a model of 4096"):
    jaxdec.generate(code, [[1, 5, 6]], max_new_tokens=4, tokenizer=gsm_tokenizer)
  gsm = jaxdec.load("zoo:gsm-ar")
  code_tokenizer = jaxdec.load_tokenizer("zoo:pycode-ar")
  with pytest.raises(ValueError, match="4096 tokens, more than the model's vocabulary of 1024"):
    jaxdec.complete(gsm, code_tokenizer, ["Tom has 3 apples."])
  assert jaxdec.complete(gsm, gsm_tokenizer, ["Tom has"], max_new_tokens=2)  # Its own: 953 of 1024.


def test_a_model_passed_as_a_drafter_is_told_to_wrap_it():
  target = jaxdec.load("zoo:pycode-ar")
  with pytest.raises(TypeError, match=r"wrap a draft model as spec.DraftModel\(model"):
    jaxdec.speculative_generate(target, [[1, 5, 6]], jaxdec.load("zoo:pycode-draft"),
                                max_new_tokens=4)
